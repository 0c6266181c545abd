"""The correctness checks of tools/device_check.py: every way the decode step can run, held against teacher forcing,
and the bf16 rollout copy's log-prob gap at a long position. One line per check, led by ok or FAIL (Log); a check
that raises is its own FAIL line and the checks go on (attempt).
"""

import contextlib
import math
import warnings
from types import SimpleNamespace
from unittest import mock

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import sampler
from infra import launch
from infra.models import first_line
from sampler import generate, release_decoder, sequence_logprobs


class Log:
    """print() that also appends each line to a file at once, and counts the failed checks."""

    def __init__(self, path):
        self.f = open(path, "w") if path else None
        self.failures = 0

    def __call__(self, *parts):
        line = " ".join(str(x) for x in parts)
        print(line, flush=True)
        if self.f:
            self.f.write(line + "\n")
            self.f.flush()

    def check(self, ok, line):
        """One check's line, led by its verdict: ok or FAIL. -> ok."""
        self.failures += not ok
        self("ok  " if ok else "FAIL", line)
        return ok


def failed(e):
    """One log line for an exception: a check that fails is reported and the run goes on."""
    return f"FAILED {type(e).__name__}: {first_line(e)[:160]}"


def sdpa_ops(fn):
    """Names of the SDPA kernels that run inside fn() (flash / efficient / cudnn / math / flash_for_cpu)."""
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    except Exception as e:  # a probe, not a check: say so and go on
        return failed(e)
    names = {
        e.key
        for e in prof.key_averages()
        if e.key.startswith("aten::_scaled_dot_product")
    }
    return (
        ",".join(sorted(n.replace("aten::_scaled_dot_product_", "") for n in names))
        or "none"
    )


# ---------------------------------------------------------------------------------------------- correctness first
# Every way the decode step can run -- recorded (CUDA graph), compiled, under each SDPA kernel, for two models in
# turn, replayed after an in-place refresh -- is held against teacher forcing: sequence_logprobs of the very tokens
# generated (Eq. 7's scorer, the reference Eq. 13 trains on). Same seed, temperature 1: every variant makes the same
# draws, so its tokens must equal plain decoding's.
# fp32 decode vs fp32 teacher forcing: the same arithmetic in another order, not another precision
TOL = 1e-4
# bf16 copy: mean log-prob gap at the long position <= this x the gap at the start (GAP_LINE says why)
GAP_RATIO = 2.0
GAP_LINE = (
    "bf16 rounding of the arithmetic does not grow with the position, a position error (e.g. rounded "
    "rotary frequencies) does"
)
KERNELS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


@torch.no_grad()
def peak(model, entropy=2.0):
    """Make a random Qwen3's distributions as sharp as a trained model's, in place: a random model's next-token
    distribution is near-uniform (log-probs ~ -log V whatever the context) and attends almost uniformly, which
    hides position and cache errors. Each layer's output x10 (the input embedding no longer dominates the residual
    stream, so the model does not just predict its input token), attention scores x2.25 (q and k norms x1.5), and
    the final norm scaled so that the mean next-token entropy over a random prompt is `entropy` nats."""
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.mul_(10)
        layer.mlp.down_proj.weight.mul_(10)
        layer.self_attn.q_norm.weight.mul_(1.5)
        layer.self_attn.k_norm.weight.mul_(1.5)
    device = next(model.parameters()).device
    ids = torch.randint(0, 256, (1, 64), generator=torch.Generator().manual_seed(0)).to(
        device
    )
    logits = model(ids).logits[0].float()  # (64, V)
    # log2 of the logits' scale: bisect the entropy, which falls as the scale grows
    lo, hi = (-4.0, 8.0)
    for _ in range(30):
        mid = (lo + hi) / 2
        lp = (logits * 2**mid).log_softmax(-1)
        lo, hi = (mid, hi) if -(lp.exp() * lp).sum(-1).mean() > entropy else (lo, mid)
    model.model.norm.weight.mul_(2**lo)


def decoded(model, prompts, new, **kw):
    """Greedy generate: every variant must pick the same tokens. (Not sampled: the step run as a call reads the used
    prefix of the cache and the recorded one the whole bucket, which sum in another order, and an inverse-CDF draw
    that lands within ~1e-6 of a boundary would take another token; an argmax flips only at a near-tie.)"""
    return generate(model, prompts, new, temperature=0, **kw)


@contextlib.contextmanager
def eager():
    """Inside, decode steps run as plain calls, never recorded: the reference the recorded step is held against."""
    with mock.patch.object(sampler, "_recordable", lambda device: False):
        yield


def gaps(model, prompts, out):
    """|out's log-probs - sequence_logprobs of out's tokens under `model`| per token, one (N,) float32 tensor."""
    with torch.no_grad():
        ref = sequence_logprobs(model, prompts, out.tokens)
    return torch.cat(
        [(torch.tensor(lp) - r.float().cpu()).abs() for lp, r in zip(out.logprobs, ref)]
    )


def attempt(log, name, fn):
    """fn(); an exception (OOM, a compiler error) is the check's one FAIL line, and the checks go on. The sampler's
    warning that a recording does not replay as the step runs is such an error here: after it the bucket decodes
    without its recording, which would pass the check that was meant for the recording."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "error",
                message="sampler: the recorded decode step",
                category=RuntimeWarning,
            )
            return fn()
    except Exception as e:
        release_decoder()
        return log.check(False, f"{name:<46} {failed(e)}")


def agrees(log, name, model, prompts, run, tokens):
    """One check line: run()'s tokens equal `tokens` (plain decoding's, same draws) and its log-probs are within
    TOL of teacher forcing on its own tokens. -> ok."""
    return attempt(log, name, lambda: _agrees(log, name, model, prompts, run(), tokens))


def _agrees(log, name, model, prompts, out, tokens):
    gap = gaps(model, prompts, out).max().item()
    rows = sum(t != u for t, u in zip(out.tokens, tokens))
    what = "equal" if not rows else f"DIFFER in {rows} of {len(tokens)} rows"
    return log.check(
        not rows and gap <= TOL,
        f"{name:<46} tokens {what}, log-prob gap max {gap:.1e} (limit {TOL:.0e})",
    )


def kernels(log, model, prompt_sets, new, check):
    """Each SDPA kernel the decode or the prefill could pick, forced (the math kernel stays allowed for what the
    forced one cannot run: flash has no mask, the efficient kernel no GQA): generate on each prompt set under it,
    each recorded afresh, then check(name, *outputs) outside it, so that the reference keeps its own kernel. A
    kernel that cannot run at these shapes and dtype, or that the default choice already runs (checked by the
    caller), gets a line saying so."""
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    release_decoder()
    default = sdpa_ops(lambda: decoded(model, prompt_sets[-1], 2))
    for name, backend in KERNELS.items():
        release_decoder()
        with sdpa_kernel([backend] if name == "math" else [backend, SDPBackend.MATH]):
            ran = sdpa_ops(lambda: decoded(model, prompt_sets[-1], 2))
            outs = (
                attempt(
                    log,
                    f"{name} SDPA",
                    lambda: [decoded(model, p, new) for p in prompt_sets],
                )
                if name in ran and ran != default
                else None
            )
        release_decoder()
        if name not in ran:
            log(
                f"skip {name + ' SDPA':<46} does not run at these shapes in {dtype} (ran: {ran})"
            )
        elif ran == default:
            log(
                f"skip {name + ' SDPA':<46} the default choice here (ran: {ran}): checked above"
            )
        elif outs:
            check(f"{name} SDPA (ran: {ran})", *outs)


def check_decoding(log, a, b, prompts, new):
    """fp32, a and b two different (peaked) models with the same shapes: plain decoding vs teacher forcing, then
    the recorded step, the compiled step and each SDPA kernel against it; a, b, a, b in turn (sampler.decoder keeps
    one bucket); and a recorded step replayed after launch.refresh wrote b's weights into a's storage."""
    device = next(a.parameters()).device
    release_decoder()
    with eager():
        plain_a, plain_b = decoded(a, prompts, new), decoded(b, prompts, new)
    lp = -torch.tensor([x for row in plain_a.logprobs for x in row]).mean().item()
    log(
        f"     {len(prompts)} prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, {new} new, fp32; "
        f"mean -log-prob of a decoded token {lp:.2f} (uniform: {math.log(a.config.vocab_size):.2f})"
    )
    agrees(
        log, "plain decoding (eager step)", a, prompts, lambda: plain_a, plain_a.tokens
    )
    recorded = (
        "recorded step (CUDA graph)"
        if sampler._recordable(device)
        else f"step as generate runs it on {device}"
    )
    agrees(log, recorded, a, prompts, lambda: decoded(a, prompts, new), plain_a.tokens)
    agrees(
        log,
        "compiled step (compiled=True)",
        a,
        prompts,
        lambda: decoded(a, prompts, new, compiled=True),
        plain_a.tokens,
    )
    kernels(
        log,
        a,
        [prompts],
        new,
        lambda name, out: agrees(log, name, a, prompts, lambda: out, plain_a.tokens),
    )
    for i, (m, plain) in enumerate(
        ((a, plain_a), (b, plain_b), (a, plain_a), (b, plain_b))
    ):
        agrees(
            log,
            f"two models in turn: call {i + 1}, model {'ab'[i % 2]}",
            m,
            prompts,
            lambda: decoded(m, prompts, new),
            plain.tokens,
        )
    release_decoder()
    decoded(a, prompts, new)
    kept = sampler._kept.get("decoder")
    launch.refresh({"a": a}, {"a": b})  # a now holds b's weights, in a's storage

    def after_refresh():
        out = decoded(a, prompts, new)
        log(
            f"     refresh: a's recording {'replayed' if sampler._kept.get('decoder') is kept else 'made anew'}"
        )
        return out

    agrees(
        log,
        "after an in-place refresh of a from b",
        a,
        prompts,
        after_refresh,
        plain_b.tokens,
    )
    release_decoder()


def check_bf16_gap(log, master, short, long, new):
    """The bf16 rollout copy (launch.rollout_copies) against its fp32 master: the mean |log-prob gap| of the
    greedy tokens (Eq. 8's log pi_theta vs the master's teacher forcing) after the `long` prompts must stay within
    GAP_RATIO x the gap after the `short` ones; under the default SDPA choice and each kernel bf16 decoding could
    pick."""
    copy = launch.rollout_copies(
        {"student": master}, SimpleNamespace(precision="bf16")
    )["student"]
    log(
        f"     bf16 rollout copy vs its fp32 master, {len(long)} x {new} greedy tokens after prompts of "
        f"{min(map(len, short))}-{max(map(len, short))} and {min(map(len, long))}-{max(map(len, long))} tokens; "
        f"limit: gap after the long ones <= {GAP_RATIO:g}x the short ones': {GAP_LINE}"
    )

    def check(name, out_short, out_long):
        attempt(log, "bf16 copy, " + name, lambda: _gap_line(name, out_short, out_long))

    def _gap_line(name, out_short, out_long):
        g_short, g_long = gaps(master, short, out_short), gaps(master, long, out_long)
        # below 1e-3: bf16's resolution
        ratio = g_long.mean().item() / max(g_short.mean().item(), 1e-3)
        log.check(
            ratio <= GAP_RATIO,
            f"{'bf16 copy, ' + name:<46} gap mean {g_short.mean():.1e} -> {g_long.mean():.1e}"
            f" (max {g_short.max():.1e} -> {g_long.max():.1e}): {ratio:.1f}x (limit {GAP_RATIO:g}x)",
        )

    release_decoder()
    outs = attempt(
        log,
        "bf16 copy, default SDPA",
        lambda: (decoded(copy, short, new), decoded(copy, long, new)),
    )
    if outs:
        check("default SDPA", *outs)
    kernels(log, copy, [short, long], new, check)
    release_decoder()
