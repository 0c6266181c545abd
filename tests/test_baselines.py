"""The Table 1 baselines: the rewards of App. D.4 (Eq. 14-22) on hand-made turns, GRPO's group-normalised advantage,
the per-role update, MAGRPO's return-to-go, SA+MT's stops, and python -m baselines.grpo end to end."""

import copy
import json
import os
import types

import pytest
import torch

import eval as ev
import train
from attribution import attribute_turn
from baselines import grpo, single
from baselines import rewards as rw
from baselines.grpo import group_advantages, group_items
from baselines.single import run_single
from infra.models import tiny_model
from rollout import RolloutConfig, code_env, math_env, run_episodes
from tests.test_workflows import APPLES, BAD, CRASH, GOOD, REV, SUM, TEST_OK, TEST_WRONG

CFG = RolloutConfig(code_timeout=5, math_timeout=5)
NONE = "I am not sure."  # a response with no artefact in it
SYNTAX = "Code:\n```python\nprint(\n```"


def _code_turn(coder, tester, problem=SUM):
    artefacts, _ = code_env(problem, {"coder": coder, "tester": tester}, CFG)
    return artefacts, attribute_turn(problem, artefacts, timeout=5).checks


def _math_turn(reasoner, tool_user):
    artefacts, _ = math_env(APPLES, {"reasoner": reasoner, "tool_user": tool_user}, CFG)
    return artefacts, attribute_turn(APPLES, artefacts, timeout=5).checks


def _local(role, problem, turn):
    return rw.local_reward(role, problem, *turn, timeout=5)


def test_coder_local_reward_build_run_pass_weighted_1_1_8():
    # builds, runs, passes
    assert _local("coder", SUM, _code_turn(GOOD, TEST_OK)) == pytest.approx(1.0)
    # builds and runs, wrong
    assert _local("coder", SUM, _code_turn(BAD, TEST_OK)) == pytest.approx(0.2)
    # builds, crashes
    assert _local("coder", SUM, _code_turn(CRASH, TEST_OK)) == pytest.approx(0.1)
    assert _local("coder", SUM, _code_turn(SYNTAX, TEST_OK)) == 0.0  # does not build
    assert _local("coder", SUM, _code_turn(NONE, TEST_OK)) == 0.0  # no program


def test_tester_local_reward_valid_spec_weighted_2_8():
    # right whatever the program
    assert _local("tester", SUM, _code_turn(BAD, TEST_OK)) == pytest.approx(1.0)
    # valid input, wrong output
    assert _local("tester", SUM, _code_turn(GOOD, TEST_WRONG)) == pytest.approx(0.2)
    assert _local("tester", SUM, _code_turn(GOOD, NONE)) == 0.0  # no test case
    # outside the input format
    blank = "Test Input:\n```\n\n```\nTest Output:\n```\n0\n```"
    assert _local("tester", SUM, _code_turn(GOOD, blank)) == 0.0
    # function format: no arguments
    not_a_list = "Test Input:\n```\n'abc'\n```\nTest Output:\n```\n'cba'\n```"
    rev = "Code:\n```python\ndef rev(s):\n    return s[::-1]\n```"
    assert rw.tester_valid(REV, _code_turn(rev, not_a_list, REV)[0]) == 0.0
    assert _local(
        "tester",
        REV,
        _code_turn(
            rev, "Test Input:\n```\n['ab']\n```\nTest Output:\n```\n'ba'\n```", REV
        ),
    ) == pytest.approx(1.0)


def test_reasoner_local_reward_format_answer_weighted_2_8():
    prog = "Code:\n```python\nprint(29)\n```"
    assert _local(
        "reasoner", APPLES, _math_turn("Reasoning Steps:\n36 - 7\n#### 29", prog)
    ) == pytest.approx(1.0)
    # format, wrong
    assert _local("reasoner", APPLES, _math_turn("#### 30", prog)) == pytest.approx(0.2)
    assert _local(
        "reasoner", APPLES, _math_turn("so it is 29.", prog)
    ) == pytest.approx(0.8)  # right, no ####
    assert _local("reasoner", APPLES, _math_turn(NONE, prog)) == 0.0  # no answer at all


def test_tool_user_local_reward_run_parse_answer_weighted_1_1_8():
    said = "#### 29"
    assert _local(
        "tool_user", APPLES, _math_turn(said, "Code:\n```python\nprint(29)\n```")
    ) == pytest.approx(1.0)
    assert _local(
        "tool_user", APPLES, _math_turn(said, "Code:\n```python\nprint(30)\n```")
    ) == pytest.approx(0.2)
    assert _local(
        "tool_user",
        APPLES,
        _math_turn(said, "Code:\n```python\nprint('no idea at all')\n```"),
    ) == pytest.approx(0.1)  # runs, prints no answer
    assert _local(
        "tool_user", APPLES, _math_turn(said, "Code:\n```python\npass\n```")
    ) == pytest.approx(0.1)
    assert _local("tool_user", APPLES, _math_turn(said, CRASH)) == 0.0  # does not run
    assert _local("tool_user", APPLES, _math_turn(said, NONE)) == 0.0  # no program


def test_role_reward_is_team_plus_alpha_local():
    artefacts, checks = _code_turn(GOOD, TEST_WRONG)
    assert rw.role_reward("coder", SUM, artefacts, checks, None, 5) == pytest.approx(
        2.0
    )  # team 1 + local 1
    assert rw.role_reward("tester", SUM, artefacts, checks, None, 5) == pytest.approx(
        1.2
    )  # the team's 1 too
    assert rw.role_reward(
        "tester", SUM, artefacts, checks, None, 5, alpha=0
    ) == pytest.approx(1.0)
    artefacts, checks = _code_turn(BAD, TEST_OK)
    assert rw.role_reward("tester", SUM, artefacts, checks, None, 5) == pytest.approx(
        1.0
    )  # team 0 + local 1
    artefacts, checks = _math_turn("#### 30", "Code:\n```python\nprint(29)\n```")
    assert rw.role_reward(
        "reasoner", APPLES, artefacts, checks, "30", 5
    ) == pytest.approx(0.2)  # y-hat wrong
    assert rw.role_reward(
        "tool_user", APPLES, artefacts, checks, "29", 5
    ) == pytest.approx(2.0)  # y-hat right


def test_group_advantage_by_hand_and_zero_for_equal_rewards():
    # mean 1.5; deviations 1.5, -0.5 x 3; unbiased variance (2.25 + 3 x 0.25) / 3 = 1
    assert group_advantages([3.0, 1.0, 1.0, 1.0]) == pytest.approx(
        [1.5, -0.5, -0.5, -0.5], abs=1e-5
    )
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == pytest.approx(
        [0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5
    )
    assert group_advantages([0.2, 0.2, 0.2, 0.2]) == [0.0] * 4  # nothing to prefer
    assert group_advantages([1.7]) == [0.0]


def _episodes(tok, scripted, coders, testers):
    return [
        run_episodes([SUM], {"coder": scripted(c), "tester": scripted(t)}, tok, CFG)[0]
        for c, t in zip(coders, testers)
    ]


def _atts(episodes):
    return [
        [attribute_turn(e.problem, t.artefacts, timeout=5) for t in e.turns]
        for e in episodes
    ]


def test_mas_grpo_gives_each_role_its_own_group_advantage(tok, scripted):
    eps = _episodes(
        tok,
        scripted,
        [[GOOD], [BAD], [BAD], [BAD]],
        [[TEST_OK], [TEST_OK], [TEST_OK], [TEST_OK]],
    )
    args = types.SimpleNamespace(grpo_variant="mas", alpha=1.0)
    items = group_items(7, list(zip(eps, _atts(eps))), args, CFG)
    assert {it.episode for it in items} == {7}  # one group: one episode of Eq. 13
    # the Coder's rewards: 2 (solved, its program right) then 0.2 three times (wrong); the Tester's 2, then 1 (its
    # test right, the team wrong): both groups are [x + 1, x, x, x], each normalised per role to 1.5, -0.5 x 3
    # (each of an episode's responses carries its reward: the wrong rollouts disagree for all 4 turns)
    reward = lambda role, e: {
        round(it.reward, 6)
        for it in items
        if it.seat == role and any(it.response is t.responses[role] for t in e.turns)
    }
    assert [reward("coder", e) for e in eps] == [{2.0}, {0.2}, {0.2}, {0.2}] and len(
        eps[1].turns
    ) == 4
    assert [reward("tester", e) for e in eps] == [{2.0}, {1.0}, {1.0}, {1.0}]
    adv = {
        it.seat: it.adv[0].item()
        for it in items
        if it.response is eps[0].turns[-1].responses[it.seat]
    }
    assert adv["coder"] == pytest.approx(1.5, abs=1e-5) and adv[
        "tester"
    ] == pytest.approx(1.5, abs=1e-5)
    assert all(
        it.adv.shape == (len(it.response.tokens),) and (it.adv == it.adv[0]).all()
        for it in items
    )


def test_magrpo_credits_each_turn_with_its_return_to_go(tok, scripted):
    # turn 1: BAD disagrees with TEST_OK (Coder 0 + 0.2); turn 2: GOOD agrees (Coder 1 + 1): returns 2.2, then 2
    eps = _episodes(tok, scripted, [[BAD, GOOD]] * 2, [[TEST_OK]] * 2)
    items = group_items(
        0,
        list(zip(eps, _atts(eps))),
        types.SimpleNamespace(grpo_variant="magrpo", alpha=1.0),
        CFG,
    )
    coder = [it for it in items if it.seat == "coder" and it.response is not None]
    assert sorted(round(it.reward, 6) for it in coder) == [2.0, 2.0, 2.2, 2.2]
    # two identical rollouts: nothing to prefer
    assert all(it.adv.abs().max() == 0 for it in items)


def test_grpo_update_of_one_role_leaves_the_other_policy_unchanged(tok, scripted):
    coder, tester = (
        tiny_model("qwen3", layers=1, hidden=32, seed=0),
        tiny_model("qwen3", layers=1, hidden=32, seed=1),
    )
    policies = {"coder": coder, "tester": tester}
    cfg = RolloutConfig(max_new_tokens=5, max_turns=1, code_timeout=5)
    eps = run_episodes([SUM] * 4, policies, tok, cfg, torch.Generator().manual_seed(0))
    args = types.SimpleNamespace(
        grpo_variant="mas",
        alpha=1.0,
        mini_batch=1,
        micro_batch=8,
        grad_clip=1.0,
        optimizer_offload=False,
        fsdp=False,
        precision="fp32",
        device="cpu",
    )
    items = group_items(0, list(zip(eps, _atts(eps))), args, cfg)
    # rewards of random models are all 0: give the Coder's responses an advantage by hand
    for it in items:
        it.adv = torch.full_like(it.adv, 1.0 if it.seat == "coder" else 0.0)
    before = {r: copy.deepcopy(m.state_dict()) for r, m in policies.items()}
    optims = [
        torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
        for m in (coder, tester)
    ]
    train.update([it for it in items if it.seat == "coder"], 1, policies, optims, args)
    changed = {
        r: any(not torch.equal(p, before[r][k]) for k, p in m.state_dict().items())
        for r, m in policies.items()
    }
    assert changed == {"coder": True, "tester": False}


def test_sa_mt_stops_when_the_answer_is_unchanged(tok, scripted):
    # whitespace aside, turn 3 repeats turn 2
    agent = scripted([BAD, GOOD, GOOD + "\n"])
    e = run_single([SUM], {"coder": agent}, tok, CFG, None, 4)[0]
    assert (
        e.stopped == "unchanged"
        and len(e.turns) == 3
        and e.final.strip() == GOOD.split("```python\n")[1][:-4]
    )
    assert [t.agree for t in e.turns] == [False, False, True]
    # turn 2 shows its own program, and neither a test case nor an output
    shown = agent.seen[1][0]
    assert "Your program:" in shown and "a - b" in shown and "Test input" not in shown


def test_sa_mt_stops_at_t_4_and_sa_st_after_one_turn(tok, scripted):
    programs = [f"Code:\n```python\nprint({i})\n```" for i in range(6)]
    e = run_single([SUM], {"coder": scripted(programs)}, tok, CFG, None, 4)[0]
    assert e.stopped == "max_turns" and len(e.turns) == 4 and "print(3)" in e.final
    e = run_single([APPLES], {"reasoner": scripted(["#### 29"])}, tok, CFG, None, 1)[0]
    assert e.stopped == "max_turns" and len(e.turns) == 1 and e.final == "29"


def test_sa_mt_metrics_count_turns_and_judge_the_last_answer(tok, scripted):
    m = single.single_agent_metrics(
        [SUM], scripted([BAD, GOOD, GOOD]), tok, 0, CFG, multi_turn=True
    )
    assert m["acc_code"] == 100.0 and m["turns_code"] == 3.0


FAST = [
    "--student",
    "tiny-qwen3",
    "--max-new-tokens",
    "6",
    "--max-turns",
    "2",
    "--batch",
    "2",
    "--mini-batch",
    "2",
    "--micro-batch",
    "8",
    "--lr",
    "1e-3",
    "--workers",
    "2",
    "--group-size",
    "2",
]


@pytest.mark.parametrize("variant", ["mas", "magrpo", "sa-st", "sa-mt"])
def test_grpo_runs_every_variant_through_train_py_s_loop_without_a_teacher(
    tmp_path, problems, variant, capsys
):
    out = str(tmp_path / variant)
    grpo.main(
        [
            "--problems",
            problems,
            "--out",
            out,
            "--steps",
            "2",
            "--grpo-variant",
            variant,
        ]
        + FAST
    )
    ms = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [m["step"] for m in ms] == [0, 1]
    main_roles = {"coder", "reasoner"}
    for m in ms:
        assert (
            set(m["seconds"]) == {"rollout", "attribution", "reward", "update"}
            and m["tokens"]["teacher"] == 0
        )
        assert set(m["reward"]) == (
            main_roles
            if variant.startswith("sa")
            else main_roles | {"tester", "tool_user"}
        )
        assert m["updates"] == 1 and m["skipped"] == 0
    printed = capsys.readouterr().out
    episodes = 2 * 2  # --batch 2 problems x --group-size 2
    assert (
        f"per step: up to {episodes * 2 * 2 * 6:,} tokens sampled ({episodes} episodes x 2 agents"
        in printed
    )
    assert "up to 0 scored by the teacher" in printed
    assert os.path.isfile(
        os.path.join(out, "checkpoint", "state.pt")
    ) and os.path.isfile(os.path.join(out, "report.html"))
    # the rewards' curves in the teacher's figures' place
    report = open(os.path.join(out, "report.html")).read()
    assert "mean reward per response" in report and "zero advantage" in report
    # resumed for a third step from its checkpoint, it equals an uninterrupted run, as a MAS-OPD run does
    grpo.main(
        [
            "--problems",
            problems,
            "--out",
            out,
            "--steps",
            "3",
            "--grpo-variant",
            variant,
            "--resume",
        ]
        + FAST
    )
    full = str(tmp_path / "full")
    grpo.main(
        [
            "--problems",
            problems,
            "--out",
            full,
            "--steps",
            "3",
            "--grpo-variant",
            variant,
        ]
        + FAST
    )
    same = lambda run: [
        {
            k: v
            for k, v in json.loads(line).items()
            if k not in ("seconds", "peak_memory_mb")
        }
        for line in open(os.path.join(run, "metrics.jsonl"))
    ]
    assert [m["step"] for m in same(out)] == [0, 1, 2] and same(out) == same(full)


def test_grpo_samples_group_size_rollouts_per_problem_in_a_row(
    tmp_path, problems, monkeypatch
):
    seen, real = [], grpo.run_episodes
    monkeypatch.setattr(
        grpo,
        "run_episodes",
        lambda ps, *a: seen.append([p["id"] for p in ps]) or real(ps, *a),
    )
    args = FAST[:-2] + ["--group-size", "3", "--steps", "1"]
    # alpha of Eq. 14 by default
    assert grpo.grpo_args(["--problems", problems] + args).alpha == 1.0
    grpo.main(["--problems", problems, "--out", str(tmp_path / "g3")] + args)
    assert len(seen) == 1 and sorted(seen[0]) == ["apples"] * 3 + ["sum"] * 3
    # a problem's group is consecutive: grpo_items reads it so
    assert seen[0][:3] == [seen[0][0]] * 3


def test_single_cli_multi_turn_is_sa_mt_in_the_same_table(tmp_path, problems, capsys):
    out = tmp_path / "sa_mt.json"
    single.main(
        [
            "--model",
            "tiny-qwen3",
            "--multi-turn",
            "--problems",
            problems,
            "--seeds",
            "0",
            "1",
            "--max-new-tokens",
            "4",
            "--json",
            str(out),
        ]
    )
    result = json.load(open(out))
    ((name, m),) = result.items()
    assert name == "single agent tiny-qwen3, multi-turn" and {
        "acc_code",
        "acc_math",
    } <= set(m)
    # SA+ST has no turns figure
    assert 1 <= m["turns_code"]["mean"] <= 4 and 1 <= m["turns_math"]["mean"] <= 4
    assert "| turns_code |" in capsys.readouterr().out


def test_eval_cli_has_no_single_agent_its_command_is_the_baselines(capsys):
    # a team's evaluation; python -m baselines.single a model alone
    for flag in ("--multi-turn", "--single-agent"):
        with pytest.raises(SystemExit) as e:
            ev.main(
                [
                    "--student",
                    "tiny-qwen3",
                    flag,
                    "--problems",
                    "examples/problems.jsonl",
                ]
            )
        assert (
            e.value.code == 2
            and f"unrecognized arguments: {flag}" in capsys.readouterr().err
        )
