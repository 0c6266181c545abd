"""The hand-written KV-cached sampler: exact against transformers, and every sampling knob behaves."""

import contextlib
import warnings

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import sampler
from infra.models import tiny_model
from sampler import STOP_CHECK, _sample, generate

LENGTHS = (5, 17, 1, 30, 9)


def _prompts(seed=0, lengths=LENGTHS):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]


def _rescore(model, prompt, tokens):
    """Teacher-forced log-probs of `tokens` after `prompt`, one unpadded full forward."""
    with torch.no_grad():
        logits = (
            model(torch.tensor([prompt + tokens]))
            .logits[0, len(prompt) - 1 : -1]
            .float()
        )
    return logits.log_softmax(-1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_greedy_matches_transformers_generate(arch, qwen3, llama):
    model = {"qwen3": qwen3, "llama": llama}[arch]
    prompts = _prompts()
    out = generate(model, prompts, 24, temperature=0)
    for p, toks in zip(prompts, out.tokens):
        ref = model.generate(
            torch.tensor([p]),
            max_new_tokens=24,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )[0, len(p) :].tolist()
        assert toks == ref


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_logprobs_match_teacher_forced_forward(arch, qwen3, llama):
    model = {"qwen3": qwen3, "llama": llama}[arch]
    prompts = _prompts(1)
    out = generate(
        model,
        prompts,
        20,
        temperature=0.7,
        top_p=0.9,
        top_k=50,
        generator=torch.Generator().manual_seed(3),
    )
    for p, toks, lps in zip(prompts, out.tokens, out.logprobs):
        assert len(toks) == len(lps) == 20
        torch.testing.assert_close(
            torch.tensor(lps), _rescore(model, p, toks), atol=1e-4, rtol=0
        )


def test_per_row_stop_keeps_and_scores_the_stop_token(qwen3):
    prompts = _prompts(2)
    # sampled, same seed: finished rows keep drawing, so a stop does not shift the other rows' random stream
    free = generate(qwen3, prompts, 16, generator=torch.Generator().manual_seed(0))
    row0 = free.tokens[0]
    # a token new at position k > 0
    k = next(i for i in range(1, len(row0)) if row0[i] not in row0[:i])
    # row 0 must stop right after it; other rows at their first `stop`, if any
    stop = row0[k]
    out = generate(
        qwen3, prompts, 16, stop_ids=[stop], generator=torch.Generator().manual_seed(0)
    )
    for p, full, toks, lps in zip(prompts, free.tokens, out.tokens, out.logprobs):
        cut = full.index(stop) + 1 if stop in full else len(full)
        assert toks == full[:cut]
        torch.testing.assert_close(
            torch.tensor(lps), _rescore(qwen3, p, toks), atol=1e-4, rtol=0
        )
    assert len(out.tokens[0]) == k + 1 < 16 and out.tokens[0][-1] == stop


def test_seeded_generator_is_reproducible(qwen3):
    prompts = _prompts(3)
    a = generate(qwen3, prompts, 12, generator=torch.Generator().manual_seed(7))
    b = generate(qwen3, prompts, 12, generator=torch.Generator().manual_seed(7))
    c = generate(qwen3, prompts, 12, generator=torch.Generator().manual_seed(8))
    assert a.tokens == b.tokens and a.logprobs == b.logprobs
    assert a.tokens != c.tokens


def test_top_k_one_and_tiny_top_p_are_greedy(qwen3):
    prompts = _prompts(4)
    greedy = generate(qwen3, prompts, 10, temperature=0).tokens
    assert (
        generate(
            qwen3, prompts, 10, top_k=1, generator=torch.Generator().manual_seed(0)
        ).tokens
        == greedy
    )
    assert (
        generate(
            qwen3, prompts, 10, top_p=1e-9, generator=torch.Generator().manual_seed(0)
        ).tokens
        == greedy
    )


def test_top_k_only_samples_among_the_k_best(qwen3):
    prompts = _prompts(5)
    out = generate(
        qwen3,
        prompts,
        15,
        temperature=1.5,
        top_k=3,
        generator=torch.Generator().manual_seed(1),
    )
    for p, toks in zip(prompts, out.tokens):
        with torch.no_grad():
            logits = qwen3(torch.tensor([p + toks])).logits[0, len(p) - 1 : -1]
        top3 = logits.topk(3, dim=-1).indices
        assert all(t in top3[i].tolist() for i, t in enumerate(toks))


def test_top_p_only_samples_inside_the_nucleus(llama):
    prompts = _prompts(6)
    out = generate(
        llama, prompts, 15, top_p=0.05, generator=torch.Generator().manual_seed(2)
    )
    for p, toks in zip(prompts, out.tokens):
        with torch.no_grad():
            probs = (
                llama(torch.tensor([p + toks])).logits[0, len(p) - 1 : -1].softmax(-1)
            )
        # mass of strictly more likely tokens must be below top_p
        for i, t in enumerate(toks):
            assert probs[i][probs[i] > probs[i, t]].sum() < 0.05


def test_hostile_arguments(qwen3):
    assert generate(qwen3, [[1, 2]], 0).tokens == [[]]
    with pytest.raises(ValueError, match="non-empty"):
        generate(qwen3, [[1], []], 4)
    with pytest.raises(ValueError, match="non-empty"):
        generate(qwen3, [], 4)
    with pytest.raises(ValueError, match="unsupported model"):
        generate(torch.nn.Linear(2, 2), [[1]], 4)


def test_sampling_frequencies_follow_the_distribution():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])
    logits = probs.log().expand(40000, 5).clone()  # the last token has -inf logit
    draws = _sample(logits, 1.0, 1.0, 0, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    torch.testing.assert_close(freq, probs, atol=0.01, rtol=0)
    assert freq[4] == 0
    # temperature 0.5 squares and renormalises the probabilities
    draws = _sample(logits[:, :4], 0.5, 1.0, 0, torch.Generator().manual_seed(1))
    sq = probs[:4] ** 2
    torch.testing.assert_close(
        torch.bincount(draws, minlength=4).float() / len(draws),
        sq / sq.sum(),
        atol=0.01,
        rtol=0,
    )


def test_bf16_autocast_generation_stays_close_to_fp32(qwen3):
    prompts = _prompts(7)
    ref = generate(qwen3, prompts, 6, temperature=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = generate(qwen3, prompts, 6, temperature=0)
    for a, b in zip(ref.logprobs, out.logprobs):
        torch.testing.assert_close(torch.tensor(b), torch.tensor(a), atol=0.1, rtol=0)


# ------------------------------------------------------------------- the static-shape decode step and its buckets


def _reference(
    model, prompts, n, *, temperature=1.0, top_p=1.0, top_k=0, stop_ids=(), seed=0
):
    """What generate must return, the plain way: each step a full forward of every row, unpadded and uncached,
    the same _sample and one uniform per row per step from the same seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    rows, lps, done = (
        [list(p) for p in prompts],
        [[] for _ in prompts],
        [False] * len(prompts),
    )
    out = [[] for _ in prompts]
    for _ in range(n):
        with torch.no_grad():
            logits = torch.stack(
                [model(torch.tensor([r])).logits[0, -1].float() for r in rows]
            )  # (B, V)
        nxt = _sample(logits, temperature, top_p, top_k, gen)
        lp = logits.log_softmax(-1).gather(1, nxt[:, None]).squeeze(1)
        for b, t in enumerate(nxt.tolist()):
            rows[b].append(t)
            if not done[b]:
                out[b].append(t)
                lps[b].append(lp[b].item())
                done[b] = t in stop_ids
        if all(done):
            break
    return out, lps


def _decodes_as_reference(model, prompts, n, *, seed, compiled=False, **sampling):
    """generate's tokens equal _reference's and its log-probs agree within 1e-4; -> generate's Generation."""
    ref, ref_lps = _reference(model, prompts, n, seed=seed, **sampling)
    out = generate(
        model,
        prompts,
        n,
        generator=torch.Generator().manual_seed(seed),
        compiled=compiled,
        **sampling,
    )
    assert out.tokens == ref
    for a, b in zip(out.logprobs, ref_lps):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=0)
    return out


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("temperature", [0, 1.0])
@pytest.mark.parametrize("fold", [False, True], ids=["gqa", "folded heads (CUDA)"])
def test_static_decode_equals_plain_decoding_greedy_and_seeded(
    arch, temperature, fold, qwen3, llama, monkeypatch
):
    """Also with the decode step's query heads folded into rows of their K/V head, the layout CUDA runs."""
    monkeypatch.setattr(sampler, "_fold_heads", lambda device: fold)
    model = {"qwen3": qwen3, "llama": llama}[arch]
    _decodes_as_reference(model, _prompts(11), 20, temperature=temperature, seed=4)


def test_rows_stop_on_their_own_between_host_checks(qwen3):
    """Stop tokens land at different steps in different rows, and all rows stop long before max_new_tokens and
    off the STOP_CHECK grid: each row ends at its own stop token, exactly as plain decoding ends it."""
    prompts = _prompts(12)
    free, _ = _reference(qwen3, prompts, 12, seed=5)
    # row 0 stops at once, each other within 5 tokens
    stops = sorted({free[0][0]} | {row[4] for row in free[1:]})
    out = _decodes_as_reference(qwen3, prompts, 3 * STOP_CHECK, stop_ids=stops, seed=5)
    assert all(len(t) <= 5 for t in out.tokens)
    assert len(out.tokens[0]) == 1 < max(len(t) for t in out.tokens)


def test_a_kept_bucket_is_reused_and_an_earlier_call_never_leaks(qwen3, llama):
    """Calls whose lengths round to the same bucket share its buffers; what an earlier call left in the cache
    (even a NaN) does not change a later call's tokens or log-probs; another batch size, another model or
    replaced weights get a new bucket, and release_decoder() frees the kept one."""
    # qwen3's weights, own storage
    model = tiny_model("qwen3", layers=2, hidden=64, heads=4, kv_heads=2, seed=0)
    long, short = _prompts(13, (40, 33, 2, 7)), _prompts(14)[:3]
    fresh = generate(qwen3, short, 10, temperature=0)

    def poison():
        # the buffers are made in generate's inference mode
        with torch.inference_mode():
            for c in (
                sampler._kept["decoder"].cache_k + sampler._kept["decoder"].cache_v
            ):
                c.fill_(float("nan"))
        return sampler._kept["decoder"]

    generate(model, long, 30, temperature=0)
    d = poison()
    # another batch size: a new bucket
    again = generate(model, short, 10, temperature=0)
    assert sampler._kept["decoder"] is not d
    d = poison()
    out = generate(model, short, 10, temperature=0)
    assert (
        sampler._kept["decoder"] is d
        and d.slot.numel() == sampler.CACHE_BUCKET > 40 + 30
    )  # reused
    assert out.tokens == again.tokens == fresh.tokens and out.logprobs == again.logprobs
    generate(llama, short, 4, temperature=0)
    assert sampler._kept["decoder"] is not d  # another model
    d = sampler._kept["decoder"]
    for p in llama.parameters():
        p.data = p.data.clone()
    generate(llama, short, 4, temperature=0)
    assert sampler._kept["decoder"] is not d  # the same model, its weights elsewhere
    sampler.release_decoder()
    assert not sampler._kept


def test_the_host_reads_the_device_once_per_STOP_CHECK_steps(qwen3, monkeypatch):
    """No host synchronisation per token: while decoding, the host reads a device value (bool, item, tolist, ...)
    once every STOP_CHECK steps, for the stop state, and at the end for the results (tokens and log-probs)."""
    prompts, reads = _prompts(17), []
    for name in ("__bool__", "__int__", "__float__", "item", "tolist", "cpu", "numpy"):
        orig = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor,
            name,
            lambda self, *a, _f=orig, _n=name, **k: (
                reads.append(_n) or _f(self, *a, **k)
            ),
        )
    n = 4 * STOP_CHECK + 3
    out = generate(qwen3, prompts, n, generator=torch.Generator().manual_seed(8))
    monkeypatch.undo()
    # no stop ids: every row decodes all n tokens
    assert all(len(t) == n for t in out.tokens)
    assert reads.count("tolist") == len(reads) == n // STOP_CHECK + 2, reads


def test_on_check_reports_the_tokens_kept_and_the_rows_stopped_at_each_host_read(qwen3):
    """The progress figures come from the stop-state read itself: per read the tokens kept since the previous one
    (a stopped row's extra tokens are not counted) and the rows stopped so far."""
    prompts, calls = _prompts(12), []
    n = 3 * STOP_CHECK + 3
    out = generate(
        qwen3,
        prompts,
        n,
        generator=torch.Generator().manual_seed(5),
        on_check=lambda *c: calls.append(c),
    )
    # no stop ids: nothing stops early
    assert calls == [(len(prompts) * STOP_CHECK, 0)] * (n // STOP_CHECK)
    free = out.tokens
    # every row stops within 5 tokens
    stops = sorted({free[0][0]} | {row[4] for row in free[1:]})
    calls.clear()
    out = generate(
        qwen3,
        prompts,
        n,
        stop_ids=stops,
        generator=torch.Generator().manual_seed(5),
        on_check=lambda *c: calls.append(c),
    )
    assert (
        calls == [(sum(map(len, out.tokens)), len(prompts))]
        and sum(map(len, out.tokens)) < len(prompts) * 5
    )


class _Capture(TorchDispatchMode):
    """Under it every op runs as usual and is appended, with its arguments and results, to `ops`."""

    def __init__(self, graph):
        super().__init__()
        self.ops = graph.ops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.append((func, args, kwargs or {}, out))
        return out


class _CpuGraph:
    """A CUDA graph's contract on the CPU: capture records the ops and the very tensors they read and write; replay
    runs the same ops on the same tensors and writes each result where capture wrote it. What the host decided at
    capture (a Python number of the position, a tensor made then) stays as it was, as in a recorded CUDA graph."""

    skip = ()  # ops a wrong recording leaves out

    def __init__(self):
        self.ops, self.replays = [], 0

    def replay(self):
        self.replays += 1
        for func, args, kwargs, out in self.ops:
            if func in self.skip:
                continue
            new = func(*args, **kwargs)
            for o, n in zip(pytree.tree_leaves(out), pytree.tree_leaves(new)):
                if (
                    isinstance(o, torch.Tensor)
                    and o.untyped_storage().data_ptr() != n.untyped_storage().data_ptr()
                ):
                    # out of place: into the capture's buffer (in-place ops and views wrote there already)
                    o.copy_(n)


class _WrongGraph(_CpuGraph):
    """A recording that replays wrongly: it leaves out the K/V cache writes, so the replayed step attends over
    what the token's slot held before and leaves it there."""

    skip = (torch.ops.aten.index_copy_.default,)


class _Stream:
    def wait_stream(self, other):
        pass


def _record_on_cpu(monkeypatch, graph):
    """Decode steps are recorded, with `graph` standing in for torch.cuda.CUDAGraph; -> the list that gets one
    entry per call of decode_one (warm-up, capture, the check of the first replay, or a step run as a call)."""
    for name, fake in (
        ("CUDAGraph", graph),
        ("graph", _Capture),
        ("Stream", _Stream),
        ("current_stream", _Stream),
        ("stream", lambda s: contextlib.nullcontext()),
    ):
        monkeypatch.setattr(torch.cuda, name, fake)
    monkeypatch.setattr(sampler, "_recordable", lambda device: True)
    monkeypatch.setattr(sampler, "_fold_heads", lambda device: True)  # as on CUDA
    steps, step = [], sampler.decode_one
    monkeypatch.setattr(sampler, "decode_one", lambda *a: steps.append(1) or step(*a))
    sampler.release_decoder()
    return steps


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_the_recorded_step_replays_as_plain_decoding(arch, monkeypatch):
    """The CUDA-graph path (_record, then replays) on the CPU with _CpuGraph standing in for torch.cuda's graph:
    tokens and log-probs equal plain uncached decoding, greedy and seeded, also when later calls replay the first
    call's recording with other prompts, another prompt length, and weights updated in place (as launch.refresh and
    optimizers write them). The step runs three times per recording (warm-up, capture, and as a call beside the
    first replay, which matches it: no warning); every other step is a replay."""
    # its weights change below
    model = tiny_model(arch, layers=2, hidden=64, heads=4, kv_heads=2, seed=3)
    steps = _record_on_cpu(monkeypatch, _CpuGraph)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = _decodes_as_reference(model, _prompts(18), 20, temperature=0, seed=0)
        _decodes_as_reference(
            model, _prompts(19, (3, 8, 41, 12, 6)), 20, temperature=1.0, seed=9
        )
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.5)
        updated = _decodes_as_reference(model, _prompts(18), 20, temperature=0, seed=0)
    # the update changed what the replayed step decodes
    assert updated.tokens != first.tokens
    d = sampler._kept["decoder"]
    assert (
        isinstance(d.graph, _CpuGraph) and d.graph.replays == 3 * 19 and len(steps) == 3
    )
    sampler.release_decoder()


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_a_recording_that_replays_wrongly_is_dropped_after_one_warning(
    arch, monkeypatch
):
    """A recording whose first replay differs from the step run as a call: one warning, the call's logits and K/V
    take the replay's place, so the tokens and log-probs are plain decoding's; the bucket decodes as calls from then
    on, in this call and the next ones (no more replays, no more warnings)."""
    model = tiny_model(arch, layers=2, hidden=64, heads=4, kv_heads=2, seed=3)
    steps = _record_on_cpu(monkeypatch, _WrongGraph)
    with pytest.warns(RuntimeWarning, match="does not replay as it runs") as caught:
        _decodes_as_reference(model, _prompts(18), 20, temperature=0, seed=0)
    assert len(caught) == 1
    d = sampler._kept["decoder"]
    # record (2), check (1), then every step as a call
    assert d.graph is None and len(steps) == 2 + 1 + 18
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _decodes_as_reference(
            model, _prompts(19, (3, 8, 41, 12, 6)), 20, temperature=1.0, seed=9
        )
    assert (
        sampler._kept["decoder"] is d
        and d.graph is None
        and len(steps) == 2 + 1 + 18 + 19
    )
    sampler.release_decoder()


def test_many_stop_ids_stop_each_row_at_its_own(qwen3):
    """A long stop list (past the size where torch.isin changes method) ends each row exactly as plain decoding."""
    prompts = _prompts(16)
    free, _ = _reference(qwen3, prompts, 8, seed=7)
    stops = sorted({row[2] for row in free} | set(range(900, 940)))
    ref, _ = _reference(qwen3, prompts, 8, stop_ids=stops, seed=7)
    out = generate(
        qwen3, prompts, 8, stop_ids=stops, generator=torch.Generator().manual_seed(7)
    )
    assert out.tokens == ref and all(len(t) <= 3 for t in out.tokens)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_the_compiled_step_decodes_as_the_plain_one(arch, qwen3, llama, monkeypatch):
    """compiled=True (the decode step through torch.compile) gives plain decoding's tokens and log-probs, greedy
    and seeded, also for further bucket shapes (where the compiler makes batch and cache length symbolic); every
    decode step goes through the compiled function."""
    model = {"qwen3": qwen3, "llama": llama}[arch]
    calls, step = [], sampler.compiled_decode_one()
    monkeypatch.setattr(
        sampler, "compiled_decode_one", lambda: lambda *a: calls.append(1) or step(*a)
    )
    sampler.release_decoder()
    for prompts, temperature in (
        (_prompts(13), 0),
        (_prompts(14, LENGTHS[:3]), 1.0),
        (_prompts(15, (300, 2)), 1.0),
    ):
        _decodes_as_reference(
            model, prompts, 6, temperature=temperature, seed=6, compiled=True
        )
    # 6 tokens: the first from the prefill, five decode steps per call
    assert len(calls) == 3 * 5
