"""Shared fixtures: the in-code tokenizer, tiny random models, scripted agents, a code + math problem file."""

import json
import multiprocessing
import os
import shutil
import signal

import pytest

from infra import data
from infra.models import make_tokenizer, tiny_model
from sampler import Generation
from sandbox import jail
from tests.test_workflows import APPLES, SUM


@pytest.fixture(autouse=True)
def judged_here(tmp_path_factory, monkeypatch):
    """Problem files judged in this session are remembered in a folder of the session's, not the user's cache."""
    monkeypatch.setattr(data, "JUDGED", str(tmp_path_factory.getbasetemp() / "judged"))


@pytest.fixture(autouse=True)
def signal_handlers():
    """train.main and eval.main take SIGINT and SIGTERM for the whole process (infra/stopping.py): give pytest its
    own handlers back after each test, so that Ctrl-C still stops the session; and a test that stopped a run in
    this process (which a real stop ends) leaves the sandbox able to run programs for the next one."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)
    jail._terminating.clear()


@pytest.fixture
def sandbox_continues():
    """-> continues(): after a run stopped in this process, the sandbox runs programs again, as in the new process
    that would resume it."""
    return jail._terminating.clear


@pytest.fixture(scope="session")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="session")
def qwen3():
    return tiny_model("qwen3", layers=2, hidden=64, heads=4, kv_heads=2, seed=0)


@pytest.fixture(scope="session")
def llama():
    return tiny_model("llama", layers=2, hidden=64, heads=4, kv_heads=2, seed=1)


class Scripted:
    """A scripted agent: call k (one per turn when it sits in one seat) answers script[k] to every prompt.

    Records the decoded prompts it was given so tests can check what the agent saw."""

    def __init__(self, tok, script):
        self.tok, self.script, self.seen = tok, list(script), []

    def __call__(self, prompts):
        k = min(len(self.seen), len(self.script) - 1)
        self.seen.append([self.tok.decode(p) for p in prompts])
        ids = self.tok(self.script[k], add_special_tokens=False)["input_ids"] + [
            self.tok.convert_tokens_to_ids("<|im_end|>")
        ]
        return Generation(
            [list(ids) for _ in prompts], [[-1.0] * len(ids) for _ in prompts]
        )


@pytest.fixture
def scripted(tok):
    return lambda script: Scripted(tok, script)


@pytest.fixture
def finishes():
    """-> run(fn, *args): fn(*args) in a forked child, its result, or "still running" once 5 s have passed (the
    child is then killed). A guard against hangs on hostile input, not a timing: the calls it guards take
    milliseconds."""

    def run(fn, *args):
        ctx = multiprocessing.get_context("fork")
        receive, send = ctx.Pipe(duplex=False)
        # not daemonic: fn may fork children itself
        child = ctx.Process(target=lambda: send.send(fn(*args)))
        child.start()
        send.close()
        try:
            return receive.recv() if receive.poll(5.0) else "still running"
        finally:
            child.kill()
            child.join()
            receive.close()

    return run


@pytest.fixture
def error_line(capsys):
    """-> check(start): what went to stderr since the last read is the one line 'error: {start}...' of the CLIs,
    after at most the progress lines of work done before the error (tqdm's, each ended by a carriage return)."""

    def check(start):
        err = capsys.readouterr().err
        err = err.rsplit("\r", 1)[-1]
        assert err.startswith(f"error: {start}") and err.count("\n") == 1, err

    return check


@pytest.fixture
def truncated_model(tok, capsys):
    """-> save(path): a tiny model saved at path whose model.safetensors is cut in half (a full disk, a killed
    copy); returns the path."""

    def save(path):
        tiny_model("qwen3", layers=1, hidden=32).save_pretrained(path)
        tok.save_pretrained(path)
        weights = os.path.join(path, "model.safetensors")
        os.truncate(weights, os.path.getsize(weights) // 2)
        # drop the save's progress bar: the tests read what the CLI alone writes to stderr
        capsys.readouterr()
        return str(path)

    return save


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    """A problem file with one code (stdio) and one math problem: every role plays."""
    path = tmp_path_factory.mktemp("data") / "p.jsonl"
    path.write_text(json.dumps(SUM) + "\n" + json.dumps(APPLES) + "\n")
    return str(path)


HIDE_BUBBLEWRAP = """\
import shutil
which = shutil.which
shutil.which = lambda name, *a, **k: None if name == "bwrap" else which(name, *a, **k)
"""


which = shutil.which  # the real one, before a test hides bubblewrap


@pytest.fixture(params=["native", "no bubblewrap"])
def jailed(request, monkeypatch):
    """The jail's promises tested where a jail is had: bubblewrap's where it works, then with bubblewrap hidden (a
    new user's machine) whatever this machine gives without it: the namespaces jail as root. Where that is no jail
    the test is skipped: train.py and eval.py refuse code problems there (jail.isolation_refusal). Returns the
    lines that hide bubblewrap from a Python subprocess ("" for native)."""
    if request.param == "no bubblewrap":
        monkeypatch.setattr(
            shutil,
            "which",
            lambda name, *a, **k: None if name == "bwrap" else which(name, *a, **k),
        )
        jail._setup.cache_clear()
        # before monkeypatch gives bubblewrap back
        request.addfinalizer(jail._setup.cache_clear)
    if jail._setup()[1] is None:
        pytest.skip("no jail here at this level")
    return HIDE_BUBBLEWRAP if request.param == "no bubblewrap" else ""
