"""The optional experiment trackers of a training run: with --wandb PROJECT a Weights & Biases run in OUT/wandb,
with --tensorboard TensorBoard's event files in OUT/tensorboard. Each logs every metrics.jsonl record as it is
written (infra/runs.py Logs.write), its numbers and lists of numbers as scalars (`loss/0`, `roles/coder/a_opd`)
at the record's step. Neither package is required: the flags are refused at start-up where one is missing
(check_trackers), and only open_trackers imports them.
"""

import importlib.util
import json
import os
import secrets
from dataclasses import dataclass

# the file in OUT/wandb that keeps the W&B run's id, so that a --resume continues the same W&B run
RUN_ID = "run-id"
# the values of WANDB_MODE that wandb.init takes
WANDB_MODES = ("online", "offline", "disabled", "dryrun", "run", "shared")


def check_trackers(args):
    """Before anything loads: a one-line ValueError naming the pip command for a requested tracker whose package
    is not installed (find_spec looks for the package without importing it), or a WANDB_MODE W&B does not take."""
    for flag, asked, package in (
        ("--wandb", args.wandb, "wandb"),
        ("--tensorboard", args.tensorboard, "tensorboard"),
    ):
        if asked and importlib.util.find_spec(package) is None:
            raise ValueError(
                f"{flag}: the {package} package is not installed (pip install {package}), or leave {flag} out"
            )
    # what wandb.init would refuse once the models had loaded, refused now
    mode = os.environ.get("WANDB_MODE")
    if args.wandb and mode is not None and mode not in WANDB_MODES:
        raise ValueError(
            f"--wandb: WANDB_MODE={mode!r} is not one of W&B's modes ({', '.join(WANDB_MODES)})"
        )


def scalars(record, prefix=""):
    """A metrics.jsonl record (or a dict within one) as {name: number}: a nested dict's numbers under
    `key/name`, a list's under `key/index`; strings, None and anything else are left out."""
    out = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, f"{name}/"))
        elif isinstance(value, list):
            out.update({f"{name}/{k}": v for k, v in enumerate(value) if number(v)})
        elif number(value):
            out[name] = value
    return out


def number(value):
    """Whether a value is one number (a bool counts as 0 or 1)."""
    return isinstance(value, (int, float))


@dataclass
class Trackers:
    """A run's open trackers (rank 0): `log` gives each one a step's record, and the record of the run's last step
    closes them. A run that ends otherwise (a signal, an error) needs no close: W&B finishes its run at exit, and
    TensorBoard's writer puts each event in its file as it comes (a thread of its own)."""

    last: int  # the run's last step
    run: object = None  # the W&B run (--wandb)
    writer: object = None  # TensorBoard's SummaryWriter (--tensorboard)

    def log(self, record):
        """A metrics.jsonl record logged at its step (record["step"], not itself a scalar)."""
        step = record["step"]
        values = scalars({k: v for k, v in record.items() if k != "step"})
        if self.run:
            # A resume from a checkpoint older than the last step logged (a stop between checkpoints): W&B keeps
            # the steps it holds as they were and warns, as its rewind (resume_from) needs its server
            self.run.log(values, step=step)
        if self.writer:
            for name, value in values.items():
                self.writer.add_scalar(name, value, step)
        if step == self.last:
            self.close()

    def close(self):
        """Each tracker finished and its files written (W&B's run marked finished)."""
        if self.run:
            self.run.finish()
        if self.writer:
            self.writer.close()


def unlink_links(top):
    """The symbolic links under `top` removed (not what they point at): W&B makes some (wandb/latest-run, debug
    logs), and a run directory may hold none (infra/rundir.py), or every later command that reads it refuses it."""
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            if os.path.islink(path := os.path.join(folder, name)):
                os.unlink(path)


def open_trackers(args, start):
    """Rank 0, once OUT is made (infra/runs.py begin_run): the trackers args ask for, opened for the steps from
    `start` (0, or the step a resume continues from) -> Trackers, or None where none is asked or no step is left
    (then none would be closed)."""
    if not (args.wandb or args.tensorboard) or start >= args.steps:
        return None
    trackers = Trackers(args.steps - 1)
    # the one place an optional package is imported: the command line and every run without these flags need
    # neither of them
    if args.wandb:
        import wandb

        trackers.run = open_wandb(wandb, args)
    if args.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: the steps logged after the checkpoint a resume continues from are hidden, as metrics.jsonl
        # is cut back to it
        trackers.writer = SummaryWriter(
            os.path.join(args.out, "tensorboard"), purge_step=start
        )
    return trackers


def open_wandb(wandb, args):
    """The W&B run of OUT in OUT/wandb: a resumed run continues the one whose id OUT/wandb/run-id keeps. Online
    where W&B has a login (WANDB_API_KEY, `wandb login`), else offline with one line saying how to upload it;
    WANDB_MODE, where set, decides. -> the wandb Run."""
    path = os.path.join(args.out, "wandb", RUN_ID)
    if args.resume and os.path.isfile(path):
        with open(path) as f:
            run_id = f.read().strip()
    else:
        run_id = secrets.token_hex(4)  # W&B's own ids: 8 characters of [a-z0-9]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(run_id + "\n")
    given = os.environ.get("WANDB_MODE")
    mode = given or ("online" if wandb.login(prompt=False, verify=False) else "offline")
    run = wandb.init(
        project=args.wandb,
        dir=args.out,
        name=os.path.basename(os.path.abspath(args.out)),
        id=run_id,
        resume="allow",
        mode=mode,
        # the run's flags, as JSON holds them (anything else as its text)
        config=json.loads(json.dumps(vars(args), default=str)),
        # a new run even where an earlier one of this process is still open (a failed run in the same process)
        reinit="create_new",
    )
    # W&B makes its links as the run starts, none later: from here on OUT holds none, and a killed run resumes
    unlink_links(os.path.join(args.out, "wandb"))
    if not given and mode == "offline":
        where = run.settings.sync_dir
        print(
            f"--wandb: no W&B login here, so the run is kept offline in {where}; upload it with: wandb sync {where}"
        )
    return run
