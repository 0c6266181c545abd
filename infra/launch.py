"""What train.py's run starts from, built before its first step: Algorithm 1's inputs (App. C) from the command
line (problems, policies from one base checkpoint or the checkpoint to resume, the frozen teacher, the tokenizer,
optimizers, the sampler's RNG), every refusal that needs no weights made before any loads; and the bf16 rollout
copies the students sample with, refreshed from their fp32 masters at every optimizer step, so that the training
loop never has to.
"""

import copy
import json
import math
import os
import random
from dataclasses import dataclass
from functools import partial

import torch

from config import preset_line
from infra.checkpoint import (
    check_disk,
    distinct,
    last_checkpoint,
    load_policies,
    read_state,
)
from infra.data import load_problems
from infra.models import (
    DTYPES,
    config_of,
    cpu_threads,
    forget_gguf,
    load_model,
    same_tokenizer_specs,
    to_dtype,
)
from infra.seats import team_seats
from prompts import check_prompt_limit, stop_ids_of
from sampler import generate
from sandbox.jail import jail_line
from scaling import distributed
from scaling.memory import check_fits
from scaling.offload import offload_moments, park
from scaling.sharding import load_optimizer, shard, whole


@dataclass
class Start:
    """What build returns: Algorithm 1's inputs (App. C) and the step the run starts at."""

    # the training problems (infra/data.py's schema)
    problems: list
    # seat -> policy pi_theta_i (one model in every seat under --shared-policy)
    policies: dict
    # the frozen teacher, on the device (on the CPU under --teacher-offload); None for the GRPO
    # baselines, whose rewards need none (App. D.4)
    teacher: torch.nn.Module
    # the students' tokenizer, the teacher's too
    tok: object
    # one AdamW per distinct policy, in distinct(policies)' order
    optims: list
    # this rank's sampler RNG
    gen: torch.Generator
    # seat -> what Phase 1 samples with (rollout_copies)
    rollout_models: dict
    # the first step to run: 0, or the resumed checkpoint's step + 1
    step: int = 0
    # steps skipped before it (resumed)
    skipped: int = 0
    # Phase 1, a function of rollout.run_episodes' arguments, and Phase 2a, of (episodes, *,
    # timeout, workers): train.run sets them, the pair's unless a variant brings its own (teams/)
    play: object = None
    attribute: object = None


def build(args, teacher=None):
    """Algorithm 1's inputs (App. C) as a Start: problems, policies (one per role from one base checkpoint, §2.1,
    or shared), the frozen teacher, tokenizer, optimizers, sampler RNG, and the step to start at (a resumed
    state). teacher: an already-built teacher (any module sampler.sequence_logprobs can score, over the students'
    tokenizer) to use instead of loading --teacher."""
    problems = load_problems(args.problems)
    # a policy per agent: 2n per domain (App. E.1)
    roles = team_seats(problems, args.agents_per_role)
    n_policies = 1 if args.shared_policy else len(roles)
    # None: from step 0 (check_run)
    ckpt = last_checkpoint(args.out)[0] if args.resume else None
    # state.pt first, so that a damaged checkpoint fails before any model loads
    state = read_state(os.path.join(ckpt, "state.pt")) if ckpt else None
    opd = args.objective == "mas-opd"  # the GRPO baselines load no teacher
    if args.fsdp and not distributed.under_torchrun():
        raise ValueError(
            "--fsdp shards across torchrun's ranks: launch train.py with torchrun (one GPU: torchrun "
            "--nproc-per-node 1 train.py ...)"
        )
    if args.fsdp_offload and (not args.fsdp or args.optimizer_offload):
        raise ValueError(
            "--fsdp-offload is FSDP2's offload of --fsdp's shards, the moments included: give it with "
            "--fsdp and without --optimizer-offload"
        )
    # the tokenizers alone first: a mismatch is refused in seconds, before any weights load
    if teacher is None and opd:
        if args.teacher is None:
            raise ValueError("--teacher is required (a model spec, as for --student)")
        same_tokenizer_specs(
            args.teacher,
            args.student,
            (f"--teacher {args.teacher}", f"--student {args.student}"),
        )
        # and the memory plan against what the device has free (configs only); a given teacher is not planned
        check_fits(
            args,
            (config_of(args.student), config_of(args.teacher)),
            n_policies,
            distributed.world_size(),
        )

    # the policies of the checkpoint, in fresh aligned storage like a live run's: loaded
    if state:
        # tensors can sit at odd offsets, which changes
        policies, tok = load_policies(ckpt, roles, "cpu")
        for model in distinct(policies):  # BLAS summation order and breaks exact resume
            for p in model.parameters():
                p.data = p.data.clone()
    else:  # every policy starts from the same base checkpoint (§2.1)
        base, tok = load_model(args.student, seed=args.seed)
        policies = {
            r: base if args.shared_policy or i == 0 else copy.deepcopy(base)
            for i, r in enumerate(roles)
        }
    # the rank that writes checkpoints, measured from what they will hold, before the teacher, the longest load
    if distributed.rank() == 0:
        print(check_disk(args, policies, tok))
    check_prompt_limit(problems, tok, args.max_prompt_tokens)
    if teacher is None and opd:
        teacher = load_model(args.teacher, seed=args.seed + 1)[0]
    teacher = teacher if opd else None
    # every model is loaded: the de-quantized GGUF kept for the next load would only take memory
    forget_gguf()
    device = torch.device(args.device)
    if teacher is not None:
        to_dtype(teacher, DTYPES[args.precision]).to(
            "cpu" if args.teacher_offload else device
        ).eval()
        teacher.requires_grad_(False)
    unique = distinct(policies)
    # fp32 master weights in every precision: lr 1e-6 updates would vanish in bf16 weights
    for model in unique:
        model.to(device)
        if args.grad_checkpointing:
            model.activation_checkpointing_enable()
    # whole copies, before any policy is sharded
    rollout_models = rollout_copies(policies, args)
    # FSDP2 units, then the optimizers on the shards (scaling/sharding.py)
    if args.fsdp:
        roots = {model: shard(model, args.fsdp_offload) for model in unique}
        policies, unique = (
            {r: roots[m] for r, m in policies.items()},
            [roots[m] for m in unique],
        )
    # AdamW, i.e. Adam with decoupled weight decay 0.01 (the paper says Adam with wd, not which form: DECISIONS.md D9)
    optims = [
        torch.optim.AdamW(
            model.parameters(), lr=args.lr, weight_decay=args.weight_decay
        )
        for model in unique
    ]
    for model, opt in zip(unique, optims):
        seat = next(s for s, p in policies.items() if p is model)
        # Phase 1 samples the policy each step has just updated (on-policy)
        if rollout_models[seat] is not model:
            opt.register_step_post_hook(partial(follow, rollout_models[seat], model))
        # the moments on the device inside their own step only
        if args.optimizer_offload:
            offload_moments(opt)
    rank, world = distributed.rank(), distributed.world_size()
    # each rank samples its own episodes
    gen = torch.Generator(device=device).manual_seed(args.seed + rank)
    start, skipped = 0, 0
    if state:
        for model, opt, s in zip(unique, optims, state["optims"]):
            # onto the device; with --optimizer-offload back to host memory at once
            load_optimizer(model, opt, s)
            if args.optimizer_offload:
                park(opt)
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        start, skipped = state["step"] + 1, state["skipped"]
        # one state per rank of the run that saved it
        samplers = state["rng"]["sampler"]
        if len(samplers) == world:
            gen.set_state(samplers[rank])
        # another world size: a fresh stream per rank, fixed by seed, step and rank
        else:
            gen.manual_seed(
                random.Random(f"{args.seed}-{start}-{rank}").getrandbits(63)
            )
    return Start(
        problems,
        policies,
        teacher,
        tok,
        optims,
        gen,
        rollout_models,
        step=start,
        skipped=skipped,
    )


def rollout_copies(policies, args):
    """role -> the model Phase 1 (App. C) samples with, whose log-probs are Eq. 8's log pi_theta. Under --precision
    bf16 a bf16 copy of each policy (one per distinct policy), refreshed from the fp32 masters at every optimizer
    step (follow): decoding reads half the bytes, casts nothing per step, and its step can be recorded as a CUDA graph
    (sampler.decoder). Under --fsdp a whole copy in any precision (ranks decode apart, FSDP2 runs in step). Otherwise
    the policies."""
    if args.precision != "bf16" and not args.fsdp:
        return policies
    copies = {
        m: to_dtype(copy.deepcopy(m), DTYPES[args.precision])
        .eval()
        .requires_grad_(False)  # RoPE stays fp32
        for m in distinct(policies)
    }
    return {r: copies[m] for r, m in policies.items()}


@torch.no_grad()
def follow(rollout_model, policy, *hook_args):
    """Copy a policy's fp32 master weights into its rollout copy, in place (a recorded decode step keeps reading
    the same storage), so that Phase 1 samples from the policy Eq. 13 just updated (App. C: on-policy): the step
    hook build registers on the policy's optimizer. A sharded policy is gathered parameter by parameter: every rank
    calls this (every rank steps every optimizer)."""
    for c, p in zip(rollout_model.parameters(), policy.parameters()):
        c.copy_(whole(p))


def refresh(rollout_models, policies):
    """follow for every distinct policy that has a rollout copy (seat -> model dicts)."""
    for m in distinct(policies):
        seat = next(s for s, p in policies.items() if p is m)
        if rollout_models[seat] is not m:
            follow(rollout_models[seat], m)


def start_lines(args, world, teacher):
    """What a run prints before it builds anything: the preset and the whole configuration, torch's CPU threads
    (set here), the sandbox's jail, the ranks, and a teacher the caller handed over."""
    yield preset_line(args)
    yield "config: " + json.dumps(vars(args))
    yield cpu_threads(args.threads)
    yield "sandbox: " + jail_line()
    share = math.ceil(args.batch / world)
    yield (
        f"ranks: {world} (torchrun), each rolls out and scores {share} of the {args.batch} episodes of a "
        "step"
        if world > 1
        else "ranks: 1"
    )
    if teacher is not None:
        yield f"teacher: {type(teacher).__name__}, given by the caller (--teacher is not loaded)"


def attribution_judge(args, teacher, tok, max_new_tokens=64):
    """PAC's attribution model under --attribution model (App. E.1.3): --attribution-model, else the frozen teacher,
    as a function list[list[int]] -> Generation that answers greedily (teams.verdicts.attribute_by_model); None for
    the verifier's route. It judges and is never trained: it is not an agent of the team."""
    if args.attribution == "verifier":
        return None
    model = (
        teacher
        if args.attribution_model is None
        else load_model(args.attribution_model, seed=args.seed)[0]
    )
    if model is None:
        raise ValueError(
            "--attribution model: give --attribution-model (the GRPO baselines load no teacher)"
        )
    model.to(args.device).eval()
    return lambda prompts: generate(
        model, prompts, max_new_tokens, temperature=0, stop_ids=stop_ids_of(tok)
    )
