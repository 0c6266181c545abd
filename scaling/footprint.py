"""Bytes of a model's tensors, from its config alone (never its weights): the exact parameter count, what autograd
saves per token in a decoder layer, the KV cache of one generate call, the activations of a prefill or of teacher
scoring, the size of a checkpoint, from a config (a transformers config or a plain dict such as
infra.models.QWEN3's). memory.py sums them into the plan of a training step (or of eval.py).

Counted from the code paths of sampler.generate, sampler.sequence_logprobs, teacher.score and train.update (torch
2.13, transformers 5.24, Qwen3 / Llama architectures), and checked against built models (tests/test_memory.py).
Sizes: P = parameter count (exact, `param_count`); C hidden, L layers, H / Hkv query / key-value heads, D head
dim, I intermediate, V vocabulary; Q = H*D, K = Hkv*D; p = parameter bytes (4: fp32 master weights), a = compute
bytes (2 under bf16 autocast, 4 in fp32), t = teacher bytes.
"""

from sampler import CACHE_BUCKET


def _get(cfg, name, default=None):
    """A field of a plain dict or of a transformers config."""
    value = (
        cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)
    )
    return default if value is None else value


def shape(cfg):
    """-> dict C, L, H, Hkv, D, I, V, Q, K, tie, qk_norm, attn_bias, mlp_bias from a dict or transformers config."""
    C, H = _get(cfg, "hidden_size"), _get(cfg, "num_attention_heads")
    D = _get(cfg, "head_dim", C // H)
    s = dict(
        C=C,
        L=_get(cfg, "num_hidden_layers"),
        H=H,
        Hkv=_get(cfg, "num_key_value_heads", H),
        D=D,
        I=_get(cfg, "intermediate_size"),
        V=_get(cfg, "vocab_size"),
        tie=bool(_get(cfg, "tie_word_embeddings")),
        qk_norm=_get(cfg, "model_type") == "qwen3",
        attn_bias=bool(_get(cfg, "attention_bias", False)),
        mlp_bias=bool(_get(cfg, "mlp_bias", False)),
    )
    s["Q"], s["K"] = s["H"] * D, s["Hkv"] * D
    return s


def param_count(cfg):
    """Exact parameter count of a Qwen3 / Llama CausalLM (tested against sum(p.numel()) of built models).

    embed V*C (+ lm_head V*C unless tied) + final norm C + L x [q C*Q, k and v C*K each, o Q*C (+ their biases
    Q + 2K + C with attention_bias), Qwen3's q_norm and k_norm D each, gate/up/down 3*C*I (+ 2I + C with
    mlp_bias), two RMSNorms 2C]."""
    s = shape(cfg)
    C, Q, K, I, D = s["C"], s["Q"], s["K"], s["I"], s["D"]
    attn = (
        2 * C * Q + 2 * C * K + (Q + 2 * K + C) * s["attn_bias"] + 2 * D * s["qk_norm"]
    )
    mlp = 3 * C * I + (2 * I + C) * s["mlp_bias"]
    return s["V"] * C * (1 if s["tie"] else 2) + s["L"] * (attn + mlp + 2 * C) + C


def autocast_params(cfg):
    """Parameters that bf16 autocast casts (and caches) on the way into a matmul: every Linear weight incl. the LM
    head; not the RMSNorm weights, not the embedding table (unless tied, when it is the LM head too)."""
    s = shape(cfg)
    norms = s["L"] * (2 * s["C"] + 2 * s["D"] * s["qk_norm"]) + s["C"]
    return param_count(cfg) - norms - (0 if s["tie"] else s["V"] * s["C"])


def layer_act_bytes(cfg, p=4, a=2, masked=False):
    """Bytes autograd saves per token per decoder layer (transformers Qwen3/Llama block, SDPA attention).

    Counted op by op for fp32 weights run in fp32 (p = a = 4) or under bf16 autocast (p = 4, a = 2), and checked
    against the tensors autograd really saves (tests/test_memory.py):
      input and post-attention RMSNorm: x and x*rsqrt(var), dtype p        4pC
      inputs of q, k, v, gate, up: autocast casts each one separately      5aC   (a == p: one tensor per norm, 2pC)
      Qwen3 q_norm / k_norm: an fp32 copy and the normalised copy (a)      (4 + a)(Q + K)
      SDPA: q, k, v as cast to a, and its output (= o_proj's input)        a(2Q + 2K)
        with a padding mask transformers repeat_kv's K and V to H heads    a*4Q instead
      SwiGLU: gate out, silu out, up out, their product                    4aI
      per-row scalars: rsqrt of 4 norms, SDPA logsumexp                    8 + 4(H + Hkv) + 4H
    With a padding mask SDPA also converts the bool mask to dtype a and saves it: a*L bytes per token per layer
    (a*L^2 per sequence) -- added by the caller, which knows L. (The classic 34*s*b*h per layer of Korthikanti et
    al. 2022, "Reducing activation recomputation", is the same bookkeeping for GPT in pure fp16.)
    """
    s = shape(cfg)
    C, Q, K, I, H, Hkv = s["C"], s["Q"], s["K"], s["I"], s["H"], s["Hkv"]
    norms = 4 * p * C
    proj_in = 5 * a * C if a != p else 2 * p * C
    qk = ((4 + a) * (Q + K) + 4 * (H + Hkv)) if s["qk_norm"] else 0
    sdpa = 4 * a * Q if masked else a * (2 * Q + 2 * K)
    return norms + proj_in + qk + sdpa + 4 * a * I + 8 + 4 * H


def outside_layers_bytes(cfg, p=4):
    """Saved per token outside the decoder layers: token ids 8, final RMSNorm 2pC + 4, RoPE cos/sin 2pD."""
    s = shape(cfg)
    return 8 + 2 * p * s["C"] + 4 + 2 * p * s["D"]


def nograd_token_bytes(cfg, p, a, rope_bytes):
    """Largest live tensors per token inside one layer of a forward without grad (prefill, teacher scoring):
    residual x and its normed copy (p), one autocast copy (a, none when a == p), then the largest of the RMSNorm's
    fp32 temporaries (3 x 4C when p != 4), attention (q, k, v in a; RoPE q*cos, rotate_half(q)*sin and their sum in
    the RoPE tables' dtype) and the MLP (silu(gate), up and their product, 3aI)."""
    s = shape(cfg)
    C, Q, K, I = s["C"], s["Q"], s["K"], s["I"]
    norm = 12 * C if p != 4 else 0
    attn = a * (Q + 2 * K) + 3 * rope_bytes * Q
    return 2 * p * C + (a * C if a != p else 0) + max(norm, attn, 3 * a * I)


def kv_cache_bytes(cfg, B, length, kv_bytes):
    """Bytes of the KV cache sampler.decoder allocates up front for one generate call (App. C, Phase 1): B prompts,
    `length` = prompt + new tokens rounded up to sampler.CACHE_BUCKET, in (B, Hkv, length, D) K and V per layer:
        2 (K, V) x L x B x Hkv x length x D x kv_bytes."""
    s = shape(cfg)
    return 2 * s["L"] * B * s["Hkv"] * _bucket(length) * s["D"] * kv_bytes


def _bucket(length):
    """A cache length as sampler.decoder rounds it: up to a multiple of CACHE_BUCKET."""
    return -(-length // CACHE_BUCKET) * CACHE_BUCKET


def rollout_bytes(cfg, B, prompt_len, response_len, a, kvb, rollout_attention="fused"):
    """(KV cache, prefill/decode temporaries) of one sampler.generate call of B prompts of up to prompt_len tokens
    and response_len new ones, with weights in `a` bytes and the cache in `kvb` (App. C, Phase 1). One call at a time
    holds its KV cache (sampler.decoder keeps one bucket and frees it before another): kv_cache_bytes.
    Prefill over B x T tokens at once: the no-grad layer tensors, the (B, T, T) bool mask and its temporaries
    (2 bytes per entry) plus SDPA's float copy of it (a), and with the math fallback scores + softmax in fp32
    (8 x B x H x T^2). Each decode step attends over the whole cache: the math fallback upcasts it to fp32 and
    repeats it to H heads, one layer at a time; plus four (B, V) fp32 vocabulary rows."""
    s, T, TN = shape(cfg), prompt_len, _bucket(prompt_len + response_len)
    # weights in a (copies)
    prefill = B * T * nograd_token_bytes(cfg, a, a, kvb) + (2 + a) * B * T * T
    decode = 2 * B * TN * s["K"] * (a if kvb != a else 0) + 16 * B * s["V"]
    if rollout_attention == "math":
        prefill += 8 * B * s["H"] * T * T
        decode += 2 * B * TN * s["D"] * 4 * (s["Hkv"] + s["H"])
    return kv_cache_bytes(cfg, B, prompt_len + response_len, kvb), max(prefill, decode)


def scoring_bytes(cfg, tb, seq_len, response_len, batch_tokens, lm_head_chunk):
    """(activation bytes, sequences per forward) of teacher.score (Eq. 7, no grad) over sequences of seq_len tokens
    (teacher prompt + response), weights in `tb` bytes: forward batches of at most batch_tokens padded tokens.
    Largest live tensors: one layer's no-grad tensors for the batch; the final hidden states (tokens x C x t); one
    LM-head chunk of logits in t, its fp32 copy and logsumexp's fp32 exp (chunk x V x (t + 4 + 4)). Packing two or
    more sequences needs a padding mask: bool (B, L, L) plus SDPA's copy in t, and repeat_kv'd K, V."""
    s = shape(cfg)
    Bt = max(1, batch_tokens // seq_len)
    tok_t = Bt * seq_len
    act_t = tok_t * (nograd_token_bytes(cfg, tb, tb, tb) + tb * s["C"])
    if Bt > 1:
        act_t += (1 + tb) * Bt * seq_len * seq_len + tok_t * 2 * tb * s["Q"]
    act_t += min(lm_head_chunk, Bt * response_len) * s["V"] * (tb + 8 if tb != 4 else 8)
    return act_t, Bt
