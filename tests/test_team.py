"""Teams of 2n agents, n per role (App. E.1, DECISIONS.md D15): seats and pairings, what each agent sees, one
verdict line per agent (Eq. 24), RAS by role type (Eq. 23), two teacher passes per response (Eq. 25), Eq. 13 per
agent, the attribution model's route, checkpoints of 2n policies, the memory plan, the exchanged seats, and the
pair as the n = 1 case with today's numbers."""

import copy
import json
import math
import os
from functools import partial

import pytest
import torch

import attribution
import config
import teacher
import train
from attribution import HEADER
from baselines import grpo
from infra import checkpoint, launch
from infra.models import make_tokenizer, tiny_model
from infra.seats import role_of, seats, team_seats
from loss import eq13_weights, mas_opd_loss
from rollout import RolloutConfig
from sampler import Generation, sequence_logprobs
from scaling import memory
from teacher import (
    KAPPA,
    ROLE_CONDITIONS,
    teacher_inputs,
    teacher_pieces,
    verdicts_before,
)
from teams import evaluation as team_evaluation
from teams.evaluation import evaluate_team
from teams.verdicts import attribute_by_model, attribute_team, attribute_team_episodes
from teams.workflow import pairings, partner, run_team_episodes
from tests.test_memory import plan_inputs
from tests.test_train import FAST
from tests.test_workflows import APPLES, BAD, GOOD, SUM
from tools.memory import dry_run
from toy.expert import conclusion_of

CFG2 = RolloutConfig(code_timeout=5, math_timeout=5, max_turns=3)
team_episodes = lambda problems, team, tok, cfg: run_team_episodes(
    problems, team, tok, cfg, n=2
)


def test_seats_and_pairings_reduce_to_the_pair():
    assert seats("code", 1) == ("coder", "tester") and pairings("math", 1) == [
        ("reasoner", "tool_user")
    ]
    assert seats("code", 2) == ("coder", "coder2", "tester", "tester2")
    assert pairings("code", 2) == [
        ("coder", "tester"),
        ("coder", "tester2"),
        ("coder2", "tester"),
        ("coder2", "tester2"),
    ]
    assert [role_of(s) for s in seats("math", 3)] == ["reasoner"] * 3 + [
        "tool_user"
    ] * 3
    assert team_seats([SUM, APPLES], 2) == sorted(seats("code", 2) + seats("math", 2))
    assert partner("tester2") == "coder2" and partner("reasoner") == "tool_user"


def _tester(value):
    return f"Test Input:\n```\n2 3\n```\nTest Output:\n```\n{value}\n```"


def _math_team(scripted):
    """Two Reasoners and two Tool-Users, every one with a different value: 5, 7, 4, 6 (the answer is 29)."""
    return {
        "reasoner": scripted(["#### 5"]),
        "reasoner2": scripted(["#### 7"]),
        "tool_user": scripted(["Code:\n```python\nprint(4)\n```"]),
        "tool_user2": scripted(["Code:\n```python\nprint(6)\n```"]),
    }


def test_replicas_roll_out_in_parallel_and_see_only_their_own_pairings(tok, scripted):
    team = _math_team(scripted)
    e = team_episodes([APPLES], team, tok, CFG2)[0]
    assert (len(e.turns), e.stopped) == (3, "max_turns") and set(
        e.turns[0].responses
    ) == set(team)
    assert set(e.turns[0].pairs) == set(pairings("math", 2)) and not any(
        e.turns[0].agreed.values()
    )
    # turn 1 of each agent: no teammate's output at all (parallel, no same-turn output)
    assert all("History" not in agent.seen[0][0] for agent in team.values())
    # turn 2 of Reasoner 2: its own answer once, both Tool-Users' results, no other Reasoner's answer
    seen = team["reasoner2"].seen[1][0]
    assert (
        seen.count("Your answer: 7") == 1
        and "It printed: 4" in seen
        and "It printed: 6" in seen
    )
    assert "5" not in seen.split("History of the earlier turns:")[1]
    seen = team["tool_user"].seen[1][0]
    assert (
        "It printed: 4" in seen
        and "The derivation's answer: 5" in seen
        and "The derivation's answer: 7" in seen
    )
    assert "print(6)" not in seen


def test_the_roles_agree_only_when_every_pairing_agrees(tok, scripted):
    right = "Code:\n```python\nprint(29)\n```"
    team = {
        "reasoner": scripted(["#### 29"]),
        "reasoner2": scripted(["#### 29"]),
        "tool_user": scripted([right]),
        "tool_user2": scripted(["Code:\n```python\nprint(30)\n```", right]),
    }
    e = team_episodes([APPLES], team, tok, CFG2)[0]
    assert (
        [t.agree for t in e.turns] == [False, True]
        and e.stopped == "agreed"
        and e.final == "29"
    )
    # the code team submits the program that agreed with the most test cases
    team = {
        "coder": scripted([BAD]),
        "coder2": scripted([GOOD]),
        "tester": scripted([_tester(5)]),
        "tester2": scripted([_tester(5)]),
    }
    e = team_episodes([SUM], team, tok, CFG2)[0]
    assert e.final.strip().endswith("print(a + b)") and e.stopped == "max_turns"


def test_each_replicas_verdict_line_names_only_its_own_output(tok, scripted):
    e = team_episodes([APPLES], _math_team(scripted), tok, CFG2)[0]
    att = attribute_team(APPLES, e.turns[0], timeout=5)
    lines = att.description.split("\n")
    assert lines[0] == HEADER and len(lines) == 1 + 4  # Eq. 24: one line per agent
    own = {
        "Reasoner 1": "'5'",
        "Reasoner 2": "'7'",
        "Tool-User 1": "'4'",
        "Tool-User 2": "'6'",
    }
    for line in lines[1:]:
        who = next(w for w in own if line.startswith(f"- {w}:"))
        assert own[who] in line and not any(
            v in line for w, v in own.items() if w != who
        )
        # every value is wrong; the reference 29 is never shown
        assert "does not agree" in line
    assert "29" not in att.description and att.agents == dict.fromkeys(
        _math_team(scripted), False
    )
    team = {
        "coder": scripted([GOOD]),
        "coder2": scripted([BAD]),
        "tester": scripted([_tester(5)]),
        "tester2": scripted([_tester(6)]),
    }
    e = team_episodes([SUM], team, tok, CFG2)[0]
    att = attribute_team(SUM, e.turns[0], timeout=5)
    assert att.agents == {
        "coder": True,
        "tester": True,
        "coder2": False,
        "tester2": False,
    }
    tester2 = next(
        x for x in att.description.split("\n") if x.startswith("- Tester 2:")
    )
    assert (
        "'6\\n'" in tester2 and "'5\\n'" not in tester2 and "does not agree" in tester2
    )
    coder2 = next(x for x in att.description.split("\n") if x.startswith("- Coder 2:"))
    assert (
        "'-1\\n', '-1\\n'" in coder2
        and "'5\\n'" not in coder2
        and "does not pass" in coder2
    )  # its own
    # outputs on both test inputs, never Coder 1's


def test_a_pair_team_keeps_the_three_line_verdict(tok, scripted):
    e = run_team_episodes(
        [SUM],
        {"coder": scripted([BAD]), "tester": scripted([_tester(5)])},
        tok,
        RolloutConfig(code_timeout=5, max_turns=1),
        n=1,
    )[0]
    att, pair = (
        attribute_team(SUM, e.turns[0], timeout=5),
        attribution.attribute_turn(
            SUM, e.turns[0].pairs[("coder", "tester")], timeout=5
        ),
    )
    assert (att.outcome, att.description, att.checks) == (
        pair.outcome,
        pair.description,
        pair.checks,
    )
    assert len(att.description.split("\n")) == 3 and att.agents == {
        "coder": False,
        "tester": True,
    }


def test_a_replicas_teacher_contexts_differ_only_in_the_role_condition_and_no_student_sees_a_verdict(
    tok, scripted
):
    episodes = team_episodes([APPLES], _math_team(scripted), tok, CFG2)
    atts = attribute_team_episodes(episodes, timeout=5, workers=4)
    inputs, overlong = teacher_inputs(episodes, atts, tok, limit=10_000)
    assert overlong == 0 and len(inputs) == 3 * 4
    verdict_lines = [line for a in atts[0] for line in a.description.split("\n")]
    rows = iter(inputs)
    for turn in episodes[0].turns:
        for name, resp in turn.responses.items():
            role, (_, seat, _, target, contrast) = role_of(name), next(rows)
            student = tok.decode(resp.context_ids)
            assert (
                seat == name
                and HEADER not in student
                and not any(line in student for line in verdict_lines)
            )
            pieces = teacher_pieces(
                tok,
                resp.context,
                (role, KAPPA[role]),
                verdicts_before(atts[0], turn.t),
                10_000,
            )
            # the same pieces in the same order, one condition each: r_rho(m) against kappa(rho(m)) (Eq. 23)
            assert [p for p in pieces[0] if p[0] != "condition"] == [
                p for p in pieces[1] if p[0] != "condition"
            ]
            assert [p[0] for p in pieces[0]] == [p[0] for p in pieces[1]]
            cond = lambda ps: tok.decode(next(p[2] for p in ps if p[0] == "condition"))
            assert (
                cond(pieces[0]) == ROLE_CONDITIONS[role]
                and cond(pieces[1]) == ROLE_CONDITIONS[KAPPA[role]]
            )
            assert target == [i for p in pieces[0] for i in p[2]] and contrast == [
                i for p in pieces[1] for i in p[2]
            ]
            # one c^t per completed turn, for every agent
            assert tok.decode(target).count(HEADER) == turn.t


def _args(tmp_path, *extra):
    return config.get_args(
        [
            "--problems",
            os.path.join(os.path.dirname(__file__), "..", "examples", "problems.jsonl"),
            "--out",
            str(tmp_path / "run"),
        ]
        + FAST
        + ["--agents-per-role", "2"]
        + list(extra)
    )


def _team(args, tok_seed=0):
    problems = train.load_problems(args.problems)
    base = tiny_model("qwen3", seed=tok_seed)
    names = team_seats(problems, args.agents_per_role)
    policies = {s: base if i == 0 else copy.deepcopy(base) for i, s in enumerate(names)}
    return problems, policies


def test_two_agents_per_role_roll_out_attribute_score_and_update_each_policy_from_its_own_responses(
    tmp_path, monkeypatch
):
    args, tok = _args(tmp_path, "--max-turns", "2"), make_tokenizer()
    problems, policies = _team(args)
    assert len(policies) == 8  # four per domain
    scored = []
    monkeypatch.setattr(
        teacher,
        "sequence_logprobs",
        lambda model, ctxs, resps, **kw: (
            scored.append(len(ctxs)),
            sequence_logprobs(model, ctxs, resps, **kw),
        )[1],
    )
    s = launch.Start(
        problems,
        policies,
        tiny_model("qwen3", seed=3),
        tok,
        [],
        torch.Generator().manual_seed(0),
        policies,
        play=partial(run_team_episodes, n=2),
    )
    episodes = train.joint_rollout(problems[:2], s, train.rollout_config(args), args)
    atts = attribute_team_episodes(episodes, timeout=5, workers=4)
    items, overlong = train.teacher_scores(episodes, atts, [0, 1], s, args)
    responses = sum(len(t.responses) for e in episodes for t in e.turns)
    # Eq. 25: two teacher passes per response, whatever the size of the team (PAC adds none)
    assert overlong == 0 and len(items) == responses and sum(scored) == 2 * responses
    assert {it.seat for it in items} == set(policies) & {
        s for e in episodes for t in e.turns for s in t.responses
    }
    # one agent's responses alone: only its policy moves
    for name in sorted({it.seat for it in items}):
        before = {
            s: [p.detach().clone() for p in m.parameters()] for s, m in policies.items()
        }
        optims = [
            torch.optim.AdamW(m.parameters(), lr=1e-2)
            for m in checkpoint.distinct(policies)
        ]
        mine = [it for it in items if it.seat == name]
        out = train.update(mine, 2, policies, optims, args)
        assert out["updates"] >= 1
        moved = {
            s
            for s, m in policies.items()
            if any(not torch.equal(p, q) for p, q in zip(m.parameters(), before[s]))
        }
        assert moved == {name}, (name, moved)


def test_eq13_over_agents_by_hand():
    # one episode: coder played 2 turns, coder2 1, tester 2, tester2 1 -> four agents, each a quarter of the episode
    names = ["coder", "coder", "coder2", "tester", "tester", "tester2"]
    w = eq13_weights(names, [0] * 6)
    # tokens, then that agent's turns, then agents
    assert w == [1 / 8, 1 / 8, 1 / 4, 1 / 8, 1 / 8, 1 / 4]
    lps = [
        torch.tensor([-1.0, -3.0]),
        torch.tensor([-2.0]),
        torch.tensor([-4.0]),
        torch.tensor([-1.0]),
        torch.tensor([-2.0]),
        torch.tensor([-8.0]),
    ]
    advs = [torch.ones_like(lp) for lp in lps]
    # per response means -2, -2, -4, -1, -2, -8; per agent: coder -2, coder2 -4, tester -1.5, tester2 -8
    assert mas_opd_loss(lps, advs, w).item() == pytest.approx(-(-2 - 4 - 1.5 - 8) / 4)


def test_the_attribution_model_returns_the_verifiers_form(tok, scripted):
    episodes = team_episodes([APPLES], _math_team(scripted), tok, CFG2)
    calls = []

    def judge(prompts):
        calls.append([tok.decode(p) for p in prompts])
        text = "Reasoner 1: inconsistent\nReasoner 2: consistent\nTool-User 1: inconsistent\nTool-User 2: inconsistent"
        ids = tok(text, add_special_tokens=False)["input_ids"]
        return Generation([ids] * len(prompts), [[0.0] * len(ids)] * len(prompts))

    atts = attribute_by_model(episodes, judge, tok)
    assert len(calls) == 1 and len(calls[0]) == 3  # one call, one prompt per turn
    assert (
        "Reference answer:\n29" in calls[0][0]
        and "Reasoner 2: the answer '7'" in calls[0][0]
    )
    a = atts[0][0]
    assert a.agents == {
        "reasoner": False,
        "reasoner2": True,
        "tool_user": False,
        "tool_user2": False,
    }
    assert (
        a.description.split("\n")[0] == HEADER and len(a.description.split("\n")) == 5
    )
    line = next(x for x in a.description.split("\n") if x.startswith("- Reasoner 2:"))
    assert "'7'" in line and "agrees with the reference answer" in line
    # the verifier's own a^t for the same turn has the same form (the verifier says Reasoner 2 is wrong: 7 != 29)
    ver = attribute_team(APPLES, episodes[0].turns[0], timeout=5)
    assert set(ver.agents) == set(a.agents) and len(ver.description.split("\n")) == 5


def test_checkpoint_holds_one_directory_per_agent_and_resumes_exactly(
    tmp_path, problems
):
    out = str(tmp_path / "run")
    base = ["--problems", problems, "--out", out] + FAST + ["--agents-per-role", "2"]
    train.main(base + ["--steps", "2", "--save-every", "1"])
    ckpt = os.path.join(out, "checkpoint")
    assert sorted(
        d for d in os.listdir(ckpt) if d not in ("state.pt", checkpoint.SETTINGS)
    ) == team_seats(train.load_problems(problems), 2)
    # from_pretrained per agent
    loaded, _ = checkpoint.load_policies(ckpt, ["coder2", "tool_user2"], "cpu")
    assert len(checkpoint.distinct(loaded)) == 2
    whole = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    train.main(base + ["--steps", "1", "--out", str(tmp_path / "r2")])
    train.main(base + ["--steps", "2", "--out", str(tmp_path / "r2"), "--resume"])
    resumed = [
        json.loads(x) for x in open(os.path.join(tmp_path / "r2", "metrics.jsonl"))
    ]
    drop = lambda m: {
        k: v for k, v in m.items() if k not in ("seconds", "peak_memory_mb")
    }
    assert [drop(m) for m in resumed] == [drop(m) for m in whole]
    assert set(whole[0]["roles"]) <= set(team_seats(train.load_problems(problems), 2))


def test_memory_plan_scales_with_the_agents(problems):
    plans = {}
    for n in (1, 2):
        args = config.get_args(
            [
                "--problems",
                problems,
                "--student",
                "tiny-qwen3",
                "--teacher",
                "tiny-qwen3",
                "--agents-per-role",
                str(n),
                "--precision",
                "bf16",
            ]
        )
        text = dry_run(args)
        plans[n] = text
        assert f"{4 * n} student policies" in text
    s, t, kw = plan_inputs(args, 8)
    one = memory.plan(s, t, **{**kw, "n_policies": 4, "agents_per_role": 1})
    two = memory.plan(s, t, **kw)
    # 2n prompts over 2n policies
    assert two["settings"]["generate_batch"] == one["settings"]["generate_batch"]
    assert two["persistent"] > one["persistent"]  # twice the policies and AdamW states


def test_exchange_puts_each_policy_in_the_partner_seat_of_the_same_number(
    tok, scripted, monkeypatch
):
    seen = []
    monkeypatch.setattr(
        team_evaluation,
        "_run",
        lambda problems, policies, *a: (seen.append(dict(policies)), {"acc_math": 0.0})[
            1
        ],
    )
    team = {s: s for s in seats("math", 2)}
    evaluate_team([APPLES], team, tok, [1], CFG2, exchange=True, n=2)
    assert seen[1] == {
        "reasoner": "tool_user",
        "reasoner2": "tool_user2",
        "tool_user": "reasoner",
        "tool_user2": "reasoner2",
    }


def test_bad_agent_flags_exit_2(tmp_path, problems, capsys):
    for argv, parse in (
        (["--agents-per-role", "0"], config.get_args),
        (["--agents-per-role", "2"], grpo.grpo_args),
    ):
        with pytest.raises(SystemExit) as e:
            parse(["--problems", problems, "--student", "tiny-qwen3"] + argv)
        assert e.value.code == 2 and "--agents-per-role" in capsys.readouterr().err


# train.py's figures for this run (examples/problems.jsonl, FAST, 3 steps, seed 0) as the pair-only code wrote them
# before teams existed, on one CPU: that code is gone, so they are the pair's only record. What is counted (tokens,
# outcomes, the roles that spoke) must come out exactly. The floats come out bit for bit on the CPU that wrote them
# (weights included), but another CPU's kernels (AVX2 or AVX-512, MKL's code path) sum in another order: a float32
# sum then moves by a few units of rounding, u = 2^-24, of its largest terms. Every figure here is built from
# log-probs of at most ln V = 5.6 nats (V = 261, the tiny models' vocabulary), so KERNEL_TOLERANCE allows 64 such
# units; on a second CPU the figures moved by at most 1.7 of them (5.7e-7), while Eq. 13's weights 0.1% off move the
# loss by 4e-4 (and a word changed in what the teacher reads changes the counted tokens).
KERNEL_TOLERANCE = 64 * 2**-24 * math.log(261)  # 2.1e-5
PAIR_BEFORE_TEAMS = [
    {
        "loss": [0.2918132469058037, -0.2973541058599949],
        "grad_norm": [0.0, 0.4043591320514679, 0.0, 0.2501441240310669],
        "tokens": {"rollout": 48, "teacher": 22750},
        "outcomes": {"BOTH_INCONSISTENT": 4},
        "a_opd": {"reasoner": -0.050557494163513184, "tool_user": 0.04305380582809448},
        "a_role": {
            "reasoner": -0.0018564860026041667,
            "tool_user": -0.002108931541442871,
        },
    },
    {
        "loss": [0.13871673122048378, 0.6048422306776047],
        "grad_norm": [0.37131771445274353, 0.0, 0.3340267837047577, 0.0],
        "tokens": {"rollout": 48, "teacher": 27048},
        "outcomes": {"BOTH_INCONSISTENT": 4},
        "a_opd": {"coder": 0.05191089709599813, "tester": 0.07447236776351929},
        "a_role": {"coder": 0.002353211243947347, "tester": -0.0005580782890319824},
    },
    {
        "loss": [0.06520707160234451, -0.6642972528934479],
        "grad_norm": [0.0, 0.3869228661060333, 0.0, 0.43799835443496704],
        "tokens": {"rollout": 48, "teacher": 25238},
        "outcomes": {"BOTH_INCONSISTENT": 4},
        "a_opd": {
            "coder": 0.07367746035257976,
            "reasoner": -0.08520551522572835,
            "tester": -0.058469176292419434,
            "tool_user": -0.16241788864135742,
        },
        "a_role": {
            "coder": -0.0006697177886962891,
            "reasoner": -0.0007249116897583008,
            "tester": 0.0015867551167805989,
            "tool_user": -0.0026352802912394204,
        },
    },
]


def test_one_agent_per_role_gives_the_pairs_numbers(tmp_path):
    out = str(tmp_path / "run")
    examples = os.path.join(
        os.path.dirname(__file__), "..", "examples", "problems.jsonl"
    )
    train.main(
        ["--problems", examples, "--out", out, "--steps", "3"]
        + FAST
        + ["--agents-per-role", "1"]
    )
    ms = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    got = [
        {
            "loss": m["loss"],
            "grad_norm": m["grad_norm"],
            "tokens": m["tokens"],
            "outcomes": m["outcomes"],
            "a_opd": {r: v["a_opd"] for r, v in m["roles"].items()},
            "a_role": {r: v["a_role"] for r, v in m["roles"].items()},
        }
        for m in ms
    ]
    floats = lambda g: (
        g["loss"]
        + g["grad_norm"]
        + [g[k][r] for k in ("a_opd", "a_role") for r in sorted(g[k])]
    )
    assert [(g["tokens"], g["outcomes"], sorted(g["a_opd"])) for g in got] == [
        (g["tokens"], g["outcomes"], sorted(g["a_opd"])) for g in PAIR_BEFORE_TEAMS
    ]
    for g, want in zip(got, PAIR_BEFORE_TEAMS):
        assert floats(g) == pytest.approx(floats(want), rel=0, abs=KERNEL_TOLERANCE)


def test_the_toy_teacher_reads_its_own_line_of_a_larger_teams_verdict(tok, scripted):
    team = {
        "reasoner": scripted(["#### 5"]),
        "reasoner2": scripted(["#### 29"]),
        "tool_user": scripted(["Code:\n```python\nprint(4)\n```"]),
        "tool_user2": scripted(["Code:\n```python\nprint(6)\n```"]),
    }
    e = team_episodes([APPLES], team, tok, CFG2)[0]
    verdict = attribute_team(APPLES, e.turns[0], timeout=5).description
    last = lambda name: (
        team[name]
        .seen[1][0]
        .split("History of the earlier turns:")[1]
        .split("\nTurn ")[-1]
    )
    # the toy teacher knows a seat by its role's answer format; which agent it is, only by its own values
    assert (
        conclusion_of("reasoner", verdict, last("reasoner2"))
        == "in the program's computation"
    )
    # its own 5 and the programs
    assert conclusion_of("reasoner", verdict, last("reasoner")) == "in both"
    # reasoner 1 is wrong too
    assert conclusion_of("tool_user", verdict, last("tool_user")) == "in both"
    pair = "\n".join(
        [HEADER, "- observed", "- the inconsistency originates in the program."]
    )
    assert (
        conclusion_of("coder", pair, "")
        == "- the inconsistency originates in the program."
    )
