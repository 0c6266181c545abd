"""Nothing a user made is lost: one run per run directory at a time, a new run never writes over a run directory, a
resume continues the same run or refuses, the evaluation before training survives interruptions, eval.py's outputs
are kept, and a run told to stop (SIGINT, SIGTERM) ends in one line that says how to continue it."""

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

import config
import eval as ev
import train
from baselines.grpo import grpo_args
from infra import checkpoint, launch, report, runs
from tests.test_train import FAST

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _files(out):
    """Every file under a run directory with its bytes: what a refused command must leave as it was."""
    return {
        os.path.join(d, n): open(os.path.join(d, n), "rb").read()
        for d, _, names in os.walk(out)
        for n in names
    }


def _no_model(monkeypatch):
    monkeypatch.setattr(
        launch,
        "load_model",
        lambda *a, **k: pytest.fail("a model loaded before the refusal"),
    )
    monkeypatch.setattr(
        launch,
        "load_policies",
        lambda *a, **k: pytest.fail("a model loaded before the refusal"),
    )


def test_a_second_run_into_the_same_out_is_refused_and_overwrite_names_the_loss(
    tmp_path, problems, error_line, monkeypatch, capsys
):
    out = str(tmp_path / "run")
    run = FAST + ["--problems", problems, "--out", out]
    train.main(run + ["--steps", "2", "--save-episodes"])
    kept, _ = _files(out), capsys.readouterr()
    with monkeypatch.context() as m:
        _no_model(m)
        with pytest.raises(SystemExit) as e:
            train.main(run + ["--steps", "1"])
    assert e.value.code == 2
    error_line(
        f"--out {out} holds a train.py run (its checkpoint holds 2 of 2 steps, 2 step(s) in metrics.jsonl): "
        f"continue it with --resume, or give another --out (--overwrite discards it)"
    )
    assert _files(out) == kept
    train.main(run + ["--steps", "1", "--overwrite"])
    assert (
        f"--overwrite: the run that was in {out} is discarded (its checkpoint holds 2"
        in capsys.readouterr().out
    )
    assert [
        json.loads(x)["step"] for x in open(os.path.join(out, "metrics.jsonl"))
    ] == [0]
    assert (
        json.load(open(os.path.join(out, "checkpoint", checkpoint.SETTINGS)))["step"]
        == 0
    )
    # the old run's, discarded with it
    assert not os.path.exists(os.path.join(out, "episodes.jsonl"))
    assert [
        c["from_step"] for c in json.load(open(os.path.join(out, runs.RUN)))["commands"]
    ] == [0]


# A process that holds OUT as a run does (infra/rundir.py), says so, and waits.
HOLDER = """
import sys, time
from infra.rundir import hold_run_dir
hold_run_dir(sys.argv[1], "--out", "python train.py --out " + sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


@contextlib.contextmanager
def _held_by_another_process(out):
    """OUT held by a child process, as a run in progress holds it; the child is killed (SIGKILL) on leaving."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, out], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "held\n"
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_one_run_per_directory_a_second_is_refused_naming_the_running_one(
    tmp_path, problems, error_line, monkeypatch
):
    out = str(tmp_path / "run")
    os.makedirs(out)
    run = FAST + ["--problems", problems, "--out", out, "--steps", "1"]
    with _held_by_another_process(out) as pid, monkeypatch.context() as m:
        _no_model(m)
        # a new run, a resume, an overwrite: each refused before any model loads, naming the process
        for extra in ([], ["--resume"], ["--overwrite"]):
            with pytest.raises(SystemExit) as e:
                train.main(run + extra)
            assert e.value.code == 2
            error_line(
                f"--out {out} is in use by a running process (process {pid}, since "
            )
        # two runs that both found no OUT: the second to make it is refused there, before it writes
        args = config.get_args(run)
        with pytest.raises(SystemExit) as e:
            runs.begin_run(args, 0)
        assert e.value.code == 2 and os.listdir(out) == ["run.lock"]
        error_line(f"--out {out} is in use by a running process (process {pid}, ")
    # the kernel drops a killed process's lock: its run can be resumed, or a new one started
    runs.check_run(config.get_args(run))
    assert (
        open(os.path.join(out, "run.lock"))
        .read()
        .startswith(f"process {os.getpid()}, since ")
    )


def test_a_resume_with_another_setting_is_refused_naming_each_and_memory_settings_may_differ(
    tmp_path, problems, error_line, monkeypatch, capsys
):
    out = str(tmp_path / "run")
    run = FAST + ["--problems", problems, "--out", out]
    train.main(run + ["--steps", "1"])
    kept, _ = _files(out), capsys.readouterr()
    with monkeypatch.context() as m:
        _no_model(m)
        for extra, line in (
            (["--lr", "2e-3"], "--lr 0.001 (this command: 0.002)"),
            (
                ["--lr", "2e-3", "--lam", "0.5", "--mini-batch", "2"],
                "--lam 0.1 (this command: 0.5), --lr 0.001 (this command: 0.002), --mini-batch 1 (this command: 2)",
            ),
            (["--seed", "3"], "--seed 0 (this command: 3)"),
            (["--problems", str(tmp_path / "other.jsonl")], "--problems sha256:"),
        ):
            if "--problems" in extra:
                (tmp_path / "other.jsonl").write_text(
                    open(problems).read().split("\n")[0] + "\n"
                )
            with pytest.raises(SystemExit) as e:
                train.main(run + ["--steps", "2", "--resume"] + extra)
            assert e.value.code == 2
            error_line(f"--resume: {out} was run with other settings: {line}")
    assert _files(out) == kept
    capsys.readouterr()
    # what changes memory, speed or the order of float sums only may differ, and --steps may grow
    train.main(
        run
        + [
            "--steps",
            "2",
            "--resume",
            "--threads",
            "1",
            "--workers",
            "1",
            "--micro-batch",
            "1",
        ]
    )
    printed = capsys.readouterr().out
    assert (
        f"resuming from step 1: 1 of 2 steps done, in {os.path.join(out, 'checkpoint')}"
        in printed
    )
    assert (
        "done: 2 steps (1 in this session, resumed from step 1), 0 skipped; metrics in"
        in printed
    )


def _recorded_run(out, args, step, steps):
    """A run directory as save_checkpoint leaves it, without weights: what check_run and study_run read."""
    os.makedirs(os.path.join(out, "checkpoint"))
    open(os.path.join(out, "checkpoint", "state.pt"), "w").close()
    with open(os.path.join(out, "checkpoint", checkpoint.SETTINGS), "w") as f:
        json.dump(
            {"step": step, "steps": steps, "settings": checkpoint.settings(args)}, f
        )


def test_what_a_resume_and_a_study_do_with_a_run_directory(tmp_path, problems):
    args = config.get_args(
        FAST + ["--problems", problems, "--out", str(tmp_path / "run"), "--steps", "6"]
    )
    _recorded_run(args.out, args, step=4, steps=6)
    args.resume = True
    runs.check_run(args)  # the same settings: it continues
    args.steps = 3
    with pytest.raises(
        ValueError,
        match=r"^--steps 3: .*checkpoint holds 5 steps already; give --steps 5 or more$",
    ):
        runs.check_run(args)
    args.resume, plan = False, runs.study_run
    assert [
        plan(args.out, reuse=True, overwrite=False),
        plan(str(tmp_path / "none"), False, False),
        plan(args.out, reuse=False, overwrite=True),
    ] == ["resume", "train", "train"]
    with pytest.raises(ValueError, match="holds a train.py run .*: --reuse keeps it"):
        plan(args.out, reuse=False, overwrite=False)
    _recorded_run(str(tmp_path / "done"), args, step=5, steps=6)
    assert plan(str(tmp_path / "done"), reuse=True, overwrite=False) == "reuse"


def test_impossible_combinations_are_refused_at_start(problems, capsys):
    base = FAST + ["--problems", problems]
    for extra, line, grpo in (
        (
            ["--batch", "2", "--mini-batch", "3"],
            "--mini-batch 3 is more than --batch 2",
            False,
        ),
        (
            ["--resume", "--overwrite"],
            "--resume continues the run in OUT, --overwrite discards it",
            False,
        ),
        (["--group-size", "1"], "--group-size 1: GRPO's group advantage", True),
        (
            ["--attribution-model", "tiny-qwen3"],
            "--attribution-model is read only with",
            False,
        ),
    ):
        with pytest.raises(SystemExit) as e:
            (grpo_args if grpo else config.get_args)(base + extra)
        assert e.value.code == 2 and line in capsys.readouterr().err
    # a preset's mini-batch over a given batch is that batch: one update on all of the step's episodes
    assert (
        config.get_args(
            ["--problems", problems, "--student", "tiny-qwen3", "--batch", "16"]
        ).mini_batch
        == 16
    )


def test_eval_refuses_to_write_over_its_outputs_unless_told(
    tmp_path, problems, error_line, monkeypatch
):
    kept = {
        flag: tmp_path / f"out{flag}" for flag in ("--json", "--episodes", "--heatmap")
    }
    for path in kept.values():
        path.write_text("an earlier evaluation")
    with monkeypatch.context() as m:
        m.setattr(
            ev,
            "load_model",
            lambda *a, **k: pytest.fail(
                "a model loaded before the outputs were checked"
            ),
        )
        for flag, path in kept.items():
            with pytest.raises(SystemExit) as e:
                ev.main(
                    [
                        "--student",
                        "tiny-qwen3",
                        "--problems",
                        problems,
                        "--teacher",
                        "tiny-qwen3",
                        flag,
                        str(path),
                    ]
                )
            assert e.value.code == 2
            error_line(
                f"{flag} {path} exists: give another path, or --overwrite to replace it"
            )
    assert all(p.read_text() == "an earlier evaluation" for p in kept.values())
    ev.main(
        [
            "--student",
            "tiny-qwen3",
            "--problems",
            problems,
            "--seeds",
            "0",
            "--no-exchange",
            "--max-new-tokens",
            "2",
            "--json",
            str(kept["--json"]),
            "--overwrite",
        ]
    )
    assert "untrained tiny-qwen3" in json.loads(kept["--json"].read_text())


def _started(args, out, timeout=300):
    """train.py in a process of its own, once its first checkpoint is written: (process, its stderr's path)."""
    err = open(os.path.join(os.path.dirname(out), "stderr"), "w")
    proc = subprocess.Popen(
        [sys.executable, "train.py"] + args,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    deadline = time.time() + timeout
    while (
        checkpoint.last_checkpoint(out)[0] is None
        and proc.poll() is None
        and time.time() < deadline
    ):
        time.sleep(0.1)
    return proc, err.name


def _last_line(stderr):
    """The last line of a command's stderr as a terminal shows it, after the progress lines' own clearing."""
    return re.sub(r".*(\r|\x1b\[A)", "", stderr.rstrip("\n").rsplit("\n", 1)[-1])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_run_ends_in_one_line_and_its_command_continues_it(
    sig, tmp_path, problems
):
    out = str(tmp_path / "run")
    args = FAST + [
        "--problems",
        problems,
        "--out",
        out,
        "--steps",
        "3",
        "--save-every",
        "1",
    ]
    proc, err = _started(args, out)
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == 128 + sig
    text = open(err).read()
    assert "Traceback" not in text and text.endswith("\n")
    last = _last_line(text)
    done = runs.steps_logged(out)
    held = checkpoint.last_checkpoint(out)[1]["step"] + 1
    assert last.startswith(
        f"stopped by {sig.name} with {done} of 3 steps done, {held} of them in the last "
        f"checkpoint ({os.path.join(out, 'checkpoint')}); continue with: "
    )
    command = shlex.split(last.split("continue with: ", 1)[1])
    assert command[-1] == "--resume" and command[1:-1] == ["train.py"] + args
    if sig == signal.SIGTERM:  # the same command after either signal: run once
        return
    r = subprocess.run(
        [sys.executable] + command[1:],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"resuming from step {held}: {held} of 3 steps done" in r.stdout
    assert (
        f"done: 3 steps ({3 - held} in this session, resumed from step {held}), 0 skipped"
        in r.stdout
    )
    assert [
        json.loads(x)["step"] for x in open(os.path.join(out, "metrics.jsonl"))
    ] == [0, 1, 2]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_evaluation_ends_in_one_line_and_its_command_runs_it_again(
    sig, tmp_path, problems
):
    json_out, episodes = (
        str(tmp_path / "figures.json"),
        str(tmp_path / "episodes.jsonl"),
    )
    args = (
        [
            "eval.py",
            "--student",
            "tiny-qwen3",
            "--problems",
            problems,
            "--max-new-tokens",
            "2",
            "--no-exchange",
            "--seeds",
        ]
        + [str(s) for s in range(12)]
        + ["--json", json_out, "--episodes", episodes]
    )
    err = open(tmp_path / "stderr", "w")
    proc = subprocess.Popen(
        [sys.executable] + args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err
    )
    deadline = time.time() + 300
    # a run has finished
    while not os.path.getsize(episodes) if os.path.exists(episodes) else True:
        assert proc.poll() is None and time.time() < deadline, open(err.name).read()[
            -2000:
        ]
        time.sleep(0.05)
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == 128 + sig
    text = open(err.name).read()
    assert "Traceback" not in text and text.endswith("\n")
    last = _last_line(text)
    assert last.startswith(
        f"stopped by {sig.name} before the figures were written; the episodes of the runs that "
        f"finished are in {episodes}; run it again with: "
    )
    assert not os.path.exists(json_out) and os.path.getsize(episodes)
    command = shlex.split(last.split("run it again with: ", 1)[1])
    assert command[1:] == args + ["--overwrite"]
    if sig == signal.SIGTERM:  # the same command after either signal: run once
        return
    r = subprocess.run(
        [sys.executable] + command[1:],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "untrained tiny-qwen3" in json.load(open(json_out))


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_step_0(
    tmp_path, problems, monkeypatch, capsys, sandbox_continues
):
    out = str(tmp_path / "run")
    run = FAST + [
        "--problems",
        problems,
        "--out",
        out,
        "--steps",
        "2",
        "--eval-problems",
        problems,
        "--eval-seeds",
        "3",
    ]
    before, stop = [], train.train_step

    def interrupted(
        step, *a, **k
    ):  # Ctrl-C while step 0 runs, the evaluation before training done
        before.append(json.load(open(os.path.join(out, "results.json")))["before"])
        os.kill(os.getpid(), signal.SIGINT)
        return stop(step, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(train, "train_step", interrupted)
        # a KeyboardInterrupt would end the whole session
        with pytest.raises(BaseException) as e:
            train.main(run)
    assert isinstance(e.value, SystemExit) and e.value.code == 130
    line = _last_line(capsys.readouterr().err)
    assert line.startswith(
        "stopped by SIGINT with 0 of 2 steps done, no checkpoint yet (one every 10 steps)"
    )
    # the resume below runs in this process, as a new one would run it
    sandbox_continues()
    train.main(run + ["--resume"])
    printed = capsys.readouterr().out
    assert (
        "resuming from step 0: no checkpoint was written before it stopped" in printed
    )
    assert (
        f"evaluation before training: read from {os.path.join(out, 'results.json')}"
        in printed
    )
    results = json.load(open(os.path.join(out, "results.json")))
    assert set(results) == {"before", "after"} and results["before"] == before[0]


# ------------------------------------------------------------------ a run directory from elsewhere is data

# what a planted link points at: the user's shell start-up file, which a resume must never write
STARTUP = "# the user's shell start-up file\n"


@pytest.fixture(scope="module")
def one_step(tmp_path_factory, problems):
    """A run of one step as train.py leaves it (a checkpoint per seat): what --resume --steps 2 continues."""
    out = str(tmp_path_factory.mktemp("one_step") / "run")
    train.main(FAST + ["--problems", problems, "--out", out, "--steps", "1"])
    return out


def _tree(top):
    """Every entry under `top` (itself included) as lstat sees it, a file with its bytes, a link with its target:
    what a refused command must leave as it was (a FIFO is never opened)."""
    out = {}
    for d, dirs, names in os.walk(top):
        for p in [d] + [os.path.join(d, n) for n in dirs + names]:
            st = os.lstat(p)
            out[p] = (
                os.readlink(p)
                if stat.S_ISLNK(st.st_mode)
                else open(p, "rb").read()
                if stat.S_ISREG(st.st_mode)
                else stat.S_IFMT(st.st_mode)
            )
    return out


@contextlib.contextmanager
def _within(seconds):
    """Fail the test, rather than hang it, where the code under test blocks (opening a FIFO, a template that
    loops): SIGALRM interrupts the blocked call."""

    def late(*_):
        raise AssertionError(f"still running after {seconds} s")

    signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)


def _plant(out, name, elsewhere):
    """Put a hostile entry at OUT/name (OUT itself for ""), aimed at the folder `elsewhere` or its file startup:
    -> the path the refusal names."""
    startup = str(elsewhere / "startup")
    path = os.path.join(out, name.split(" (")[0]) if name else out
    if os.path.lexists(path) and name:
        os.remove(path)
    if (
        name == "checkpoint.tmp"
    ):  # a checkpoint would be saved into the folder elsewhere
        os.symlink(str(elsewhere), path)
    elif name == "samples.jsonl":  # dangling: the run would create the file it names
        os.symlink(str(elsewhere / "new"), path)
    elif name.endswith("(hard link)"):
        os.link(startup, path)
    elif name.endswith("(FIFO)"):
        os.mkfifo(path)
    elif not name:  # --out itself a link to the run
        os.rename(out, out + ".real")
        os.symlink(out + ".real", out)
    else:
        os.symlink(startup, path)
    return path


@pytest.mark.parametrize(
    "name, why",
    [
        ("run.json.tmp", "is a symbolic link"),
        ("metrics.jsonl", "is a symbolic link"),
        ("checkpoint.tmp", "is a symbolic link"),
        ("checkpoint/coder/tokenizer_config.json", "is a symbolic link"),
        ("samples.jsonl", "is a symbolic link"),
        ("", "is a symbolic link"),
        ("metrics.jsonl (hard link)", "has 2 names (hard links)"),
        ("results.json (FIFO)", "is neither a file nor a folder"),
    ],
)
def test_a_resume_refuses_a_run_directory_holding_a_link_and_writes_nothing_anywhere(
    one_step, name, why, tmp_path, problems, error_line, monkeypatch
):
    out, elsewhere = str(tmp_path / "run"), tmp_path / "elsewhere"
    shutil.copytree(one_step, out)
    elsewhere.mkdir()
    (elsewhere / "startup").write_text(STARTUP)
    planted = _plant(out, name, elsewhere)
    kept, there = _tree(out), _tree(str(elsewhere))
    with monkeypatch.context() as m, _within(60):
        _no_model(m)
        with pytest.raises(SystemExit) as e:
            train.main(
                FAST
                + ["--problems", problems, "--out", out, "--steps", "2", "--resume"]
            )
    assert e.value.code == 2
    error_line(f"--out {out}: {planted} {why}")
    assert _tree(out) == kept and _tree(str(elsewhere)) == there


def test_a_new_run_refuses_an_out_holding_a_dangling_link_or_being_one(
    tmp_path, problems, error_line, monkeypatch
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    holding, being = str(tmp_path / "holding"), str(tmp_path / "being")
    os.mkdir(holding)
    os.symlink(str(elsewhere / "new"), os.path.join(holding, "metrics.jsonl"))
    os.symlink(str(elsewhere), being)  # a folder there: --out's probe wrote into it
    probed = []
    for out, planted in (
        (holding, os.path.join(holding, "metrics.jsonl")),
        (being, being),
    ):
        with monkeypatch.context() as m:
            _no_model(m)
            m.setattr(train, "check_writable", lambda *a, **k: probed.append(a))
            with pytest.raises(SystemExit) as e:
                train.main(
                    FAST + ["--problems", problems, "--out", out, "--steps", "1"]
                )
        assert e.value.code == 2
        error_line(f"--out {out}: {planted} is a symbolic link")
    assert os.listdir(elsewhere) == [] and os.listdir(holding) == ["metrics.jsonl"]
    assert probed == []


def test_every_reader_of_a_run_directory_refuses_one_holding_a_link(
    one_step, tmp_path, problems, error_line
):
    run, elsewhere = str(tmp_path / "run"), tmp_path / "elsewhere"
    shutil.copytree(one_step, run)
    elsewhere.mkdir()
    (elsewhere / "startup").write_text(STARTUP)
    planted = _plant(run, "checkpoint/coder/tokenizer_config.json", elsewhere)
    kept = _tree(run)
    with pytest.raises(SystemExit) as e:
        report.main([run])
    assert e.value.code == 2
    error_line(f"{run}: {planted} is a symbolic link")
    with pytest.raises(SystemExit) as e:
        ev.main(["--run", run, "--problems", problems, "--seeds", "0"])
    assert e.value.code == 2
    checkpoint_dir = os.path.join(run, "checkpoint")
    error_line(f"{checkpoint_dir}: {planted} is a symbolic link")
    with pytest.raises(ValueError, match=f"^{re.escape(run)}: {re.escape(planted)} is"):
        runs.study_run(run, reuse=True, overwrite=False)
    assert _tree(run) == kept and (elsewhere / "startup").read_text() == STARTUP


@pytest.mark.parametrize(
    "template, why",
    [
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "did not render one user message within 3 s; refusing it",
        ),
        # C-level work, which no signal in the process that renders it interrupts (about 13 s here)
        (
            "{{ 10 ** 10000000 }}",
            "did not render one user message within 3 s; refusing it",
        ),
        (
            "{% for i in range(10**9) %}{% endfor %}",
            "fails on one user message (Range too big.",
        ),
    ],
    ids=["nested loops", "a huge power", "a range over jinja's limit"],
)
def test_a_checkpoints_chat_template_that_loops_is_refused_in_one_line_within_seconds(
    one_step, template, why, tmp_path, problems, capsys
):
    run = str(tmp_path / "run")
    shutil.copytree(one_step, run)
    ckpt = os.path.join(run, "checkpoint")
    for seat in os.listdir(ckpt):
        if os.path.isdir(os.path.join(ckpt, seat)):
            with open(os.path.join(ckpt, seat, "chat_template.jinja"), "w") as f:
                f.write(template)
    started = time.monotonic()
    with _within(60), pytest.raises(SystemExit) as e:
        ev.main(["--run", run, "--problems", problems, "--seeds", "0"])
    assert e.value.code == 2 and time.monotonic() - started < 20
    err = capsys.readouterr().err.rsplit("\r", 1)[-1]
    assert re.fullmatch(
        rf"error: model '({re.escape(ckpt)}/\w+)': the chat template in \1/chat_template.jinja "
        rf"{re.escape(why)}.*\n",
        err,
    ), err
