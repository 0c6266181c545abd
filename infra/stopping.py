"""How a run of train.py or eval.py ends and what it says about it: told to stop (SIGINT from Ctrl-C; SIGTERM
from `kill`, `timeout` or a scheduler), it kills the sandboxed programs in progress and exits with 130 or 143 and one
line instead of a traceback: for training, the steps done, the last checkpoint and the command that continues the
run; for an evaluation, what was kept and the command that runs it again. Finished, a training run counts its steps,
those of this session apart.
"""

import os
import signal

from infra.checkpoint import last_checkpoint
from infra.progress import last_line
from infra.runs import command_line, end_command, steps_logged
from sandbox.jail import end_runs

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stop_on_signals(say=None):
    """From here on SIGINT and SIGTERM end the run: the sandbox's runs killed (end_runs), say(signal name), its one
    line, on stderr (say None: nothing, as on ranks other than 0), and SystemExit(128 + signal) so that every
    `finally` runs. A second signal meanwhile kills at once, as the default would."""

    def stop(signum, frame):
        for s in SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        end_runs()
        if say:
            last_line(say(signal.Signals(signum).name))
        raise SystemExit(128 + signum)

    for s in SIGNALS:
        # a signal ignored by who started us (nohup) stays so
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, stop)


def stop_line(args, name, again="--resume"):
    """The one line of a stopped training run: the steps metrics.jsonl records, what the last checkpoint holds (a resume
    continues from it; without one, from step 0 with the evaluation before training kept) and the command."""
    end_command(args, f"stopped by {name}")
    path, record = last_checkpoint(args.out)
    kept = (
        f"no checkpoint yet (one every {args.save_every} steps)"
        if path is None
        else f"{record['step'] + 1} of them in the last checkpoint ({path})"
        if record
        else f"last checkpoint: {path}"
    )
    return (
        f"stopped by {name} with {steps_logged(args.out)} of {args.steps} steps done, {kept}; continue with: "
        f"{command_line(again)}"
    )


def eval_stop_line(args, name):
    """The one line of a stopped evaluation: its figures come at the end, so nothing of --json or --heatmap was
    written; --episodes holds the runs that finished. An evaluation does not resume: the command runs it again, with
    --overwrite where the episodes file it began must be replaced."""
    kept = (
        f"the episodes of the runs that finished are in {args.episodes}"
        if args.episodes
        else "nothing was written"
    )
    again = command_line("--overwrite" if args.episodes else None)
    return f"stopped by {name} before the figures were written; {kept}; run it again with: {again}"


def done_line(args, start, skipped):
    """The closing line of a run: its steps (those of this session, when it resumed), the skipped ones and where
    its metrics and checkpoint are; run.json records the command's end."""
    end_command(args, "done")
    session = (
        f" ({args.steps - start} in this session, resumed from step {start})"
        if start
        else ""
    )
    return (
        f"done: {args.steps} steps{session}, {skipped} skipped; metrics in "
        f"{os.path.join(args.out, 'metrics.jsonl')}, checkpoint in {os.path.join(args.out, 'checkpoint')}"
    )
