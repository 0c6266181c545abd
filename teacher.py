"""The frozen teacher's side of Algorithm 1, Phase 2 (App. C): what it reads, and how it scores.

  - ROLE_CONDITIONS and KAPPA: the role-condition passages r_i (App. F.3) and the contrast map (Eq. 23).
  - teacher_context: u~ = u (+) r_i (+) c^{<t} (Eq. 6, 12) built from the student's stored context segments.
  - sequence_logprobs / score: force-decode stored response tokens (never re-tokenized, never generated) and
    gather their log-probs l_k (Eq. 7), chunked so no full-vocabulary log-softmax exists for all positions.
"""
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# Two paragraphs each, the same structure and similar length (App. F.3): (1) the role, its teammate, its
# responsibility; (2) what the role is centred on and the teammate's duty it must not take over. They replace
# the student's generic opening line and add no facts about the task (App. F intro).
ROLE_CONDITIONS = {
    "coder": (
        "You are the Coder of a two-agent team; your teammate is the Tester. Your responsibility is to analyse "
        "the problem, design an algorithm that solves it, implement that algorithm correctly in Python, and use "
        "the feedback of earlier turns to refine the program.\n\n"
        "Your work centres on the program itself: its logic, its edge cases and its handling of input and "
        "output. You may read the results your teammate's test case produces, but writing and judging test "
        "cases is the Tester's duty, not yours: do not take it over by inventing test inputs and their "
        "expected outputs."),
    "tester": (
        "You are the Tester of a two-agent team; your teammate is the Coder. Your responsibility is to analyse "
        "the problem, choose an input that exercises what the specification demands, work out the exact "
        "output a correct program must give for it, and use the feedback of earlier turns to refine the test.\n\n"
        "Your work centres on the test case itself: a valid input and an expected output that truly follows "
        "from the specification. You may read the output your teammate's program produces, but designing and "
        "implementing the solution is the Coder's duty, not yours: do not take it over by writing or "
        "debugging a program."),
    "reasoner": (
        "You are the Reasoner of a two-agent team; your teammate is the Tool-User. Your responsibility is to "
        "analyse the problem, derive its answer step by step through mathematical reasoning, check every step "
        "of the derivation, and use the feedback of earlier turns to refine it.\n\n"
        "Your work centres on the derivation itself: the setup, the algebra and the logic that lead to the "
        "answer. You may read the result your teammate's program prints, but computing the answer with code is "
        "the Tool-User's duty, not yours: do not take it over by writing programs or by enumerating cases the "
        "way a computer would."),
    "tool_user": (
        "You are the Tool-User of a two-agent team; your teammate is the Reasoner. Your responsibility is to "
        "analyse the problem, translate it into a computation, implement that computation correctly in a short "
        "Python program that prints the answer, and use the feedback of earlier turns to refine the program.\n\n"
        "Your work centres on the computation itself: a faithful encoding of the problem and code that runs and "
        "prints the answer. You may read the answer your teammate's derivation reports, but deriving the "
        "answer by mathematical reasoning is the Reasoner's duty, not yours: do not take it over by replacing "
        "the computation with a derivation by hand."),
}

# kappa: each role is contrasted with the teammate role its condition forbids taking over (App. E.1.2, Eq. 23).
KAPPA = {"coder": "tester", "tester": "coder", "reasoner": "tool_user", "tool_user": "reasoner"}


def teacher_context(tokenizer, segments, role, verdicts=None, limit=12288):
    """u~ (Eq. 6, 12) as token ids, or None when it cannot fit in `limit` tokens.

    segments: the student's stored context x_i^t (rollout.Segment list). role: whose condition r replaces the
    generic opening line (the target role, or kappa of it for the contrast pass). verdicts: c^{<t}, the
    descriptions of turns 0..t-1 (attribution.verdicts_before), or None for PAC off; the verdict on turn t'
    goes right after the history entry of turn t', i.e. just before the turn it guides (App. F.4).

    Teacher prompt limit (App. D.6.3: 12,288 vs the students' 8,192): when u~ is longer, the oldest history
    entries are dropped together with their verdicts, as the students' own limit does; if even that cannot
    fit, None: the caller leaves that response out of the loss and counts it.
    """
    history_turns = [s.turn for s in segments if s.kind == "history" and s.turn >= 0]
    if verdicts is not None and any(t >= len(verdicts) for t in history_turns):
        raise ValueError(f"teacher_context: {len(verdicts)} verdicts for a context that records turns "
                         f"{history_turns}; every completed turn needs its verdict")
    if sum(s.kind == "opening" for s in segments) != 1:
        raise ValueError("teacher_context: the student context must hold exactly one 'opening' segment")
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = []  # (turn or -1, ids): a history entry and its verdict share the turn, so they are dropped together
    for s in segments:
        pieces.append((s.turn, encode(ROLE_CONDITIONS[role]) if s.kind == "opening" else s.ids))
        if verdicts is not None and s.kind == "history" and s.turn >= 0:
            pieces.append((s.turn, encode(verdicts[s.turn] + "\n\n")))
    dropped = sorted(set(history_turns))
    while sum(len(ids) for _, ids in pieces) > limit:
        if not dropped:
            return None
        oldest = dropped.pop(0)
        pieces = [(t, ids) for t, ids in pieces if t != oldest]
    return [i for _, ids in pieces for i in ids]


def _gather_logprobs(head_weight, h, targets):
    """log_softmax(h @ W^T)[targets] for one chunk of positions: h (N, C), targets (N,) -> (N,) float32."""
    logits = F.linear(h, head_weight).float()                                      # (N, V)
    return logits.gather(1, targets[:, None]).squeeze(1) - logits.logsumexp(dim=-1)


def sequence_logprobs(model, contexts, responses, *, chunk=1024):
    """Force-decode: per response, log p(y_k | context, y_<k) for every response token.

    contexts, responses: lists of B token-id lists (responses non-empty). Returns B float32 tensors of shape
    (len(response),). Differentiable when called with grad enabled (the student's loss term of Eq. 13);
    under no_grad it is the teacher score of Eq. 7. The LM head runs on response positions only, `chunk`
    positions at a time; with grad each chunk is recomputed in backward (checkpoint), so at most one
    (chunk, V) logit block is alive at once.
    """
    if len(contexts) != len(responses) or any(len(r) == 0 for r in responses):
        raise ValueError("sequence_logprobs: need one non-empty response per context")
    device = next(model.parameters()).device
    seqs = [list(c) + list(r) for c, r in zip(contexts, responses)]
    L = max(len(s) for s in seqs)
    ids = torch.tensor([s + [0] * (L - len(s)) for s in seqs], device=device)                  # (B, L) right-padded
    mask = torch.tensor([[1] * len(s) + [0] * (L - len(s)) for s in seqs], device=device)      # (B, L)
    h = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state                 # (B, L, C)
    # the position before each response token predicts it
    rows = torch.tensor([b for b, r in enumerate(responses) for _ in r], device=device)        # (N,)
    cols = torch.tensor([len(c) - 1 + k for c, r in zip(contexts, responses) for k in range(len(r))], device=device)
    targets = torch.tensor([t for r in responses for t in r], device=device)                   # (N,)
    hs, weight = h[rows, cols], model.get_output_embeddings().weight                           # (N, C), (V, C)
    parts = []
    for i in range(0, len(targets), chunk):
        args = (weight, hs[i:i + chunk], targets[i:i + chunk])
        parts.append(checkpoint(_gather_logprobs, *args, use_reentrant=False) if torch.is_grad_enabled()
                     else _gather_logprobs(*args))
    return list(torch.cat(parts).split([len(r) for r in responses]))


@torch.no_grad()
def score(teacher, contexts, responses, *, max_batch_tokens=16384, chunk=1024):
    """Teacher log-probs l_k (Eq. 7) of stored responses after their teacher contexts, batched.

    contexts: B token-id lists (from teacher_context); responses: B stored response token-id lists.
    Sequences are packed greedily, in order, into forward batches of at most max_batch_tokens padded tokens.
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
