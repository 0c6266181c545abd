"""Role conditions, the teacher context (Eq. 6, 12) and force-decoded scoring (Eq. 7)."""

import pytest
import torch

from attribution import Attribution
from config import PAPER
from prompts import OPENING
from rollout import RolloutConfig, run_episodes
from sampler import sequence_logprobs
from teacher import KAPPA, ROLE_CONDITIONS, score, teacher_contexts, verdicts_before
from tests.test_workflows import BAD, SUM, TEST_WRONG

LIMIT = PAPER["teacher_max_prompt_tokens"]  # the teacher's prompt limit (App. D.6.3)

HEADER = "Verification result for the previous turn:"


def test_role_conditions_are_isomorphic_and_kappa_pairs_teammates(tok):
    lengths = {r: len(tok(c)["input_ids"]) for r, c in ROLE_CONDITIONS.items()}
    assert max(lengths.values()) <= 1.15 * min(lengths.values())
    for role, text in ROLE_CONDITIONS.items():
        paragraphs = text.split("\n\n")
        assert len(paragraphs) == 2
        mate = {
            "coder": "Tester",
            "tester": "Coder",
            "reasoner": "Tool-User",
            "tool_user": "Reasoner",
        }[role]
        assert (
            f"teammate is the {mate}" in paragraphs[0]
            and f"{mate}'s core duty" in paragraphs[1]
        )
    assert all(KAPPA[KAPPA[r]] == r != KAPPA[r] for r in KAPPA)
    assert {frozenset((r, KAPPA[r])) for r in KAPPA} == {
        frozenset(("coder", "tester")),
        frozenset(("reasoner", "tool_user")),
    }


@pytest.fixture(scope="module")
def episode(tok):
    from tests.conftest import Scripted

    return run_episodes(
        [SUM],
        {"coder": Scripted(tok, [BAD]), "tester": Scripted(tok, [TEST_WRONG])},
        tok,
        RolloutConfig(max_turns=3, code_timeout=5),
    )[0]


def _atts(n):
    return [
        Attribution("X", f"{HEADER}\n- observed on turn {t}\n- verdict on turn {t}", {})
        for t in range(n)
    ]


def test_teacher_context_replaces_only_the_opening_line(tok, episode):
    for turn in episode.turns:
        for role, resp in turn.responses.items():
            student = tok.decode(resp.context_ids)
            for r, ids in zip(
                (role, KAPPA[role]),
                teacher_contexts(
                    tok, resp.context, (role, KAPPA[role]), None, limit=LIMIT
                ),
            ):
                text = tok.decode(ids)
                opening = OPENING[role][min(turn.t, 1)]
                assert opening not in text and ROLE_CONDITIONS[r] in text
                # every other token verbatim
                assert text == student.replace(opening, ROLE_CONDITIONS[r])
                assert HEADER not in text  # PAC off: student-visible context only


def test_verdicts_come_only_from_completed_turns_each_before_the_turn_it_guides(
    tok, episode
):
    atts = _atts(len(episode.turns))
    for turn in episode.turns:
        for role, resp in turn.responses.items():
            # students never see a verdict
            assert HEADER not in tok.decode(resp.context_ids)
            text = tok.decode(
                teacher_contexts(
                    tok,
                    resp.context,
                    (role,),
                    verdicts_before(atts, turn.t),
                    limit=LIMIT,
                )[0]
            )
            assert text.count(HEADER) == turn.t
            for t in range(len(episode.turns)):
                assert (f"verdict on turn {t}" in text) == (t < turn.t)
            # after the record of turn t, before the record of turn t + 1
            for t in range(turn.t):
                at = text.index(f"verdict on turn {t}")
                assert text.index(f"Turn {t + 1}:") < at
                if t + 1 < turn.t:
                    assert at < text.index(f"Turn {t + 2}:")
            # the instruction segment follows all verdicts
            last = turn.responses[role].context[-2]
            assert text.rindex(tok.decode(last.ids)) > max(
                [text.index(f"verdict on turn {t}") for t in range(turn.t)], default=-1
            )


def test_missing_verdict_for_a_recorded_turn_is_an_error(tok, episode):
    resp = episode.turns[2].responses["coder"]
    with pytest.raises(ValueError, match="needs its verdict"):
        teacher_contexts(
            tok, resp.context, ("coder",), verdicts_before(_atts(1), 1), limit=LIMIT
        )
    with pytest.raises(ValueError, match="opening"):
        teacher_contexts(
            tok,
            [s for s in resp.context if s.kind != "opening"],
            ("coder",),
            None,
            limit=LIMIT,
        )


def test_teacher_prompt_limit_drops_oldest_entry_with_its_verdict(tok, episode):
    resp = episode.turns[2].responses["tester"]
    verdicts = verdicts_before(_atts(2), 2)
    full = teacher_contexts(tok, resp.context, ("tester",), verdicts, limit=LIMIT)[0]
    cut = teacher_contexts(
        tok, resp.context, ("tester",), verdicts, limit=len(full) - 1
    )[0]
    text = tok.decode(cut)
    assert "Turn 1:" not in text and "verdict on turn 0" not in text
    assert "Turn 2:" in text and "verdict on turn 1" in text
    assert teacher_contexts(tok, resp.context, ("tester",), verdicts, limit=50) is None


def test_target_and_contrast_contexts_are_cut_together_and_differ_only_in_the_role_condition(
    tok, episode
):
    """App. D.6.3: near the teacher limit both passes must drop the same history entries. The Coder's condition is
    shorter than the Tester's, so a limit between the two full lengths would cut only the Tester's if each were
    cut alone."""
    resp = episode.turns[2].responses["tester"]
    roles, verdicts = ("tester", "coder"), verdicts_before(_atts(2), 2)
    full = teacher_contexts(tok, resp.context, roles, verdicts, limit=LIMIT)
    lengths = sorted(len(c) for c in full)
    assert lengths[0] < lengths[1]
    for limit in (lengths[1] - 1, lengths[0]):
        target, contrast = (
            tok.decode(c)
            for c in teacher_contexts(tok, resp.context, roles, verdicts, limit=limit)
        )
        assert max(len(tok(x)["input_ids"]) for x in (target, contrast)) <= limit
        assert (
            target.replace(ROLE_CONDITIONS["tester"], ROLE_CONDITIONS["coder"])
            == contrast
        )
        assert (
            "Turn 1:" not in target
            and "Turn 2:" in target
            and "verdict on turn 1" in target
        )


def _naive(model, ctx, resp):
    logits = model(torch.tensor([ctx + resp])).logits[0, len(ctx) - 1 : -1]
    return logits.log_softmax(-1).gather(1, torch.tensor(resp)[:, None]).squeeze(1)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_force_decoding_matches_a_full_forward_in_chunks(arch, qwen3, llama):
    model = {"qwen3": qwen3, "llama": llama}[arch]
    g = torch.Generator().manual_seed(0)
    ctxs = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (7, 1, 20)]
    resps = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (5, 9, 1)]
    with torch.no_grad():
        got = sequence_logprobs(model, ctxs, resps, chunk=4)
        for c, r, lp in zip(ctxs, resps, got):
            torch.testing.assert_close(lp, _naive(model, c, r), atol=1e-5, rtol=0)
    # forces one sequence per forward
    scored = score(model, ctxs, resps, max_batch_tokens=16)
    assert all(not s.requires_grad for s in scored)
    for a, b in zip(scored, got):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_force_decoding_gradient_matches_naive(llama):
    ctx, resp = [3, 4, 5], [6, 7, 8, 9, 10]
    model = llama
    model.zero_grad()
    sequence_logprobs(model, [ctx], [resp], chunk=2)[0].sum().backward()
    ours = (
        model.lm_head.weight.grad.clone(),
        model.model.layers[0].mlp.up_proj.weight.grad.clone(),
    )
    model.zero_grad()
    _naive(model, ctx, resp).sum().backward()
    torch.testing.assert_close(model.lm_head.weight.grad, ours[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(
        model.model.layers[0].mlp.up_proj.weight.grad, ours[1], atol=1e-5, rtol=1e-4
    )
    model.zero_grad(set_to_none=True)
    with pytest.raises(ValueError):
        sequence_logprobs(model, [ctx], [[]])
