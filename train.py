"""MAS-OPD training: Algorithm 1 (App. C) as one readable loop.

Per step: Phase 1 the students roll out jointly (rollout.py); Phase 2 the verifier attributes every completed
turn (attribution.py), then the frozen teacher scores every response twice, under the target and the contrast
role condition (teacher.py); advantages A^RAS (Eq. 10); Phase 3 the loss of Eq. 13 (loss.py) updates each
role's policy from its own responses, all policies synchronously. Verdicts and teacher scores are then dropped.

    python train.py                                  # the toy preset (toy.py): build, evaluate, train, evaluate
    python train.py --problems examples/problems.jsonl --student tiny-qwen3 --teacher tiny-qwen3 --steps 3
                                                     # tiny random models: every step of the protocol, seconds
    python train.py --problems FILE --student DIR --teacher DIR --steps 150 --batch 128 --mini-batch 64 \
        --micro-batch 8 --max-new-tokens 4096 --lr 1e-6  # the paper's schedule on real models
"""
import argparse
import copy
import json
import math
import os
import random
import resource
import shutil
import sys
import time
from contextlib import nullcontext

import torch
from tqdm import tqdm
from transformers.utils import logging as hf_logging

from attribution import attribute_episodes, verdicts_before
from data import ProblemError, write_atomic
import memory
from eval import EVAL_DECODING, evaluate, load_policies, markdown
from loss import eq13_weights, opd_advantage, ras_advantage, role_advantage, weighted_loss
from models import check_same_tokenizer, load_model
from rollout import ROLES, RolloutConfig, run_episodes
from teacher import KAPPA, score, sequence_logprobs, teacher_context
from toy import load_problem_set, resolve


def get_args(argv=None):
    ap = argparse.ArgumentParser(description="MAS-OPD training (Algorithm 1). Paper values in brackets.")
    a = ap.add_argument
    a("--problems", default="toy", help="JSONL problem file (schema: data.py), or 'toy': the toy world's train "
      "split")
    a("--student", default="toy", help="toy | tiny-qwen3 | tiny-llama | local dir | .gguf | hub id [Qwen3-1.7B]")
    a("--teacher", default="toy-teacher", help="toy-teacher | same choices as --student; a tiny random teacher is "
      "drawn from seed+1 [Qwen3-14B]")
    a("--eval-problems", default=None, help="held-out problems evaluated before and after training "
      "(default: the toy world's test split when --problems toy, else none)")
    a("--eval-seeds", type=int, nargs="+", default=[1000, 1001])
    a("--no-eval", action="store_true", help="skip the evaluation before and after training")
    a("--cache", default=".cache", help="where the toy world's models are built once")
    a("--out", default="runs/default", help="metrics.jsonl and checkpoint/ go here")
    a("--resume", action="store_true", help="continue from OUT/checkpoint")
    a("--steps", type=int, default=20, help="[150]")
    a("--batch", type=int, default=16, help="problems (episodes) per step [128]")
    a("--mini-batch", type=int, default=8, help="episodes per optimizer update [64]")
    a("--micro-batch", type=int, default=64, help="responses per forward/backward (gradient accumulation)")
    a("--lam", type=float, default=0.1, help="lambda of Eq. 10; 0 = w/o RAS [0.1]")
    a("--no-pac", action="store_true", help="teacher sees only the student-visible context (w/o PAC)")
    a("--shared-policy", action="store_true", help="one student in every seat")
    a("--lr", type=float, default=2e-4, help="toy preset; the paper's models: [1e-6]")
    a("--weight-decay", type=float, default=0.01, help="[0.01]")
    a("--grad-clip", type=float, default=1.0, help="[1.0]")
    a("--max-turns", type=int, default=4, help="[4]")
    a("--max-new-tokens", type=int, default=48, help="student response limit [4096]")
    a("--max-prompt-tokens", type=int, default=8192, help="student prompt limit [8192]")
    a("--teacher-max-prompt-tokens", type=int, default=12288, help="teacher prompt limit [12288]")
    a("--teacher-batch-tokens", type=int, default=16384, help="padded tokens per teacher forward")
    a("--temperature", type=float, default=1.0, help="[1.0]")
    a("--top-p", type=float, default=1.0, help="[1.0]")
    a("--top-k", type=int, default=0, help="0 = off [off]")
    a("--precision", choices=("fp32", "bf16"), default=None, help="default: bf16 on GPU, fp32 on CPU")
    a("--grad-checkpointing", action="store_true")
    a("--rollout-chunk", type=int, default=0, help="prompts per generate call, 0 = all (bounds the KV cache)")
    a("--teacher-offload", action="store_true", help="keep the teacher on the CPU except while it scores")
    a("--dry-run", action="store_true", help="print the memory plan (memory.py) for these settings and exit")
    a("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a("--workers", type=int, default=4, help="sandbox runs at once")
    a("--save-every", type=int, default=1, help="steps between checkpoints (and always at the end)")
    a("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.precision = args.precision or ("bf16" if args.device.startswith("cuda") else "fp32")
    for name in ("steps", "batch", "mini_batch", "micro_batch", "max_turns", "max_new_tokens", "save_every"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.lam < 0:
        ap.error("--lam must be >= 0")
    return args


def batch_for_step(problems, step, batch, seed):
    """The problems of one step: epoch-wise shuffles derived from the seed alone, so a resumed run draws the
    same problems as an uninterrupted one without storing a data-loader state."""
    out = []
    for k in range(step * batch, (step + 1) * batch):
        epoch, i = divmod(k, len(problems))
        out.append(problems[random.Random(f"{seed}-{epoch}").sample(range(len(problems)), len(problems))[i]])
    return out


def peak_memory_mb(device):
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def role_stats(items):
    """Per role: token means of A^OPD, A^role and the sampled reverse-KL estimate log pi_theta - log pi_T."""
    out = {}
    for role in sorted({it["role"] for it in items}):
        mine = [it for it in items if it["role"] == role]
        lp_s, lp_t, lp_c = (torch.cat([it[k] for it in mine]) for k in ("lp_s", "lp_t", "lp_c"))
        out[role] = {"a_opd": opd_advantage(lp_t, lp_s).mean().item(),
                     "a_role": role_advantage(lp_t, lp_c).mean().item(),
                     "reverse_kl": (lp_s - lp_t).mean().item(), "responses": len(mine), "tokens": len(lp_s)}
    return out


def train_step(step, problems, policies, optims, teacher, tok, args, gen):
    """One iteration of Algorithm 1. Returns the step's metrics; the caller decides what to save."""
    m = {"step": step, "seconds": {}, "tokens": {}}
    amp = torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16) if args.precision == "bf16" else nullcontext()
    rcfg = RolloutConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                         max_prompt_tokens=args.max_prompt_tokens, top_p=args.top_p, top_k=args.top_k,
                         workers=args.workers, max_batch=args.rollout_chunk)
    clock = time.perf_counter()

    def lap(phase):
        nonlocal clock
        m["seconds"][phase] = round(time.perf_counter() - clock, 3)
        clock = time.perf_counter()

    # Phase 1: joint rollout, students only.
    with amp:
        episodes = run_episodes(batch_for_step(problems, step, args.batch, args.seed), policies, tok, rcfg, gen)
    lap("rollout")

    # Phase 2a: a^t for every completed turn, all before any scoring (the last turn's verdict goes unused).
    per_episode = attribute_episodes(episodes, timeout=rcfg.code_timeout, workers=args.workers)
    atts = [a for e in episodes for a in per_episode[id(e)]]
    lap("attribution")

    # Phase 2b: two teacher passes per response, on u~ = u (+) r (+) c^{<t} (Eq. 12) with r = r_i and kappa(r_i).
    items, m["teacher_overlong"] = [], 0
    for ei, e in enumerate(episodes):
        for turn in e.turns:
            verdicts = None if args.no_pac else verdicts_before(per_episode[id(e)], turn.t)
            for role, resp in turn.responses.items():
                ctx = [teacher_context(tok, resp.context, r, verdicts, args.teacher_max_prompt_tokens)
                       for r in (role, KAPPA[role])]
                if None in ctx:
                    m["teacher_overlong"] += 1
                    continue
                items.append({"episode": ei, "role": role, "resp": resp, "ctx_t": ctx[0], "ctx_c": ctx[1],
                              "lp_s": torch.tensor(resp.logprobs)})
    if args.teacher_offload:
        teacher.to(args.device)
    with amp:
        for key, lp in (("ctx_t", "lp_t"), ("ctx_c", "lp_c")):
            scores = score(teacher, [it[key] for it in items], [it["resp"].tokens for it in items],
                           max_batch_tokens=args.teacher_batch_tokens)
            for it, s in zip(items, scores):
                it[lp] = s.float()
    if args.teacher_offload:
        teacher.to("cpu")
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    for it in items:  # Eq. 10, with the sampler's student log-probs (App. C)
        it["adv"] = ras_advantage(it["lp_t"], it["lp_c"], it["lp_s"], args.lam)
    lap("teacher")

    m["tokens"] = {"rollout": sum(len(it["resp"].tokens) for it in items),
                   "teacher": sum(len(it["ctx_t"]) + len(it["ctx_c"]) + 2 * len(it["resp"].tokens) for it in items)}
    m["roles"] = role_stats(items) if items else {}
    m["turns_per_episode"] = sum(len(e.turns) for e in episodes) / len(episodes)
    m["conflict_rate"] = sum(not t.agree for e in episodes for t in e.turns) / max(1, len(atts))
    m["stopped"] = {k: sum(e.stopped == k for e in episodes) for k in sorted({e.stopped for e in episodes})}
    m["outcomes"] = {k: sum(a.outcome == k for a in atts) for k in sorted({a.outcome for a in atts})}

    # Phase 3: Eq. 13 over mini-batches of episodes, gradient accumulation over micro-batches of responses.
    m["skipped"], m["loss"], m["updates"] = 0, [], 0
    if not items:
        m["skipped"] = 1
    elif not all(torch.isfinite(it["adv"]).all() for it in items):
        print(f"!!! step {step}: non-finite advantage; step skipped, no update", file=sys.stderr)
        m["skipped"] = 1
        items = []
    unique = distinct(policies)
    for model in unique:
        model.train()
    for first in range(0, len(episodes), args.mini_batch):
        mb = [it for it in items if first <= it["episode"] < first + args.mini_batch]
        if not mb:
            continue
        weights = eq13_weights([it["role"] for it in mb], [it["episode"] for it in mb])
        loss_sum = 0.0
        for lo in range(0, len(mb), args.micro_batch):
            chunk, w = mb[lo:lo + args.micro_batch], weights[lo:lo + args.micro_batch]
            logps = [None] * len(chunk)
            with amp:
                for model in unique:  # each response is re-scored, with grad, by its author's policy only
                    idx = [k for k, it in enumerate(chunk) if policies[it["role"]] is model]
                    if idx:
                        lps = sequence_logprobs(model, [chunk[k]["resp"].context_ids for k in idx],
                                                [chunk[k]["resp"].tokens for k in idx])
                        for k, lp in zip(idx, lps):
                            logps[k] = lp
            if first == 0 and lo == 0:  # on-policy here: recomputed log-probs must match the sampler's
                m["logprob_gap"] = max((lp.detach().cpu() - it["lp_s"]).abs().max().item()
                                       for lp, it in zip(logps, chunk))
            loss = weighted_loss(logps, [it["adv"].to(lp.device) for it, lp in zip(chunk, logps)], w)
            loss.backward()
            loss_sum += loss.item()
        norms = [torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip).item() for model in unique]
        if all(math.isfinite(x) for x in norms + [loss_sum]):
            for opt in optims:
                opt.step()
            m["updates"] += 1
        else:
            print(f"!!! step {step}: non-finite loss/gradient (loss {loss_sum}, grad norms {norms}); update skipped",
                  file=sys.stderr)
            m["skipped"] = 1
        for opt in optims:
            opt.zero_grad(set_to_none=True)
        m["loss"].append(loss_sum)
        m["grad_norm"] = norms
    for model in unique:
        model.eval()
    lap("update")
    m["peak_memory_mb"] = round(peak_memory_mb(args.device), 1)
    return m


# ---------------------------------------------------------------------------------------------- checkpoints

def distinct(policies):
    """The distinct models among role -> model (one when a shared policy sits in every seat)."""
    return list({id(p): p for p in policies.values()}.values())


def policy_names(policies):
    """Directory name per distinct policy: its role, or 'shared' when one model sits in every seat."""
    names = {}
    for role, model in policies.items():
        names.setdefault(id(model), "shared" if len(distinct(policies)) == 1 else role)
    return names


def save_checkpoint(out, step, policies, optims, tok, gen, skipped, args):
    """Write OUT/checkpoint atomically: build checkpoint.tmp, then swap it in. Refuses non-finite weights."""
    unique = distinct(policies)
    if not all(torch.isfinite(p).all() for model in unique for p in model.parameters()):
        raise RuntimeError(f"step {step}: non-finite weights; refusing to write a checkpoint")
    final, tmp, old = (os.path.join(out, n) for n in ("checkpoint", "checkpoint.tmp", "checkpoint.old"))
    shutil.rmtree(tmp, ignore_errors=True)
    names = policy_names(policies)
    for model in unique:
        model.save_pretrained(os.path.join(tmp, names[id(model)]))
        tok.save_pretrained(os.path.join(tmp, names[id(model)]))
    torch.save({"step": step, "optims": [o.state_dict() for o in optims], "skipped": skipped, "args": vars(args),
                "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "sampler": gen.get_state()}},
               os.path.join(tmp, "state.pt"))
    if os.path.isdir(final):
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def build(args):
    """Problems, policies (one per role, or shared), the frozen teacher, tokenizer, optimizers, sampler RNG."""
    problems = load_problem_set(args.problems, "train")
    roles = sorted({r for p in problems for r in ROLES[p["domain"]]})
    ckpt = os.path.join(args.out, "checkpoint")
    if args.resume and not os.path.isdir(ckpt) and os.path.isdir(ckpt + ".old"):
        ckpt += ".old"  # a crash between the two renames of save_checkpoint
    if args.resume and not os.path.isfile(os.path.join(ckpt, "state.pt")):
        raise ValueError(f"--resume: no checkpoint in {args.out}")

    if args.resume:  # the policies of the checkpoint, in fresh aligned storage like a live run's: loaded
        policies, tok = load_policies(ckpt, roles, "cpu")  # tensors can sit at odd offsets, which changes
        for m in distinct(policies):                        # BLAS summation order and breaks exact resume
            for p in m.parameters():
                p.data = p.data.clone()
    else:  # every policy starts from the same base checkpoint (§2.1)
        base, tok = load_model(resolve(args.student, args.cache), seed=args.seed)
        policies = {r: base for r in roles} if args.shared_policy else {r: copy.deepcopy(base) for r in roles}
    teacher, teacher_tok = load_model(resolve(args.teacher, args.cache), seed=args.seed + 1)
    check_same_tokenizer(teacher_tok, tok, (f"--teacher {args.teacher}", f"--student {args.student}"))
    device = torch.device(args.device)
    teacher.to("cpu" if args.teacher_offload else device, dtype=torch.bfloat16 if args.precision == "bf16"
               else torch.float32).eval().requires_grad_(False)
    unique = distinct(policies)
    for m in unique:  # fp32 master weights in every precision: lr 1e-6 updates would vanish in bf16 weights
        m.to(device)
        if args.grad_checkpointing:
            m.activation_checkpointing_enable()
    # AdamW, i.e. Adam with decoupled weight decay 0.01 (the paper says Adam with wd; §10.10 leaves the form open)
    optims = [torch.optim.AdamW(m.parameters(), lr=args.lr, weight_decay=args.weight_decay) for m in unique]
    gen = torch.Generator(device=device).manual_seed(args.seed)
    start, skipped = 0, 0
    if args.resume:
        state = torch.load(os.path.join(ckpt, "state.pt"), weights_only=False)
        for opt, s in zip(optims, state["optims"]):
            opt.load_state_dict(s)
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        gen.set_state(state["rng"]["sampler"])
        start, skipped = state["step"] + 1, state["skipped"]
    return problems, policies, teacher, tok, optims, gen, start, skipped


def main(argv=None):
    args = get_args(argv)
    hf_logging.disable_progress_bar()  # one bar (ours) per run, not one per saved shard
    print("config:", json.dumps(vars(args)))
    if args.dry_run:  # configs only, no weights: e.g. --student Qwen/Qwen3-1.7B --teacher Qwen/Qwen3-14B
        print(memory.dry_run(args))
        return
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    try:
        problems, policies, teacher, tok, optims, gen, start, skipped = build(args)
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    os.makedirs(args.out, exist_ok=True)
    metrics_path = os.path.join(args.out, "metrics.jsonl")
    kept = []  # on resume, drop lines of steps after the checkpoint (written before a crash)
    if args.resume and os.path.exists(metrics_path):
        with open(metrics_path) as f:
            kept = [ln for ln in f if json.loads(ln)["step"] < start]
    with open(metrics_path, "w") as f:
        f.writelines(kept)
    held_out = None if args.no_eval else args.eval_problems or ("toy" if args.problems == "toy" else None)
    if held_out:
        held_out = load_problem_set(held_out, "test")
        results = {"before": evaluate_policies(held_out, policies, tok, args)} if start == 0 else {}
    bar = tqdm(range(start, args.steps), desc="steps", initial=start, total=args.steps)
    for step in bar:
        m = train_step(step, problems, policies, optims, teacher, tok, args, gen)
        skipped += m["skipped"]
        m["skipped_total"] = skipped
        with open(metrics_path, "a") as f:
            f.write(json.dumps(m) + "\n")
        roles = m["roles"]
        bar.set_postfix(loss=f"{sum(m['loss']):.4f}", turns=f"{m['turns_per_episode']:.2f}",
                        conflict=f"{m['conflict_rate']:.2f}", skipped=skipped,
                        **{f"a_role[{r}]": f"{s['a_role']:+.3f}" for r, s in roles.items()})
        if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
            save_checkpoint(args.out, step, policies, optims, tok, gen, skipped, args)
    print(f"done: {args.steps - start} steps, {skipped} skipped; metrics in {metrics_path}, "
          f"checkpoint in {os.path.join(args.out, 'checkpoint')}")
    if held_out:
        results["after"] = evaluate_policies(held_out, policies, tok, args)
        print(markdown({f"{k} ({len(held_out)} held-out problems, seeds {args.eval_seeds})": v
                        for k, v in results.items()}))
        write_atomic(os.path.join(args.out, "results.json"), json.dumps(results, indent=1))


def evaluate_policies(problems, policies, tok, args, exchange=False):
    """Team accuracy, revise-iff-wrong and turns on held-out problems over args.eval_seeds, with eval.py's
    decoding (App. D.5); with exchange=True also the exchange penalty (Fig. 3a)."""
    cfg = RolloutConfig(max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens,
                        workers=args.workers, **EVAL_DECODING)
    return evaluate(problems, policies, tok, args.eval_seeds, cfg, exchange=exchange)


if __name__ == "__main__":
    main()
