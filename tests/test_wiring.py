"""The wiring of Algorithm 1 in train.py: which contexts the teacher scores, which advantages come out, which
policy receives which gradient, and which decoding evaluation uses. A recording teacher stands in for
teacher.score: it logs every (context, response) it is asked to score and returns hand-set log-probs that
depend only on the role condition in the context, so every advantage is known in closed form."""

import dataclasses
import json
import re

import pytest
import torch

import config
import eval as evaluation
import teacher
import train
from attribution import HEADER
from infra.models import make_tokenizer, tiny_model
from loss import ras_advantage
from prompts import Segment
from rollout import Response
from teacher import KAPPA, ROLE_CONDITIONS
from tests.test_workflows import SUM

# The recording teacher's log-prob of every token, by the role condition its context holds.
TEACHER_LP = {"coder": -1.0, "tester": -2.5, "reasoner": -0.5, "tool_user": -4.0}
ARGS = [
    "--student",
    "tiny-qwen3",
    "--teacher",
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
    "3",
    "--lr",
    "1e-3",
    "--workers",
    "2",
    "--steps",
    "1",
]


def turn_of(item):
    """The turn t of a response: the number of earlier turns its student context records."""
    return sum(s.kind == "history" and s.turn >= 0 for s in item.response.context)


def condition_of(text):
    """The one role whose condition the teacher context holds (it must hold exactly one)."""
    found = [r for r, c in ROLE_CONDITIONS.items() if c in text]
    assert len(found) == 1, found
    return found[0]


class Recorder:
    """teacher.score's stand-in, plus taps on train.build (the policies), train.update (the Scored items) and
    train.sequence_logprobs (which model re-scores which contexts with grad, through FSDP2's root when sharded)."""

    def __init__(self, monkeypatch, tok):
        self.tok, self.scored, self.items, self.rescored, self.policies = (
            tok,
            [],
            [],
            [],
            {},
        )
        real_update, real_logprobs, real_build = (
            train.update,
            train.sequence_logprobs,
            train.build,
        )

        def score(teacher, contexts, responses, **kw):
            out = []
            for c, r in zip(contexts, responses):
                text = tok.decode(c)
                self.scored.append((text, list(r)))
                out.append(torch.full((len(r),), TEACHER_LP[condition_of(text)]))
            return out

        def update(items, *a, **kw):
            self.items += items
            return real_update(items, *a, **kw)

        def logprobs(model, contexts, responses):
            self.rescored.append((model, [list(c) for c in contexts]))
            return real_logprobs(model, contexts, responses)

        def build(args, teacher=None):
            built = real_build(args, teacher)
            # role -> the policy trained for that role
            self.policies.update(built.policies)
            return built

        monkeypatch.setattr(train, "build", build)
        monkeypatch.setattr(teacher, "score", score)  # what score_both_passes calls
        monkeypatch.setattr(train, "update", update)
        monkeypatch.setattr(train, "sequence_logprobs", logprobs)


def run(monkeypatch, tmp_path, problems, *flags):
    """One train_step through train.main with the recorder in place -> (recorder, the step's metrics)."""
    rec = Recorder(monkeypatch, make_tokenizer())
    out = tmp_path / "run"
    train.main(["--problems", problems, "--out", str(out)] + ARGS + list(flags))
    with open(out / "metrics.jsonl") as f:
        return rec, json.loads(f.readline())


def test_two_passes_per_response_on_contexts_that_differ_only_in_the_role_condition(
    monkeypatch, tmp_path, problems
):
    rec, metrics = run(monkeypatch, tmp_path, problems)
    assert rec.items and len(rec.scored) == 2 * len(rec.items)
    # random students disagree: turn 2 happens, verdicts play
    assert any(turn_of(it) == 1 for it in rec.items)
    for it in rec.items:
        target, contrast = (
            rec.tok.decode(it.ctx_target),
            rec.tok.decode(it.ctx_contrast),
        )
        assert (
            condition_of(target) == it.seat and condition_of(contrast) == KAPPA[it.seat]
        )
        assert (
            target.replace(ROLE_CONDITIONS[it.seat], ROLE_CONDITIONS[KAPPA[it.seat]])
            == contrast
        )
        # c^{<t}: one per completed turn
        assert target.count(HEADER) == contrast.count(HEADER) == turn_of(it)
        assert (target, it.response.tokens) in rec.scored and (
            contrast,
            it.response.tokens,
        ) in rec.scored
    assert metrics["tokens"]["teacher"] == sum(
        len(it.ctx_target) + len(it.ctx_contrast) + 2 * len(it.response.tokens)
        for it in rec.items
    )
    assert metrics["tokens"]["rollout"] == sum(
        len(it.response.tokens) for it in rec.items
    )


@pytest.mark.parametrize("lam", [0.1, 0.7])
def test_advantages_are_eq10_with_the_sampler_logprobs(
    monkeypatch, tmp_path, problems, lam
):
    rec, metrics = run(monkeypatch, tmp_path, problems, "--lam", str(lam))
    for it in rec.items:
        lp_s = torch.tensor(it.response.logprobs)
        a_opd = TEACHER_LP[it.seat] - lp_s  # Eq. 8: teacher minus student
        # Eq. 9: target minus contrast
        a_role = TEACHER_LP[it.seat] - TEACHER_LP[KAPPA[it.seat]]
        torch.testing.assert_close(it.adv, a_opd + lam * a_role)  # Eq. 10
        torch.testing.assert_close(
            it.adv, ras_advantage(it.lp_target, it.lp_contrast, it.lp_student, lam)
        )
    for role, s in metrics["roles"].items():
        assert s["a_role"] == pytest.approx(TEACHER_LP[role] - TEACHER_LP[KAPPA[role]])


def test_the_teacher_context_of_turn_t_holds_the_verdicts_of_turns_before_t_only(
    monkeypatch, tmp_path, problems
):
    """PAC (Eq. 12): c^{<t} are the verdicts of the completed turns 0..t-1 of the response's own episode. Each verdict
    is tagged with its episode and turn, so a context that also carries the verdict on the very response being
    scored (turn t), a later turn's, or another episode's shows it."""
    real = train.attribute_episodes
    tag = lambda e, t: f"verdict on {e.problem['id']} turn {t}."
    tagged = lambda episodes, **kw: [
        [
            dataclasses.replace(a, description=f"{HEADER}\n- {tag(e, t)}")
            for t, a in enumerate(atts)
        ]
        for e, atts in zip(episodes, real(episodes, **kw))
    ]
    monkeypatch.setattr(train, "attribute_episodes", tagged)
    episodes = []
    monkeypatch.setattr(
        "infra.metrics.append_episodes", lambda path, eps, **kw: episodes.extend(eps)
    )
    rec, _ = run(monkeypatch, tmp_path, problems, "--max-turns", "3", "--save-episodes")
    assert max(turn_of(it) for it in rec.items) == 2  # turns 0, 1 and 2 are scored
    for it in rec.items:
        e, t = episodes[it.episode], turn_of(it)
        for ctx in (it.ctx_target, it.ctx_contrast):
            seen = re.findall(r"verdict on \S+ turn \d+\.", rec.tok.decode(ctx))
            assert seen == [tag(e, k) for k in range(t)], (it.seat, t, seen)


def test_no_pac_gives_the_teacher_no_verdict_in_either_pass(
    monkeypatch, tmp_path, problems
):
    rec, _ = run(monkeypatch, tmp_path, problems, "--no-pac")
    assert rec.scored and not any(HEADER in text for text, _ in rec.scored)
    assert any("History of the earlier turns" in text for text, _ in rec.scored)


def test_each_response_is_rescored_with_grad_by_its_authors_policy_only(
    monkeypatch, tmp_path, problems
):
    rec, metrics = run(monkeypatch, tmp_path, problems)
    assert metrics["updates"] == 1
    by_context = {}
    for it in rec.items:
        by_context.setdefault(tuple(it.response.context_ids), set()).add(it.seat)
    # one policy per role
    assert len({id(m) for m in rec.policies.values()}) == len(rec.policies) == 4
    seen = set()
    for model, contexts in rec.rescored:
        for c in contexts:
            (role,) = by_context[tuple(c)]
            assert model is rec.policies[role], (
                f"a {role} response was re-scored by another role's policy"
            )
            seen.add(tuple(c))
    assert seen == set(by_context)  # every response was re-scored


def _item(role, adv, tok):
    ctx = tok("What is 2 + 2?", add_special_tokens=False)["input_ids"]
    resp = tok("#### 4", add_special_tokens=False)["input_ids"]
    response = Response(role, [Segment("task", ctx)], resp, [0.0] * len(resp), "")
    return train.Scored(
        0,
        role,
        response,
        [],
        [],
        torch.zeros(len(resp)),
        adv=torch.full((len(resp),), adv),
    )


def test_update_sends_each_gradient_to_its_authors_policy(tok):
    """Only the Coder's responses carry an advantage: the Coder's policy moves and the Tester's does not (Adam on
    a zero gradient, no weight decay, takes a zero step)."""
    coder, tester = (
        tiny_model("qwen3", layers=1, hidden=32, seed=0),
        tiny_model("qwen3", layers=1, hidden=32, seed=1),
    )
    policies = {"coder": coder, "tester": tester}
    optims = [
        torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.0)
        for m in (coder, tester)
    ]
    before = {
        r: [p.detach().clone() for p in m.parameters()] for r, m in policies.items()
    }
    args = config.get_args(
        ["--problems", "-", "--student", "-", "--teacher", "-", "--micro-batch", "1"]
    )
    out = train.update(
        [_item("coder", 1.0, tok), _item("tester", 0.0, tok)], 1, policies, optims, args
    )
    assert out["updates"] == 1 and out["skipped"] == 0
    moved = {
        r: any(not torch.equal(a, b) for a, b in zip(before[r], m.parameters()))
        for r, m in policies.items()
    }
    assert moved == {"coder": True, "tester": False}


def test_evaluation_decodes_as_the_paper(monkeypatch, problems, tmp_path):
    """App. D.5: temperature 0.6, top-p 0.95, top-k 20, T = 4, in train.py's evaluation and in eval.py."""
    assert evaluation.EVAL_DECODING == dict(
        temperature=0.6, top_p=0.95, top_k=20, max_turns=4
    )
    seen = []
    monkeypatch.setattr(
        evaluation,
        "run_episodes",
        lambda problems, policies, tok, cfg, **kw: seen.append(cfg) or [],
    )
    args = config.get_args(
        [
            "--problems",
            problems,
            "--student",
            "tiny-qwen3",
            "--teacher",
            "tiny-qwen3",
            "--temperature",
            "0.9",
            "--top-k",
            "5",
            "--max-turns",
            "2",
            "--eval-seeds",
            "3",
        ]
    )
    evaluation.evaluate_policies(
        [SUM], {"coder": None, "tester": None}, make_tokenizer(), args
    )
    evaluation.main(
        [
            "--problems",
            problems,
            "--student",
            "tiny-qwen3",
            "--seeds",
            "3",
            "--no-exchange",
        ]
    )
    assert len(seen) == 2
    for cfg in seen:
        assert (cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_turns) == (
            0.6,
            0.95,
            20,
            4,
        )
