"""The toy world: its problems are valid, its simulator agrees with the real sandboxed environment and verifier,
and its training examples respect who may see what."""
import random

import torch

from attribution import attribute_turn
from data import check_problem
from rollout import RolloutConfig, code_env, math_env
from teacher import ROLE_CONDITIONS
from toy import (ORACLE, ROLE_BLIND, make_phrase_tokenizer, make_tokenizer, sft, sft_examples, simulate, tiny_model,
                 toy_problems)

HEADER = "Verification result for the previous turn:"


def test_problems_are_valid_and_splits_disjoint():
    train, test = toy_problems("train"), toy_problems("test")
    assert len(train) == 180 and len(test) == 90
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
    from teacher import sequence_logprobs
    before = torch.stack([lp.mean() for lp in sequence_logprobs(model, *zip(*ex))]).mean().item()
    sft(model, ex, 12, batch=4, lr=2e-2)
    with torch.no_grad():
        after = torch.stack([lp.mean() for lp in sequence_logprobs(model, *zip(*ex))]).mean().item()
    assert after > before + 1.0
