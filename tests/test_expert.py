"""The hand-written toy teacher (toy/expert.py): a language model over the token ids teacher.score gives it, right
on the students' own prefixes, deciding by the verdicts when it has them and at chance without, and, under the
contrast condition, sure to do the teammate's part where under its own it does so half the time."""

import math
import random

import pytest
import torch

from attribution import HEADER
from config import PAPER, TEACHER_BATCH_TOKENS
from infra.models import make_tokenizer
from prompts import ROLES, build_context
from teacher import KAPPA, score, teacher_contexts
from toy import expert
from toy.expert import HandTeacher
from toy.world import (
    FIRST,
    NOUN,
    ROLE_BLIND,
    derivation,
    expr,
    program,
    question_spec,
    simulate,
    toy_problems,
    value_of,
    whole_job,
)
from toy.world import test_case as a_test_case

LIMIT = PAPER["teacher_max_prompt_tokens"]  # the teacher's prompt limit (App. D.6.3)


@pytest.fixture(scope="module")
def teacher():
    tok = make_tokenizer()
    return tok, HandTeacher(tok)


def ids_of(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"] + [
        tok.convert_tokens_to_ids("<|im_end|>")
    ]


def right_artefact(role, problem, last=None):
    """What an expert writes as `role`'s own artefact: its right artefact, or, for a role that computes whose
    teammate's program was right last turn, the value that program printed."""
    spec = question_spec(problem["question"])
    if role == "coder":
        return program(f"x = int(input())\nprint({expr(spec)})")
    if role == "tool_user":
        return program(f"print({expr(spec)})")
    if role == "tester":
        x = 3 if last is None else int(last.artefacts.test_input)
        return a_test_case(x, value_of(spec, x))
    return derivation(spec, value_of(spec))


def expert_response(role, problem, earlier):
    """Revise iff the verdict on the previous turn blames this role; keep its artefact otherwise."""
    if not earlier:
        return right_artefact(role, problem)
    last = earlier[-1]
    if last.checks[role]:
        return f"I keep my {NOUN[role]}.\n" + last.own[role]
    if role == "reasoner" and last.checks["tool_user"]:
        printed = last.artefacts.program_answer
        return f"I revise my answer.\nReasoning Steps: I adopt the printed result.\n#### {printed}"
    return f"I revise my {NOUN[role]}.\n" + right_artefact(role, problem, last)


def states(n, seed=0, later=False):
    """(problem, role, earlier turns, the whole episode) at states of role-blind episodes of training problems."""
    rng, out, problems = random.Random(seed), [], toy_problems("train")
    while len(out) < n:
        p = rng.choice(problems)
        turns = simulate(p, ROLE_BLIND, rng)
        if later and len(turns) < 2:
            continue
        t = rng.randrange(1, len(turns)) if later else 0
        out += [(p, r, turns[:t], turns) for r in ROLES[p["domain"]]]
    return out[:n]


def contexts(tok, p, role, earlier, pac=True, roles=None):
    segs = build_context(tok, p, role, [x.artefacts for x in earlier])
    return teacher_contexts(
        tok,
        segs,
        roles or (role,),
        [x.verdict for x in earlier] if pac else None,
        limit=LIMIT,
    )


def test_scored_through_teacher_score_unchanged_and_sharp_on_an_expert(teacher):
    """An expert's responses (revise iff wrong, right artefacts) cost little with the verdicts (about a nat each:
    the layout is a coin flip); the role-blind students' responses in the same states cost several nats more."""
    tok, hand = teacher
    good, blind = [], []
    for p, r, earlier, turns in states(40, later=True):
        ctx = contexts(tok, p, r, earlier)[0]
        ours, theirs = (
            ids_of(tok, expert_response(r, p, earlier)),
            ids_of(tok, turns[len(earlier)].responses[r]),
        )
        lp_good, lp_blind = score(
            hand, [ctx, ctx], [ours, theirs], max_batch_tokens=TEACHER_BATCH_TOKENS
        )
        assert lp_good.shape == (len(ours),) and torch.isfinite(lp_blind).all()
        good.append(lp_good.sum().item())
        blind.append(lp_blind.sum().item())
    assert (
        sum(good) / len(good) > -1.5
        and sum(blind) / len(blind) < sum(good) / len(good) - 3
    )


def _opening_probs(tok, hand, p, role, earlier, pac):
    """P(the response opens with 'I keep my ...') and P('I revise my ...') under the target condition."""
    ctx = contexts(tok, p, role, earlier, pac)[0]
    return [
        score(
            hand,
            [ctx],
            [tok(f"I {w} my {NOUN[role]}.\n", add_special_tokens=False)["input_ids"]],
            max_batch_tokens=TEACHER_BATCH_TOKENS,
        )[0]
        .sum()
        .exp()
        .item()
        for w in ("keep", "revise")
    ]


def test_decides_by_the_verdict_with_pac_and_at_chance_without(teacher):
    tok, hand = teacher
    decided = 0
    for p, r, earlier, _ in states(60, seed=2, later=True):
        right = earlier[-1].checks[r]
        keep, revise = _opening_probs(tok, hand, p, r, earlier, pac=True)
        if "originates in both" not in earlier[-1].verdict:
            assert (
                (keep > 0.9 > 0.1 > revise) if right else (revise > 0.9 > 0.1 > keep)
            ), (r, right, keep, revise)
            decided += 1
        keep_blind, revise_blind = _opening_probs(tok, hand, p, r, earlier, pac=False)
        assert abs(keep_blind - revise_blind) < 0.05
    assert decided > 20


def test_closing_a_program_after_a_wrong_number_is_expected(teacher):
    """A teacher fine-tuned on expert trajectories priced ')' after the students' own 'print(8' at about -15 nats;
    this one expects the program to be closed (a few nats at most), whatever number the student wrote."""
    tok, hand = teacher
    p = next(q for q in toy_problems("train") if q["question"] == "What is 5 plus 1?")
    ctx = contexts(tok, p, "tool_user", [])[0]
    for source in ("print(5 + 1)", "print(8)", "print(5 + 3)"):
        lp = score(
            hand,
            [ctx],
            [ids_of(tok, program(source))],
            max_batch_tokens=TEACHER_BATCH_TOKENS,
        )[0]
        # the closing bracket, the fence and the end of the response
        tail = lp[-len(ids_of(tok, ")\n```")) :]
        assert tail.min().item() > -2.5, (source, tail)


def test_role_advantage_sits_where_own_work_ends_or_the_teammates_begins(teacher):
    """A^role = l^(r) - l^(kappa r) (Eq. 9) is non-zero only where the two layouts part: strongly positive there on
    the role's own work alone (ending after it, or starting with it), negative on the teammate's part, and about
    zero on every other token."""
    tok, hand = teacher
    for p, r, earlier, _ in states(12, seed=3):
        target, contrast = contexts(tok, p, r, earlier, roles=(r, KAPPA[r]))
        own = right_artefact(r, p)
        parting = (
            len(tok(own, add_special_tokens=False)["input_ids"])
            if FIRST[p["domain"]] == r
            else 0
        )
        for text, sign in (
            (own, 1),
            (whole_job(r, p["domain"], own, right_artefact(KAPPA[r], p)), -1),
        ):
            ids = ids_of(tok, text)
            lt, lc = score(
                hand,
                [target, contrast],
                [ids, ids],
                max_batch_tokens=TEACHER_BATCH_TOKENS,
            )
            a_role = (lt - lc).tolist()
            assert (
                (a_role[parting] > 5) if sign > 0 else (-1.0 < a_role[parting] < -0.5)
            ), (r, text, a_role)
            assert max(abs(v) for k, v in enumerate(a_role) if k != parting) < 0.05, (
                r,
                text,
                a_role,
            )
        assert HEADER not in tok.decode(target)


def test_does_the_teammates_part_half_the_time_and_under_kappa_nearly_always(teacher):
    """Under its own condition TEAMMATE_WORK of the mass goes to the whole-job layout, under kappa CONTRAST_WORK:
    the Coder's choice after its program, the Tester's at its first token."""
    tok, hand = teacher
    p = next(q for q in toy_problems("train") if q["domain"] == "code")
    own = right_artefact("coder", p)
    target, contrast = contexts(tok, p, "coder", [], roles=("coder", "tester"))
    ids = ids_of(tok, own)
    end = [
        score(hand, [c], [ids], max_batch_tokens=TEACHER_BATCH_TOKENS)[0][-1]
        .exp()
        .item()
        for c in (target, contrast)
    ]  # P(end after the program)
    assert end[0] == pytest.approx(1 - expert.TEAMMATE_WORK, abs=0.02)
    assert end[1] == pytest.approx(1 - expert.CONTRAST_WORK, abs=1e-3)
    target, contrast = contexts(tok, p, "tester", [], roles=("tester", "coder"))
    first = tok("Test Input:\n```\n", add_special_tokens=False)["input_ids"][:1]
    starts = [
        score(hand, [c], [first], max_batch_tokens=TEACHER_BATCH_TOKENS)[0][0]
        .exp()
        .item()
        for c in (target, contrast)
    ]  # P(own artefact first)
    assert (
        starts[0] == pytest.approx(1 - expert.TEAMMATE_WORK, abs=0.02)
        and starts[1] < 1e-3
    )


def test_sure_of_its_arithmetic_and_adopts_a_cleared_result(teacher):
    """Reverse KL pulls a student towards the teacher's whole distribution, so the teacher is as sure as an expert:
    every token of a right first-turn derivation above 0.95, and, when the verdict clears the program, adopting its
    printed result is most of the revision mass."""
    tok, hand = teacher
    p = next(q for q in toy_problems("train") if q["question"] == "What is 6 times 5?")
    lp = score(
        hand,
        [contexts(tok, p, "reasoner", [])[0]],
        [ids_of(tok, derivation(question_spec(p["question"]), 30))],
        max_batch_tokens=TEACHER_BATCH_TOKENS,
    )[0]
    # the last token, the end, shares its mass with the whole job
    assert lp[:-1].min().item() > -0.05, lp
    rng = random.Random(4)
    while True:
        turns = simulate(p, ROLE_BLIND, rng)
        if (
            len(turns) > 1
            and not turns[0].checks["reasoner"]
            and turns[0].checks["tool_user"]
        ):
            break
    ctx = contexts(tok, p, "reasoner", turns[:1])[0]
    adopt = tok(
        "I revise my answer.\nReasoning Steps: I adopt the printed result.\n#### 30",
        add_special_tokens=False,
    )
    assert (
        score(hand, [ctx], [adopt["input_ids"]], max_batch_tokens=TEACHER_BATCH_TOKENS)[
            0
        ]
        .sum()
        .exp()
        .item()
        > 0.7
    )


def test_role_advantage_favours_the_decision_the_verdict_asks_of_the_role_itself(
    teacher,
):
    """Under kappa(r) the teacher takes the contrast role's side, so on a later turn A^role of the opening is
    positive for the decision the verdict asks of r (keep when only the teammate is blamed, revise when r is) and
    negative for the other one; without verdicts both passes are at chance and A^role is zero there."""
    tok, hand = teacher
    checked = 0
    for p, r, earlier, _ in states(40, seed=5, later=True):
        if "originates in both" in earlier[-1].verdict:
            continue
        right = "keep" if earlier[-1].checks[r] else "revise"
        for pac in (True, False):
            target, contrast = contexts(tok, p, r, earlier, pac, roles=(r, KAPPA[r]))
            for word in ("keep", "revise"):
                ids = tok(f"I {word} my {NOUN[r]}.\n", add_special_tokens=False)[
                    "input_ids"
                ]
                lt, lc = score(
                    hand,
                    [target, contrast],
                    [ids, ids],
                    max_batch_tokens=TEACHER_BATCH_TOKENS,
                )
                a_role = (lt - lc).sum().item()
                if not pac:
                    assert abs(a_role) < 1e-3
                else:
                    assert a_role > 3 if word == right else a_role < -3, (
                        r,
                        right,
                        word,
                        a_role,
                    )
        checked += 1
    assert checked > 10


def _mixture_rows(hand, context, response):
    """response_logprobs written the plain way, one float64 tensor row per position updated in place: the reference
    the teacher's Python-float rows must equal to the last bit."""
    mixture = expert.plans(context)
    log_w = torch.tensor(
        [math.log(max(w, 1e-12)) for w, _ in mixture], dtype=torch.float64
    )
    rows, s = [], ""
    for tok in response:
        w = torch.softmax(log_w, 0)
        row = torch.full((hand.V,), expert.SMOOTH / hand.V, dtype=torch.float64)
        for k, ((_, parts), wp) in enumerate(zip(mixture, w.tolist())):
            nxt = hand._next(parts, s) or {hand.eos: 1.0}
            total = sum(nxt.values())
            for i, q in nxt.items():
                row[i] += (1 - expert.SMOOTH) * wp * q / total
            log_w[k] += math.log(
                (1 - expert.SMOOTH) * nxt.get(tok, 0.0) / max(total, 1e-12)
                + expert.SMOOTH / hand.V
            )
        rows.append(row.log())
        s += hand.pieces[tok]
    return torch.stack(rows)


def test_scores_are_the_mixture_bit_for_bit_through_the_sparse_head(teacher):
    """teacher.score through the sparse identity head and the unzeroed hidden states gives exactly what the plain
    mixture's log-probabilities give through sequence_logprobs' float32 log-softmax (torch.equal; the float64 rows
    too), on a fixed set of contexts of every role, with
    and without history."""
    tok, hand = teacher
    ctxs, resps = [], []
    for p, role, earlier, turns in states(8, seed=3) + states(8, seed=4, later=True):
        ctx = contexts(tok, p, role, earlier)[0]
        ctxs.append(ctx)
        resps.append(ids_of(tok, turns[len(earlier)].responses[role]))
    got = score(hand, ctxs, resps, max_batch_tokens=TEACHER_BATCH_TOKENS)
    for ctx, resp, lp in zip(ctxs, resps, got):
        rows = _mixture_rows(hand, tok.decode(ctx), resp)
        # float64, every token
        assert torch.equal(hand.response_logprobs(tok.decode(ctx), resp), rows)
        rows = rows.float()  # sequence_logprobs renormalises in float32
        want = rows.gather(1, torch.tensor(resp)[:, None]).squeeze(1) - rows.logsumexp(
            dim=-1
        )
        assert torch.equal(lp, want)
