"""tools/device_check.py and tools/decode_checks.py: the correctness checks pass on a correct sampler and say FAIL,
one line each, when the recorded, compiled, two-model or refreshed decode step is wrong or the bf16 copy shifts
positions; the run's exit status counts them; and the whole script runs at tiny shapes on the CPU, checks first,
timing last."""

import contextlib
import copy

import pytest
import torch
from torch.utils import _pytree as pytree

import sampler
from infra import launch
from tests.test_sampler import _Capture, _CpuGraph, _Stream
from tools import decode_checks as checks
from tools import device_check as dc


class _Lines:
    """A device_check Log without a file, and what it printed (read from capsys)."""

    def __init__(self, capsys):
        self.log, self.capsys, self.lines = checks.Log(None), capsys, []

    def verdicts(self):
        """check name (as printed, stripped) -> 'ok' / 'FAIL', for the lines printed since the last call."""
        self.lines += self.capsys.readouterr().out.splitlines()
        return {
            line[5:51].strip(): line[:4].strip()
            for line in self.lines
            if line[:4] in ("ok  ", "FAIL")
        }


def _models():
    torch.manual_seed(0)
    a, b = (dc.build(dc.TINY_S, torch.float32, "cpu") for _ in range(2))
    for m in (a, b):
        checks.peak(m)
    return a, b


def _prompts(*lengths):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]


@pytest.fixture
def graphs(monkeypatch):
    """Decode steps recorded and replayed on the CPU with the stand-in graph (graph=_CpuGraph by default, or the
    class passed to the returned function). The stand-in records dispatched ops, which a compiled frame does not
    let through, so here compiled=True gets the plain step (the compiled one is checked unrecorded below)."""

    def use(graph=_CpuGraph):
        for name, fake in (
            ("CUDAGraph", graph),
            ("graph", _Capture),
            ("Stream", _Stream),
            ("current_stream", _Stream),
            ("stream", lambda s: contextlib.nullcontext()),
        ):
            monkeypatch.setattr(torch.cuda, name, fake)
        monkeypatch.setattr(sampler, "_recordable", lambda device: True)
        monkeypatch.setattr(sampler, "compiled_decode_one", lambda: sampler.decode_one)

    sampler.release_decoder()
    yield use
    sampler.release_decoder()


def _decoding(lines):
    a, b = _models()
    checks.check_decoding(lines.log, a, b, _prompts(12, 16, 20, 24), 12)
    return lines.verdicts()


def test_peaked_weights_are_not_flat():
    a, _ = _models()
    with torch.no_grad():
        lp = a(torch.tensor([_prompts(40)[0]])).logits[0].float().log_softmax(-1)
    entropy = -(lp.exp() * lp).sum(-1).mean().item()
    assert (
        1.0
        < entropy
        < 3.0
        < torch.log(torch.tensor(float(dc.TINY_S["vocab_size"]))).item()
    )


def test_every_decoding_check_passes_when_recorded_steps_replay_correctly(
    graphs, capsys
):
    graphs()
    lines = _Lines(capsys)
    verdicts = _decoding(lines)
    assert set(verdicts.values()) == {"ok"} and lines.log.failures == 0, "\n".join(
        lines.lines
    )
    assert {
        "plain decoding (eager step)",
        "recorded step (CUDA graph)",
        "compiled step (compiled=True)",
        "two models in turn: call 4, model b",
        "after an in-place refresh of a from b",
    } <= set(verdicts)
    assert any(name.startswith("math SDPA") for name in verdicts)
    assert "     refresh: a's recording replayed" in lines.lines


def test_a_wrong_compiled_step_fails_its_line_only(monkeypatch, capsys):
    sampler.release_decoder()
    step = sampler.compiled_decode_one()

    def off(model, d):  # logits 1% too sharp: tokens may agree, log-probs do not
        return step(model, d).mul_(1.01)

    monkeypatch.setattr(sampler, "compiled_decode_one", lambda: off)
    lines = _Lines(capsys)
    verdicts = _decoding(lines)
    assert verdicts.pop("compiled step (compiled=True)") == "FAIL" and set(
        verdicts.values()
    ) == {"ok"}, "\n".join(lines.lines)
    assert lines.log.failures == 1
    sampler.release_decoder()


@pytest.mark.parametrize("offset, verdict", [(2e-4, "FAIL"), (5e-5, "ok")])
def test_a_check_line_holds_log_probs_to_TOL_even_when_the_tokens_agree(
    offset, verdict, capsys
):
    a, _ = _models()
    prompts = _prompts(12, 16)
    with checks.eager():
        out = checks.decoded(a, prompts, 8)
    shifted = sampler.Generation(
        out.tokens, [[x + offset for x in row] for row in out.logprobs]
    )
    lines = _Lines(capsys)
    assert checks.agrees(
        lines.log, "shifted", a, prompts, lambda: shifted, out.tokens
    ) == (verdict == "ok")
    assert lines.verdicts() == {"shifted": verdict} and "tokens equal" in lines.lines[0]


class _NoCacheWrite(_CpuGraph):
    """A graph that does not replay the step's K/V cache writes (as if those kernels had not been captured)."""

    def replay(self):
        self.ops = [
            op for op in self.ops if op[0] is not torch.ops.aten.index_copy_.default
        ]
        super().replay()


def test_a_recorded_step_that_replays_wrongly_fails(graphs, capsys):
    graphs(_NoCacheWrite)
    verdicts = _decoding(_Lines(capsys))
    assert verdicts["plain decoding (eager step)"] == "ok"
    assert (
        verdicts["recorded step (CUDA graph)"]
        == verdicts["two models in turn: call 2, model b"]
        == "FAIL"
    )


class _StaleWeights(_CpuGraph):
    """A graph that replays with the weights as they were when it was recorded (copies, not the parameters)."""

    params = set()

    def replay(self):
        # outputs too: a view of a weight must not be written back into it
        if not self.replays:
            stale = lambda t: (
                t.clone()
                if isinstance(t, torch.Tensor)
                and t.untyped_storage().data_ptr() in self.params
                else t
            )
            self.ops = [
                (f, pytree.tree_map(stale, args), kw, pytree.tree_map(stale, out))
                for f, args, kw, out in self.ops
            ]
        super().replay()


def test_a_replay_that_misses_an_in_place_refresh_fails(graphs, monkeypatch, capsys):
    graphs(_StaleWeights)
    a, b = _models()
    monkeypatch.setattr(
        _StaleWeights,
        "params",
        {p.untyped_storage().data_ptr() for p in a.parameters()},
    )
    lines = _Lines(capsys)
    checks.check_decoding(lines.log, a, b, _prompts(12, 16, 20, 24), 12)
    verdicts = lines.verdicts()
    assert verdicts.pop("after an in-place refresh of a from b") == "FAIL" and set(
        verdicts.values()
    ) == {"ok"}, lines.lines


def test_two_models_sharing_one_recording_fail(graphs, monkeypatch, capsys):
    """The kept bucket reused for another model of the same shapes (a key without the weights) replays the first
    model's recording for the second."""
    graphs()
    make = sampler.decoder

    def shared(model, B, t_max, dtype, compiled=False):
        d = sampler._kept.get("decoder")
        if (
            d is not None
            and d.graph is not None
            and d.tok.numel() == B
            and d.slot.numel() >= t_max
            and (d.step is sampler.decode_one) != compiled
            and sampler._recordable(None)
        ):
            return d
        return make(model, B, t_max, dtype, compiled)

    monkeypatch.setattr(sampler, "decoder", shared)
    verdicts = _decoding(_Lines(capsys))
    assert verdicts["two models in turn: call 1, model a"] == "ok"
    assert verdicts["two models in turn: call 2, model b"] == "FAIL"


def _rounding_copies(policies, args):
    """bf16 copies made with Module.to(bf16), which rounds the rotary frequencies with the weights."""
    return {
        role: copy.deepcopy(m).to(torch.bfloat16).requires_grad_(False)
        for role, m in policies.items()
    }


@pytest.mark.parametrize("rounded", [False, True])
def test_the_bf16_gap_check_fails_rounded_rotary_frequencies(
    rounded, monkeypatch, capsys
):
    """At ~1k positions the gap of a copy with bf16-rounded rotary frequencies grows past GAP_RATIO x the gap at
    the start; launch.rollout_copies' own copies (fp32 frequencies, models.to_dtype) pass."""
    if rounded:
        monkeypatch.setattr(launch, "rollout_copies", _rounding_copies)
    a, _ = _models()
    lines = _Lines(capsys)
    short, long = _prompts(64, 56, 48, 40), _prompts(1024, 1016, 1008, 1000)
    checks.check_bf16_gap(lines.log, a, short, long, 32)
    verdict = lines.verdicts()["bf16 copy, default SDPA"]
    assert verdict == ("FAIL" if rounded else "ok"), "\n".join(lines.lines)


def test_tiny_run_on_cpu_checks_first_times_last_and_exits_with_its_failures(
    tmp_path, monkeypatch, capsys
):
    """The whole script at tiny shapes (in process; the compiled step is made wrong): every line printed is in
    --out, the correctness lines come before the first timed line, the wrong step is the one FAIL line, the
    timings still run, and the exit status is 1."""
    step = sampler.compiled_decode_one()
    monkeypatch.setattr(
        sampler,
        "compiled_decode_one",
        lambda: lambda model, d, n: step(model, d, n).mul_(1.01),
    )
    out = tmp_path / "device_check.txt"
    assert dc.main(["--tiny", "--out", str(out)]) == 1
    text, printed = out.read_text(), capsys.readouterr().out
    assert all(line in printed for line in text.splitlines())
    fails = [line for line in text.splitlines() if "FAIL" in line]
    assert (
        len(fails) == 1
        and fails[0].startswith("FAIL compiled step")
        and "skipped" not in text
    ), text
    assert (
        text.index("correctness: 1 failed")
        < text.index("measured peak")
        < text.index("(a1)")
    )
    assert text.rstrip().endswith("1 failed")
    for needle in (
        "ok   step as generate runs it",
        "ok   two models in turn",
        "ok   after an in-place refresh",
        "ok   bf16 copy",
        "decode",
        "compiled=True",
        "x transformers",
        "--compile",
        "faster than under autocast",
        "teacher scoring",
        "update",
        "checkpointing",
        "predicted",
    ):
        assert needle in text, needle
