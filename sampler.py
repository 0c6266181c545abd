"""The students' sampler and the teacher-forced scorer: torch only, one model's weights, no workflow.

  - `generate`: a hand-written KV-cached sampler over a transformers Llama/Qwen3 model's weights. It returns, per
    sampled token, the student log-prob log pi_theta(y_k | x, y_<k) that Eq. 8 subtracts (App. C: the advantage
    uses the log-probs kept from the rollout).
  - `sequence_logprobs`: force-decode given token ids after given contexts and gather their log-probs. Under
    no_grad it is the teacher score l_k of Eq. 7; with grad it is the student's log pi_theta term of Eq. 13.

Nothing here knows about roles, prompts or verifiers, so either function can be copied into another project.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class Generation:
    tokens: list[list[int]]     # per prompt: the new token ids (a produced stop token is included)
    logprobs: list[list[float]]  # same lengths: log-prob of each token under the unmodified model


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _check_supported(model):
    """Our forward re-implements the Llama/Qwen3 block; refuse anything we would silently get wrong."""
    body = getattr(model, "model", None)
    if body is None or not hasattr(body, "layers") or not hasattr(body, "rotary_emb"):
        raise ValueError(f"generate: unsupported model {type(model).__name__} (need a Llama- or Qwen3-style CausalLM)")
    if getattr(model.config, "use_sliding_window", False):
        raise ValueError("generate: sliding-window attention is not implemented; set config.use_sliding_window=False")


def _rms_norm(module, x):
    """The model's RMSNorm as one fused op (same formula; fewer kernel launches per decode step). The weight
    follows x's dtype so that under bf16 autocast (fp32 master weights) the fused kernel still applies."""
    return F.rms_norm(x, module.weight.shape, module.weight.to(x.dtype), module.variance_epsilon)


def _forward(model, ids, cos, sin, mask, cache_k, cache_v, start):
    """One forward over new tokens, writing their K/V into our cache.

    ids: (B, S) token ids; cos, sin: (B, 1, S, D) RoPE tables at their positions; mask: (B, 1, S, start + S)
    bool, True = may attend; cache_k/v: per layer (B, Hkv, Tmax, D); the new tokens occupy cache slots
    [start, start + S). Returns the final hidden states (B, S, C).
    """
    body = model.model
    B, S = ids.shape
    x = body.embed_tokens(ids)                              # (B, S, C)
    end = start + S
    for i, layer in enumerate(body.layers):
        attn = layer.self_attn
        h = _rms_norm(layer.input_layernorm, x)
        q = attn.q_proj(h).view(B, S, -1, attn.head_dim)    # (B, S, H, D)
        k = attn.k_proj(h).view(B, S, -1, attn.head_dim)    # (B, S, Hkv, D)
        v = attn.v_proj(h).view(B, S, -1, attn.head_dim)
        if hasattr(attn, "q_norm"):                         # Qwen3: RMSNorm per head, before RoPE
            q, k = _rms_norm(attn.q_norm, q), _rms_norm(attn.k_norm, k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, S, D)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        cache_k[i][:, :, start:end] = k
        cache_v[i][:, :, start:end] = v
        o = F.scaled_dot_product_attention(q, cache_k[i][:, :, :end], cache_v[i][:, :, :end], attn_mask=mask,
                                           scale=attn.scaling, enable_gqa=True)  # (B, H, S, D)
        x = x + attn.o_proj(o.transpose(1, 2).reshape(B, S, -1))
        x = x + layer.mlp(_rms_norm(layer.post_attention_layernorm, x))
    return _rms_norm(body.norm, x)


def _sample(logits, temperature, top_p, top_k, generator):
    """logits: (B, V) float32 -> (B,) token ids. temperature 0 = greedy."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # keep a token while the mass strictly before it is < top_p, so the top token always survives
        drop = (probs.cumsum(dim=-1) - probs) >= top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    # Inverse-CDF draw, one uniform per row: exact categorical sampling, and on CPU ~40x faster than
    # torch.multinomial at Qwen3's 152k vocabulary. Zero-probability tokens are never drawn (side="right").
    cdf = logits.softmax(dim=-1).cumsum(dim=-1)                                        # (B, V)
    u = torch.rand(cdf.size(0), 1, generator=generator, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.size(-1) - 1).squeeze(1)


@torch.inference_mode()
def generate(model, prompts, max_new_tokens, *, temperature=1.0, top_p=1.0, top_k=0, stop_ids=(), generator=None):
    """Sample continuations of a batch of token-id prompts with our own KV cache.

    model: a transformers Llama- or Qwen3-style CausalLM (its weights are used; its forward and cache are not).
    prompts: list of B non-empty lists of token ids, any lengths (left-padded internally).
    Sampling: temperature (0 = greedy), then top-k (0 = off), then top-p (1.0 = off), with `generator`.
    A row stops after producing any id in `stop_ids` (that token is kept and scored) or after max_new_tokens.

    Returns Generation(tokens, logprobs): per row the new ids and, for each, log_softmax of the model's raw
    logits (temperature 1, no top-k/top-p) at that position. These are the student log-probs of Eq. 8 and the
    ones training differentiates; when temperature != 1 or top-k/top-p are active they are NOT the
    probabilities of the distribution the token was drawn from.
    """
    _check_supported(model)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate: prompts must be a non-empty list of non-empty token-id lists")
    B, T = len(prompts), max(len(p) for p in prompts)
    tokens, logprobs = [[] for _ in range(B)], [[] for _ in range(B)]
    if max_new_tokens <= 0:
        return Generation(tokens, logprobs)
    param = next(model.parameters())
    device = param.device
    # Under autocast (bf16 compute over fp32 master weights) K and V come out in the autocast dtype: cache them
    # so, at half the bytes of the weights' dtype.
    dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else param.dtype
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    t_max = T + max_new_tokens
    cache_k = [torch.zeros(B, cfg.num_key_value_heads, t_max, head_dim, device=device, dtype=dtype)
               for _ in range(cfg.num_hidden_layers)]
    cache_v = [torch.zeros_like(c) for c in cache_k]

    # Left-pad so every row's next token lands in the same cache slot; pad slots are never attended to.
    pad = torch.tensor([T - len(p) for p in prompts], device=device)                  # (B,)
    ids = torch.tensor([[0] * (T - len(p)) + list(p) for p in prompts], device=device)  # (B, T)
    slot = torch.arange(t_max, device=device)                                          # (Tmax,)
    valid = slot[None, :] >= pad[:, None]                                              # (B, Tmax) real tokens
    pos = (slot[None, :] - pad[:, None]).clamp(min=0)                                  # (B, Tmax)
    # RoPE tables for every slot, once; the model's own rotary module, so its rope scaling applies.
    cos, sin = model.model.rotary_emb(cache_k[0], pos)                                 # (B, Tmax, D) each
    cos, sin = cos[:, None], sin[:, None]                                              # (B, 1, Tmax, D)
    causal = slot[:T, None] >= slot[None, :T]                                          # (T, T)
    # A pad query may see itself so that no row of the softmax is empty (an empty row gives NaN, and a NaN
    # in a pad slot's K/V would leak into real rows through 0 * NaN).
    mask = causal & (valid[:, None, :T] | torch.eye(T, dtype=torch.bool, device=device))  # (B, T, T)
    h = _forward(model, ids, cos[:, :, :T], sin[:, :, :T], mask[:, None], cache_k, cache_v, 0)

    stop = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    new_ids, new_lps = [], []
    for step in range(max_new_tokens):
        logits = model.lm_head(h[:, -1]).float()                                       # (B, V)
        nxt = _sample(logits, temperature, top_p, top_k, generator)                    # (B,)
        lp = logits.log_softmax(dim=-1).gather(1, nxt[:, None]).squeeze(1)             # (B,)
        new_ids.append(torch.where(done, -1, nxt))
        new_lps.append(lp)
        done = done | torch.isin(nxt, stop)
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        cur = T + step                                                                 # this token's slot
        h = _forward(model, nxt[:, None], cos[:, :, cur:cur + 1], sin[:, :, cur:cur + 1],
                     valid[:, None, None, :cur + 1], cache_k, cache_v, cur)

    # One device->host copy at the end instead of one per step.
    ids_cpu, lps_cpu = torch.stack(new_ids, 1).tolist(), torch.stack(new_lps, 1).tolist()
    for b in range(B):
        for tok, lp in zip(ids_cpu[b], lps_cpu[b]):
            if tok < 0:
                break
            tokens[b].append(tok)
            logprobs[b].append(lp)
    return Generation(tokens, logprobs)


# ----------------------------------------------------------------------------------------------------------
# Teacher forcing


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
