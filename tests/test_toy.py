"""The toy world: its problems are valid, its simulator agrees with the real sandboxed environment and verifier,
and its training examples respect who may see what."""
import json
import os
import random

import pytest
import torch

from attribution import attribute_turn
from data import check_problem, load_problems
from models import load_model, make_tokenizer, tiny_model
from rollout import ROLES, RolloutConfig, code_env, math_env
from sampler import sequence_logprobs
from teacher import ROLE_CONDITIONS
from toy import ablation, diagnose
from toy.__main__ import main as toy_main
from toy.world import (DRIFT_MARK, ORACLE, ROLE_BLIND, TOY_VERSION, build_toy, make_phrase_tokenizer, respond, sft,
                       sft_examples, simulate, step_env, teacher_report, toy_problems)

HEADER = "Verification result for the previous turn:"


def test_problems_are_valid_and_splits_disjoint():
    train, test = toy_problems("train"), toy_problems("test")
    assert len(train) == 200 and len(test) == 100
    assert not {p["id"] for p in train} & {p["id"] for p in test}
    for p in train + test:
        check_problem(p)


def test_simulator_matches_the_real_environment_and_verifier():
    rng, cfg = random.Random(0), RolloutConfig(code_timeout=5, math_timeout=5)
    problems = toy_problems("train")
    for k in range(8):
        p = problems[rng.randrange(len(problems))] if k % 2 else problems[rng.randrange(18)]
        for turn in simulate(p, ORACLE if k % 4 == 0 else ROLE_BLIND, rng):
            real, agree = (code_env if p["domain"] == "code" else math_env)(p, turn.responses, cfg)
            assert real == turn.artefacts
            att = attribute_turn(p, real, timeout=5)
            assert att.description == turn.verdict
            assert list(att.checks.values()) == list(turn.checks.values())


def test_oracle_revises_iff_wrong_and_its_artefact_is_then_right():
    """What the teacher is trained on: at every state of role-blind episodes the oracle keeps a right artefact
    (without the teammate's work a drift appended) and replaces a wrong one by a right one."""
    rng, problems, seen = random.Random(3), toy_problems("train"), 0
    for _ in range(80):
        p = rng.choice(problems)
        turns = simulate(p, ROLE_BLIND, rng)
        for t in range(1, len(turns)):
            for r in ROLES[p["domain"]]:
                was_right = turns[t - 1].checks[r]
                text = respond(r, p, turns[:t], ORACLE, rng, was_right)
                assert text.startswith("I keep" if was_right else "I revise"), text
                assert step_env(p, {**turns[t].responses, r: text})[2][r], (p["question"], r, text)
                assert DRIFT_MARK[r] not in text
                seen += 1
    assert seen > 100


def test_examples_students_never_see_verdicts_or_role_conditions():
    tok = make_tokenizer()
    train = toy_problems("train")
    students = [tok.decode(c) for c, _ in sft_examples(tok, train, 60, False, 0)]
    teachers = [tok.decode(c) for c, _ in sft_examples(tok, train, 200, True, 0)]
    for text in students:
        assert HEADER not in text and not any(c[:40] in text for c in ROLE_CONDITIONS.values())
    assert all(any(c[:40] in t for c in ROLE_CONDITIONS.values()) for t in teachers)
    assert any(HEADER in t for t in teachers)


def test_phrase_tokenizer_round_trips_and_keeps_digits_apart():
    tok = make_phrase_tokenizer(["What is 7 times 8? Reasoning Steps: 7 * 8 = 56\n#### 56"] * 50, vocab_size=400)
    text = "<|im_start|>user\nWhat is 12 times 34? ünïcode\n  x<|im_end|>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert all(not any(ch.isdigit() for ch in t) or t.strip("Ġ").isdigit() and len(t.strip("Ġ")) == 1
               for t in tok.convert_ids_to_tokens(ids))


def test_sft_fits_a_small_set():
    tok = make_tokenizer()
    ex = sft_examples(tok, toy_problems("train"), 4, False, 3)
    model = tiny_model("qwen3", layers=1, hidden=32, seed=0)
    before = torch.stack([lp.mean() for lp in sequence_logprobs(model, *zip(*ex))]).mean().item()
    sft(model, ex, 12, batch=4, lr=2e-2)
    with torch.no_grad():
        after = torch.stack([lp.mean() for lp in sequence_logprobs(model, *zip(*ex))]).mean().item()
    assert after > before + 1.0


@pytest.fixture(scope="module")
def small_toy(tmp_path_factory):
    """A toy build of a few SFT steps, and a file of 4 held-out toy problems: (cache dir, problem file)."""
    root = tmp_path_factory.mktemp("toy")
    cache = str(root / "cache")
    build_toy(cache, student_steps=3, teacher_steps=3)
    held = root / "held.jsonl"
    held.write_text("".join(json.dumps(p) + "\n" for p in toy_problems("test")[::25]))
    return cache, str(held)


def test_short_toy_run_builds_caches_trains_and_evaluates(tmp_path, small_toy):
    """`python -m toy` in miniature: the toy build (a few SFT steps), cached, with its problem files; MAS-OPD
    steps through train.py; evaluation before and after on the held-out toy problems; and the teacher report."""
    cache, held = small_toy
    root = os.path.join(cache, TOY_VERSION)
    assert os.listdir(cache) == [TOY_VERSION]  # no temporary directory left behind
    assert build_toy(cache, student_steps=10**9) == root  # cached: built once, never rebuilt
    assert [p["id"] for p in load_problems(os.path.join(root, "test.jsonl"))] == [p["id"] for p in toy_problems("test")]
    out = str(tmp_path / "run")
    toy_main(["--cache", cache, "--out", out, "--steps", "2", "--batch", "4", "--mini-batch", "2",
              "--max-new-tokens", "12", "--max-turns", "2", "--eval-seeds", "5", "--eval-problems", held])
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    assert set(results) == {"before", "after"}
    for r in results.values():
        assert 0 <= r["acc_code"]["mean"] <= 100 and 0 <= r["acc_math"]["mean"] <= 100
    with open(os.path.join(out, "metrics.jsonl")) as f:
        assert [json.loads(line)["step"] for line in f] == [0, 1]
    teacher, tok = load_model(os.path.join(root, "teacher"))
    report = teacher_report(tok, teacher, toy_problems("train"), n=8)
    assert {"decide_pac", "decide_blind"} <= set(report) and all(0 <= v <= 100 for v in report.values())


def test_hand_teacher_runs_through_train_py(tmp_path, small_toy, capsys):
    """`python -m toy --teacher hand`: train.py gets the hand-written teacher object and no --teacher to load."""
    cache, held = small_toy
    out = str(tmp_path / "hand")
    toy_main(["--cache", cache, "--out", out, "--teacher", "hand", "--steps", "1", "--batch", "2", "--mini-batch",
              "2", "--max-new-tokens", "8", "--max-turns", "2", "--eval-seeds", "5", "--eval-problems", held])
    printed = capsys.readouterr().out
    assert '"teacher": null' in printed and "teacher: HandTeacher" in printed
    with open(os.path.join(out, "metrics.jsonl")) as f:
        roles = json.loads(f.readline())["roles"]
    assert roles and all(v["reverse_kl"] == v["reverse_kl"] for v in roles.values())  # scored, finite


def test_ablation_trains_three_variants_and_tables_four_systems(tmp_path, small_toy, capsys):
    cache, held = small_toy
    out = str(tmp_path / "abl")
    ablation.main(["--out", out, "--steps", "1", "--eval-seeds", "5", "--cache", cache, "--batch", "2",
                   "--mini-batch", "2", "--max-new-tokens", "8", "--max-turns", "2", "--eval-problems", held])
    for run in ("mas_opd", "w_o_ras", "w_o_pac"):
        assert os.path.isdir(os.path.join(out, run, "checkpoint", "coder"))
    with open(os.path.join(out, "ablation.json")) as f:
        results = json.load(f)
    assert list(results) == ["untrained", "MAS-OPD", "w/o RAS (lambda=0)", "w/o PAC"]
    for m in results.values():
        assert {"acc_code", "acc_math", "exchange_penalty_code", "exchange_penalty_math"} <= set(m)
    assert results["untrained"]["exchange_penalty_code"]["mean"] == 0  # one model in both seats
    assert "Table 2 analogue" in capsys.readouterr().out


def test_diagnose_tables_turns_openings_and_advantages(small_toy):
    from eval import EVAL_DECODING
    root = os.path.join(small_toy[0], TOY_VERSION)
    student, tok = load_model(os.path.join(root, "student"))
    teacher, _ = load_model(os.path.join(root, "teacher"))
    policies = {r: student for rs in ROLES.values() for r in rs}
    problems = toy_problems("test")[::25]
    cfg = RolloutConfig(max_new_tokens=6, **{**EVAL_DECODING, "max_turns": 2})
    table = diagnose.turn_table(problems, policies, tok, 0, cfg)
    assert set(table) == {"coder", "tester", "reasoner", "tool_user"}
    for role, row in table.items():
        domain = next(d for d, rs in ROLES.items() if role in rs)
        assert row[0][1] == sum(p["domain"] == domain for p in problems)  # every episode has a turn 0
        counts = [n for _, n in row]
        assert all(0 <= right <= n for right, n in row) and counts == sorted(counts, reverse=True)
    probs = diagnose.opening_probabilities(policies, tok, toy_problems("train"), n=3)
    assert set(probs) == {"tool_user", "reasoner"} and all(0 <= p <= 1 for p in probs.values())
    adv = diagnose.advantage_breakdown(policies, teacher, tok, problems, seed=0)
    responses = sum(n for (_, _, kind), (_, n) in adv.items() if kind == "opening")
    assert responses >= 2 * len(problems)  # one opening token per response, two responses per turn
    assert all(kind in ("opening", "digit", "other") for _, _, kind in adv)
