"""What lets a run of Algorithm 1 stop and continue exactly: the checkpoint (every distinct policy, the optimizers,
the step, the skipped count, every random stream, the run's settings), written atomically and read back with
one-line refusals; the disk check and start-up line before the first save; the JSONL logs cut back to a resumed
step. And what keeps a run directory whole: a new run never writes over one (unless --overwrite discards it), a
resume continues the same run or refuses, and the evaluation before training is kept from the moment it is made.
"""
import datetime
import hashlib
import json
import math
import os
import random
import shlex
import shutil
import sys

import torch

from infra import distributed
from infra.data import json_text, longest_response, nearest_folder, write_atomic
from infra.footprint import checkpoint_bytes, config_of
from infra.memory import GiB
from infra.models import first_line, load_model
from infra.sharding import unwrap


def distinct(policies):
    """The distinct models among role -> model (one when a shared policy sits in every seat), in seat order."""
    return list(dict.fromkeys(policies.values()))


def policy_names(policies):
    """Directory name per distinct policy: its role, or 'shared' when one model sits in every seat."""
    names = {}
    for role, model in policies.items():
        names.setdefault(model, "shared" if len(distinct(policies)) == 1 else role)
    return names


def save_checkpoint(out, step, policies, states, tok, samplers, skipped, args):
    """Write OUT/checkpoint atomically: build checkpoint.tmp, then swap it in. Refuses non-finite weights.
    states: (weights, optimizer states) per distinct policy, as sharding.full_states gives them (weights None: the
    model's own). samplers: the sampler generator state of every rank (one in a single process)."""
    unique, (weights, optim_states) = distinct(policies), states
    tensors = [t for model, sd in zip(unique, weights) for t in (model.parameters() if sd is None else sd.values())]
    if not all(torch.isfinite(t).all() for t in tensors):
        raise RuntimeError(f"step {step}: non-finite weights; refusing to write a checkpoint")
    final, tmp, old = (os.path.join(out, n) for n in ("checkpoint", "checkpoint.tmp", "checkpoint.old"))
    shutil.rmtree(tmp, ignore_errors=True)
    names = policy_names(policies)
    for model, sd in zip(unique, weights):
        unwrap(model).save_pretrained(os.path.join(tmp, names[model]), state_dict=sd)
        tok.save_pretrained(os.path.join(tmp, names[model]))
    torch.save({"step": step, "optims": optim_states, "skipped": skipped, "args": vars(args),
                "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "sampler": samplers}},
               os.path.join(tmp, "state.pt"))
    write_atomic(os.path.join(tmp, SETTINGS), json_text({"step": step, "steps": args.steps,
                                                         "settings": settings(args)}, indent=1))
    if os.path.isdir(final):
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def check_disk(args, n_policies):
    """The start-up line: what one step of Algorithm 1 (App. C) samples and scores at most (every episode runs
    --max-turns turns, every response --max-new-tokens tokens, every teacher context its limit; Eq. 7 scores each
    response twice) and what each checkpoint writes (footprint.checkpoint_bytes, from the config, no weights).
    Raises ValueError (one line) when --out has not the free disk space the next save_checkpoint needs at its
    peak: checkpoint.tmp is complete before the last checkpoint goes, so a run that saves twice needs two
    checkpoints' space, or one where a checkpoint is already there."""
    grpo = args.objective == "grpo"  # G rollouts per problem and no teacher (App. D.6.2)
    episodes = args.batch * (args.group_size if grpo else 1)
    responses = episodes * 2 * args.agents_per_role * args.max_turns  # 2n agents per episode
    limit = longest_response(args)
    sampled = responses * limit
    scored = 0 if grpo else 2 * responses * (args.teacher_max_prompt_tokens + limit)
    size = checkpoint_bytes(config_of(args.student), n_policies)
    there = any(os.path.isdir(os.path.join(args.out, n)) for n in ("checkpoint", "checkpoint.old"))
    copies = 1 if there or args.steps <= args.save_every else 2
    folder = nearest_folder(args.out)
    free = shutil.disk_usage(folder).free
    if free < copies * size:
        raise ValueError(f"--out {args.out}: {size_text(free)} free on disk at {folder}, but the checkpoints "
                         f"need {size_text(copies * size)} ({copies} x {size_text(size)}: a new one is written "
                         f"before the last is removed); choose --out on a disk with room, or free space there")
    return (f"per step: up to {sampled:,} tokens sampled ({episodes} episodes x {2 * args.agents_per_role} agents "
            f"x {args.max_turns} turns x "
            f"{limit}), up to {scored:,} scored by the teacher (each response twice, contexts of at most "
            f"{args.teacher_max_prompt_tokens:,}); checkpoint: {size:,} bytes ({size / GiB:.1f} GiB, {n_policies} "
            f"polic{'y' if n_policies == 1 else 'ies'}: fp32 weights + AdamW moments) every {args.save_every} "
            f"steps and at the end, {free / GiB:.1f} GiB free at {folder}")


def size_text(n):
    """A byte count in the largest unit it fills once (GiB, MiB, KiB), so that a small one never reads 0.0 GiB."""
    for unit, name in ((GiB, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= unit:
            return f"{n / unit:.1f} {name}"
    return f"{n} bytes"


def start_log(path, start):
    """Begin a JSONL log of steps at step `start` (0 for a fresh run, which empties it): keep the lines of earlier
    steps and drop those of later ones (written after the checkpoint, before a crash)."""
    kept = []
    if start and os.path.exists(path):
        with open(path) as f:
            kept = [ln for ln in f if step_of(ln) < start]
    with open(path, "w") as f:
        f.writelines(kept)


def step_of(line):
    """The step of a metrics.jsonl line; a line a crash cut short counts as after every checkpoint (dropped)."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return math.inf


def read_state(path):
    """The state.pt of save_checkpoint; a damaged file is a one-line ValueError naming it."""
    try:
        state = torch.load(path, weights_only=False)
    except Exception as e:  # truncated: RuntimeError (no zip directory) or EOFError; corrupt: whatever unpickling hits
        raise ValueError(f"{path}: cannot load checkpoint ({first_line(e)})") from None
    missing = {"step", "optims", "skipped", "rng"} - (set(state) if isinstance(state, dict) else set())
    if missing or not {"torch", "python", "sampler"} <= set(state["rng"]):
        raise ValueError(f"{path}: not a checkpoint of train.py (missing {sorted(missing) or 'rng states'})")
    return state


def policy_dirs(ckpt, roles):
    """{seat: directory} of the policies saved in a checkpoint directory: <seat>/ each (one policy per agent as in
    §2.1, infra/team.py's seats) or one shared/ for every seat. Raises ValueError (one line) when one is missing."""
    if not os.path.isdir(ckpt):
        raise ValueError(f"no checkpoint directory {ckpt}")
    shared = os.path.isdir(os.path.join(ckpt, "shared"))
    dirs = {r: os.path.join(ckpt, "shared" if shared else r) for r in roles}
    for r, path in dirs.items():
        if not os.path.isdir(path):
            raise ValueError(f"{ckpt} has no policy for seat {r!r}")
    return dirs


def load_policies(ckpt, roles, device, dtype=torch.float32):
    """The policies saved in a checkpoint directory (policy_dirs) in their own seats, with parameters in `dtype`,
    and the tokenizer saved with them."""
    dirs, loaded = policy_dirs(ckpt, roles), {}
    for path in dirs.values():
        if path not in loaded:
            loaded[path], tok = load_model(path, dtype=dtype, device=device)
    return {r: loaded[path] for r, path in dirs.items()}, tok


# ----------------------------------------------------------------------------- a run directory kept whole

SETTINGS = "settings.json"  # in a checkpoint: the step it holds, the run's --steps and settings (plain JSON)
RUN = "run.json"            # OUT/run.json: the run's settings and every command that ran it, with its date
# train.py's files in OUT: what a new run would write over
RUN_FILES = ("checkpoint", "checkpoint.old", "checkpoint.tmp", "metrics.jsonl", "samples.jsonl", "episodes.jsonl",
             "results.json", "report.html", RUN)
# The flags that change neither the method nor its data: memory, speed, where and what is written, the order of
# float sums or of random draws (--micro-batch, --rollout-chunk, --threads, --fsdp), the jail, and --steps, which
# a resumed run may raise to train further. Every other flag of train.py is a setting of the run, and a preset
# counts by the values it sets.
FREE = ("preset", "unisolated_programs", "micro_batch", "grad_checkpointing", "rollout_chunk", "teacher_batch_tokens",
        "teacher_offload", "fsdp", "fsdp_offload", "optimizer_offload", "compile", "device", "workers", "threads",
        "out", "resume", "overwrite", "save_every", "save_episodes", "steps")
FILES = ("problems", "eval_problems")  # compared by content: the same problems under another path are the same


def settings(args):
    """The settings of a run, as recorded with its checkpoints and compared on --resume: every flag of train.py
    but FREE, as plain JSON values; a problem file by the digest of its content."""
    out = {k: v for k, v in sorted(vars(args).items()) if k not in FREE}
    for k in FILES:
        if out.get(k):
            out[k] = digest(out[k])
    return out


def digest(path):
    """'sha256:' and the first 16 hex digits of the file's digest; a one-line ValueError when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError as e:
        raise ValueError(f"{path}: cannot read problem file ({e.strerror})") from None


def read_json(path, default=None):
    """The JSON value in `path`, or `default` where there is no such file or it is damaged."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def last_checkpoint(out):
    """The checkpoint a resume reads: OUT/checkpoint, or checkpoint.old after a crash between save_checkpoint's two
    renames. -> (its directory, its SETTINGS record: {} for a checkpoint of an older train.py that wrote none), or
    (None, None) when OUT holds no checkpoint."""
    for path in (os.path.join(out, "checkpoint"), os.path.join(out, "checkpoint.old")):
        if os.path.isfile(os.path.join(path, "state.pt")):
            return path, read_json(os.path.join(path, SETTINGS), {})
    return None, None


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
    if path is None and not any(os.path.isfile(os.path.join(out, name)) for name in RUN_FILES):
        return None
    parts = ["no checkpoint" if path is None else f"its checkpoint holds {record['step'] + 1} of {record['steps']} "
             "steps" if record else "a checkpoint", f"{steps_logged(out)} step(s) in metrics.jsonl"]
    results = read_json(os.path.join(out, "results.json"))
    if isinstance(results, dict):
        parts.append(f"results.json: {', '.join(results) or 'empty'}")
    return ", ".join(parts)


def check_run(args):
    """Before anything loads: what OUT holds against what this command asks, refused in one line (ValueError). A
    new run into a directory that holds a run, unless --overwrite discards it; a --resume with nothing to continue,
    with a setting other than the run's (each named with both values), or with --steps below the steps done."""
    what = held(args.out)
    if not args.resume:
        if what and not args.overwrite:
            raise ValueError(f"--out {args.out} holds a train.py run ({what}): continue it with --resume, or give "
                             f"another --out (--overwrite discards it)")
        return
    path, record = last_checkpoint(args.out)
    run = read_json(os.path.join(args.out, RUN))
    if path is None and not isinstance(run, dict):
        raise ValueError(f"--resume: no checkpoint in {args.out}, nor a run started there")
    recorded = record.get("settings") if path else run.get("settings")
    if recorded is None:  # a checkpoint of an older train.py: nothing recorded to compare
        return
    now = settings(args)
    differ = [k for k in sorted(set(now) | set(recorded)) if now.get(k) != recorded.get(k)]
    if differ:
        show = lambda v: " ".join(map(str, v)) if isinstance(v, list) else str(v)
        raise ValueError(f"--resume: {args.out} was run with other settings: " + ", ".join(
            f"--{k.replace('_', '-')} {show(recorded.get(k))} (this command: {show(now.get(k))})" for k in differ)
            + "; give the run's values to continue it, or another --out for a new run")
    done = record["step"] + 1 if record else 0
    if args.steps < done:
        raise ValueError(f"--steps {args.steps}: {path} holds {done} steps already; give --steps {done} or more")


def study_run(out, reuse, overwrite):
    """What a command that trains several runs (the toy studies, tools.sweep) does with one of its run directories
    before it trains any: "train" (nothing there, or --overwrite), "reuse" (with --reuse, a run whose checkpoint
    holds all its steps) or "resume" (with --reuse, a run that stopped early); a run there without either flag,
    or both flags, is a one-line ValueError."""
    what = held(out)
    if reuse and overwrite:
        raise ValueError("--reuse keeps the runs in OUT, --overwrite discards them: give one of them")
    if what is None or overwrite:
        return "train"
    if not reuse:
        raise ValueError(f"{out} holds a train.py run ({what}): --reuse keeps it (and finishes it if it stopped "
                         "early), or give another --out (--overwrite discards it)")
    path, record = last_checkpoint(out)
    return "reuse" if path and (not record or record["step"] + 1 >= record["steps"]) else "resume"


def command_line(again=None):
    """This process's command line as it was typed (under torchrun, torchrun's), or with `again` (--resume) the
    command that continues the run: --overwrite dropped, `again` added where it is not there."""
    argv = (["torchrun", f"--nproc-per-node={distributed.world_size()}"] + sys.argv
            if distributed.under_torchrun() else sys.orig_argv)
    if again:
        argv = [a for a in argv if a != "--overwrite"] + ([again] if again not in argv else [])
    return shlex.join(argv)


def begin_run(args, start):
    """Rank 0, once the run's inputs are built and before it writes anything: the run of --overwrite discarded,
    OUT made, OUT/run.json begun or extended with this command (date, command line, first step: the report's
    header), and a resumed run's line saying where it continues."""
    what = held(args.out)
    if args.overwrite and what:
        for name in RUN_FILES:
            shutil.rmtree(os.path.join(args.out, name), ignore_errors=True)
            if os.path.isfile(os.path.join(args.out, name)):
                os.remove(os.path.join(args.out, name))
        print(f"--overwrite: the run that was in {args.out} is discarded ({what})")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, RUN)
    run = (read_json(path) if args.resume else None) or {"settings": settings(args), "args": vars(args),
                                                         "commands": []}
    run["commands"].append({"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                            "command": command_line(), "from_step": start})
    write_atomic(path, json_text(run, indent=1))
    if args.resume:
        kept = f"{start} of {args.steps} steps done, in {last_checkpoint(args.out)[0]}" if start else \
            "no checkpoint was written before it stopped"
        print(f"resuming from step {start}: {kept}")


def evaluation_before(args, start, evaluate):
    """OUT/results.json's evaluation before training, written the moment it is made so that no interruption loses
    it: a resumed run reads it back (its settings, the evaluation's included, are the run's: check_run), a run
    at step 0 makes it with evaluate(). -> {"before": metrics}, or {} for a run resumed from a checkpoint of an
    older train.py, which kept none."""
    path = os.path.join(args.out, "results.json")
    before = (read_json(path) or {}).get("before") if args.resume else None
    if before:
        print(f"evaluation before training: read from {path}, where the run wrote it at its start")
        return {"before": before}
    if start:
        print(f"evaluation before training: none in {path} (written by train.py since it keeps it); 'after' only")
        return {}
    results = {"before": evaluate()}
    write_atomic(path, json_text(results, indent=1))
    return results
