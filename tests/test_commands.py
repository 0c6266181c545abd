"""Every command reads its flags before its heavy imports: --help answers without loading torch or transformers
(seconds), a refused flag is one line that says where the flags are described, and Ctrl-C while torch loads ends
in one line and exit 130, with nothing written. Each command runs as a user runs it, in a process of its own; the
processes run side by side."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# how each command is run, and a flag value it refuses (its own flag's, or one it passes on to train.py)
COMMANDS = {
    "train.py": ["--steps", "zero"],
    "eval.py": ["--max-new-tokens", "zero"],
    "-m baselines.grpo": ["--steps", "zero"],
    "-m baselines.single": ["--max-new-tokens", "zero"],
    "-m toy": ["--steps", "zero"],
    "-m toy.ablation": ["--train-seeds", "zero"],
    "-m toy.learned_study": ["--steps", "zero"],
    "-m toy.learned": ["--episodes", "zero"],
    "-m toy.scaling": ["--agents", "zero"],
    "-m toy.build": ["toy/student", "--nope"],
    "-m toy.baselines": ["--steps", "zero"],
    "-m tools.transcripts": ["--max-turns", "zero"],
    "-m tools.loaders": ["--limit", "zero"],
    "-m tools.bench_sampler": ["--batch", "zero"],
    "-m tools.walk": ["--nope"],
    "-m tools.memory": ["--steps", "zero"],
    "-m tools.sweep": ["--lam", "zero"],
    "-m tools.contexts": ["--turn", "zero"],
    "-m tools.device_check": ["--budget-s", "zero"],
    "-m infra.report": ["--nope"],
}
HEAVY = ("torch", "transformers")
MAIN = r'^if __name__ == "__main__":'


def start(command, flags, *python):
    return subprocess.Popen(
        [sys.executable, *python, *command.split(), *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(procs):
    """{command: (exit status, stdout, stderr)} of processes started side by side."""
    done = {c: p.communicate(timeout=120) for c, p in procs.items()}
    return {c: (procs[c].returncode, *done[c]) for c in procs}


def imported(importtime):
    """The modules that -X importtime's lines (on stderr) say were imported."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime.splitlines()
        if line.startswith("import time:")
    }


@pytest.fixture(scope="module")
def helps():
    return finish({c: start(c, ["--help"], "-X", "importtime") for c in COMMANDS})


@pytest.fixture(scope="module")
def refusals():
    return finish({c: start(c, flags) for c, flags in COMMANDS.items()})


def path_of(command):
    """The file a command runs: "-m toy.build" -> toy/build.py, "-m toy" -> toy/__main__.py."""
    if not command.startswith("-m "):
        return command
    path = command[3:].replace(".", "/")
    return path + ("/__main__.py" if os.path.isdir(os.path.join(ROOT, path)) else ".py")


def test_every_command_of_the_project_is_here():
    """Every file that runs as a command (the sandbox's runner aside, which only the sandbox starts)."""
    mains = {
        os.path.join(folder, name)
        for folder in ["", "baselines", "infra", "scaling", "teams", "tools", "toy"]
        for name in os.listdir(os.path.join(ROOT, folder))
        if name.endswith(".py")
        and re.search(MAIN, open(os.path.join(ROOT, folder, name)).read(), re.M)
    }
    assert mains == {path_of(c) for c in COMMANDS}


@pytest.mark.parametrize("command", COMMANDS)
def test_help_answers_before_torch_loads(command, helps):
    code, out, err = helps[command]
    assert code == 0 and out.startswith("usage: "), (code, out[:200], err[-2000:])
    heavy = sorted(m for m in imported(err) if m.split(".")[0] in HEAVY)
    assert not heavy, f"{command} --help imported {heavy[:5]}"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_refused_flag_is_one_line_that_points_to_help(command, refusals):
    code, out, err = refusals[command]
    assert code == 2 and len(err.splitlines()) == 1, (code, err)
    assert "error: " in err and "(see python " in err and " --help)" in err, err
    assert "usage:" not in out + err


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc here")
def test_ctrl_c_while_torch_loads_is_one_line_exit_130_and_nothing_written(
    tmp_path,
):
    out = tmp_path / "run"
    flags = "--problems examples/problems.jsonl --student tiny-qwen3 --teacher tiny-qwen3 --steps 1"
    p = start("train.py", [*flags.split(), "--unisolated-programs", "--out", str(out)])
    # the flags were read and torch's libraries are being mapped: Ctrl-C in the middle of its import
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        with open(f"/proc/{p.pid}/maps") as f:
            if "torch" in f.read():
                break
        time.sleep(0.005)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    code = p.returncode
    assert (
        code == 130 and err == "stopped by SIGINT before python train.py finished\n"
    ), (
        code,
        err,
    )
    assert not out.exists()
