"""What keeps a run directory whole: a new run of train.py never writes over one (unless --overwrite discards
it), a resume continues the same run or refuses (the settings recorded with its checkpoint, infra/checkpoint.py),
the evaluation before training is kept from the moment it is made, OUT/run.json records every command that ran
there, and the run's logs start where the run does (open_logs). The commands that train several runs (the toy
studies, tools.sweep) decide here what becomes of each.
"""

import datetime
import math
import os
import shlex
import shutil
import sys
from dataclasses import dataclass

from tqdm import tqdm

from infra.checkpoint import last_checkpoint, read_json, settings, start_log, step_of
from infra.data import json_text, write_atomic
from infra.metrics import step_line
from infra.models import machine
from infra.rundir import check_run_dir, hold_run_dir
from infra.trackers import Trackers, check_trackers, open_trackers
from scaling import distributed

# OUT/run.json: the run's settings and every command that ran it, with its date
RUN = "run.json"
# train.py's files in OUT: what a new run would write over
RUN_FILES = (
    "checkpoint",
    "checkpoint.old",
    "checkpoint.tmp",
    "metrics.jsonl",
    "samples.jsonl",
    "episodes.jsonl",
    "results.json",
    "report.html",
    "wandb",
    "tensorboard",
    RUN,
)


def steps_logged(out):
    """How many steps OUT/metrics.jsonl records: its last complete record's step + 1 (0 for none)."""
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            steps = [s for s in map(step_of, f) if math.isfinite(s)]
    except OSError:
        return 0
    return max(steps) + 1 if steps else 0


def held(out):
    """What OUT holds of a train.py run, in words ("its checkpoint holds 6 of 6 steps, 6 step(s) in metrics.jsonl,
    results.json: before, after"), or None where it holds none of train.py's files."""
    path, record = last_checkpoint(out)
    if path is None and not any(
        os.path.isfile(os.path.join(out, name)) for name in RUN_FILES
    ):
        return None
    parts = [
        "no checkpoint"
        if path is None
        else f"its checkpoint holds {record['step'] + 1} of {record['steps']} steps"
        if record
        else "a checkpoint",
        f"{steps_logged(out)} step(s) in metrics.jsonl",
    ]
    results = read_json(os.path.join(out, "results.json"))
    if isinstance(results, dict):
        parts.append(f"results.json: {', '.join(results) or 'empty'}")
    return ", ".join(parts)


def check_run(args):
    """Before anything loads: what OUT holds against what this command asks, refused in one line (ValueError). A
    new run into a directory that holds a run, unless --overwrite discards it; a --resume with nothing to continue,
    with a setting other than the run's (each named with both values), or with --steps below the steps done; an
    OUT holding a link or anything else a run directory may not (infra/rundir.py); an OUT that a running process
    holds (from here on this process holds it: hold)."""
    check_trackers(args)  # --wandb, --tensorboard: their package installed
    check_run_dir(args.out, f"--out {args.out}")
    hold(args)  # a run in OUT now: refused, whatever this command asks
    what = held(args.out)
    if not args.resume:
        if what and not args.overwrite:
            raise ValueError(
                f"--out {args.out} holds a train.py run ({what}): continue it with --resume, or give "
                f"another --out (--overwrite discards it)"
            )
        return
    path, record = last_checkpoint(args.out)
    run = read_json(os.path.join(args.out, RUN))
    if path is None and not isinstance(run, dict):
        raise ValueError(
            f"--resume: no checkpoint in {args.out}, nor a run started there"
        )
    recorded = record.get("settings") if path else run.get("settings")
    # a checkpoint of an older train.py: nothing recorded to compare
    if recorded is None:
        return
    now = settings(args)
    differ = [
        k for k in sorted(set(now) | set(recorded)) if now.get(k) != recorded.get(k)
    ]
    if differ:
        show = lambda v: " ".join(map(str, v)) if isinstance(v, list) else str(v)
        raise ValueError(
            f"--resume: {args.out} was run with other settings: "
            + ", ".join(
                f"--{k.replace('_', '-')} {show(recorded.get(k))} (this command: {show(now.get(k))})"
                for k in differ
            )
            + "; give the run's values to continue it, or another --out for a new run"
        )
    done = record["step"] + 1 if record else 0
    if args.steps < done:
        raise ValueError(
            f"--steps {args.steps}: {path} holds {done} steps already; give --steps {done} or more"
        )


def hold(args):
    """Rank 0 holds OUT for the process's life (infra/rundir.py, hold_run_dir); a one-line ValueError naming the
    process that holds it already."""
    if distributed.rank() == 0:
        hold_run_dir(args.out, f"--out {args.out}", command_line())


def study_run(out, reuse, overwrite):
    """What a command that trains several runs (the toy studies, tools.sweep) does with one of its run directories
    before it trains any: "train" (nothing there, or --overwrite), "reuse" (with --reuse, a run whose checkpoint
    holds all its steps) or "resume" (with --reuse, a run that stopped early); a run there without either flag,
    or both flags, or a directory holding what a run directory may not (infra/rundir.py), is a one-line
    ValueError."""
    check_run_dir(out, out)
    what = held(out)
    if reuse and overwrite:
        raise ValueError(
            "--reuse keeps the runs in OUT, --overwrite discards them: give one of them"
        )
    if what is None or overwrite:
        return "train"
    if not reuse:
        raise ValueError(
            f"{out} holds a train.py run ({what}): --reuse keeps it (and finishes it if it stopped "
            "early), or give another --out (--overwrite discards it)"
        )
    path, record = last_checkpoint(out)
    return (
        "reuse"
        if path and (not record or record["step"] + 1 >= record["steps"])
        else "resume"
    )


def command_line(again=None):
    """This process's command line as it was typed (under torchrun, torchrun's), or with `again` (--resume) the
    command that continues the run: --overwrite dropped, `again` added where it is not there."""
    argv = (
        ["torchrun", f"--nproc-per-node={distributed.world_size()}"] + sys.argv
        if distributed.under_torchrun()
        else sys.orig_argv
    )
    if again:
        argv = [a for a in argv if a != "--overwrite"] + (
            [again] if again not in argv else []
        )
    return shlex.join(argv)


def begin_run(args, start):
    """Rank 0, once the run's inputs are built and before it writes anything: the run of --overwrite discarded,
    OUT made, OUT/run.json begun or extended with this command (date, command line, first step: the report's
    header), and a resumed run's line saying where it continues."""
    os.makedirs(args.out, exist_ok=True)
    try:  # OUT made: held from here on, where check_run found no OUT to hold
        hold(args)
    except ValueError as e:  # a run started at the same moment took it first
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    what = held(args.out)
    if args.overwrite and what:
        for path in (os.path.join(args.out, name) for name in RUN_FILES):
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
        print(f"--overwrite: the run that was in {args.out} is discarded ({what})")
    path = os.path.join(args.out, RUN)
    run = (read_json(path) if args.resume else None) or {
        "settings": settings(args),
        "args": vars(args),
        "commands": [],
    }
    run["commands"].append(
        {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": command_line(),
            "from_step": start,
            "machine": machine(args.device),
        }
    )
    write_atomic(path, json_text(run, indent=1))
    if args.resume:
        kept = (
            f"{start} of {args.steps} steps done, in {last_checkpoint(args.out)[0]}"
            if start
            else "no checkpoint was written before it stopped"
        )
        print(f"resuming from step {start}: {kept}")


def end_command(args, how):
    """Rank 0, as the command ends: OUT/run.json's record of it completed with how it ended ("done", or the signal
    that stopped it) and its wall time in seconds, from its date (the report's header)."""
    path = os.path.join(args.out, RUN)
    run = read_json(path)
    if distributed.rank() != 0 or not isinstance(run, dict) or not run.get("commands"):
        return
    now = datetime.datetime.now().astimezone()
    began = datetime.datetime.fromisoformat(run["commands"][-1]["date"])
    run["commands"][-1].update(ended=how, seconds=round((now - began).total_seconds()))
    write_atomic(path, json_text(run, indent=1))


@dataclass
class Logs:
    """The run's JSONL logs (infra/metrics.py writes them): every step's figures, the report's samples, and with
    --save-episodes every episode (a file per rank); with --wandb or --tensorboard, rank 0's trackers."""

    metrics: str
    samples: str
    episodes: str | None
    trackers: Trackers | None = None

    def write(self, metrics):
        """A step's metrics.jsonl record appended, its console line printed above the progress bar, and the
        record logged to the trackers (infra/trackers.py: the last step's closes them)."""
        with open(self.metrics, "a") as f:
            f.write(json_text(metrics) + "\n")
        tqdm.write(step_line(metrics))
        if self.trackers:
            self.trackers.log(metrics)


def open_logs(args, rank, start):
    """The run's Logs, each cut back to `start` (a resumed step): rank 0 first begins the run (begin_run). Every
    rank calls this."""
    name = "episodes.jsonl" if rank == 0 else f"episodes.rank{rank}.jsonl"
    logs = Logs(
        os.path.join(args.out, "metrics.jsonl"),
        os.path.join(args.out, "samples.jsonl"),
        os.path.join(args.out, name) if args.save_episodes else None,
    )
    if rank == 0:
        # OUT made, run.json begun; --overwrite discards the run there
        begin_run(args, start)
        start_log(logs.metrics, start)
        start_log(logs.samples, start)
        logs.trackers = open_trackers(args, start)  # --wandb, --tensorboard
    distributed.barrier()  # OUT exists before any rank writes its episodes there
    if logs.episodes:
        start_log(logs.episodes, start)
    return logs


def evaluation_before(args, start, evaluate):
    """OUT/results.json's evaluation before training, written the moment it is made so that no interruption loses
    it: a resumed run reads it back (its settings, the evaluation's included, are the run's: check_run), a run
    at step 0 makes it with evaluate(). -> {"before": metrics}, or {} for a run resumed from a checkpoint of an
    older train.py, which kept none."""
    path = os.path.join(args.out, "results.json")
    before = (read_json(path) or {}).get("before") if args.resume else None
    if before:
        print(
            f"evaluation before training: read from {path}, where the run wrote it at its start"
        )
        return {"before": before}
    if start:
        print(
            f"evaluation before training: not in {path} (its checkpoint is older than that file's record); "
            "the results hold 'after' only"
        )
        return {}
    results = {"before": evaluate()}
    save_results(args, results)
    return results


def save_results(args, results):
    """OUT/results.json: the run's evaluations so far ({"before", "after"} -> figures), written atomically."""
    write_atomic(os.path.join(args.out, "results.json"), json_text(results, indent=1))
