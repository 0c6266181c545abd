"""What lets a run of Algorithm 1 stop and continue exactly: the checkpoint (every distinct policy, the optimizers,
the step, the skipped count, every random stream, the run's settings), written atomically and read back with
one-line refusals; the disk check and start-up line before the first save; the JSONL logs cut back to a resumed
step.
"""

import errno
import hashlib
import json
import math
import os
import pickle
import random
import re
import shutil
import sys
import tempfile

import torch

from config import longest_response
from infra.data import json_text, nearest_folder, write_atomic
from infra.models import first_line, load_model
from infra.progress import last_line
from infra.rundir import check_run_dir
from scaling import distributed
from scaling.memory import GiB
from scaling.sharding import full_states, unwrap


def distinct(policies):
    """The distinct models among role -> model (one when a shared policy sits in every seat), in seat order."""
    return list(dict.fromkeys(policies.values()))


def policy_names(policies):
    """Directory name per distinct policy: its role, or 'shared' when one model sits in every seat."""
    names = {}
    for role, model in policies.items():
        names.setdefault(model, "shared" if len(distinct(policies)) == 1 else role)
    return names


def checkpoint(s, step, skipped, args):
    """The checkpoint of `step` of a run (s: infra.launch.Start): every rank's sampler stream (so that a resume
    continues each) and the full states (gathered to rank 0 under --fsdp) collected, then written by rank 0
    (save_checkpoint). Every rank calls this."""
    samplers = distributed.gather(s.gen.get_state())
    states = full_states(distinct(s.policies), s.optims)
    if distributed.rank() == 0:
        try:
            save_checkpoint(
                args.out, step, s.policies, states, s.tok, samplers, skipped, args
            )
        except DiskFull as e:  # the run ends in one line, its last checkpoint whole
            last_line(f"error: {e}")
            sys.exit(2)


def save_checkpoint(out, step, policies, states, tok, samplers, skipped, args):
    """Write OUT/checkpoint atomically: build checkpoint.tmp, then swap it in. Refuses non-finite weights.
    states: (weights, optimizer states) per distinct policy, as sharding.full_states gives them (weights None: the
    model's own). samplers: the sampler generator state of every rank (one in a single process)."""
    unique, weights = distinct(policies), states[0]
    tensors = [
        t
        for model, sd in zip(unique, weights)
        for t in (model.parameters() if sd is None else sd.values())
    ]
    if not all(torch.isfinite(t).all() for t in tensors):
        raise RuntimeError(
            f"step {step}: non-finite weights; refusing to write a checkpoint"
        )
    final, tmp, old = (
        os.path.join(out, n) for n in ("checkpoint", "checkpoint.tmp", "checkpoint.old")
    )
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write_checkpoint(tmp, step, policies, states, tok, samplers, skipped, args)
    except Exception as e:  # the partial write goes; the last checkpoint stays
        shutil.rmtree(tmp, ignore_errors=True)
        if full := no_space(e, out, policies, tok, step):
            raise full from None
        raise
    if os.path.isdir(final):
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def write_checkpoint(tmp, step, policies, states, tok, samplers, skipped, args):
    """save_checkpoint's folder `tmp`: each distinct policy's weights and tokenizer, state.pt, settings.json."""
    unique, (weights, optim_states) = distinct(policies), states
    names = policy_names(policies)
    for model, sd in zip(unique, weights):
        unwrap(model).save_pretrained(os.path.join(tmp, names[model]), state_dict=sd)
        tok.save_pretrained(os.path.join(tmp, names[model]))
    torch.save(
        {
            "step": step,
            "optims": optim_states,
            "skipped": skipped,
            "args": vars(args),
            "rng": {
                "torch": torch.get_rng_state(),
                "python": random.getstate(),
                "sampler": samplers,
            },
        },
        os.path.join(tmp, "state.pt"),
    )
    write_atomic(
        os.path.join(tmp, SETTINGS),
        json_text(
            {"step": step, "steps": args.steps, "settings": settings(args)}, indent=1
        ),
    )


class DiskFull(ValueError):
    """A checkpoint that the disk had no room for; the message names the space it needs."""


def no_space(error, out, policies, tok, step):
    """The DiskFull of a save that failed for want of space (an errno ENOSPC or EDQUOT on the way, the
    "file write failed" of torch's writer, or less free than a checkpoint needs once the partial write is
    gone), saying what is free, what a checkpoint needs and what the last checkpoint holds; None for any other
    failure."""
    chain, e = [], error
    while e is not None:
        chain.append(e)
        e = e.__cause__ or e.__context__
    text = " ".join(map(str, chain))
    folder = nearest_folder(out)
    free = shutil.disk_usage(folder).free
    path, record = last_checkpoint(out)
    try:  # measured as at the start (an earlier checkpoint may lack moments: AdamW makes them at a first update)
        need = checkpoint_size(policies, tok)
    except OSError:  # no room for the tokenizer's files in the temporary folder either
        need = tree_size(path)
    full = any(getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) for e in chain)
    if not (
        full or free < need or re.search("No space|write failed|StorageFull", text)
    ):
        return None
    kept = (
        f"{path} still holds step {record['step']}, whole"
        if path and record
        else "no earlier checkpoint"
    )
    return DiskFull(
        f"step {step}: no room for the checkpoint at {folder}: {size_text(free)} free, a checkpoint needs "
        f"{size_text(need)} (the partial write is removed; {kept}); free space there, then continue the run "
        "with --resume"
    )


def checkpoint_size(policies, tok):
    """Bytes one save_checkpoint writes, measured from what it saves (not from a config): per distinct policy the
    tensors of its state dict as save_pretrained writes them (each storage once, so a tied embedding once, and
    safetensors' header), its config files and the tokenizer's files (written once here to a temporary folder and
    measured), and AdamW's two fp32 moments per trainable weight (state.pt); then a MARGIN for what is not
    counted (state.pt's step counters, RNG states and arguments, the file system's blocks)."""
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        model = unwrap(distinct(policies)[0])
        model.config.save_pretrained(tmp)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(tmp)
        files = sum(e.stat().st_size for e in os.scandir(tmp) if e.is_file())
    size = 0
    for model in map(unwrap, distinct(policies)):
        sd = model.state_dict()
        storages = {t.untyped_storage().data_ptr(): t.nbytes for t in sd.values()}
        header = len(json.dumps({k: list(t.shape) for k, t in sd.items()})) * 2
        moments = 2 * sum(4 * p.numel() for p in model.parameters() if p.requires_grad)
        size += sum(storages.values()) + header + files + moments
    return math.ceil(size * (1 + MARGIN[0])) + MARGIN[1]


# checkpoint_size's margin: a fraction of the bytes counted, and bytes: a 135M-parameter run's uncounted files came to
# 0.02% of its checkpoint, a 0.25M-parameter toy policy's to 7 KiB each (tests/test_train.py)
MARGIN = (0.01, 2**20)


def check_disk(args, policies, tok):
    """The start-up line: what one step of Algorithm 1 (App. C) samples and scores at most (every episode runs
    --max-turns turns, every response --max-new-tokens tokens, every teacher context its limit; Eq. 7 scores each
    response twice) and what each checkpoint writes (checkpoint_size, from the loaded policies and tokenizer).
    Raises ValueError (one line) when --out has not the free disk space the next save_checkpoint needs at its
    peak: checkpoint.tmp is complete before the last checkpoint goes, so a run that saves twice needs two
    checkpoints' space, or one where a checkpoint is already there. A checkpoint.tmp left by a save that did not
    finish (a killed run) counts as free, and is named: the next save removes it first."""
    # G rollouts per problem and no teacher (App. D.6.2)
    grpo = args.objective == "grpo"
    episodes = args.batch * (args.group_size if grpo else 1)
    # 2n agents per episode
    responses = episodes * 2 * args.agents_per_role * args.max_turns
    limit = longest_response(args)
    sampled = responses * limit
    scored = 0 if grpo else 2 * responses * (args.teacher_max_prompt_tokens + limit)
    n_policies = len(distinct(policies))
    size = checkpoint_size(policies, tok)
    there = any(
        os.path.isdir(os.path.join(args.out, n))
        for n in ("checkpoint", "checkpoint.old")
    )
    copies = 1 if there or args.steps <= args.save_every else 2
    folder = nearest_folder(args.out)
    partial = os.path.join(args.out, "checkpoint.tmp")
    leftover = tree_size(partial)
    free = shutil.disk_usage(folder).free + leftover
    counted = (
        f", counting the {size_text(leftover)} of {partial}, a save that did not finish, which the next save "
        "removes first"
        if leftover
        else ""
    )
    if free < copies * size:
        raise ValueError(
            f"--out {args.out}: {size_text(free)} free on disk at {folder}{counted}, but the checkpoints "
            f"need {size_text(copies * size)} ({copies} x {size_text(size)}: a new one is written "
            f"before the last is removed); choose --out on a disk with room, or free space there"
        )
    return (
        f"per step: up to {sampled:,} tokens sampled ({episodes} episodes x {2 * args.agents_per_role} agents "
        f"x {args.max_turns} turns x "
        f"{limit}), up to {scored:,} scored by the teacher (each response twice, contexts of at most "
        f"{args.teacher_max_prompt_tokens:,}); checkpoint: {size:,} bytes ({size_text(size)}, {n_policies} "
        f"polic{'y' if n_policies == 1 else 'ies'}: weights, tokenizer, AdamW moments, "
        f"+{MARGIN[0]:.0%} + {size_text(MARGIN[1])} margin) every {args.save_every} steps and at the end, "
        f"{size_text(free)} free at {folder}{counted}"
    )


def tree_size(path):
    """Bytes of the files under `path` (0 where there is none)."""
    return sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(path)
        for name in names
    )


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
    """The state.pt of save_checkpoint, loaded as data: tensors and plain values only (weights_only), so that a
    run directory from elsewhere (a shared run, a download) cannot run code in the trainer. A state that would
    (pickle's global or reduce calls) and a damaged file are each a one-line ValueError naming it."""
    try:
        state = torch.load(path, weights_only=True)
    # what weights_only refuses; torch's reason follows a paragraph of advice
    except pickle.UnpicklingError as e:
        why = next((ln for ln in str(e).splitlines()[1:] if ln.strip()), first_line(e))
        raise ValueError(
            f"{path}: refusing a checkpoint state that is not plain data, as loading it could run "
            f"code ({why})"
        ) from None
    # truncated: RuntimeError (no zip directory) or EOFError; corrupt: whatever unpickling hits
    except Exception as e:
        raise ValueError(f"{path}: cannot load checkpoint ({first_line(e)})") from None
    missing = {"step", "optims", "skipped", "rng"} - (
        set(state) if isinstance(state, dict) else set()
    )
    if missing or not {"torch", "python", "sampler"} <= set(state["rng"]):
        raise ValueError(
            f"{path}: not a checkpoint of train.py (missing {sorted(missing) or 'rng states'})"
        )
    return state


def policy_dirs(ckpt, roles):
    """{seat: directory} of the policies saved in a checkpoint directory: <seat>/ each (one policy per agent as in
    §2.1, infra/seats.py's seats) or one shared/ for every seat. Raises ValueError (one line) when one is missing,
    or when the directory holds a link or anything else a run directory may not (infra/rundir.py): every reader of a
    checkpoint (eval.py --run, a resume, the studies) comes through here before any file of it is opened."""
    check_run_dir(ckpt, ckpt)
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


# ----------------------------------------------------------------------------- the settings recorded with it

# in a checkpoint: the step it holds, the run's --steps and settings (plain JSON)
SETTINGS = "settings.json"
# The flags that change neither the method nor its data: memory, speed, where and what is written, the order of
# float sums or of random draws (--micro-batch, --rollout-chunk, --threads, --fsdp), the jail, and --steps, which
# a resumed run may raise to train further. Every other flag of train.py is a setting of the run, and a preset
# counts by the values it sets.
FREE = (
    "preset",
    "unisolated_programs",
    "micro_batch",
    "grad_checkpointing",
    "rollout_chunk",
    "teacher_batch_tokens",
    "teacher_offload",
    "fsdp",
    "fsdp_offload",
    "optimizer_offload",
    "compile",
    "device",
    "workers",
    "threads",
    "out",
    "resume",
    "overwrite",
    "save_every",
    "save_episodes",
    "steps",
    "wandb",
    "tensorboard",
)
# compared by content: the same problems under another path are the same
FILES = ("problems", "eval_problems")


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
