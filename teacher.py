"""The frozen teacher's side of Algorithm 1, Phase 2 (App. C): what it reads, and how it
scores.

  - ROLE_CONDITIONS and KAPPA: the role-condition passages r_i (App. F.3) and the
    contrast map (Eq. 23).
  - verdicts_before: c^{<t}, the verdicts of PAC the teacher reads before turn t
    (Eq. 12).
  - teacher_pieces / teacher_contexts: u~ = u (+) r (+) c^{<t} (Eq. 6, 12) built from
    the student's stored context segments, once per role condition asked for (the target
    role's and kappa's), cut to the teacher's limit identically (DECISIONS.md D3); as
    labelled pieces, or joined into ids.
  - teacher_inputs: both contexts of every response of a batch of episodes.
  - score: force-decode stored response tokens (never re-tokenized, never generated)
    with the sampler's sequence_logprobs and return their log-probs l_k (Eq. 7), batched
    by padded tokens; score_both_passes: Eq. 7 under both contexts, the two terms of
    A^role (Eq. 9).

It needs prompts.py (the students' context segments, plain-text encoding) and sampler.py
(the force-decoding), nothing else of the project. train.py (Algorithm 1) and eval.py
(the heat map of App. G.2) both call teacher_inputs and score_both_passes.
"""

import torch

from prompts import encode_text
from sampler import sequence_logprobs

# Two paragraphs each, the same structure and similar length (App. F.3): (1) the role,
# its teammate, its responsibility; (2) what the role is centred on, what of the
# teammate's work it may read, and the teammate's core duty it must not take over. They
# replace the student's generic opening line and add no facts about the task (App. F
# intro). The paper prints most of the Coder's passage; ours follows its elements in our
# own words, and the other three are written by analogy (the paper shows them only as
# images).
ROLE_CONDITIONS = {
    "coder": (
        "You are the Coder of a two-agent team; your teammate is the Tester. Your "
        "responsibility is to analyse the problem, design an algorithm that solves "
        "it, implement that algorithm correctly in Python, and use the feedback of "
        "earlier turns to refine the program.\n\n"
        "Your work centres on the program itself: its logic, its edge cases and its "
        "handling of input and output. You may read the feedback from running your "
        "teammate's test, but the Tester's core duty, writing and judging test cases, "
        "is not yours: do not take it over by inventing test inputs and their "
        "expected outputs."
    ),
    "tester": (
        "You are the Tester of a two-agent team; your teammate is the Coder. Your "
        "responsibility is to analyse the problem, choose an input that exercises "
        "what the specification demands, work out the exact output a correct program "
        "must give for it, and use the feedback of earlier turns to refine the "
        "test.\n\n"
        "Your work centres on the test case itself: a valid input and an expected "
        "output that truly follows from the specification. You may read the output "
        "your teammate's program produces, but the Coder's core duty, designing and "
        "implementing the solution, is not yours: do not take it over by writing or "
        "debugging a program."
    ),
    "reasoner": (
        "You are the Reasoner of a two-agent team; your teammate is the Tool-User. "
        "Your responsibility is to analyse the problem, derive its answer step by "
        "step through mathematical reasoning, check every step of the derivation, and "
        "use the feedback of earlier turns to refine it.\n\n"
        "Your work centres on the derivation itself: the setup, the algebra and the "
        "logic that lead to the answer. You may read the result your teammate's "
        "program prints, but the Tool-User's core duty, computing the answer with "
        "code, is not yours: do not take it over by writing programs or by "
        "enumerating cases the way a computer would."
    ),
    "tool_user": (
        "You are the Tool-User of a two-agent team; your teammate is the Reasoner. "
        "Your responsibility is to analyse the problem, translate it into a "
        "computation, implement that computation correctly in a short Python program "
        "that prints the answer, and use the feedback of earlier turns to refine the "
        "program.\n\n"
        "Your work centres on the computation itself: a faithful encoding of the "
        "problem and code that runs and prints the answer. You may read the answer "
        "your teammate's derivation reports, but the Reasoner's core duty, deriving "
        "the answer by mathematical reasoning, is not yours: do not take it over by "
        "replacing the computation with a derivation by hand."
    ),
}

# kappa: each role is contrasted with the teammate role its condition forbids taking
# over (App. E.1.2, Eq. 23).
KAPPA = {
    "coder": "tester",
    "tester": "coder",
    "reasoner": "tool_user",
    "tool_user": "reasoner",
}


def verdicts_before(attributions, t):
    """c^{<t} = (c^0, ..., c^{t-1}) (§3.3, Eq. 12): the verdicts of completed turns
    only, empty at t = 0. attributions: an episode's a^t, one per completed turn
    (attribution.attribute_episodes), each with its verdict c^t as `.description`. A
    verdict on turn t' becomes usable at turn t' + 1, so t may not exceed the number
    attributed. -> list of t strings."""
    if not 0 <= t <= len(attributions):
        raise ValueError(
            f"turn {t}: only {len(attributions)} completed turns are attributed"
        )
    return [a.description for a in attributions[:t]]


def teacher_pieces(tokenizer, segments, roles, verdicts, limit):
    """u~ (Eq. 6, 12) in labelled pieces, one list per role condition in `roles`, or
    None when they cannot fit.

    A piece is (kind, turn, ids): the student's segments in order (kind and turn as in
    prompts.Segment) with the generic opening line replaced by the role condition r
    (kind "condition", Eq. 6) and, with PAC, each verdict (kind "verdict", the turn it
    judges) placed after its history entry. teacher_contexts joins the pieces; a reader
    (tools/contexts.py) shows them labelled.

    segments: the student's stored context x_i^t (prompts.Segment list). roles: whose
    condition r replaces the generic opening line, e.g. (role, KAPPA[role]) for the
    target and the contrast pass of Eq. 9. verdicts: c^{<t} (verdicts_before), or None
    for PAC off; the verdict on turn t' goes right after the history entry of turn t',
    i.e. just before the turn it guides (App. F.4). The same verdicts go to every role's
    context.

    limit: the teacher's prompt limit (App. D.6.3: 12,288 against the students' 8,192).
    When the longest of the contexts exceeds it, the oldest history entries are dropped
    from all of them together with their verdicts (as the students' own limit does), so
    the contexts still differ only in the role condition (App. D.6.3). If even that
    cannot fit, None: the caller leaves that response out of the loss and counts it
    (DECISIONS.md D3).
    """
    history_turns = [s.turn for s in segments if s.kind == "history" and s.turn >= 0]
    if verdicts is not None and any(t >= len(verdicts) for t in history_turns):
        raise ValueError(
            f"teacher_contexts: {len(verdicts)} verdicts for a context that records "
            f"turns {history_turns}; every completed turn needs its verdict"
        )
    if sum(s.kind == "opening" for s in segments) != 1:
        raise ValueError(
            "teacher_contexts: the student context must hold exactly one 'opening' "
            "segment"
        )
    # (kind, turn or -1, ids or None = the role condition): a history entry and its
    # verdict share the turn. Verdicts quote program output: plain text only
    # (encode_text).
    pieces = []
    for s in segments:
        if s.kind == "opening":
            pieces.append(("condition", s.turn, None))
        else:
            pieces.append((s.kind, s.turn, s.ids))
        if verdicts is not None and s.kind == "history" and s.turn >= 0:
            pieces.append(
                ("verdict", s.turn, encode_text(tokenizer, verdicts[s.turn] + "\n\n"))
            )
    conditions = [encode_text(tokenizer, ROLE_CONDITIONS[r]) for r in roles]
    fixed = lambda: sum(len(ids) for _, _, ids in pieces if ids is not None)
    dropped = sorted(set(history_turns))
    while fixed() + max(len(c) for c in conditions) > limit:
        if not dropped:
            return None
        oldest = dropped.pop(0)
        pieces = [p for p in pieces if p[1] != oldest]
    return [
        [(kind, t, cond if ids is None else ids) for kind, t, ids in pieces]
        for cond in conditions
    ]


def teacher_contexts(tokenizer, segments, roles, verdicts, limit):
    """u~ (Eq. 6, 12) as token ids: teacher_pieces joined, one context per role
    condition in `roles`, or None when they cannot fit within `limit` (arguments as
    teacher_pieces')."""
    pieces = teacher_pieces(tokenizer, segments, roles, verdicts, limit)
    if pieces is None:
        return None
    return [[i for _, _, ids in p for i in ids] for p in pieces]


def teacher_inputs(episodes, attributions, tokenizer, limit, pac=True):
    """Both teacher contexts of every response in `episodes` (Eq. 12): u~ = u (+) r (+)
    c^{<t} with r = r_i, the author's role condition (the target), and r = kappa(r_i)
    (the contrast, Eq. 23), the same verdicts c^{<t} in both (verdicts_before; none when
    pac is False, w/o PAC), cut to `limit` together (teacher_contexts).

    attributions: one list per episode (attribution.attribute_episodes). Returns
    (inputs, overlong): inputs a list of (k, seat, response, target, contrast), k the
    episode's index in `episodes`, seat its author (the key of its policy: a pair's
    seats are its roles; one c^{<t} serves every agent of a turn, Eq. 24), target and
    contrast token-id lists; overlong the number of responses left out because even
    their shortest contexts exceed `limit` (DECISIONS.md D3)."""
    inputs, overlong = [], 0
    for k, (e, atts) in enumerate(zip(episodes, attributions)):
        for turn in e.turns:
            verdicts = verdicts_before(atts, turn.t) if pac else None
            for seat, resp in turn.responses.items():
                # the author's role r_i and kappa(r_i), by role type (Eq. 23)
                roles = (resp.role, KAPPA[resp.role])
                ctx = teacher_contexts(tokenizer, resp.context, roles, verdicts, limit)
                if ctx is None:
                    overlong += 1
                    continue
                inputs.append((k, seat, resp, ctx[0], ctx[1]))
    return inputs, overlong


def score_both_passes(teacher, targets, contrasts, responses, max_batch_tokens):
    """The frozen teacher force-decodes every response under both of its contexts
    (Eq. 7, twice): the two terms of A^role (Eq. 9). targets, contrasts: B token-id
    lists (teacher_inputs); responses: the B stored response token-id lists;
    max_batch_tokens: padded tokens per forward (score). Returns (lp_target,
    lp_contrast), each B float32 tensors of shape (len(response),) on the CPU."""
    lp_target = score(teacher, targets, responses, max_batch_tokens=max_batch_tokens)
    lp_contrast = score(
        teacher, contrasts, responses, max_batch_tokens=max_batch_tokens
    )
    return [lp.float() for lp in lp_target], [lp.float() for lp in lp_contrast]


@torch.no_grad()
def score(teacher, contexts, responses, *, max_batch_tokens, chunk=1024):
    """Teacher log-probs l_k (Eq. 7) of stored responses after their teacher contexts,
    batched.

    contexts: B token-id lists (from teacher_contexts); responses: B stored response
    token-id lists. Sequences are packed greedily, in order, into forward batches of at
    most max_batch_tokens padded tokens (the teacher's activations grow with them).
    chunk: positions of the LM head computed at once (sampler.sequence_logprobs).
    Returns B float32 tensors on the CPU, shape (len(response),).
    """
    out, batch = [], []
    for c, r in zip(contexts, responses):
        longest = max([len(c) + len(r)] + [len(bc) + len(br) for bc, br in batch])
        if batch and longest * (len(batch) + 1) > max_batch_tokens:
            out += sequence_logprobs(teacher, *zip(*batch), chunk=chunk)
            batch = []
        batch.append((c, r))
    if batch:
        out += sequence_logprobs(teacher, *zip(*batch), chunk=chunk)
    return [x.cpu() for x in out]
