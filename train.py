"""MAS-OPD training: Algorithm 1 (App. C) as one readable loop.

Per step: Phase 1 the students roll out jointly (rollout.py); Phase 2 the verifier
attributes every completed turn (attribution.py), then the frozen teacher scores every
response twice, under the target and the contrast role condition (teacher.py), giving
A^RAS (Eq. 10); Phase 3 the loss of Eq. 13 (loss.py) updates each role's policy from its
own responses, all policies synchronously. Verdicts and teacher scores are then dropped.
What a run starts from is infra/launch.py's, its files infra/'s, several ranks and
offloading scaling/'s; a variant brings its own step (baselines/grpo.py) or Phase 1 and
2a (teams/). Tiny random models, every phase in seconds; the paper's schedule (the
defaults, App. D.6.1, D.6.3; --preset for other scales); the laptop demo; eight GPUs:

    python train.py --problems examples/problems.jsonl --student tiny-qwen3 --teacher tiny-qwen3 --steps 3
    python train.py --problems FILE --student DIR --teacher DIR
    python -m toy
    torchrun --nproc-per-node 8 train.py --problems FILE --student DIR --teacher DIR --fsdp
"""

from config import get_args
from infra.cli import flags_first

if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(get_args)

import math
import random
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

import torch
from tqdm import tqdm
from transformers.utils import logging as hf_logging

from attribution import attribute_episodes
from eval import evaluate_policies, markdown
from infra.checkpoint import checkpoint
from infra.data import ProblemError, check_writable, load_problems
from infra.launch import attribution_judge, build, start_lines
from infra.metrics import StepLog, gap_metrics, logprob_gap, rollout_counts
from infra.report import write_report
from infra.runs import check_run, evaluation_before, open_logs, save_results
from infra.stopping import done_line, stop_line, stop_on_signals
from loss import eq13_weights, mas_opd_loss, ras_advantage
from prompts import check_prompt_limit
from rollout import Response, rollout_config, run_episodes
from sampler import release_decoder, sequence_logprobs
from sandbox.jail import check_isolation
from scaling import distributed
from scaling.offload import teacher_on_device
from scaling.sharding import lockstep
from teacher import score_both_passes, teacher_inputs
from teams.phases import phases


@dataclass
class Scored:
    """One student response on its way through Phases 2 and 3. Per-token tensors have
    shape (L,), L = its tokens."""

    episode: int  # its episode's index in the step's batch (Eq. 13 averages by it)
    seat: str  # its author: its gradient goes to policies[seat] only
    response: Response  # the student's context x_i^t and its sampled tokens y_i^t
    ctx_target: list  # u~ (Eq. 12) under the target role's condition r_i, token ids
    # u~ (Eq. 12) under the contrast condition kappa(r_i) (Eq. 23), token ids
    ctx_contrast: list
    lp_student: torch.Tensor  # log pi_theta_i(y_k | x, y_<k), the sampler's (App. C)
    lp_target: torch.Tensor = None  # l^(i)_k, the teacher under r_i (Eq. 7)
    lp_contrast: torch.Tensor = None  # l^(j)_k, the teacher under r_j, j = kappa(i)
    adv: torch.Tensor = None  # A^RAS_k (Eq. 10), detached


def autocast(args):
    """bf16 compute over the fp32 master weights, or nothing (precision is left open by
    the paper, DECISIONS.md D9)."""
    if args.precision != "bf16":
        return nullcontext()
    return torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16)


def batch_for_step(problems, step, batch, seed):
    """The problems of one step: epoch-wise shuffles derived from the seed alone, so a
    resumed run draws the same problems as an uninterrupted one without storing a
    data-loader state."""
    out, n = [], len(problems)
    for k in range(step * batch, (step + 1) * batch):
        epoch, i = divmod(k, n)
        out.append(problems[random.Random(f"{seed}-{epoch}").sample(range(n), n)[i]])
    return out


def train_step(step, s, args, log=None):
    """One iteration of Algorithm 1 (App. C): rollout -> attribute -> two teacher passes
    -> advantages -> update. s: its inputs (infra.launch.Start); log: what the run keeps
    of the step (infra.metrics.StepLog). Returns the step's metrics.jsonl record."""
    log = log or StepLog(step, args.device)
    cfg = rollout_config(args, progress=log.show)
    batch = batch_for_step(s.problems, step, args.batch, args.seed)
    ids = distributed.share(args.batch)  # this rank's episodes (all in one process)
    with log.phase("rollout"):  # Phase 1: the students' joint rollout (Eq. 1-3)
        episodes = joint_rollout([batch[i] for i in ids], s, cfg, args)
        log.record(episodes)
    with log.phase("attribution"):  # Phase 2a, PAC: a^t of every turn (Eq. 11)
        attributions = s.attribute(
            episodes, timeout=cfg.code_timeout, workers=args.workers
        )
    with log.phase("teacher"):  # Phase 2b, RAS: two teacher passes, A^RAS (Eq. 7-10)
        items, overlong = teacher_scores(episodes, attributions, ids, s, args)
    log.sample(items, batch)  # a few scored responses for the heat maps (App. G.2)
    with log.phase("update"):  # Phase 3: Eq. 13, all policies synchronously
        updated = update(items, args.batch, s.policies, s.optims, args)
    return log.close(rollout_counts(episodes, attributions, items, overlong), updated)


def teacher_scores(episodes, attributions, ids, s, args):
    """Phase 2b: each response scored by the teacher s.teacher under r_i and kappa(r_i)
    (Eq. 7), then A^RAS (Eq. 10) from the sampler's log-probs. ids: each episode's index
    in the step's batch. -> (Scored items, teacher-overlong count)."""
    # u~ under r_i and kappa(r_i), with the verdicts c^{<t} unless w/o PAC (Eq. 12)
    limit, pac = args.teacher_max_prompt_tokens, not args.no_pac
    inputs, overlong = teacher_inputs(episodes, attributions, s.tok, limit, pac)
    items = [
        Scored(ids[k], seat, resp, target, contrast, torch.tensor(resp.logprobs))
        for k, seat, resp, target, contrast in inputs
    ]
    targets = [it.ctx_target for it in items]
    contrasts = [it.ctx_contrast for it in items]
    responses = [it.response.tokens for it in items]
    with (
        autocast(args),
        teacher_on_device(s.teacher, args.device, args.teacher_offload),
    ):
        lps = score_both_passes(  # Eq. 7, twice
            s.teacher, targets, contrasts, responses, args.teacher_batch_tokens
        )
    for it, lp_target, lp_contrast in zip(items, *lps):
        it.lp_target, it.lp_contrast = lp_target, lp_contrast
        # Eq. 10
        it.adv = ras_advantage(lp_target, lp_contrast, it.lp_student, args.lam)
    return items, overlong


def joint_rollout(problems, s, cfg, args, play=None):
    """Phase 1 of Algorithm 1 (App. C): the students' episodes (play: s.play, or a
    variant's protocol) sampled by the policies or by their bf16 copies, which follow
    every optimizer step (infra/launch.py). The copies sample without autocast, Eq. 13
    differentiates the masters under it: metrics.jsonl's logprob_gap (0: on-policy)."""
    play = play or s.play
    with autocast(args) if s.rollout_models is s.policies else nullcontext():
        episodes = play(problems, s.rollout_models, s.tok, cfg, s.gen)
    # the sampler's KV cache, before the teacher and the update need the memory
    release_decoder()
    return episodes


def author_logprobs(items, policies):
    """Eq. 13's log pi_theta_i(y_k | x, y_<k), with grad: each response re-scored by its
    author's policy only, with the sampler's force-decoding (a sharded policy answers it
    alike, scaling/sharding.py). -> one (L,) tensor per item."""
    logps = [None] * len(items)
    for model in dict.fromkeys(policies.values()):
        idx = [k for k, it in enumerate(items) if policies[it.seat] is model]
        if idx:
            contexts = [items[k].response.context_ids for k in idx]
            responses = [items[k].response.tokens for k in idx]
            for k, lp in zip(idx, sequence_logprobs(model, contexts, responses)):
                logps[k] = lp
    return logps


def micro_batches(mb, weights, size):
    """Gradient accumulation: one mini-batch's responses and their Eq. 13 weights in
    consecutive runs of `size` -> [(items, weights)]."""
    return [
        (mb[lo : lo + size], weights[lo : lo + size]) for lo in range(0, len(mb), size)
    ]


def update(items, n_episodes, policies, optims, args):
    """Phase 3: the loss of Eq. 13 over mini-batches of `args.mini_batch` episodes (one
    optimizer step each, all policies together), accumulated over micro-batches of
    `args.micro_batch` responses; batch semantics: DECISIONS.md D8. A non-finite
    advantage skips the step, a non-finite loss or gradient that update. Under torchrun
    `items` are this rank's share, the counts and gradients summed over ranks: each rank
    takes the update of the whole batch. Returns the update's metrics."""
    out = {"loss": [], "updates": 0, "skipped": int(distributed.total(len(items)) == 0)}
    if nonfinite_advantage(items):
        return {**out, "skipped": 1}
    unique, gap = list(dict.fromkeys(policies.values())), None
    # FSDP2 is SPMD: every rank runs the same micro-batches (scaling/sharding.py)
    split = partial(lockstep, policies=policies) if args.fsdp else micro_batches
    for model in unique:
        model.train()
    # one optimizer step per mini-batch
    for first in range(0, n_episodes, args.mini_batch):
        mb = [it for it in items if first <= it.episode < first + args.mini_batch]
        n_mb = distributed.total(len({it.episode for it in mb}))  # E of Eq. 13
        if not n_mb:
            continue
        # w_i
        weights = eq13_weights([it.seat for it in mb], [it.episode for it in mb], n_mb)
        loss_sum = 0.0
        for chunk, w in split(mb, weights, args.micro_batch):  # gradients accumulated
            with autocast(args):
                # log pi_theta_i(y_k | x, y_<k)
                logps = author_logprobs(chunk, policies)
            # the first micro-batch: still on-policy
            gap = gap or logprob_gap(logps, chunk)
            advs = [it.adv.to(lp.device) for it, lp in zip(chunk, logps)]
            loss = mas_opd_loss(logps, advs, w)  # Eq. 13
            loss.backward()
            loss_sum += loss.item()
        optimizer_step(unique, optims, loss_sum, args, out)  # every policy at once
    for model in unique:
        model.eval()
    # over every rank's first micro-batch
    return {**out, **gap_metrics(distributed.gather(gap))}


def nonfinite_advantage(items):
    """Whether any rank holds a non-finite A^RAS (Eq. 10): then no rank updates."""
    if not distributed.total(not all(torch.isfinite(it.adv).all() for it in items)):
        return False
    print("!!! non-finite advantage; step skipped, no update", file=sys.stderr)
    return True


def optimizer_step(unique, optims, loss_sum, args, out):
    """One step of every policy on the mini-batch's gradients, summed over ranks and
    clipped to args.grad_clip; a non-finite loss or gradient skips it. Appends the
    mini-batch's loss (all ranks) to out["loss"], sets out["grad_norm"], counts
    out["updates"] and marks out["skipped"]."""
    distributed.sum_grads(unique)
    loss_sum = distributed.total(loss_sum)
    out["grad_norm"] = [
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip).item()
        for model in unique
    ]
    if all(math.isfinite(x) for x in out["grad_norm"] + [loss_sum]):
        # one policy at a time (--optimizer-offload: scaling/offload.py)
        for opt in optims:
            opt.step()
        out["updates"] += 1
    else:
        why = f"loss {loss_sum}, grad norms {out['grad_norm']}"
        print(f"!!! non-finite loss/gradient ({why}); update skipped", file=sys.stderr)
        out["skipped"] = 1
    for opt in optims:
        opt.zero_grad(set_to_none=True)
    out["loss"].append(loss_sum)


def main(argv=None, teacher=None, again="--resume"):
    """The command line: Algorithm 1's loop (App. C) with evaluation before and after;
    `teacher`, when given, is used instead of loading --teacher (see build); `again`:
    the flag that continues the run in the calling command (infra/stopping.py)."""
    run(get_args(argv), teacher, again=again)


def run(args, teacher=None, step_fn=None, evaluate=None, again="--resume"):
    """Algorithm 1's loop on parsed args (config.get_args); step_fn and evaluate: a
    variant's step and held-out evaluation (baselines/grpo.py). Under torchrun every
    rank runs this; rank 0 alone prints, evaluates and writes."""
    step_fn, evaluate = step_fn or train_step, evaluate or evaluate_policies
    rank, world, args.device = distributed.init(args.device)
    say = print if rank == 0 else lambda *a, **k: None
    hf_logging.disable_progress_bar()  # one bar (ours) per run, not one per saved shard
    # SIGINT, SIGTERM: exit 130, 143 and one line (rank 0's)
    stop_on_signals(partial(stop_line, args, again=again) if rank == 0 else None)
    for line in start_lines(args, world, teacher):
        say(line)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    try:
        s, held_out = start(args, teacher, say)
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    logs = open_logs(args, rank, s.step)  # metrics.jsonl, samples.jsonl, episodes
    skipped, results = s.skipped, {}
    # evaluated as Phase 1 samples: on the rollout models
    evaluated = lambda: evaluate(held_out, s.rollout_models, s.tok, args)
    if held_out and rank == 0:  # written at once, read back on resume
        results = evaluation_before(args, s.step, evaluated)
    steps = range(s.step, args.steps)
    for step in tqdm(steps, "steps", args.steps, initial=s.step, disable=rank != 0):
        # the report's heat maps (App. G.2) show the first and the last step
        sampled = logs.samples if rank == 0 and step in (0, args.steps - 1) else None
        log = StepLog(step, args.device, rank == 0, logs.episodes, sampled, s.tok)
        metrics = step_fn(step, s, args, log)
        skipped += metrics["skipped"]
        metrics["skipped_total"] = skipped
        if rank == 0:
            logs.write(metrics)
        if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
            checkpoint(s, step, skipped, args)
    if held_out and rank == 0:
        results["after"] = evaluated()
        held = f"({len(held_out)} held-out problems, seeds {args.eval_seeds})"
        print(markdown({f"{k} {held}": v for k, v in results.items()}))
        save_results(args, results)
    say(done_line(args, s.step, skipped))  # the command's end, in run.json too
    if rank == 0:
        print(f"report: {write_report(args.out)}")
    distributed.barrier()  # no rank leaves while rank 0 still writes or evaluates
    distributed.finish()


def start(args, teacher, say):
    """What a run checks and builds before its first step, a refusal in one line each:
    the jail, --out, a run already there, the models (infra.launch.build), Phase 1 and
    2a, the held-out problems. -> (infra.launch.Start, held-out problems or None)."""
    if note := check_isolation(args.unisolated_programs):  # before anything loads
        say(note)
    # a run in OUT never written over, a link in it refused: before the probe below writes
    check_run(args)
    check_writable(args.out, "--out", directory=True)  # before the models load
    held_out = load_problems(args.eval_problems) if args.eval_problems else None
    s = build(args, teacher)
    # Phase 1 and 2a: the pair's, unless a team of 2n agents or PAC by the attribution
    # model brings its own (teams/)
    play, attribute = phases(args, attribution_judge(args, s.teacher, s.tok), s.tok)
    s.play, s.attribute = play or run_episodes, attribute or attribute_episodes
    check_prompt_limit(held_out or [], s.tok, args.max_prompt_tokens)
    return s, held_out


if __name__ == "__main__":
    main()
