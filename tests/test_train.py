"""train.py end to end on tiny models: metrics, checkpoints, resume exactness, non-finite guards."""

import ast
import errno
import json
import os
import re
import types

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import config
import eval as evaluation
import rollout
import train
from config import preset_line
from infra import checkpoint, launch, models
from infra.models import make_tokenizer, tiny_model
from sampler import generate, sequence_logprobs
from sandbox import jail
from scaling import memory
from tests.test_memory import configs

FAST = [
    "--student",
    "tiny-qwen3",
    "--teacher",
    "tiny-qwen3",
    "--max-new-tokens",
    "6",
    "--max-turns",
    "2",
    "--batch",
    "2",
    "--mini-batch",
    "1",
    "--micro-batch",
    "3",
    "--lr",
    "1e-3",
    "--workers",
    "2",
]


def _strict(word):
    raise AssertionError(f"{word} is not JSON")


def _metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line, parse_constant=_strict) for line in f]


def _comparable(m):
    return {k: v for k, v in m.items() if k not in ("seconds", "peak_memory_mb")}


def _start_line(text):
    """(tokens sampled, tokens scored, checkpoint bytes) from train.py's start-up line."""
    m = re.search(
        r"per step: up to ([\d,]+) tokens sampled .*, up to ([\d,]+) scored .*checkpoint: ([\d,]+) bytes",
        text,
    )
    return tuple(int(g.replace(",", "")) for g in m.groups())


def test_three_steps_write_metrics_and_a_loadable_checkpoint(
    tmp_path, problems, capsys
):
    out = str(tmp_path / "run")
    train.main(["--problems", problems, "--out", out, "--steps", "3"] + FAST)
    # the start-up line's bounds hold for every step, and its checkpoint size covers what was written, by no more
    # than its stated margin
    printed = capsys.readouterr().out
    sampled, scored, size = _start_line(printed)
    assert sampled == 2 * 2 * 2 * 6  # batch x roles x max_turns x max_new_tokens
    written = sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, fs in os.walk(os.path.join(out, "checkpoint"))
        for f in fs
    )
    margin = written * checkpoint.MARGIN[0] + checkpoint.MARGIN[1]
    assert written <= size <= written + 1.1 * margin, (size, written)
    ms = _metrics(out)
    assert all(
        m["tokens"]["rollout"] <= sampled and m["tokens"]["teacher"] <= scored
        for m in ms
    )
    assert [m["step"] for m in ms] == [0, 1, 2]
    for m in ms:
        assert set(m["seconds"]) == {"rollout", "attribution", "teacher", "update"}
        assert set(m["roles"]) == {"coder", "tester", "reasoner", "tool_user"}
        assert m["tokens"]["rollout"] > 0  # exact token counts: tests/test_wiring.py
        assert 0 <= m["conflict_rate"] <= 1 and 1 <= m["turns_per_episode"] <= 2
        assert m["updates"] == 2 and m["skipped"] == 0 and m["peak_memory_mb"] > 0
        assert sum(m["outcomes"].values()) == round(m["turns_per_episode"] * 2)
        # per role, % of responses parsed by each rule or unparsed
        assert set(m["format"]) == set(m["roles"])
        assert all(
            abs(sum(shares.values()) - 100) < 1e-9 and "unparsed" in shares
            for shares in m["format"].values()
        )
    # one persistent console line per step, with the step's loss, per-token reverse KL and A^role over all roles
    lines = re.findall(
        r"^step (\d+) \| loss (\S+) \| reverse KL (\S+) \| A\^role (\S+) \| conflict (\S+) \| \S+ s$",
        printed,
        re.M,
    )
    assert [int(x[0]) for x in lines] == [0, 1, 2]
    for m, (_, loss, kl, a_role, conflict) in zip(ms, lines):
        per_token = lambda k: (
            sum(s[k] * s["tokens"] for s in m["roles"].values())
            / sum(s["tokens"] for s in m["roles"].values())
        )
        assert float(loss) == pytest.approx(sum(m["loss"]) / 2, abs=1e-4)
        assert float(kl) == pytest.approx(per_token("reverse_kl"), abs=1e-4)
        assert float(a_role) == pytest.approx(per_token("a_role"), abs=1e-4)
        assert float(conflict) == pytest.approx(m["conflict_rate"], abs=0.005)
    # the sampler's log-probs are the trainer's (on-policy, before any update)
    assert ms[0]["logprob_gap_mean"] <= ms[0]["logprob_gap"] < 1e-4
    ckpt = os.path.join(out, "checkpoint")
    assert sorted(os.listdir(ckpt)) == [
        "coder",
        "reasoner",
        "settings.json",
        "state.pt",
        "tester",
        "tool_user",
    ]
    coder = AutoModelForCausalLM.from_pretrained(os.path.join(ckpt, "coder"))
    AutoTokenizer.from_pretrained(os.path.join(ckpt, "coder"))
    start = tiny_model("qwen3", layers=2, hidden=64, seed=0)
    assert not torch.equal(coder.lm_head.weight, start.lm_head.weight)  # it trained
    tester = AutoModelForCausalLM.from_pretrained(os.path.join(ckpt, "tester"))
    # separate policies
    assert not torch.equal(coder.lm_head.weight, tester.lm_head.weight)


def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path, problems, capsys):
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    train.main(
        ["--problems", problems, "--out", full, "--steps", "3", "--save-episodes"]
        + FAST
    )
    err = capsys.readouterr().err
    # the phase line inside a step, and the rollout's own line:
    assert "step 2: update (done: rollout" in err
    assert "turn 1/2: reading " in err and " tok/s [" in err
    train.main(
        ["--problems", problems, "--out", part, "--steps", "1", "--save-episodes"]
        + FAST
    )
    for name in ("metrics.jsonl", "episodes.jsonl"):
        # a line written just before a crash
        with open(os.path.join(part, name), "a") as f:
            # and one the crash cut short
            f.write(json.dumps({"step": 1, "stale": True}) + "\n" + '{"step": 2, "lo')
    train.main(
        [
            "--problems",
            problems,
            "--out",
            part,
            "--steps",
            "3",
            "--resume",
            "--save-episodes",
        ]
        + FAST
    )
    assert [_comparable(m) for m in _metrics(part)] == [
        _comparable(m) for m in _metrics(full)
    ]
    episodes = [
        [json.loads(ln) for ln in open(os.path.join(run, "episodes.jsonl"))]
        for run in (full, part)
    ]
    assert episodes[0] == episodes[1] and [e["step"] for e in episodes[0]] == [
        0,
        0,
        1,
        1,
        2,
        2,
    ]
    assert all(
        len(r["tokens"]) == len(r["logprobs"])
        for e in episodes[0]
        for t in e["turns"]
        for r in t["responses"].values()
    )
    a = AutoModelForCausalLM.from_pretrained(os.path.join(full, "checkpoint", "tester"))
    b = AutoModelForCausalLM.from_pretrained(os.path.join(part, "checkpoint", "tester"))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_shared_policy_no_pac_and_lambda_zero(tmp_path, problems):
    out = str(tmp_path / "shared")
    train.main(
        [
            "--problems",
            problems,
            "--out",
            out,
            "--steps",
            "1",
            "--shared-policy",
            "--no-pac",
            "--lam",
            "0",
        ]
        + FAST
    )
    assert sorted(os.listdir(os.path.join(out, "checkpoint"))) == [
        "settings.json",
        "shared",
        "state.pt",
    ]
    assert _metrics(out)[0]["updates"] == 2


def test_non_finite_teacher_skips_the_step_and_never_checkpoints_bad_weights(
    tmp_path, problems, capsys
):
    bad = tiny_model("qwen3", layers=2, hidden=64, seed=5)
    with torch.no_grad():
        bad.lm_head.weight[0, 0] = float("nan")
    bad.save_pretrained(tmp_path / "nan-teacher")
    make_tokenizer().save_pretrained(tmp_path / "nan-teacher")
    out = str(tmp_path / "run")
    train.main(
        FAST
        + [
            "--problems",
            problems,
            "--out",
            out,
            "--steps",
            "2",
            "--teacher",
            str(tmp_path / "nan-teacher"),
        ]
    )
    ms = _metrics(out)
    assert (
        [m["skipped"] for m in ms] == [1, 1]
        and ms[-1]["skipped_total"] == 2
        and ms[0]["updates"] == 0
    )
    # NaN is written as null: metrics.jsonl stays JSON
    assert ms[0]["roles"]["coder"]["a_opd"] is None
    assert "non-finite advantage" in capsys.readouterr().err
    coder = AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "checkpoint", "coder")
    )
    start = tiny_model("qwen3", layers=2, hidden=64, seed=0)
    assert all(
        torch.equal(x, y) for x, y in zip(coder.parameters(), start.parameters())
    )  # untouched


def test_no_arguments_points_to_the_demo(capsys):
    with pytest.raises(SystemExit) as e:
        train.main([])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "python -m toy" in err.splitlines()[-1]


def test_a_teacher_with_another_tokenizer_is_refused_before_any_weights_load(
    tmp_path, problems, capsys
):
    other = make_tokenizer()
    other.add_tokens(["<extra>"])
    other.save_pretrained(tmp_path / "teacher")
    # no weights at all: loading them would fail otherwise
    (tmp_path / "teacher" / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as e:
        train.main(
            FAST
            + [
                "--problems",
                problems,
                "--out",
                str(tmp_path / "run"),
                "--teacher",
                str(tmp_path / "teacher"),
            ]
        )
    assert e.value.code == 2 and "must share a tokenizer" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "run")


def test_a_run_that_cannot_fit_is_refused_before_any_weights_load_with_flags_that_fit(
    tmp_path, problems, capsys, monkeypatch
):
    monkeypatch.setattr(
        launch, "load_model", lambda *a, **k: pytest.fail("weights were loaded")
    )
    # a machine with 2 GiB free
    monkeypatch.setattr(memory, "available_bytes", lambda device: 2 * memory.GiB)
    big = FAST + [
        "--problems",
        problems,
        "--teacher",
        "tiny-qwen3",
        "--batch",
        "128",
        "--max-prompt-tokens",
        "8192",
    ]
    with pytest.raises(SystemExit) as e:
        train.main(big + ["--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert (
        e.value.code == 2
        and len(err.splitlines()) == 1
        and not os.path.exists(tmp_path / "run")
    )
    assert (
        err.startswith("error: memory: one training step needs about")
        and "2.0 GiB of RAM available" in err
    )
    flags = (
        err.split("it would fit with ")[1].split(" (python -m tools.memory")[0].split()
    )
    assert "--batch" in flags
    assert (
        memory.check_fits(
            config.get_args(big + flags), configs(config.get_args(big + flags)), 4
        )["total"]
        <= 2 * memory.GiB
    )  # and it does fit


def test_presets_fill_only_the_flags_not_given():
    paper = config.get_args(["--problems", "p.jsonl", "--student", "tiny-qwen3"])
    assert (
        paper.preset,
        paper.steps,
        paper.batch,
        paper.mini_batch,
        paper.lr,
        paper.max_new_tokens,
        paper.max_prompt_tokens,
        paper.teacher_max_prompt_tokens,
    ) == ("paper", 150, 128, 64, 1e-6, 4096, 8192, 12288)
    cpu = config.get_args(
        [
            "--problems",
            "p.jsonl",
            "--student",
            "tiny-qwen3",
            "--preset",
            "cpu",
            "--steps",
            "7",
        ]
    )
    assert (
        cpu.steps,
        cpu.batch,
        cpu.max_new_tokens,
        cpu.math_max_new_tokens,
        cpu.eval_seeds,
    ) == (7, 2, 512, 256, [1000])
    assert not hasattr(cpu, "seeds")  # eval.py's key stays out of train.py's namespace
    assert preset_line(cpu).startswith(
        "preset: cpu (batch=2, mini_batch=2, micro_batch=2, lr=1e-06, "
        "max_new_tokens=512, math_max_new_tokens=256"
    )  # steps=7 was given
    alone = config.get_args(
        [
            "--problems",
            "p.jsonl",
            "--student",
            "tiny-qwen3",
            "--preset",
            "cpu",
            "--max-new-tokens",
            "48",
        ]
    )
    # one limit for both, not 48 and 256
    assert (alone.max_new_tokens, alone.math_max_new_tokens) == (48, 0)
    both = config.get_args(
        [
            "--problems",
            "p.jsonl",
            "--student",
            "tiny-qwen3",
            "--preset",
            "cpu",
            "--max-new-tokens",
            "48",
            "--math-max-new-tokens",
            "32",
        ]
    )
    assert (both.max_new_tokens, both.math_max_new_tokens) == (48, 32)
    with pytest.raises(SystemExit):
        config.get_args(
            ["--problems", "p.jsonl", "--student", "tiny-qwen3", "--preset", "huge"]
        )
    gpu = config.get_args(
        [
            "--problems",
            "p.jsonl",
            "--student",
            "tiny-qwen3",
            "--preset",
            "gpu",
            "--save-every",
            "3",
        ]
    )
    assert (
        gpu.steps,
        gpu.batch,
        gpu.mini_batch,
        gpu.micro_batch,
        gpu.lr,
        gpu.max_new_tokens,
        gpu.max_prompt_tokens,
        gpu.teacher_max_prompt_tokens,
        gpu.save_every,
        gpu.grad_checkpointing,
        gpu.rollout_chunk,
    ) == (50, 16, 8, 2, 1e-6, 1024, 2048, 3072, 3, False, 0)  # --save-every 3 given
    # the checkpoint interval is a preset value too
    assert (paper.save_every, cpu.save_every) == (10, 1)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Values config.py types once (the paper preset's lengths, the sandbox timeouts, the teacher's batch, the evaluation
# decoding, weight decay); another default with one of them is a second copy. And knobs whose default is config's.
TYPED_ONCE = (12288, 16384, 8192, 4096, 30.0, 20.0, 0.6, 0.95, 0.01)
DEFAULT_NAMES = {
    "max_turns",
    "temperature",
    "top_p",
    "top_k",
    "timeout",
    "code_timeout",
    "math_timeout",
    "limit",
    "max_batch_tokens",
    "teacher_batch_tokens",
    "lam",
    "weight_decay",
    "grad_clip",
}


def _typed_once(value):
    """Whether `value` is one of TYPED_ONCE, of the same type (top-k's 20 is not the math timeout's 20.0)."""
    return any(type(value) is type(v) and value == v for v in TYPED_ONCE)


def _paper_and_infra_files():
    """The paper's files but config.py (the one place) and sampler.py (copied alone, torch only: its own neutral
    sampling defaults), and every file of infra/."""
    paper = [
        os.path.join(ROOT, n)
        for n in os.listdir(ROOT)
        if n.endswith(".py") and n not in ("config.py", "sampler.py")
    ]
    infra = [
        os.path.join(ROOT, "infra", n)
        for n in os.listdir(os.path.join(ROOT, "infra"))
        if n.endswith(".py")
    ]
    return sorted(paper + infra)


def _literal_defaults(path):
    """(line, name, value) of every literal default in a file: a function parameter's, a dataclass field's and an
    argparse flag's (default=)."""
    for node in ast.walk(ast.parse(open(path).read())):
        pairs = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = [
                (p.arg, d)
                for p, d in zip(
                    positional[len(positional) - len(a.defaults) :], a.defaults
                )
            ]
            pairs += [
                (p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None
            ]
        elif isinstance(node, ast.ClassDef):
            pairs = [
                (s.target.id, s.value)
                for s in node.body
                if isinstance(s, ast.AnnAssign) and s.value is not None
            ]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            flag = str(node.args[0].value).lstrip("-").replace("-", "_")
            pairs = [(flag, k.value) for k in node.keywords if k.arg == "default"]
        for name, d in pairs:
            if (
                isinstance(d, ast.Constant)
                and d.value is not None
                and not isinstance(d.value, bool)
            ):
                yield d.lineno, name, d.value


def test_help_groups_the_flags_and_each_default_is_typed_once(capsys, monkeypatch):
    base = ["--problems", "p.jsonl", "--student", "tiny-qwen3"]
    # the defaults train.py shares with the rollout (and the paper preset's limits) reach it unchanged
    assert rollout.rollout_config(config.get_args(base)) == rollout.RolloutConfig()
    # a preset value typed once: in effect and in --help
    monkeypatch.setitem(config.PRESETS["paper"], "steps", 77)
    assert config.get_args(base).steps == 77
    with pytest.raises(SystemExit) as e:
        config.get_args(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    titles = [
        "\ndata and models:",
        "\nthe paper's schedule",
        "\nMAS-OPD (",
        "\nsampling (",
        "\nmemory and speed:",
        "\noutput:",
    ]
    assert [text.index(t) for t in titles] == sorted(text.index(t) for t in titles)
    text = text[text.index(titles[0]) :]  # the groups, past the usage line
    steps = " ".join(
        text[text.index("--steps STEPS") : text.index("--batch BATCH")].split()
    )
    assert (
        steps
        == "--steps STEPS (preset) [paper: 77, gpu: 50, cpu: 2, smol: 1, toy: 100]"
    )
    teacher = " ".join(
        text[text.index("--teacher TEACHER") : text.index("--eval-problems")].split()
    )
    assert "(required" in teacher
    top_k = " ".join(text[text.index("--top-k TOP_K") :].split())
    assert top_k.startswith(f"--top-k TOP_K 0 = off [{rollout.RolloutConfig().top_k}]")
    # no default of the paper's files or infra/ repeats a value config.py types (a literal of TYPED_ONCE, or any
    # literal for a knob of DEFAULT_NAMES: they take config's value or an argument), and config types each once
    repeated = [
        f"{path}:{line} {name}={value!r}"
        for path in _paper_and_infra_files()
        for line, name, value in _literal_defaults(path)
        if name in DEFAULT_NAMES or _typed_once(value)
    ]
    assert not repeated, f"defaults typed again outside config.py: {repeated}"
    numbers = [
        tok.value
        for tok in ast.walk(ast.parse(open(os.path.join(ROOT, "config.py")).read()))
        if isinstance(tok, ast.Constant) and _typed_once(tok.value)
    ]
    assert sorted(numbers) == sorted(TYPED_ONCE), (
        f"config.py types these more or less than once: {numbers}"
    )


def test_every_preset_has_every_key_and_help_lists_each_value(capsys):
    keys = set(config.PAPER)
    assert set(config.PRESETS) == {"paper", "gpu", "cpu", "smol", "toy"}
    assert all(set(p) == keys for p in config.PRESETS.values()), {
        n: keys ^ set(p) for n, p in config.PRESETS.items()
    }
    show = lambda v: " ".join(map(str, v)) if isinstance(v, list) else str(v)
    for main, flags in (
        (config.get_args, keys - {"seeds"}),
        (
            evaluation.main,
            {
                "seeds",
                "max_new_tokens",
                "math_max_new_tokens",
                "teacher_max_prompt_tokens",
            },
        ),
    ):
        with pytest.raises(SystemExit):
            main(["--help"])
        # the flags, past the usage line
        text = " ".join(capsys.readouterr().out.split("options:")[1].split())
        for key in flags:
            flag = "--" + key.replace("_", "-")
            listed = ", ".join(
                f"{name}: {show(p[key])}" for name, p in config.PRESETS.items()
            )
            assert re.search(
                re.escape(flag)
                + r" [^(]*?\(preset\)[^[]*\["
                + re.escape(listed)
                + r"\]",
                text,
            ), (flag, listed)


class Loaded(Exception):
    """Raised by a stand-in load_model: the run got past every check made before the teacher loads."""


def test_a_run_without_disk_space_for_its_checkpoints_is_refused_before_the_teacher_loads(
    tmp_path, problems, error_line, capsys, monkeypatch
):
    real_load, loads = launch.load_model, []

    def load_students_only(*a, **k):  # the students load, the teacher would be next
        loads.append(a[0])
        if len(loads) > 1:
            raise Loaded()
        return real_load(*a, **k)

    monkeypatch.setattr(launch, "load_model", load_students_only)
    # the problems' four roles: four policies, measured as the run measures them
    loaded = [models.load_model("tiny-qwen3") for _ in range(4)]
    size = checkpoint.checkpoint_size(
        dict(zip("abcd", [m for m, _ in loaded])), loaded[0][1]
    )
    free = [0]
    monkeypatch.setattr(
        checkpoint.shutil,
        "disk_usage",
        lambda path: types.SimpleNamespace(free=free[0]),
    )
    out = tmp_path / "run"
    run = FAST + ["--problems", problems, "--out", str(out), "--save-every", "2"]

    def refused(steps):
        loads.clear()
        with pytest.raises(SystemExit) as e:
            train.main(run + ["--steps", str(steps)])
        assert e.value.code == 2 and loads == ["tiny-qwen3"]

    def passes(steps):
        loads.clear()
        with pytest.raises(Loaded):
            train.main(run + ["--steps", str(steps)])
        return capsys.readouterr().out

    # the second save writes checkpoint.tmp beside the first checkpoint: two must fit
    free[0] = 2 * size - 1
    refused(3)
    error_line(f"--out {out}: {checkpoint.size_text(free[0])} free on disk")
    assert not out.exists()  # nothing written
    free[0] = 2 * size
    passes(3)
    # one save (steps <= --save-every), or a checkpoint already there: one must fit
    free[0] = size - 1
    refused(2)
    free[0] = size
    passes(2)
    (out / "checkpoint").mkdir(parents=True)
    passes(3)
    # a save that did not finish left checkpoint.tmp: it counts as free (the next save removes it), and is named
    (out / "checkpoint.tmp").mkdir()
    (out / "checkpoint.tmp" / "part").write_bytes(b"x" * 1000)
    free[0] = size - 1000
    assert (
        f"counting the 1000 bytes of {out}/checkpoint.tmp, a save that did not finish"
        in passes(2)
    )
    free[0] = size - 1001
    refused(2)
    error_line(f"--out {out}: {checkpoint.size_text(size - 1)} free on disk at")


@pytest.mark.parametrize(
    "failure",
    [
        # torch's writer on a full disk, safetensors' and open()'s errno; a failure that is not the disk's
        RuntimeError("[enforce fail at inline_container.cc:672] . file write failed"),
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("a bug"),
    ],
)
def test_a_save_the_disk_has_no_room_for_keeps_the_last_checkpoint_and_ends_in_one_line(
    failure, tmp_path, problems, capsys, monkeypatch
):
    out = tmp_path / "run"
    run = FAST + ["--problems", problems, "--out", str(out), "--steps", "2"]
    real_save, saves = checkpoint.torch.save, []

    def full_at_the_second_save(obj, path):
        saves.append(path)
        if len(saves) == 2:  # half written, then the disk is full
            open(path, "wb").write(b"partial")
            raise failure
        return real_save(obj, path)

    monkeypatch.setattr(checkpoint.torch, "save", full_at_the_second_save)
    with pytest.raises(SystemExit if "bug" not in str(failure) else RuntimeError) as e:
        train.main(run + ["--save-every", "1"])
    # the partial write is gone, the checkpoint of step 0 whole
    assert not (out / "checkpoint.tmp").exists()
    assert json.loads((out / "checkpoint" / "settings.json").read_text())["step"] == 0
    if "bug" in str(failure):  # not the disk: the error as it is
        assert e.value is failure
        return
    # the last line, below the closed progress bar
    last = capsys.readouterr().err.rstrip("\n").rsplit("\n", 1)[-1]
    assert e.value.code == 2 and last.startswith(
        "error: step 1: no room for the checkpoint"
    )
    if isinstance(failure, OSError):  # one kind of failure is enough to resume from
        return
    # room again: the run continues from it and ends
    monkeypatch.setattr(checkpoint.torch, "save", real_save)
    train.main(run + ["--save-every", "1", "--resume"])
    assert [m["step"] for m in _metrics(out)] == [0, 1]


def test_compile_flag_reaches_the_rollout_config():
    base = ["--problems", "p.jsonl", "--student", "tiny-qwen3"]
    assert rollout.rollout_config(config.get_args(base + ["--compile"])).compile
    assert not rollout.rollout_config(config.get_args(base)).compile


def test_save_refuses_non_finite_weights(tmp_path):
    model = tiny_model("qwen3", layers=1, hidden=32)
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("inf")
    opt = torch.optim.AdamW(model.parameters())
    args = config.get_args(
        ["--problems", "p.jsonl", "--student", "tiny-qwen3", "--teacher", "tiny-qwen3"]
    )
    with pytest.raises(RuntimeError, match="non-finite"):
        checkpoint.save_checkpoint(
            str(tmp_path),
            0,
            {"coder": model},
            ([None], [opt.state_dict()]),
            make_tokenizer(),
            [torch.Generator().get_state()],
            0,
            args,
        )
    assert not os.path.exists(tmp_path / "checkpoint")


def test_bad_input_exits_2(tmp_path, capsys, problems):
    with pytest.raises(SystemExit) as e:
        train.main(
            FAST
            + [
                "--problems",
                str(tmp_path / "missing.jsonl"),
                "--out",
                str(tmp_path / "x"),
            ]
        )
    assert e.value.code == 2 and "missing.jsonl" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x")
    with pytest.raises(SystemExit) as e:
        train.main(
            FAST
            + [
                "--problems",
                problems,
                "--eval-problems",
                str(tmp_path / "gone.jsonl"),
                "--out",
                str(tmp_path / "z"),
            ]
        )
    assert (
        e.value.code == 2
        and "gone.jsonl" in capsys.readouterr().err
        and not os.path.exists(tmp_path / "z")
    )
    with pytest.raises(SystemExit) as e:
        train.main(
            FAST + ["--problems", problems, "--out", str(tmp_path / "y"), "--resume"]
        )
    assert e.value.code == 2 and "no checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        config.get_args(FAST + ["--problems", problems, "--steps", "0"])
    # no problems, student or teacher: usage error, nothing runs
    with pytest.raises(SystemExit) as e:
        config.get_args([])
    assert e.value.code == 2
    i = FAST.index("--teacher")
    no_teacher = FAST[:i] + FAST[i + 2 :]
    # no --teacher and no teacher object: one line, nothing written
    with pytest.raises(SystemExit) as e:
        train.main(no_teacher + ["--problems", problems, "--out", str(tmp_path / "w")])
    assert e.value.code == 2 and "--teacher is required" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "w")


def test_unusable_out_fails_before_any_model_loads(
    tmp_path, error_line, problems, monkeypatch
):
    monkeypatch.setattr(
        launch,
        "load_model",
        lambda *a, **k: pytest.fail("a model loaded before --out was checked"),
    )
    taken = tmp_path / "file"
    taken.write_text("")
    # an existing file; a directory that would have to be made inside one
    for out in (taken, taken / "run"):
        with pytest.raises(SystemExit) as e:
            train.main(FAST + ["--problems", problems, "--out", str(out)])
        assert e.value.code == 2
        error_line(f"--out {out}: ")
    # an unwritable directory (root may write anywhere)
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(SystemExit) as e:
        train.main(FAST + ["--problems", problems, "--out", str(tmp_path / "new")])
    assert e.value.code == 2
    error_line(f"--out {tmp_path / 'new'}: ")
    assert os.listdir(tmp_path) == ["file"]


def test_damaged_checkpoint_on_resume_is_one_line(
    tmp_path, error_line, problems, monkeypatch, truncated_model
):
    ckpt = tmp_path / "checkpoint"
    state = ckpt / "state.pt"
    truncated_model(ckpt / "shared")
    torch.save(
        {
            "step": 0,
            "optims": [torch.zeros(1000)],
            "skipped": 0,
            "rng": dict.fromkeys(("torch", "python", "sampler")),
        },
        state,
    )
    resume = FAST + ["--problems", problems, "--out", str(tmp_path), "--resume"]
    with pytest.raises(SystemExit) as e:
        train.main(resume)
    assert e.value.code == 2
    error_line(f"model '{ckpt / 'shared'}': cannot load")
    os.truncate(state, os.path.getsize(state) // 2)
    monkeypatch.setattr(
        launch,
        "load_policies",
        lambda *a, **k: pytest.fail("a model loaded before state.pt"),
    )
    with pytest.raises(SystemExit) as e:
        train.main(resume)
    assert e.value.code == 2
    error_line(f"{state}: cannot load checkpoint (")
    torch.save({"step": 0}, state)  # loads, but is not what save_checkpoint writes
    with pytest.raises(SystemExit) as e:
        train.main(resume)
    assert e.value.code == 2
    error_line(
        f"{state}: not a checkpoint of train.py (missing ['optims', 'rng', 'skipped'])"
    )


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--lr", "inf"),
        ("--lr", "nan"),
        ("--lr", "0"),
        ("--lr", "-0.5"),
        ("--temperature", "nan"),
        ("--temperature", "-1"),
        ("--top-p", "0"),
        ("--top-p", "1.5"),
        ("--top-p", "nan"),
        ("--top-k", "-1"),
        ("--lam", "nan"),
        ("--lam", "-0.1"),
        ("--weight-decay", "-0.5"),
        ("--weight-decay", "inf"),
        ("--grad-clip", "0"),
        ("--grad-clip", "nan"),
        ("--max-new-tokens", "0"),
        ("--max-prompt-tokens", "-1"),
        ("--teacher-max-prompt-tokens", "0"),
        ("--teacher-batch-tokens", "0"),
        ("--max-turns", "0"),
        ("--steps", "0"),
        ("--batch", "0"),
        ("--mini-batch", "-1"),
        ("--micro-batch", "0"),
        ("--save-every", "0"),
        ("--workers", "0"),
        ("--rollout-chunk", "-1"),
        ("--seed", str(2**64)),
        ("--seed", "1e3"),
        ("--eval-seeds", str(2**64)),
        ("--device", "nonsense"),
        ("--device", "cuda:99"),
    ],
)
def test_bad_numbers_are_refused_at_parse_time(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        config.get_args(
            ["--problems", "p.jsonl", "--student", "tiny-qwen3", flag, value]
        )
    assert e.value.code == 2 and f"error: argument {flag}: " in capsys.readouterr().err


def test_bf16_autocast_and_gradient_checkpointing_path_runs(tmp_path, problems):
    out = str(tmp_path / "bf16")
    train.main(
        [
            "--problems",
            problems,
            "--out",
            out,
            "--steps",
            "1",
            "--precision",
            "bf16",
            "--grad-checkpointing",
        ]
        + FAST
    )
    m = _metrics(out)[0]
    assert m["updates"] == 2 and m["skipped"] == 0
    coder = AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "checkpoint", "coder")
    )
    # master weights stay fp32 (lr 1e-6 steps would vanish in bf16)
    assert coder.dtype == torch.float32
    # sampled by bf16 copies, re-scored under autocast over the fp32 masters: close, not equal
    assert 0 < m["logprob_gap_mean"] <= m["logprob_gap"] < 0.5


def test_bf16_rollout_copies_follow_the_fp32_masters():
    policies = {"coder": tiny_model("qwen3", layers=2, hidden=64, seed=0)}
    policies["tester"] = policies["coder"]  # a shared policy: one copy
    fp32 = config.get_args(["--problems", "p.jsonl", "--student", "tiny-qwen3"])
    assert launch.rollout_copies(policies, fp32) is policies
    copies = launch.rollout_copies(
        policies,
        config.get_args(
            ["--problems", "p.jsonl", "--student", "tiny-qwen3", "--precision", "bf16"]
        ),
    )
    assert (
        copies["coder"] is copies["tester"] is not policies["coder"]
        and copies["coder"].dtype == torch.bfloat16
    )
    storage = [c.data_ptr() for c in copies["coder"].parameters()]
    with torch.no_grad():
        for p in policies["coder"].parameters():
            p.add_(0.25)  # an update
    launch.refresh(copies, policies)
    for c, p in zip(copies["coder"].parameters(), policies["coder"].parameters()):
        assert torch.equal(c, p.detach().to(torch.bfloat16))
    # in place: a recording stays valid
    assert [c.data_ptr() for c in copies["coder"].parameters()] == storage


def test_every_bf16_model_made_here_keeps_rope_in_fp32_as_transformers_loads_it(
    tmp_path, problems
):
    """A bf16 load, the bf16 rollout copies (also after refresh) and the bf16 teacher score the same log-probs at
    positions 3000-4096 as transformers' own bf16 load of the same checkpoint: Qwen3's head dim and RoPE theta, with
    attention peaked enough that a turned position shows (rounded inv_freq moves log-probs by up to ~1 here)."""
    model = tiny_model(
        "qwen3",
        hidden=256,
        heads=2,
        kv_heads=1,
        layers=1,
        rope_theta=1e6,
        max_position_embeddings=8192,
    )
    with torch.no_grad():
        for w in (
            model.model.layers[0].self_attn.q_proj.weight,
            model.model.layers[0].self_attn.k_proj.weight,
        ):
            w.mul_(8)
        model.model.embed_tokens.weight.mul_(30)
    spec = str(tmp_path / "base")
    model.save_pretrained(spec)
    make_tokenizer().save_pretrained(spec)
    theirs = AutoModelForCausalLM.from_pretrained(spec, dtype=torch.bfloat16).eval()
    seq = torch.randint(
        0, 256, (4096,), generator=torch.Generator().manual_seed(1)
    ).tolist()
    score = lambda m: sequence_logprobs(m, [seq[:3000]], [seq[3000:]])[0]
    with torch.no_grad():
        reference = score(theirs)
        args = config.get_args(
            [
                "--problems",
                problems,
                "--student",
                spec,
                "--teacher",
                spec,
                "--precision",
                "bf16",
                "--batch",
                "2",
                "--max-new-tokens",
                "8",
                "--max-prompt-tokens",
                "512",
            ]
        )
        built = launch.build(args)
        policies, teacher = built.policies, built.teacher
        copies = launch.rollout_copies(policies, args)
        made = {
            "load_model": models.load_model(spec, dtype=torch.bfloat16)[0],
            "teacher": teacher,
            "rollout copy": copies["coder"],
        }
        launch.refresh(copies, policies)
        made["refreshed rollout copy"] = copies["tester"]
        for name, m in made.items():
            assert {n: b.dtype for n, b in m.named_buffers()} == {
                n: b.dtype for n, b in theirs.named_buffers()
            }, name
            assert next(m.parameters()).dtype == torch.bfloat16, name
            assert torch.equal(score(m), reference), name
        # the sampler's own log-probs (Eq. 8) too: its RoPE tables come from the model's rotary module
        prompt = [seq[:3000]]
        ours = generate(copies["coder"], prompt, 4, temperature=0)
        assert ours == generate(theirs, prompt, 4, temperature=0)


def test_teacher_offload_and_rollout_rounds(tmp_path, problems):
    out = str(tmp_path / "offload")
    train.main(
        FAST
        + [
            "--problems",
            problems,
            "--out",
            out,
            "--steps",
            "1",
            "--teacher-offload",
            "--rollout-chunk",
            "1",
        ]
    )
    assert _metrics(out)[0]["updates"] == 2


def test_bf16_evaluation_runs_on_the_rollout_copies_of_the_final_masters(
    tmp_path, problems, monkeypatch
):
    """Under --precision bf16 the held-out evaluation decodes as Phase 1 does, on the bf16 copies, and the one after
    training on copies refreshed from the masters that the checkpoint saves (not the ones before the last update)."""
    seen = []
    monkeypatch.setattr(
        evaluation,
        "evaluate",
        lambda problems, policies, *a, **k: (
            seen.append([p.detach().clone() for p in policies["coder"].parameters()])
            or {}
        ),
    )
    out = str(tmp_path / "run")
    train.main(
        FAST
        + [
            "--problems",
            problems,
            "--out",
            out,
            "--steps",
            "1",
            "--precision",
            "bf16",
            "--eval-problems",
            problems,
        ]
    )
    before, after = seen
    assert all(p.dtype == torch.bfloat16 for p in before + after)
    masters = AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "checkpoint", "coder")
    ).parameters()
    assert all(torch.equal(a, m.to(torch.bfloat16)) for a, m in zip(after, masters))
    # the update moved the copies
    assert any(not torch.equal(a, b) for a, b in zip(after, before))


@pytest.mark.parametrize("command", ["train", "eval"])
def test_without_a_jail_the_programs_are_refused_unless_given_up_by_name(
    command, tmp_path, problems, error_line, monkeypatch, capsys
):
    """Where the sandbox has no jail a student's program could read the golden tests: train.py and eval.py refuse in
    one line before anything loads, unless --unisolated-programs (the toy preset's choice) gives that up."""
    # the uid or process level
    monkeypatch.setattr(jail, "_setup", lambda: ("/usr/bin/python3", None))
    monkeypatch.setattr(
        launch, "load_model", lambda *a, **k: (_ for _ in ()).throw(Loaded())
    )
    monkeypatch.setattr(
        evaluation, "load_model", lambda *a, **k: (_ for _ in ()).throw(Loaded())
    )
    main, flags = (
        (train.main, FAST + ["--out", str(tmp_path / "run")])
        if command == "train"
        else (evaluation.main, ["--student", "tiny-qwen3"])
    )
    with pytest.raises(SystemExit) as e:
        main(flags + ["--problems", problems])
    assert e.value.code == 2 and not os.path.exists(tmp_path / "run")
    error_line(
        "the sandbox has no jail here (no bubblewrap, and not root with util-linux's unshare)"
    )
    for given_up in (["--unisolated-programs"], ["--preset", "toy"]):
        # past the check: on to loading the models, having said what is given up
        with pytest.raises(Loaded):
            main(flags + ["--problems", problems] + given_up)
        assert (
            "sandbox: NO jail here, and the students' programs run all the same"
            in capsys.readouterr().out
        )
