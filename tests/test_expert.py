"""The hand-written toy teacher (toy/expert.py): a language model over the token ids teacher.score gives it, right
on the students' own prefixes, deciding by the verdicts when it has them and at chance without, and preferring
the teammate's kind of artefact under the contrast condition."""
import random

import pytest
import torch

from attribution import HEADER
from models import make_tokenizer
from rollout import ROLES, build_context
from teacher import KAPPA, score, teacher_contexts
from toy.expert import HandTeacher
from toy.world import NOUN, ORACLE, ROLE_BLIND, respond, simulate, toy_problems


@pytest.fixture(scope="module")
def expert():
    tok = make_tokenizer()
    return tok, HandTeacher(tok)


def ids_of(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")]


def states(n, seed=0, later=False):
    """(problem, role, earlier turns, the turn's own record) of role-blind episodes of training problems."""
    rng, out = random.Random(seed), []
    problems = toy_problems("train")
    while len(out) < n:
        p = rng.choice(problems)
        turns = simulate(p, ROLE_BLIND, rng)
        t = rng.randrange(1, len(turns)) if later and len(turns) > 1 else 0 if not later else None
        if t is None:
            continue
        out += [(p, r, turns[:t], turns) for r in ROLES[p["domain"]]]
    return out[:n]


def test_scored_through_teacher_score_unchanged_and_sharp_on_the_oracle(expert):
    """The oracle's responses (revise iff wrong, right artefacts) cost a small fraction of a nat per token with the
    verdicts; the role-blind responses of the same states cost more."""
    tok, teacher = expert
    rng = random.Random(1)
    oracle, blind = [], []
    for p, r, earlier, turns in states(40, later=True):
        segs = build_context(tok, p, r, earlier)
        ctx = teacher_contexts(tok, segs, (r,), [x.verdict for x in earlier])[0]
        good = ids_of(tok, respond(r, p, earlier, ORACLE, rng, earlier[-1].checks[r]))
        bad = ids_of(tok, turns[len(earlier)].responses[r])
        lp_good, lp_bad = score(teacher, [ctx, ctx], [good, bad])
        assert lp_good.shape == (len(good),) and torch.isfinite(lp_bad).all()
        oracle.append(lp_good.mean().item())
        blind.append(lp_bad.mean().item())
    assert sum(oracle) / len(oracle) > -0.2 and sum(blind) / len(blind) < sum(oracle) / len(oracle) - 0.4


def _opening_probs(tok, teacher, p, role, earlier, verdicts):
    """P(the response opens with 'I keep my ...') and P('I revise my ...') under the target condition."""
    ctx = teacher_contexts(tok, build_context(tok, p, role, earlier), (role,), verdicts)[0]
    out = []
    for word in ("keep", "revise"):
        opening = tok(f"I {word} my {NOUN[role]}.\n", add_special_tokens=False)["input_ids"]
        out.append(score(teacher, [ctx], [opening])[0].sum().exp().item())
    return out


def test_decides_by_the_verdict_with_pac_and_at_chance_without(expert):
    tok, teacher = expert
    decided = 0
    for p, r, earlier, _ in states(60, seed=2, later=True):
        right = earlier[-1].checks[r]
        keep, revise = _opening_probs(tok, teacher, p, r, earlier, [x.verdict for x in earlier])
        if right is not None and earlier[-1].verdict.count("originates in both") == 0:
            assert (keep > 0.5 > revise) if right else (revise > 0.5 > keep), (r, right, keep, revise)
            decided += 1
        keep_blind, revise_blind = _opening_probs(tok, teacher, p, r, earlier, None)
        assert abs(keep_blind - revise_blind) < 0.1 or min(keep_blind, revise_blind) < 1e-3  # chance, or no keep
    assert decided > 20


def test_closing_a_program_after_a_wrong_number_is_expected(expert):
    """The learned toy teacher priced ')' after the students' own 'print(8' at about -15 nats; this one expects
    the program to be closed (a few nats at most), whatever number the student wrote."""
    tok, teacher = expert
    p = next(q for q in toy_problems("train") if q["question"] == "What is 5 plus 2?")
    ctx = teacher_contexts(tok, build_context(tok, p, "tool_user", []), ("tool_user",))[0]
    for program in ("print(5 + 2)", "print(8)", "print(5 + 3)"):
        lp = score(teacher, [ctx], [ids_of(tok, f"Code:\n```python\n{program}\n```")])[0]
        tail = lp[-len(ids_of(tok, ")\n```")):]  # the closing bracket, the fence and the end of the response
        assert tail.min().item() > -2.0, (program, tail)


def test_contrast_condition_prefers_the_teammates_artefact(expert):
    """A^role = l^(r) - l^(kappa r): negative on a teammate's artefact appended to the role's own, positive on
    ending the response after the role's own artefact."""
    tok, teacher = expert
    for p, r, earlier, _ in states(8, seed=3):
        segs = build_context(tok, p, r, earlier)
        target, contrast = teacher_contexts(tok, segs, (r, KAPPA[r]))
        own = respond(r, p, earlier, ORACLE, random.Random(0), True)
        mate = respond(KAPPA[r], p, earlier, ORACLE, random.Random(0), True)
        clean, drifted = ids_of(tok, own), ids_of(tok, own + "\n" + mate)
        lt, lc = score(teacher, [target, contrast], [clean, clean])
        assert (lt - lc)[-1].item() > 0.3  # ending after its own artefact
        lt, lc = score(teacher, [target, contrast], [drifted, drifted])
        assert (lt - lc)[len(clean) - 1:].sum().item() < -5  # the appended teammate's work
        assert HEADER not in tok.decode(target)


def test_sure_of_its_arithmetic_and_adopts_a_cleared_result(expert):
    """Reverse KL pulls a student towards the teacher's whole distribution, so the teacher must be as sure as an
    expert: every token of a right turn-0 derivation above 0.9, and, when the verdict clears the program, adopting
    its printed result is most of the revision mass."""
    tok, teacher = expert
    p = next(q for q in toy_problems("train") if q["question"] == "What is 7 times 8?")
    ctx = teacher_contexts(tok, build_context(tok, p, "reasoner", []), ("reasoner",))[0]
    lp = score(teacher, [ctx], [ids_of(tok, "Reasoning Steps: 7 * 8 = 56\n#### 56")])[0]
    assert lp.min().item() > -0.1, lp
    rng = random.Random(4)
    for _ in range(200):
        turns = simulate(p, ROLE_BLIND, rng)
        last = turns[0]
        if len(turns) > 1 and not last.checks["reasoner"] and last.checks["tool_user"]:
            break
    segs = build_context(tok, p, "reasoner", turns[:1])
    ctx = teacher_contexts(tok, segs, ("reasoner",), [last.verdict])[0]
    adopt = score(teacher, [ctx], [tok("I revise my answer.\nReasoning Steps: I adopt the printed result.\n#### 56",
                                       add_special_tokens=False)["input_ids"]])[0]
    assert adopt.sum().exp().item() > 0.7
