"""The optional experiment trackers (infra/trackers.py): --wandb and --tensorboard log the very figures of
metrics.jsonl at their steps, a resume continues them without logging a step twice, the run directory keeps plain
files and folders only, and a tracker whose package is missing is refused in one line before anything loads."""

import glob
import importlib.util
import json
import os
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest

import train
from infra.rundir import check_run_dir
from infra.trackers import RUN_ID, scalars
from tests.test_run_directory import _no_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a run of a second a step: one turn, one update a step (its loss and grad norms still lists), no jail
FAST = ["--student", "tiny-qwen3", "--teacher", "tiny-qwen3", "--batch", "2"]
FAST += ["--mini-batch", "2", "--max-turns", "1", "--max-new-tokens", "8"]
FAST += ["--unisolated-programs"]


def _logged(out):
    """metrics.jsonl's records as the trackers log them: step -> {name: number}."""
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    return {
        r["step"]: scalars({k: v for k, v in r.items() if k != "step"}) for r in records
    }


def _wandb_records(path):
    """The records of a W&B transaction log (a run's .wandb file): a 7-byte header, then blocks of 32 KiB holding
    chunks (crc32, length, kind: 1 whole record, 2-4 its first, middle and last part) of protobuf Records."""
    from wandb.proto import wandb_internal_pb2

    data, pos, part = open(path, "rb").read(), 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        tail = 32768 - pos % 32768
        if tail < 7:  # a block's tail too short for a chunk header is padding
            pos += tail
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        part += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            part = b""
            yield record


def _wandb_run(sync_dir):
    """An offline W&B run as its .wandb file holds it -> (history: step -> {name: value}, W&B's own keys such as
    _step left out; whether the run was finished)."""
    (path,) = glob.glob(os.path.join(sync_dir, "run-*.wandb"))
    history, finished = {}, False
    for r in _wandb_records(path):
        kind = r.WhichOneof("record_type")
        finished |= kind == "exit"
        if kind == "history":
            items = {
                "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item
            }
            history[r.history.step.num] = {
                k: v for k, v in items.items() if not k.startswith("_")
            }
    return history, finished


@pytest.fixture
def offline_wandb(tmp_path_factory, monkeypatch):
    """W&B offline and quiet, its caches and settings in a folder of the test's, not the user's."""
    home = tmp_path_factory.mktemp("wandb_home")
    for name, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CACHE_DIR": str(home / "cache"),
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_DATA_DIR": str(home / "data"),
    }.items():
        monkeypatch.setenv(name, value)


def test_wandb_logs_each_record_and_a_resume_continues_the_same_run(
    tmp_path, problems, offline_wandb, monkeypatch
):
    out = str(tmp_path / "run")
    run = FAST + ["--problems", problems, "--out", out, "--wandb", "mas-opd-test"]
    step_fn = train.train_step

    def checked(*a, **k):  # W&B's links gone as soon as it starts: a killed run resumes
        check_run_dir(out, out)
        return step_fn(*a, **k)

    monkeypatch.setattr(train, "train_step", checked)
    train.main(run + ["--steps", "2"])
    check_run_dir(out, out)  # and once it ends: eval --run and the report read OUT
    run_id = open(os.path.join(out, "wandb", RUN_ID)).read().strip()
    # a tracker is not a setting of the run: a resume may add one
    train.main(run + ["--steps", "3", "--resume", "--tensorboard"])
    check_run_dir(out, out)
    # the same W&B run, continued from the resumed step on; each part finished with its last step
    first, second = sorted(glob.glob(os.path.join(out, "wandb", f"*-{run_id}")))
    logged = _logged(out)
    assert _wandb_run(first) == ({s: logged[s] for s in (0, 1)}, True)
    assert _wandb_run(second) == ({2: logged[2]}, True)
    # the lists and the nested figures too
    assert {"loss/0", "grad_norm/0", "roles/coder/a_opd"} <= set(logged[0])


def test_tensorboard_logs_each_record_and_a_resume_hides_the_steps_after_its_checkpoint(
    tmp_path, problems, monkeypatch, sandbox_continues
):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = str(tmp_path / "run")
    run = FAST + ["--problems", problems, "--out", out, "--tensorboard"]
    run += ["--steps", "4", "--save-every", "2"]
    step_fn = train.train_step

    # Ctrl-C in step 3: step 2 logged, the checkpoint holds steps 0-1
    def stopped(step, *a, **k):
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return step_fn(step, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(train, "train_step", stopped)
        # a KeyboardInterrupt would end the whole session
        with pytest.raises(BaseException) as e:
            train.main(run)
    assert isinstance(e.value, SystemExit) and e.value.code == 130
    sandbox_continues()
    train.main(run + ["--resume"])
    check_run_dir(out, out)
    events = EventAccumulator(os.path.join(out, "tensorboard"))
    events.Reload()
    logged = _logged(out)
    names = {name for values in logged.values() for name in values}
    assert sorted(logged) == [0, 1, 2, 3]
    assert sorted(events.Tags()["scalars"]) == sorted(names)
    for name in names:
        # step 2 once, as the resumed run logged it: the interrupted run's is purged
        assert [(e.step, e.value) for e in events.Scalars(name)] == [
            (s, np.float32(v[name])) for s, v in sorted(logged.items()) if name in v
        ], name


@pytest.mark.parametrize("flag", [["--wandb", "p"], ["--tensorboard"]])
def test_a_tracker_whose_package_is_missing_is_refused_in_one_line_before_anything_loads(
    flag, tmp_path, problems, monkeypatch, error_line
):
    package, find_spec = flag[0][2:], importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a, **k: None if name == package else find_spec(name, *a, **k),
    )
    _no_model(monkeypatch)
    out = str(tmp_path / "run")
    with pytest.raises(SystemExit) as e:
        train.main(FAST + ["--problems", problems, "--out", out, "--steps", "1"] + flag)
    assert e.value.code == 2
    error_line(
        f"{flag[0]}: the {package} package is not installed (pip install {package}), or leave {flag[0]} out"
    )
    assert not os.path.exists(out)


def test_a_wandb_mode_wandb_would_refuse_is_refused_in_one_line_before_anything_loads(
    tmp_path, problems, monkeypatch, error_line
):
    monkeypatch.setenv("WANDB_MODE", "ofline")
    _no_model(monkeypatch)
    out = str(tmp_path / "run")
    with pytest.raises(SystemExit) as e:
        train.main(FAST + ["--problems", problems, "--out", out, "--wandb", "p"])
    assert e.value.code == 2 and not os.path.exists(out)
    error_line(
        "--wandb: WANDB_MODE='ofline' is not one of W&B's modes (online, offline"
    )


def test_the_trackers_module_imports_no_tracker_nor_torch():
    """The command line reads without the optional packages: only open_trackers imports them."""
    code = "import sys, infra.trackers; print(*sys.modules)"
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    loaded = {name.split(".")[0] for name in r.stdout.split()}
    assert not loaded & {"torch", "transformers", "wandb", "tensorboard"}, loaded
