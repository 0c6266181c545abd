"""The students' sampler and the teacher-forced scorer: torch only, one model's weights,
no workflow.

  - `generate`: a hand-written KV-cached sampler over a transformers Llama/Qwen3 model's
    weights. It returns, per sampled token, the student log-prob log pi_theta(y_k | x,
    y_<k) that Eq. 8 subtracts (App. C: the advantage uses the log-probs kept from the
    rollout).
  - `sequence_logprobs`: force-decode given token ids after given contexts and gather
    their log-probs. Under no_grad it is the teacher score l_k of Eq. 7; with grad it is
    the student's log pi_theta term of Eq. 13.

Nothing here knows about roles, prompts or verifiers, so either function can be copied
into another project. Top to bottom: the two functions; the model's forward on our own
cache; the static-shape bucket that generate decodes on; then the CUDA-graph recording
of its decode step and torch.compile. Measured speeds: docs/sampler.md.
"""

import functools
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class Generation:
    # per prompt: the new token ids (a produced stop token is included)
    tokens: list[list[int]]
    # same lengths: log-prob of each token under the unmodified model
    logprobs: list[list[float]]


# cache lengths are rounded up to a multiple of this, so nearby prompt lengths share a
# graph
CACHE_BUCKET = 128
# decode steps between host reads of "has every row stopped?" (each read is a device
# sync)
STOP_CHECK = 16


@torch.inference_mode()
def generate(
    model,
    prompts,
    max_new_tokens,
    *,
    temperature=1.0,
    top_p=1.0,
    top_k=0,
    stop_ids=(),
    generator=None,
    compiled=False,
    on_check=None,
):
    """Sample continuations of a batch of token-id prompts with our own KV cache.

    model: a transformers Llama- or Qwen3-style CausalLM (its weights are used; its
    forward and cache are not). prompts: list of B non-empty lists of token ids, any
    lengths (left-padded internally). Sampling: temperature (0 = greedy), then top-k (0
    = off), then top-p (1.0 = off), with `generator`. A row stops after producing any id
    in `stop_ids` (that token is kept and scored) or after max_new_tokens. compiled: the
    decode step through torch.compile (compiled_decode_one; for CUDA; its first calls
    compile).

    Returns Generation(tokens, logprobs): per row the new ids and, for each, log_softmax
    of the model's raw logits (temperature 1, no top-k/top-p) at that position. These
    are the student log-probs of Eq. 8 and the ones training differentiates; when
    temperature != 1 or top-k/top-p are active they are NOT the probabilities of the
    distribution the token was drawn from.

    Prefill runs once over the prompts; then each token is one decode_one step on a
    static-shape bucket (decoder), on CUDA without autocast a replayed CUDA graph
    (_decode_step; with compiled=True, gpt-fast's recipe). The host reads the stop state
    every STOP_CHECK steps only; rows that stopped keep decoding until then, and their
    extra tokens are dropped. on_check: called at each of those reads as
    on_check(new_tokens, rows_done), the tokens kept since the last read and the rows
    stopped so far (a progress line's figures, at no extra sync).
    """
    _check_supported(model)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError(
            "generate: prompts must be a non-empty list of non-empty token-id lists"
        )
    B, T = len(prompts), max(len(p) for p in prompts)
    tokens, logprobs = [[] for _ in range(B)], [[] for _ in range(B)]
    if max_new_tokens <= 0:
        return Generation(tokens, logprobs)
    param = next(model.parameters())
    # Under autocast (bf16 compute over fp32 master weights) K and V come out in the
    # autocast dtype: cache them so, at half the bytes of the weights' dtype.
    amp = torch.is_autocast_enabled(param.device.type)
    dtype = torch.get_autocast_dtype(param.device.type) if amp else param.dtype
    d = decoder(model, B, T + max_new_tokens, dtype, compiled)
    h = prefill(model, d, prompts)  # (B, C)
    logits = model.lm_head(h).float()  # (B, V)

    stop = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=param.device)
    done = torch.zeros(B, dtype=torch.bool, device=param.device)
    new_ids, new_lps = [], []
    for step in range(max_new_tokens):
        nxt = _sample(logits, temperature, top_p, top_k, generator)  # (B,)
        lp = logits.log_softmax(dim=-1).gather(1, nxt[:, None]).squeeze(1)  # (B,)
        new_ids.append(torch.where(done, -1, nxt))
        new_lps.append(lp)
        # not isin: with ~10+ ids it calls unique, which syncs
        done = done | (nxt[:, None] == stop).any(-1)
        if step == max_new_tokens - 1:
            break
        # one host read: rows stopped, tokens kept since the last read
        if (step + 1) % STOP_CHECK == 0:
            kept = (torch.stack(new_ids[-STOP_CHECK:]) >= 0).sum()
            rows_done, kept = torch.stack((done.sum(), kept)).tolist()
            if on_check:
                on_check(kept, rows_done)
            if rows_done == B:
                break
        d.tok.copy_(nxt)
        d.cur.fill_(T + step)  # this token's slot
        logits = _decode_step(model, d, T + step + 1)  # (B, V)

    # One device->host copy at the end instead of one per step.
    ids_cpu, lps_cpu = (
        torch.stack(new_ids, 1).tolist(),
        torch.stack(new_lps, 1).tolist(),
    )
    for b in range(B):
        for tok, lp in zip(ids_cpu[b], lps_cpu[b]):
            if tok < 0:
                break
            tokens[b].append(tok)
            logprobs[b].append(lp)
    return Generation(tokens, logprobs)


def _gather_logprobs(head_weight, h, targets):
    """log_softmax(h @ W^T)[targets] for one chunk of positions: h (N, C), targets (N,)
    -> (N,) float32."""
    logits = F.linear(h, head_weight).float()  # (N, V)
    return logits.gather(1, targets[:, None]).squeeze(1) - logits.logsumexp(dim=-1)


def sequence_logprobs(model, contexts, responses, *, chunk=1024):
    """Force-decode: per response, log p(y_k | context, y_<k) for every response token.

    contexts, responses: lists of B token-id lists (responses non-empty). Returns B
    float32 tensors of shape (len(response),). Differentiable when called with grad
    enabled (the student's loss term of Eq. 13); under no_grad it is the teacher score
    of Eq. 7. The LM head runs on response positions only, `chunk` positions at a time;
    with grad each chunk is recomputed in backward (checkpoint), so at most one (chunk,
    V) logit block is alive at once.
    """
    if len(contexts) != len(responses) or any(len(r) == 0 for r in responses):
        raise ValueError("sequence_logprobs: need one non-empty response per context")
    device = next(model.parameters()).device
    seqs = [list(c) + list(r) for c, r in zip(contexts, responses)]
    L = max(len(s) for s in seqs)
    # (B, L) right-padded
    ids = torch.tensor([s + [0] * (L - len(s)) for s in seqs], device=device)
    mask = torch.tensor(
        [[1] * len(s) + [0] * (L - len(s)) for s in seqs], device=device
    )  # (B, L)
    # (B, L, C)
    h = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    # the position before each response token predicts it
    # (N,)
    rows = torch.tensor([b for b, r in enumerate(responses) for _ in r], device=device)
    cols = [len(c) - 1 + k for c, r in zip(contexts, responses) for k in range(len(r))]
    cols = torch.tensor(cols, device=device)  # (N,)
    targets = torch.tensor([t for r in responses for t in r], device=device)  # (N,)
    hs, weight = h[rows, cols], model.get_output_embeddings().weight  # (N, C), (V, C)
    parts = []
    for i in range(0, len(targets), chunk):
        args = (weight, hs[i : i + chunk], targets[i : i + chunk])
        if torch.is_grad_enabled():
            parts.append(checkpoint(_gather_logprobs, *args, use_reentrant=False))
        else:
            parts.append(_gather_logprobs(*args))
    return list(torch.cat(parts).split([len(r) for r in responses]))


# --------------------------------------------------------------------------------------
# The model's forward over our own cache, and the draw


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _check_supported(model):
    """Our forward re-implements the Llama/Qwen3 block; refuse anything we would
    silently get wrong."""
    body = getattr(model, "model", None)
    if body is None or not hasattr(body, "layers") or not hasattr(body, "rotary_emb"):
        raise ValueError(
            f"generate: unsupported model {type(model).__name__} (need a Llama- or "
            "Qwen3-style CausalLM)"
        )
    if getattr(model.config, "use_sliding_window", False):
        raise ValueError(
            "generate: sliding-window attention is not implemented; set "
            "config.use_sliding_window=False"
        )


def _rms_norm(module, x):
    """The model's RMSNorm as one fused op (same formula; fewer kernel launches per
    decode step). The weight follows x's dtype so that under bf16 autocast (fp32 master
    weights) the fused kernel still applies."""
    return F.rms_norm(
        x, module.weight.shape, module.weight.to(x.dtype), module.variance_epsilon
    )


def _fold_heads(device):
    """Whether a decode step folds the query heads into rows of their K/V head
    (_grouped_attention): on CUDA, for its fused kernels. The CPU's fused kernel takes
    GQA and a mask together, and there the folded layout is slower."""
    return device.type == "cuda"


def _grouped_attention(q, k, v, mask, scale):
    """Grouped-query attention with a mask: q (B, H, S, D); k, v (B, Hkv, T, D); mask
    (B, 1, S, T) bool -> (B, H, S, D). Query head h reads K/V head h // G (G = H / Hkv,
    as transformers' repeat_kv).

    A decode step (S = 1) lays the G query heads of each K/V head out as G query rows of
    that head, and the mask broadcasts over them for free: SDPA then sees plain
    multi-head attention, which every fused kernel takes with a mask. Asked for GQA and
    a mask together, a torch without a fused kernel for both (the memory-efficient
    kernel has no GQA, flash no mask) falls back to the math kernel, which would upcast
    and repeat the whole cache at every step. The prefill runs once per call and keeps
    enable_gqa: folding it would copy its (B, S, T) mask G times, and so does a device
    without CUDA (_fold_heads)."""
    B, H, S, D = q.shape
    if S > 1 or not _fold_heads(q.device):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=True
        )
    Hkv = k.size(1)
    # a KV head's G = H // Hkv query heads as its rows: q (B, Hkv, G, D), the mask alike
    q = q.reshape(B, Hkv, H // Hkv, D)
    mask = mask.expand(B, 1, H // Hkv, mask.size(-1))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return o.reshape(B, H, 1, D)


def _block(layer, x, cos, sin, mask, ck, cv, slots, kv_len):
    """One decoder layer (a transformers Llama/Qwen3 block, re-implemented) over new
    tokens, writing their K/V into this layer's cache.

    x: (B, S, C) hidden states of the new tokens; cos, sin: (B, 1, S, D) RoPE tables at
    their positions; mask: (B, 1, S, kv_len) bool, True = may attend; ck, cv: this
    layer's cache (B, Hkv, Tmax, D); slots: (S,) long tensor, the cache slots the new
    tokens go to (a tensor, not a Python int, so that a decode step keeps one shape and
    can be replayed as a CUDA graph); attention reads cache slots [0, kv_len). Returns
    (B, S, C).
    """
    attn = layer.self_attn
    B, S, _ = x.shape
    h = _rms_norm(layer.input_layernorm, x)
    q = attn.q_proj(h).view(B, S, -1, attn.head_dim)  # (B, S, H, D)
    k = attn.k_proj(h).view(B, S, -1, attn.head_dim)  # (B, S, Hkv, D)
    v = attn.v_proj(h).view(B, S, -1, attn.head_dim)
    if hasattr(attn, "q_norm"):  # Qwen3: RMSNorm per head, before RoPE
        q, k = _rms_norm(attn.q_norm, q), _rms_norm(attn.k_norm, k)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, S, D)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    ck.index_copy_(2, slots, k.to(ck.dtype))
    cv.index_copy_(2, slots, v.to(cv.dtype))
    o = _grouped_attention(q, ck[:, :, :kv_len], cv[:, :, :kv_len], mask, attn.scaling)
    x = x + attn.o_proj(o.transpose(1, 2).reshape(B, S, -1))
    return x + layer.mlp(_rms_norm(layer.post_attention_layernorm, x))


def _forward(model, ids, cos, sin, mask, cache_k, cache_v, slots, kv_len, block=_block):
    """One forward over new tokens ids (B, S), writing their K/V into our cache (per
    layer (B, Hkv, Tmax, D)); the other arguments as _block's, which `block` is (or its
    compiled form). Returns the final hidden states (B, S, C)."""
    x = model.model.embed_tokens(ids)  # (B, S, C)
    for layer, ck, cv in zip(model.model.layers, cache_k, cache_v):
        x = block(layer, x, cos, sin, mask, ck, cv, slots, kv_len)
    return _rms_norm(model.model.norm, x)


def _sample(logits, temperature, top_p, top_k, generator):
    """logits: (B, V) float32 -> (B,) token ids. temperature 0 = greedy."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    if temperature != 1:
        # (B, V); skipped at 1, a pass over the vocabulary
        logits = logits / temperature
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # keep a token while the mass strictly before it is < top_p, so the top token
        # always survives
        drop = (probs.cumsum(dim=-1) - probs) >= top_p
        logits = logits.scatter(
            -1, order, sorted_logits.masked_fill(drop, float("-inf"))
        )
    # Inverse-CDF draw, one uniform per row: exact categorical sampling, and on a CPU
    # far faster than torch.multinomial over Qwen3's vocabulary. Zero-probability tokens
    # are never drawn (side="right").
    cdf = logits.softmax(dim=-1).cumsum(dim=-1)  # (B, V)
    u = torch.rand(cdf.size(0), 1, generator=generator, device=cdf.device) * cdf[:, -1:]
    return (
        torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.size(-1) - 1).squeeze(1)
    )


# --------------------------------------------------------------------------------------
# Static-shape decoding (the way gpt-fast does it): every decode step of a generate call
# has the same shapes and reads its position from a tensor, on buffers of one (batch,
# cache length, dtype) bucket; the last bucket is kept. A step run as a call (CPU,
# autocast) attends over the used prefix of the cache only; CUDA records it (below).


@dataclass
class Decoder:
    """The static buffers of one bucket: the K/V cache, RoPE tables, which slots hold
    real tokens, the token and slot of the step, and the step's output logits. `step` is
    decode_one or its compiled form; `graph` is the recorded step (CUDA), or None (the
    step runs as a call: CPU, under autocast, or a recording whose first replay did not
    match the call); `checked`: that first replay has been compared with the call."""

    cache_k: list  # per layer (B, Hkv, Tmax, D)
    cache_v: list
    cos: torch.Tensor  # (B, 1, Tmax, D)
    sin: torch.Tensor
    valid: torch.Tensor  # (B, Tmax) bool, slots of real (not left-pad) tokens
    slot: torch.Tensor  # (Tmax,) 0..Tmax-1
    tok: torch.Tensor  # (B,) the token fed at this step
    cur: torch.Tensor  # (1,) long, its cache slot
    logits: torch.Tensor  # (B, V) float32, written by the step
    step: object  # decode_one or compiled_decode_one()
    graph: object = None
    checked: bool = False


def decode_one(model, d, n, block=_block):
    """One decode step on the bucket's buffers: the token d.tok at slot d.cur ->
    d.logits (B, V) float32 of the next token (whose log_softmax is the student log-prob
    of Eq. 8, App. C), attending over cache slots [0, n). n = Tmax (the whole bucket) is
    the step a CUDA graph records: only tensor reads and writes, no Python value depends
    on the position, so every step has the same shapes. n = d.cur + 1 (the used prefix)
    is the step run as a call, which reads no more of the cache than it needs."""
    # (B, 1, 1, D)
    cos, sin = (d.cos.index_select(2, d.cur), d.sin.index_select(2, d.cur))
    mask = (d.valid[:, :n] & (d.slot[:n] <= d.cur))[:, None, None]  # (B, 1, 1, n)
    h = _forward(
        model, d.tok[:, None], cos, sin, mask, d.cache_k, d.cache_v, d.cur, n, block
    )
    return _lm_head(model, h[:, -1], d.logits)  # (B, V) float32


def _lm_head(model, h, out):
    """The LM head on final hidden states h (B, C), written into out (B, V) float32.
    When h is float32 already (a CPU step without autocast) the product is written into
    out directly: no (B, V) temporary and no copy of it (8 ms of a profiled CPU decode
    step at Qwen3's 151,936-entry vocabulary, docs/sampler.md). The same kernel either
    way, so the same bits."""
    weight = model.get_output_embeddings().weight  # (V, C)
    if h.dtype != out.dtype or torch.is_autocast_enabled(h.device.type):
        return out.copy_(F.linear(h, weight))
    return torch.mm(h, weight.T, out=out)


# the last bucket: {"key": ..., "decoder": Decoder}; one at a time, whichever model made
# it
_kept = {}


def decoder(model, B, t_max, dtype, compiled=False):
    """The bucket (B, t_max rounded up to CACHE_BUCKET, dtype) for `model`'s Phase 1
    decoding (App. C). The last one is kept, so that the next call of the same model
    with the same bucket reuses its buffers and its recording; any other call frees it
    first, so at most one KV cache is alive at a time, as tools/memory.py plans
    (release_decoder frees it at once). The key holds every parameter's storage address:
    a recorded graph reads the weights where they were, so moved or replaced weights
    need a new recording (in-place updates, as optimizers do them, do not). The step is
    recorded as a CUDA graph where _recordable says so; `compiled` makes the step
    compiled_decode_one()'s."""
    device = next(model.parameters()).device
    cfg = model.config
    head_dim = (
        getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    )
    t_max = -(-t_max // CACHE_BUCKET) * CACHE_BUCKET
    graphed = _recordable(device)
    key = (
        B,
        t_max,
        dtype,
        graphed,
        compiled,
        tuple(p.data_ptr() for p in model.parameters()),
    )
    if _kept.get("key") == key:
        return _kept["decoder"]
    release_decoder()
    cache_k = [
        torch.zeros(
            B, cfg.num_key_value_heads, t_max, head_dim, device=device, dtype=dtype
        )
        for _ in range(cfg.num_hidden_layers)
    ]
    rope = torch.zeros(B, 1, t_max, head_dim, device=device, dtype=dtype)
    vocab = model.get_output_embeddings().weight.size(0)
    d = Decoder(
        cache_k,
        [torch.zeros_like(c) for c in cache_k],
        rope,
        rope.clone(),
        torch.zeros(B, t_max, dtype=torch.bool, device=device),
        torch.arange(t_max, device=device),
        torch.zeros(B, dtype=torch.long, device=device),
        torch.zeros(1, dtype=torch.long, device=device),
        torch.zeros(B, vocab, device=device),
        compiled_decode_one() if compiled else decode_one,
    )
    if graphed:
        _record(model, d)
    _kept.update(key=key, decoder=d)
    return d


def release_decoder():
    """Free the kept bucket (its KV cache and recording), e.g. after Phase 1's rollout
    (App. C), before the teacher and the update need the memory."""
    _kept.clear()


def prefill(model, d, prompts):
    """Write the left-padded prompts into d's cache and RoPE tables; -> final hidden
    state of the last prompt position (B, C), from which the first sampled token of
    Phase 1 (App. C) is drawn. Left-padding puts every row's next token in the same
    cache slot; pad slots are never attended to by real tokens."""
    device = d.slot.device
    T = max(len(p) for p in prompts)
    pad = torch.tensor([T - len(p) for p in prompts], device=device)  # (B,)
    # (B, T)
    ids = torch.tensor([[0] * (T - len(p)) + list(p) for p in prompts], device=device)
    d.valid.copy_(d.slot[None, :] >= pad[:, None])  # (B, Tmax) real tokens
    pos = (d.slot[None, :] - pad[:, None]).clamp(min=0)  # (B, Tmax)
    # RoPE tables for every slot, once; the model's own rotary module, so its rope
    # scaling applies.
    cos, sin = model.model.rotary_emb(d.cache_k[0], pos)  # (B, Tmax, D) each
    d.cos.copy_(cos[:, None])
    d.sin.copy_(sin[:, None])
    # an earlier call's values: finite, masked, but 0 * inf would still leak
    for c in d.cache_k + d.cache_v:
        c[:, :, T:].zero_()
    causal = d.slot[:T, None] >= d.slot[None, :T]  # (T, T)
    # A pad query may see itself so that no row of the softmax is empty (an empty row
    # gives NaN, and a NaN in a pad slot's K/V would leak into real rows through 0 *
    # NaN). (B, T, T)
    mask = causal & (
        d.valid[:, None, :T] | torch.eye(T, dtype=torch.bool, device=device)
    )
    h = _forward(
        model,
        ids,
        d.cos[:, :, :T],
        d.sin[:, :, :T],
        mask[:, None],
        d.cache_k,
        d.cache_v,
        d.slot[:T],
        T,
    )
    return h[:, -1]


# --------------------------------------------------------------------------------------
# CUDA graphs and torch.compile of the decode step: recorded once per bucket, replayed
# at one launch per token; a recorded step attends over the whole bucket (future slots
# masked): more reads than the used prefix, fixed shapes.


def _decode_step(model, d, n):
    """One decode step on d's buffers -> the next token's logits (B, V): the recording
    replayed (its first replay checked, _check_replay), or, without one, d.step run as a
    call over cache slots [0, n)."""
    if d.graph is None:
        return d.step(model, d, n)
    d.graph.replay()
    return d.logits if d.checked else _check_replay(model, d)


@functools.cache
def compiled_decode_one():
    """decode_one (Phase 1 decoding, App. C) with each layer's _block through
    torch.compile, as gpt-fast compiles its decode step: a layer's elementwise work
    (norms, RoPE, the cache writes, the mask, SiLU, residuals) fused into a few kernels,
    about half the launches of the plain block: at small batches a layer's weights read
    in the time of a few launches. One layer is compiled, not the whole step: all layers
    have the same code and shapes, so they share one compilation. dynamic=True: batch
    and cache length are symbolic from the start, so one compilation serves every bucket
    (batch 1 gets its own). Made on first use (importing the compiler takes seconds)."""
    block = torch.compile(_block, fullgraph=True, dynamic=True)
    return lambda model, d, n: decode_one(model, d, n, block)


def _recordable(device):
    """Whether decode steps on `device` are recorded as a CUDA graph: on CUDA, unless
    autocast is on (its weight casts would be recorded with the weights of the
    moment)."""
    return device.type == "cuda" and not torch.is_autocast_enabled("cuda")


def _record(model, d):
    """Record d.step as a CUDA graph on d's buffers. The warm-up call on a side stream
    comes first, as capture requires; it is also where a compiled step compiles and
    tunes its kernels for these shapes (nothing may synchronise during capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        d.step(model, d, d.slot.numel())
    torch.cuda.current_stream().wait_stream(side)
    d.graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(d.graph):
        d.step(model, d, d.slot.numel())


# The first replay of a recording against the step run as a call with the recorded
# shapes: the same kernels on the same inputs, so a correct replay matches it to the
# last bit (as the tests' stand-in graph does) and this tolerance only absorbs a
# reduction that is not bitwise reproducible from run to run (rounding noise, far below
# it). A broken recording (a position, a weight or a buffer fixed at capture, a kernel
# that does not replay) moves log-probs by whole nats. A false alarm costs speed, not
# correctness: the bucket then decodes as calls.
REPLAY_TOL = 1e-3


def _check_replay(model, d):
    """Compare the first replay of d's recording (its logits in d.logits) with d.step
    run as a call on the same buffers, -> the call's logits (B, V). A step writes K/V
    into slot d.cur only, and each layer of the call writes it before reading it, so the
    call's result does not depend on what the replay wrote there and overwrites it: the
    same K/V again if the replay was right, the right K/V if not. (A broken recording
    that wrote into other slots would leave them wrong until the next call's prefill
    rewrites the cache.) On a mismatch (a row's most likely token differs, or a log-prob
    by more than REPLAY_TOL) warn once and decode this bucket as calls from then on: a
    warning, which a training script or a user can silence or make an error (python -W
    error). One host read, once per recording."""
    replayed = d.logits.log_softmax(-1)  # (B, V)
    called = d.step(model, d, d.slot.numel()).log_softmax(-1)  # (B, V)
    d.checked = True
    gap = (replayed - called).abs().max()
    # a NaN gap fails too
    if not ((replayed.argmax(-1) == called.argmax(-1)).all() & (gap <= REPLAY_TOL)):
        warnings.warn(
            f"sampler: the recorded decode step (batch {d.tok.numel()}, cache "
            f"{d.slot.numel()}) does not replay as it runs (log-prob gap "
            f"{gap.item():.3g}); this bucket decodes without the recording",
            RuntimeWarning,
        )
        d.graph = None
    return d.logits
