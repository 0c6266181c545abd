"""MAS-OPD training: Algorithm 1 (App. C) as one readable loop.

Per step: Phase 1 the students roll out jointly (rollout.py); Phase 2 the verifier attributes every completed
turn (attribution.py), then the frozen teacher scores every response twice, under the target and the contrast
role condition (teacher.py); advantages A^RAS (Eq. 10); Phase 3 the loss of Eq. 13 (loss.py) updates each
role's policy from its own responses, all policies synchronously. Verdicts and teacher scores are then dropped.
The prompts and parsing rules are prompts.py's, a step's figures and console line metrics.py's, checkpoints and
resume checkpoint.py's.

    python train.py --problems examples/problems.jsonl --student tiny-qwen3 --teacher tiny-qwen3 --steps 3 \
        --batch 2 --max-new-tokens 32      # tiny random models: every phase of the protocol, seconds
    python train.py --problems FILE --student DIR --teacher DIR   # the paper's schedule (defaults) on real models
    python -m toy                          # the laptop demo: the toy world's models and problems through this file
    torchrun --nproc-per-node 8 train.py --problems FILE --student DIR --teacher DIR   # data parallel, 8 GPUs

Defaults are the paper's values (App. D.6.1, D.6.3) where it gives one; `--help` shows them in brackets. The flags
that depend on the scale of a run (schedule, batches, lengths, checkpoint interval) come from `--preset` (paper |
gpu | cpu) unless given. At start it prints what a step will sample and a checkpoint will write, and refuses a run
whose --out has not the disk space for its next checkpoint.
"""
import argparse
import copy
import json
import math
import os
import random
import sys
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from tqdm import tqdm
from transformers.utils import logging as hf_logging

import distributed
from attribution import attribute_episodes, verdicts_before
from checkpoint import check_disk, distinct, read_state, save_checkpoint, start_log
from data import (COUNT, PRESETS, SEED, ProblemError, apply_preset, bounded, check_writable, json_text,
                  load_problems, preset_help, preset_line, write_atomic)
from eval import EVAL_DECODING, evaluate, load_policies, markdown, run_line
from loss import eq13_weights, mas_opd_loss, ras_advantage
from memory import check_fits
from metrics import PhaseClock, add_counts, peak_memory_mb, rollout_counts, rollout_metrics, step_line, step_samples
from models import (DEVICE, DTYPES, cpu_threads, device, forget_gguf, load_model, precision, same_tokenizer_specs,
                    to_dtype)
from prompts import ROLES, check_prompt_limit
from report import write_report
from rollout import Response, RolloutConfig, append_episodes, rollout_config, run_episodes
from sampler import release_decoder, sequence_logprobs
from sandbox import describe, stop_on_sigterm
from teacher import KAPPA, score, teacher_contexts


def get_args(argv=None):
    """The run's configuration, one argparse namespace: the paper's values as defaults (App. D.6.1, D.6.3), the
    scale-dependent flags from --preset where not given. Each default is typed once: the rollout's in
    RolloutConfig, the scale-dependent ones in data.PRESETS, the rest here; --help prints them in brackets."""
    ap = argparse.ArgumentParser(description="MAS-OPD training (Algorithm 1). Defaults in brackets; a (preset) flag "
                                 "lists each preset's value.",
                                 epilog="The laptop demo runs the toy world through this file: python -m toy")
    r = RolloutConfig()  # the source of every default the rollout shares with this command line
    add = ap.add_argument_group("data and models").add_argument
    add("--problems", required=True, help="JSONL problem file (schema: data.py)")
    add("--student", required=True, help="tiny-qwen3 | tiny-llama | local dir | .gguf | hub id (paper: Qwen3-1.7B)")
    add("--teacher", help="(required, unless a program calling train.main hands it the teacher, as python -m toy "
        "does) same choices as --student, one tokenizer with it (paper: Qwen3-14B)")
    add("--eval-problems", default=None, help="held-out problems evaluated before and after training")
    add("--preset", choices=sorted(PRESETS), default="paper", help="defaults of the flags marked (preset): the "
        "paper's schedule and limits, a first run on one GPU, or a first CPU run of real models (data.py, PRESETS); "
        "explicit flags win [%(default)s]")
    add("--seed", type=SEED, default=0, help="[%(default)s]")
    add = ap.add_argument_group("the paper's schedule (App. D.6.3)").add_argument
    add("--steps", type=COUNT, help=preset_help("steps"))
    add("--batch", type=COUNT, help=preset_help("batch", "problems (episodes) per step"))
    add("--mini-batch", type=COUNT, help=preset_help("mini_batch", "episodes per optimizer update"))
    add("--micro-batch", type=COUNT, help=preset_help("micro_batch", "responses per forward/backward (gradient "
                                                                     "accumulation)"))
    add("--lr", type=bounded(float, 0, low_open=True), help=preset_help("lr"))
    add("--weight-decay", type=bounded(float, 0), default=0.01, help="[%(default)s]")
    add("--grad-clip", type=bounded(float, 0, low_open=True), default=1.0, help="[%(default)s]")
    add = ap.add_argument_group("MAS-OPD (Eq. 10, PAC, policies)").add_argument
    add("--lam", type=bounded(float, 0), default=0.1, help="lambda of Eq. 10; 0 = w/o RAS [%(default)s]")
    add("--no-pac", action="store_true", help="teacher sees only the student-visible context (w/o PAC)")
    add("--shared-policy", action="store_true", help="one student in every seat")
    add = ap.add_argument_group("sampling (App. D.6.1, D.6.3)").add_argument
    add("--max-turns", type=COUNT, default=r.max_turns, help="T [%(default)s]")
    add("--max-new-tokens", type=COUNT, help=preset_help("max_new_tokens", "student response limit"))
    add("--math-max-new-tokens", type=bounded(int, 0), help=preset_help("math_max_new_tokens", "the math roles' limit, "
        "0 = --max-new-tokens (given alone, --max-new-tokens sets this to 0)"))
    add("--max-prompt-tokens", type=COUNT, help=preset_help("max_prompt_tokens", "student prompt limit"))
    add("--teacher-max-prompt-tokens", type=COUNT, help=preset_help("teacher_max_prompt_tokens",
                                                                    "teacher prompt limit"))
    add("--temperature", type=bounded(float, 0), default=r.temperature, help="[%(default)s]")
    add("--top-p", type=bounded(float, 0, 1, low_open=True), default=r.top_p, help="[%(default)s]")
    add("--top-k", type=bounded(int, 0), default=r.top_k, help="0 = off [%(default)s]")
    add = ap.add_argument_group("memory and speed").add_argument
    add("--precision", choices=tuple(DTYPES), default=None, help="default: bf16 on GPU, fp32 on CPU")
    add("--grad-checkpointing", action="store_true")
    add("--rollout-chunk", type=bounded(int, 0), default=r.rollout_chunk,
        help="prompts per generate call, 0 = all (bounds the KV cache) [%(default)s]")
    add("--teacher-batch-tokens", type=COUNT, default=16384, help="padded tokens per teacher forward [%(default)s]")
    add("--teacher-offload", action="store_true", help="keep the teacher on the CPU except while it scores")
    add("--compile", action="store_true", help="compile the sampler's decode step (fused kernels, for a GPU; the "
        "first rollout compiles for tens of seconds)")
    add("--device", type=device, default=DEVICE, help="[%(default)s]")
    add("--workers", type=COUNT, default=r.workers, help="sandbox runs at once [%(default)s]")
    add("--threads", type=bounded(int, 0), default=0, help="torch CPU threads; 0 = the cores other work leaves free "
        "[%(default)s]")
    add = ap.add_argument_group("output").add_argument
    add("--out", default="runs/default", help="metrics.jsonl and checkpoint/ go here [%(default)s]")
    add("--resume", action="store_true", help="continue from OUT/checkpoint")
    add("--save-every", type=COUNT, help=preset_help("save_every", "steps between checkpoints (and always at the "
                                                                   "end)"))
    add("--save-episodes", action="store_true", help="append each step's episodes to OUT/episodes.jsonl as the "
        "rollout ends (every response with its context, tokens, log-probs and the parsed artefacts)")
    add("--eval-seeds", type=SEED, nargs="+", help=preset_help("eval_seeds", "one evaluation of --eval-problems "
                                                                            "per seed"))
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # a newcomer's first try: say where the demo is, not only which flags are missing
        ap.error("--problems and --student are required; the laptop demo (the toy world, nothing to download) is "
                 "python -m toy")
    args = ap.parse_args(argv)
    apply_preset(args)
    args.precision = precision(args.precision, args.device)
    return args


def batch_for_step(problems, step, batch, seed):
    """The problems of one step: epoch-wise shuffles derived from the seed alone, so a resumed run draws the
    same problems as an uninterrupted one without storing a data-loader state."""
    out = []
    for k in range(step * batch, (step + 1) * batch):
        epoch, i = divmod(k, len(problems))
        out.append(problems[random.Random(f"{seed}-{epoch}").sample(range(len(problems)), len(problems))[i]])
    return out


@dataclass
class Scored:
    """One student response on its way through Phases 2 and 3. Per-token tensors have shape (L,), L = its tokens."""
    episode: int                 # its episode's index in the step's batch (Eq. 13 averages per episode)
    role: str                    # its author's role: its gradient goes to policies[role] only
    response: Response           # the student's context x_i^t and its sampled tokens y_i^t
    ctx_target: list             # u~ with the target role's condition r_i (Eq. 12), token ids
    ctx_contrast: list           # u~ with the contrast role's condition kappa(r_i) (Eq. 23), token ids
    lp_student: torch.Tensor     # log pi_theta_i(y_k | x, y_<k) kept from the sampler (App. C)
    lp_target: torch.Tensor = None    # l^(i)_k, the teacher under r_i (Eq. 7)
    lp_contrast: torch.Tensor = None  # l^(j)_k, the teacher under r_j, j = kappa(i)
    adv: torch.Tensor = None          # A^RAS_k (Eq. 10), detached


def autocast(args):
    """bf16 compute over the fp32 master weights, or nothing (precision is left open by the paper, DECISIONS.md D9)."""
    if args.precision != "bf16":
        return nullcontext()
    return torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16)


def rollout_copies(policies, args):
    """role -> the model Phase 1 (App. C) samples with, whose log-probs are Eq. 8's log pi_theta. Under --precision
    bf16 a bf16 copy of each policy (one per distinct policy), refreshed from the fp32 masters before every rollout
    (refresh): decoding reads half the bytes, casts nothing per step, and its step can be recorded as a CUDA graph
    (sampler.decoder). Otherwise the policies."""
    if args.precision != "bf16":
        return policies
    copies = {id(m): to_dtype(copy.deepcopy(m), torch.bfloat16).eval().requires_grad_(False)  # RoPE stays fp32
              for m in distinct(policies)}
    return {r: copies[id(m)] for r, m in policies.items()}


@torch.no_grad()
def refresh(rollout_models, policies):
    """Copy each policy's fp32 master weights into its rollout copy, in place (a recorded decode step keeps reading
    the same storage), so that Phase 1 samples from the policy Eq. 13 just updated (App. C: on-policy)."""
    for r, model in policies.items():
        if rollout_models[r] is not model:
            for c, p in zip(rollout_models[r].parameters(), model.parameters()):
                c.copy_(p)


def train_step(step, problems, policies, optims, teacher, tok, args, gen, rollout_models=None, record=None,
               progress=False, samples=None):
    """One iteration of Algorithm 1 (App. C): rollout -> attribute -> two teacher passes -> advantages -> update.
    rollout_models: what Phase 1 samples with (rollout_copies; default: the policies themselves). record: called
    as record(step, episodes) as soon as the rollout ends. progress: a line that names the phase running and the
    seconds of those done. samples: a JSONL file to which the first and the last step append a few scored responses
    (metrics.step_samples, for the run report). Returns the step's metrics; the caller decides what to save."""
    cfg, clock = rollout_config(args, progress=progress), PhaseClock(step, progress)
    ids = list(range(distributed.rank(), args.batch, distributed.world_size()))  # this rank's share of the batch
    batch = batch_for_step(problems, step, args.batch, args.seed)
    with clock.phase("rollout"):          # Phase 1: the students' joint rollout
        episodes = joint_rollout([batch[i] for i in ids], policies, rollout_models or policies, tok, cfg, gen, args)
        if record:
            record(step, episodes)
    with clock.phase("attribution"):      # Phase 2a: a^t of every turn before any scoring (the last goes unused)
        attributions = attribute_episodes(episodes, timeout=cfg.code_timeout, workers=args.workers)
    with clock.phase("teacher"):
        items, overlong = teacher_inputs(episodes, ids, attributions, tok, args)  # u~ under r_i and kappa(r_i)
        with autocast(args):
            score_both_passes(items, teacher, args)                               # Phase 2b: Eq. 7, twice
        for it in items:                                                          # Eq. 10, sampler log-probs
            it.adv = ras_advantage(it.lp_target, it.lp_contrast, it.lp_student, args.lam)
    if samples and step in (0, args.steps - 1):  # the report's heat maps, before and after training (App. G.2)
        with open(samples, "a") as f:
            f.writelines(json_text(s) + "\n" for s in step_samples(step, items, batch, tok))
    counts = add_counts(distributed.gather(rollout_counts(episodes, attributions, items, overlong)))  # all ranks
    metrics = {"step": step, **rollout_metrics(counts)}
    with clock.phase("update"):           # Phase 3: Eq. 13, all policies synchronously
        metrics.update(update(items, args.batch, policies, optims, args))
    clock.close()
    return {**metrics, "seconds": clock.seconds, "peak_memory_mb": round(peak_memory_mb(args.device), 1)}


def joint_rollout(problems, policies, rollout_models, tok, cfg, gen, args):
    """Phase 1 of Algorithm 1 (App. C): the rollout models refreshed from the policies (on-policy), then the
    students' episodes (rollout.run_episodes). Under bf16 the rollout copies sample without autocast; their
    log-probs are then those of bf16 weights while Eq. 13 differentiates the fp32 masters under autocast: the gap
    between the two is reported as logprob_gap / logprob_gap_mean (0 would be exactly on-policy, Eq. 8)."""
    refresh(rollout_models, policies)
    with autocast(args) if rollout_models is policies else nullcontext():
        episodes = run_episodes(problems, rollout_models, tok, cfg, gen)
    release_decoder()  # the sampler's KV cache, before the teacher and the update need the memory
    return episodes


def teacher_inputs(episodes, ids, attributions, tok, args):
    """One Scored per response with its two teacher contexts u~ = u (+) r (+) c^{<t} (Eq. 12): r = r_i and
    r = kappa(r_i), the same verdicts c^{<t} in both (none with --no-pac), cut to the teacher limit together.
    ids: each episode's index in the step's batch. Returns (items, number of responses left out because even their
    shortest teacher context is too long)."""
    items, overlong = [], 0
    for ei, e in zip(ids, episodes):
        for turn in e.turns:
            verdicts = None if args.no_pac else verdicts_before(attributions[id(e)], turn.t)
            for role, resp in turn.responses.items():
                ctx = teacher_contexts(tok, resp.context, (role, KAPPA[role]), verdicts, args.teacher_max_prompt_tokens)
                if ctx is None:
                    overlong += 1
                    continue
                items.append(Scored(ei, role, resp, ctx[0], ctx[1], torch.tensor(resp.logprobs)))
    return items, overlong


def score_both_passes(items, teacher, args):
    """The frozen teacher force-decodes every response under both contexts (Eq. 7): lp_target and lp_contrast."""
    if args.teacher_offload:
        teacher.to(args.device)
    tokens = [it.response.tokens for it in items]
    target = score(teacher, [it.ctx_target for it in items], tokens, max_batch_tokens=args.teacher_batch_tokens)
    contrast = score(teacher, [it.ctx_contrast for it in items], tokens, max_batch_tokens=args.teacher_batch_tokens)
    for it, lp_t, lp_c in zip(items, target, contrast):
        it.lp_target, it.lp_contrast = lp_t.float(), lp_c.float()
    if args.teacher_offload:
        teacher.to("cpu")
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


def author_logprobs(items, policies):
    """Eq. 13's log pi_theta_i(y_k | x, y_<k), with grad: each response re-scored by its author's policy only."""
    logps = [None] * len(items)
    for model in distinct(policies):
        idx = [k for k, it in enumerate(items) if policies[it.role] is model]
        if idx:
            lps = sequence_logprobs(model, [items[k].response.context_ids for k in idx],
                                    [items[k].response.tokens for k in idx])
            for k, lp in zip(idx, lps):
                logps[k] = lp
    return logps


def update(items, n_episodes, policies, optims, args):
    """Phase 3: the loss of Eq. 13 over mini-batches of `args.mini_batch` episodes (one optimizer step each, all
    policies together), accumulated over micro-batches of `args.micro_batch` responses. A non-finite advantage
    skips the step; a non-finite loss or gradient skips that update. Returns the update's metrics. Batch semantics
    (episodes; the second mini-batch slightly off-policy, without an importance ratio): DECISIONS.md D8.
    Under torchrun `items` are this rank's share; every decision below is taken on all ranks' figures together, and
    the gradients are summed over ranks before the step, so each rank takes the update of the whole batch."""
    out = {"loss": [], "updates": 0, "skipped": int(distributed.total(len(items)) == 0)}
    if distributed.total(not all(torch.isfinite(it.adv).all() for it in items)):
        print("!!! non-finite advantage; step skipped, no update", file=sys.stderr)
        return {**out, "skipped": 1}
    unique = distinct(policies)
    for model in unique:
        model.train()
    for first in range(0, n_episodes, args.mini_batch):
        mb = [it for it in items if first <= it.episode < first + args.mini_batch]
        n_mb = distributed.total(len({it.episode for it in mb}))  # E of Eq. 13: the mini-batch's episodes, all ranks
        if not n_mb:
            continue
        weights = eq13_weights([it.role for it in mb], [it.episode for it in mb], n_mb)  # from the whole mini-batch
        loss_sum = 0.0
        for lo in range(0, len(mb), args.micro_batch):
            chunk = mb[lo:lo + args.micro_batch]
            with autocast(args):
                logps = author_logprobs(chunk, policies)
            if "gaps" not in out:  # on-policy here: the trainer's log-probs must match the sampler's
                out["gaps"] = torch.cat([(lp.detach().cpu() - it.lp_student).abs() for lp, it in zip(logps, chunk)])
            loss = mas_opd_loss(logps, [it.adv.to(lp.device) for it, lp in zip(chunk, logps)],
                                weights[lo:lo + args.micro_batch])
            loss.backward()
            loss_sum += loss.item()
        distributed.sum_grads(unique)
        loss_sum = distributed.total(loss_sum)
        out["grad_norm"] = [torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip).item()
                            for model in unique]
        if all(math.isfinite(x) for x in out["grad_norm"] + [loss_sum]):
            for opt in optims:
                opt.step()
            out["updates"] += 1
        else:
            print(f"!!! non-finite loss/gradient (loss {loss_sum}, grad norms {out['grad_norm']}); update skipped",
                  file=sys.stderr)
            out["skipped"] = 1
        for opt in optims:
            opt.zero_grad(set_to_none=True)
        out["loss"].append(loss_sum)
    for model in unique:
        model.eval()
    mine = out.pop("gaps", None)  # |sampler - trainer| per token of the first micro-batch, before any update
    gaps = [g for g in distributed.gather(None if mine is None else (mine.max().item(), mine.sum().item(),
                                                                     mine.numel())) if g is not None]
    if not gaps:
        return out
    return {**out, "logprob_gap": max(g[0] for g in gaps),
            "logprob_gap_mean": sum(g[1] for g in gaps) / max(1, sum(g[2] for g in gaps))}


def build(args, teacher=None):
    """Algorithm 1's inputs (App. C): problems, policies (one per role from one base checkpoint, §2.1, or
    shared), the frozen teacher, tokenizer, optimizers, sampler RNG. teacher: an already-built teacher (any module
    sampler.sequence_logprobs can score, over the students' tokenizer) to use instead of loading --teacher."""
    problems = load_problems(args.problems)
    roles = sorted({r for p in problems for r in ROLES[p["domain"]]})
    n_policies = 1 if args.shared_policy else len(roles)
    if distributed.rank() == 0:  # the rank that writes checkpoints; configs only, before any weights load
        print(check_disk(args, n_policies))
    ckpt = os.path.join(args.out, "checkpoint")
    if args.resume and not os.path.isdir(ckpt) and os.path.isdir(ckpt + ".old"):
        ckpt += ".old"  # a crash between the two renames of save_checkpoint
    if args.resume and not os.path.isfile(os.path.join(ckpt, "state.pt")):
        raise ValueError(f"--resume: no checkpoint in {args.out}")
    # state.pt first, so that a damaged checkpoint fails before any model loads
    state = read_state(os.path.join(ckpt, "state.pt")) if args.resume else None
    if teacher is None:  # the tokenizers alone first: a mismatch is refused in seconds, before any weights load
        if args.teacher is None:
            raise ValueError("--teacher is required (a model spec, as for --student)")
        same_tokenizer_specs(args.teacher, args.student, (f"--teacher {args.teacher}", f"--student {args.student}"))
        # and the memory plan against what the device has free (configs only); a given teacher is not planned
        check_fits(args, n_policies, distributed.world_size())

    if args.resume:  # the policies of the checkpoint, in fresh aligned storage like a live run's: loaded
        policies, tok = load_policies(ckpt, roles, "cpu")  # tensors can sit at odd offsets, which changes
        for model in distinct(policies):                    # BLAS summation order and breaks exact resume
            for p in model.parameters():
                p.data = p.data.clone()
    else:  # every policy starts from the same base checkpoint (§2.1)
        base, tok = load_model(args.student, seed=args.seed)
        policies = {r: base if args.shared_policy or i == 0 else copy.deepcopy(base) for i, r in enumerate(roles)}
    check_prompt_limit(problems, tok, args.max_prompt_tokens)  # before the teacher, the longest load
    if teacher is None:
        teacher = load_model(args.teacher, seed=args.seed + 1)[0]
    forget_gguf()  # every model is loaded: the de-quantized GGUF kept for the next load would only take memory
    device = torch.device(args.device)
    to_dtype(teacher, DTYPES[args.precision]).to("cpu" if args.teacher_offload else device).eval().requires_grad_(False)
    unique = distinct(policies)
    for model in unique:  # fp32 master weights in every precision: lr 1e-6 updates would vanish in bf16 weights
        model.to(device)
        if args.grad_checkpointing:
            model.activation_checkpointing_enable()
    # AdamW, i.e. Adam with decoupled weight decay 0.01 (the paper says Adam with wd, not which form: DECISIONS.md D9)
    optims = [torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay) for model in unique]
    rank, world = distributed.rank(), distributed.world_size()
    gen = torch.Generator(device=device).manual_seed(args.seed + rank)  # each rank samples its own episodes
    start, skipped = 0, 0
    if args.resume:
        for opt, s in zip(optims, state["optims"]):
            opt.load_state_dict(s)
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        start, skipped = state["step"] + 1, state["skipped"]
        samplers = state["rng"]["sampler"]  # one state per rank of the run that saved it
        if len(samplers) == world:
            gen.set_state(samplers[rank])
        else:  # another world size: a fresh stream per rank, fixed by seed, step and rank
            gen.manual_seed(random.Random(f"{args.seed}-{start}-{rank}").getrandbits(63))
    return problems, policies, teacher, tok, optims, gen, start, skipped


def main(argv=None, teacher=None):
    """The command line: Algorithm 1's loop (App. C) with evaluation before and after; `teacher`, when given, is
    used instead of loading --teacher (see build). Under torchrun every rank runs this; rank 0 alone prints,
    evaluates and writes (metrics.jsonl, checkpoints, results.json)."""
    args = get_args(argv)
    rank, world, args.device = distributed.init(args.device)
    say = print if rank == 0 else lambda *a, **k: None
    hf_logging.disable_progress_bar()  # one bar (ours) per run, not one per saved shard
    say(preset_line(args))
    say("config:", json.dumps(vars(args)))
    say(cpu_threads(args.threads))
    stop_on_sigterm()
    say("sandbox:", describe())
    say(f"ranks: {world} (torchrun), each rolls out and scores {math.ceil(args.batch / world)} of the "
        f"{args.batch} episodes of a step" if world > 1 else "ranks: 1")
    if teacher is not None:
        say(f"teacher: {type(teacher).__name__}, given by the caller (--teacher is not loaded)")
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    try:
        check_writable(args.out, "--out", directory=True)  # before the models load, not at the first save
        held_out = load_problems(args.eval_problems) if args.eval_problems else None
        problems, policies, teacher, tok, optims, gen, start, skipped = build(args, teacher)
        rollout_models = rollout_copies(policies, args)
        check_prompt_limit(held_out or [], tok, args.max_prompt_tokens)
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    metrics_path = os.path.join(args.out, "metrics.jsonl")
    samples_path = os.path.join(args.out, "samples.jsonl")
    episodes_path = os.path.join(args.out, "episodes.jsonl" if rank == 0 else f"episodes.rank{rank}.jsonl")
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        start_log(metrics_path, start)
        start_log(samples_path, start)
    distributed.barrier()  # OUT exists before any rank writes its episodes there
    if args.save_episodes:
        start_log(episodes_path, start)
    record = (lambda step, episodes: append_episodes(episodes_path, episodes, step=step)) if args.save_episodes \
        else None
    if held_out and rank == 0:  # evaluated as Phase 1 samples: on the bf16 copies under --precision bf16
        results = {"before": evaluate_policies(held_out, rollout_models, tok, args)} if start == 0 else {}
    for step in tqdm(range(start, args.steps), desc="steps", initial=start, total=args.steps, disable=rank != 0):
        metrics = train_step(step, problems, policies, optims, teacher, tok, args, gen, rollout_models, record,
                             progress=rank == 0, samples=samples_path if rank == 0 else None)
        skipped += metrics["skipped"]
        metrics["skipped_total"] = skipped
        if rank == 0:
            with open(metrics_path, "a") as f:
                f.write(json_text(metrics) + "\n")
            tqdm.write(step_line(metrics))  # stays on screen above the bar
        if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
            samplers = distributed.gather(gen.get_state())  # every rank's stream, so that a resume continues each
            if rank == 0:
                save_checkpoint(args.out, step, policies, optims, tok, samplers, skipped, args)
    say(f"done: {args.steps - start} steps, {skipped} skipped; metrics in {metrics_path}, "
        f"checkpoint in {os.path.join(args.out, 'checkpoint')}")
    if held_out and rank == 0:
        refresh(rollout_models, policies)  # the copies still hold the weights from before the last update
        results["after"] = evaluate_policies(held_out, rollout_models, tok, args)
        print(markdown({f"{k} ({len(held_out)} held-out problems, seeds {args.eval_seeds})": v
                        for k, v in results.items()}))
        write_atomic(os.path.join(args.out, "results.json"), json_text(results, indent=1))
    if rank == 0:
        print(f"report: {write_report(args.out)}")
    distributed.barrier()  # no rank leaves while rank 0 still writes or evaluates
    distributed.finish()


def evaluate_policies(problems, policies, tok, args, exchange=False):
    """Team accuracy, revise-iff-wrong and turns on held-out problems over args.eval_seeds, with eval.py's
    decoding (App. D.5); with exchange=True also the exchange penalty (Fig. 3a). Rank 0 only: it shows progress."""
    cfg = rollout_config(args, progress=True, **EVAL_DECODING)
    out = evaluate(problems, policies, tok, args.eval_seeds, cfg, exchange=exchange,
                   on_run=lambda *run: tqdm.write(run_line(*run)))
    release_decoder()
    return out


if __name__ == "__main__":
    main()
