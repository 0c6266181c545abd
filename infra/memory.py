"""How much memory one MAS-OPD training step needs, before any weights load: train.py refuses a run that cannot
fit (check_fits) and `python -m tools.memory` prints the whole plan for train.py's flags (reading model configs
only, never weights). eval.py checks its own plan likewise (check_eval_fits) and from it picks how many prompts go
into one generate call.

This is an ESTIMATE of what torch.cuda.max_memory_allocated would report for train.py as it is written today
(torch 2.13, transformers 5.24): the tensors each phase keeps alive, counted from the code paths of
sampler.generate, sampler.sequence_logprobs and train.update. It leaves out the CUDA context, library
workspaces, allocator fragmentation (`fits` keeps a reserve for them) and small tensors. tools/device_check.py prints
it beside measured peaks; trust the measurement where they disagree.

Algorithm 1 runs its phases one after another, so
    peak = persistent + max(rollout, teacher scoring, update)
    persistent = student weights (fp32 master, one copy per policy) + AdamW moments (2 x fp32 per policy)
                 + under bf16 the rollout copies (bf16, one per policy) + teacher weights (bf16 with --precision
                 bf16, frozen, no optimizer)
Gradients exist only inside the update (train.py zeroes them with set_to_none after each optimizer step).
The items come from footprint.py (model shapes to bytes), whose size letters (P, C, L, p, a, t, ...) the comments
here use.
"""
import itertools
import math
import os
import re

import torch

from config import PAPER, TEACHER_BATCH_TOKENS
from infra.data import load_problems, longest_response
from infra.footprint import (autocast_params, config_of, layer_act_bytes, nograd_token_bytes, outside_layers_bytes,
                             param_count, rollout_bytes, scoring_bytes, shape)
from prompts import ROLES

GiB = 2**30


def plan(student_cfg, teacher_cfg, *, n_policies=2, precision="bf16", grad_checkpointing=True,
         prompt_len=PAPER["max_prompt_tokens"], response_len=PAPER["max_new_tokens"],
         teacher_prompt_len=PAPER["teacher_max_prompt_tokens"], micro_batch=PAPER["micro_batch"],
         rollout_batch=PAPER["batch"], teacher_batch_tokens=TEACHER_BATCH_TOKENS, lm_head_chunk=1024,
         kv_bytes=None, rollout_attention="fused", teacher_offload=False, rollout_chunk=0):
    """Estimated bytes per item and per phase of one train.py step. Returns a dict:
      settings, params {student, teacher}, bytes {item: bytes}, phases {rollout, teacher, update: bytes},
      persistent, peak_phase, total (= persistent + the largest phase).

    n_policies: 2 (one per role) or 1 (--shared-policy). precision: "bf16" (autocast over fp32 master weights,
    teacher stored in bf16, as train.py) or "fp32". rollout_batch: episodes sampled together (train.py: --batch);
    each policy's generate call gets rollout_batch * 2 / n_policies prompts (2 roles per episode; a shared policy
    samples both roles' prompts in one call), in rounds of at most rollout_chunk prompts (--rollout-chunk; 0 = one
    call). micro_batch: responses per backward (--micro-batch), each taken at
    its longest, prompt_len + response_len tokens. kv_bytes: KV-cache element size; default = what
    sampler.generate allocates: the autocast dtype under bf16 (2 bytes), else fp32. rollout_attention:
    "fused" assumes a fused SDPA kernel serves generate's masked GQA attention; "math" assumes torch's math
    fallback (flash rejects explicit masks and the memory-efficient kernel rejects GQA in torch 2.13), which
    materialises (B, H, T, T) fp32 scores in the prefill. device_check.py prints which backend runs.
    teacher_offload: the teacher lives on the CPU except while it scores (--teacher-offload).
    """
    if precision not in ("bf16", "fp32") or n_policies < 1 or rollout_attention not in ("fused", "math"):
        raise ValueError("plan: precision must be bf16|fp32, n_policies >= 1, rollout_attention fused|math")
    s = shape(student_cfg)
    Ps, Pt = param_count(student_cfg), param_count(teacher_cfg)
    p, a = 4, (2 if precision == "bf16" else 4)
    tb = a                                   # teacher bytes: bf16 with --precision bf16, else fp32
    kvb = kv_bytes or a
    n = n_policies
    b = {}

    # Persistent: present in every phase.
    b["student weights (fp32 master)"] = n * 4 * Ps
    b["AdamW moments (2 x fp32)"] = n * 8 * Ps
    if a != p:
        b["rollout copies (bf16, launch.rollout_copies)"] = n * a * Ps
    b["teacher weights"] = tb * Pt
    persistent = sum(b.values()) - (b["teacher weights"] if teacher_offload else 0)
    casts = n * 2 * autocast_params(student_cfg) if a != p else 0

    # Phase 1, rollout (sampler.generate; under bf16 on the bf16 rollout copies, so no weight is cast): one generate
    # call of B prompts at a time (rollout_bytes).
    B = math.ceil(rollout_batch * 2 / n)
    B = min(B, rollout_chunk) if rollout_chunk else B
    b["KV cache (one generate call)"], b["rollout prefill/decode temporaries"] = rollout_bytes(
        student_cfg, B, prompt_len, response_len, a, kvb, rollout_attention)
    rollout = b["KV cache (one generate call)"] + b["rollout prefill/decode temporaries"]

    # Phase 2, teacher scoring (teacher.score, no grad; scoring_bytes).
    b["teacher scoring activations"], Bt = scoring_bytes(teacher_cfg, tb, teacher_prompt_len + response_len,
                                                         response_len, teacher_batch_tokens, lm_head_chunk)
    teacher = b["teacher scoring activations"] + (b["teacher weights"] if teacher_offload else 0)

    # Phase 3, update: micro_batch responses, each recomputed with grad by its author's policy
    # (sampler.sequence_logprobs), all graphs alive until loss.backward(). Per token: L x layer_act_bytes (no
    # checkpointing) or L x pC (checkpointing keeps each layer's input) plus one layer recomputed in backward;
    # outside the layers outside_layers_bytes; response positions' hidden states pC (the LM head's checkpoint
    # input). A micro-batch of several sequences per policy is padded: the bool mask L^2 per sequence, and SDPA
    # saves its dtype-a copy in every layer (a L^2 per sequence per layer). Backward temporaries: residual-stream
    # gradients and the MLP's intermediate gradients, tokens x (2pC + 3aI). LM head: one checkpointed chunk
    # recomputed in backward: bf16 logits, fp32 copy, fp32 gradient, exp temporary, bf16 gradient = 16 bytes per
    # logit. The optimizer step (foreach AdamW) allocates one fp32 temporary of one policy's size (sqrt of v).
    Ls = prompt_len + response_len
    tok = micro_batch * Ls
    masked = math.ceil(micro_batch / n) > 1
    mask_bool = micro_batch * Ls * Ls if masked else 0
    mask_layer = a * micro_batch * Ls * Ls if masked else 0
    lay = layer_act_bytes(student_cfg, p, a, masked)
    common = tok * outside_layers_bytes(student_cfg, p) + micro_batch * response_len * p * s["C"] + mask_bool
    full = tok * s["L"] * lay + s["L"] * mask_layer + common
    ckpt = tok * s["L"] * p * s["C"] + tok * lay + mask_layer + common
    b["gradients (fp32, update only)"] = n * 4 * Ps
    b["autocast bf16 weight copies (update)"] = casts = casts // n * min(n, micro_batch)  # policies in a micro-batch
    b["activations, no checkpointing"] = full
    b["activations, checkpointing"] = ckpt
    b["backward temporaries"] = tok * (2 * p * s["C"] + 3 * a * s["I"])
    b["LM-head logits chunk"] = (min(lm_head_chunk, micro_batch * response_len) * s["V"] * 16
                                 + (2 * s["V"] * s["C"] if a != p else 0))  # + its recomputed weight cast
    b["AdamW step temporary"] = 4 * Ps
    if grad_checkpointing:
        # Autocast's cached weight copies live only through the forward (the checkpointed graph does not hold them,
        # and the cache empties when `with amp:` ends); the recompute in backward casts one layer at a time.
        saved = ckpt - tok * lay - mask_layer
        fwd = casts + tok * nograd_token_bytes(student_cfg, p, a, p)
        bwd = tok * lay + mask_layer + b["backward temporaries"] + b["LM-head logits chunk"]
        fwd_bwd = saved + max(fwd, bwd)
    else:  # the graph holds the bf16 weight copies until backward has used them
        fwd_bwd = casts + full + b["backward temporaries"] + b["LM-head logits chunk"]
    update = b["gradients (fp32, update only)"] + max(fwd_bwd, b["AdamW step temporary"])

    phases = {"rollout": rollout, "teacher": teacher, "update": update}
    peak_phase = max(phases, key=phases.get)
    settings = dict(n_policies=n, precision=precision, grad_checkpointing=grad_checkpointing, prompt_len=prompt_len,
                    response_len=response_len, teacher_prompt_len=teacher_prompt_len, micro_batch=micro_batch,
                    rollout_batch=rollout_batch, generate_batch=B, teacher_batch_tokens=teacher_batch_tokens,
                    teacher_seqs_per_forward=Bt, lm_head_chunk=lm_head_chunk, kv_bytes=kvb,
                    rollout_attention=rollout_attention, teacher_offload=teacher_offload)
    return {"settings": settings, "params": {"student": Ps, "teacher": Pt}, "bytes": b, "phases": phases,
            "persistent": persistent, "peak_phase": peak_phase, "total": persistent + phases[peak_phase]}


def format_plan(pl):
    """A table in GiB, one item per line, grouped by phase; the total is persistent + the largest phase."""
    s, b, ph = pl["settings"], pl["bytes"], pl["phases"]
    g = lambda x: f"{x / GiB:9.2f} GiB"
    ckpt_item = "activations, checkpointing" if s["grad_checkpointing"] else "activations, no checkpointing"
    other = "activations, no checkpointing" if s["grad_checkpointing"] else "activations, checkpointing"
    lines = [f"memory estimate: {s['n_policies']} student polic{'y' if s['n_policies'] == 1 else 'ies'} of "
             f"{pl['params']['student']:,} params, teacher {pl['params']['teacher']:,}; "
             f"{s['precision']}, grad checkpointing {'on' if s['grad_checkpointing'] else 'off'}",
             f"  lengths: prompt {s['prompt_len']} + response {s['response_len']} (teacher prompt "
             f"{s['teacher_prompt_len']}); rollout batch {s['rollout_batch']} episodes = {s['generate_batch']} "
             f"prompts per generate call; micro-batch {s['micro_batch']}; KV cache {s['kv_bytes']} bytes/elem; "
             f"prefill attention {s['rollout_attention']}" + ("; teacher offloaded" if s["teacher_offload"] else ""),
             "persistent (every phase)"]
    persistent = [k for k in ("student weights (fp32 master)", "AdamW moments (2 x fp32)",
                              "rollout copies (bf16, launch.rollout_copies)", "teacher weights") if k in b]
    lines += [f"  {k:<40}{g(b[k])}" + ("  (CPU outside scoring)" if k == "teacher weights" and s["teacher_offload"]
                                       else "") for k in persistent]
    lines.append(f"  {'= persistent':<40}{g(pl['persistent'])}")
    groups = {"rollout": ["KV cache (one generate call)",
                          "rollout prefill/decode temporaries"],
              "teacher": ["teacher scoring activations"] + (["teacher weights"] if s["teacher_offload"] else []),
              "update": ["gradients (fp32, update only)", "autocast bf16 weight copies (update)", ckpt_item,
                         "backward temporaries", "LM-head logits chunk"]}
    for name, items in groups.items():
        lines.append(f"phase {name}" + ("  <- largest" if name == pl["peak_phase"] else ""))
        lines += [f"  {k:<40}{g(b[k])}" for k in items]
        if name == "update":
            if s["grad_checkpointing"]:
                lines.append("  (with checkpointing the weight copies live in the forward only: the phase is the "
                             "larger of forward and backward, not the sum)")
            lines.append(f"  {'(' + other + ')':<40}{g(b[other])}  not used")
            lines.append(f"  {'(AdamW step temporary, after backward)':<40}{g(b['AdamW step temporary'])}")
        lines.append(f"  {'= phase ' + name:<40}{g(ph[name])}")
    lines.append(f"{'TOTAL peak = persistent + ' + pl['peak_phase']:<42}{g(pl['total'])}")
    return "\n".join(lines)


def fits(pl, gib=80.0, reserve=0.1):
    """True when the estimate leaves `reserve` (a fraction of the card) for CUDA context, workspaces and
    allocator fragmentation, which max_memory_allocated does not count."""
    return pl["total"] <= gib * (1 - reserve) * GiB


# The knobs that trade memory for time, each a train.py flag.
OPTIONS = {
    "shared policy (--shared-policy)": dict(n_policies=1),
    "gradient checkpointing (--grad-checkpointing)": dict(grad_checkpointing=True),
    "responses 2048 (--max-new-tokens 2048)": dict(response_len=2048),
    "micro-batch 1 (--micro-batch 1)": dict(micro_batch=1),
    "generate in rounds of 16 prompts (--rollout-chunk 16)": dict(rollout_chunk=16),
    "teacher on CPU outside scoring (--teacher-offload)": dict(teacher_offload=True),
}


def max_rollout_batch(student_cfg, teacher_cfg, gib=80.0, reserve=0.1, **kw):
    """The largest rollout batch (episodes sampled together) that fits, given the other settings; 0 if none."""
    hi = kw.pop("rollout_batch", 128)
    return _largest(lambda rb: fits(plan(student_cfg, teacher_cfg, rollout_batch=rb, **kw), gib, reserve), hi)


def _largest(fits_at, hi):
    """The largest n in 0..hi with fits_at(n), for a fits_at that holds up to some n and not beyond (the total
    grows with a batch); 0 if none."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits_at(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _is_set(change, kw):
    return all(kw.get(k, plan.__kwdefaults__[k]) == v for k, v in change.items())


def fixes(student_cfg, teacher_cfg, gib=80.0, reserve=0.1, **kw):
    """Every combination of OPTIONS not already set that fits, each at the largest rollout batch that fits (at most
    the one asked for), fewest knobs first, then the largest batch: [(option names, rollout batch, plan)]."""
    combos = []
    names = [name for name, change in OPTIONS.items() if not _is_set(change, kw)]
    for r in range(len(names) + 1):  # r = 0: a smaller rollout batch alone
        for chosen in itertools.combinations(names, r):
            change = {k: v for name in chosen for k, v in OPTIONS[name].items()}
            rb = max_rollout_batch(student_cfg, teacher_cfg, gib, reserve, **{**kw, **change})
            if rb:
                combos.append((len(chosen), -rb, chosen, rb, plan(student_cfg, teacher_cfg, **{**kw, **change,
                                                                                            "rollout_batch": rb})))
    return [c[2:] for c in sorted(combos, key=lambda c: c[:2])]


def fit_report(student_cfg, teacher_cfg, gib=80.0, reserve=0.1, top=10, **kw):
    """Does it fit in `gib` GiB? If not: each knob alone (total and persistent + each phase), the largest rollout
    batch that fits, and the smallest combinations of knobs that fit, each at the largest rollout batch that fits
    (at most the one asked for). Returns the text."""
    row = lambda pl: (f"{pl['total'] / GiB:7.1f}  (rollout {(pl['persistent'] + pl['phases']['rollout']) / GiB:6.1f}"
                      f" | teacher {(pl['persistent'] + pl['phases']['teacher']) / GiB:5.1f}"
                      f" | update {(pl['persistent'] + pl['phases']['update']) / GiB:5.1f})"
                      f"  {'fits' if fits(pl, gib, reserve) else 'does not fit'}")
    base = plan(student_cfg, teacher_cfg, **kw)
    out = [f"GPU {gib:g} GiB, usable {gib * (1 - reserve):.1f} GiB ({reserve:.0%} kept for CUDA context, workspaces "
           f"and fragmentation). Totals in GiB = persistent + largest phase:",
           f"  {'as given':<50}{row(base)}"]
    if fits(base, gib, reserve):
        return "\n".join(out)
    out.append("one change at a time:")
    for name, change in OPTIONS.items():
        out.append(f"  {name:<50}" + ("already so" if _is_set(change, kw) else
                                      row(plan(student_cfg, teacher_cfg, **{**kw, **change}))))
    rb = max_rollout_batch(student_cfg, teacher_cfg, gib, reserve, **kw)
    out.append(f"  {'smaller rollout batch (--batch; the KV cache)':<50}" +
               (f"fits up to {rb} episodes per generate round" if rb else
                "none fits: the other phases alone are over (update / teacher above)"))
    combos = fixes(student_cfg, teacher_cfg, gib, reserve, **kw)
    asked = kw.get("rollout_batch", plan.__kwdefaults__["rollout_batch"])
    out.append(f"smallest combinations that fit, each at the largest rollout batch that fits (asked: {asked}; "
               f"{min(top, len(combos))} of {len(combos)} shown):")
    for chosen, rb, pl in combos[:top]:
        out.append(f"  rollout batch {rb:>3}, total {pl['total'] / GiB:5.1f}: "
                   + (" + ".join(chosen) or "no other change"))
    if not combos:
        out.append("  none, not even with every knob at once")
    return "\n".join(out)



def plan_inputs(args, n_policies, world=1, rollout_attention="fused"):
    """(student config, teacher config, plan keywords) for train.py's parsed args: the plan of exactly the run they
    would start. world: ranks under torchrun; each rolls out its share of --batch, while policies, optimizer states
    and the teacher are replicated on every rank (nothing is sharded), so only the rollout's KV cache shrinks."""
    kw = dict(n_policies=n_policies, precision=args.precision, grad_checkpointing=args.grad_checkpointing,
              prompt_len=args.max_prompt_tokens, response_len=longest_response(args),
              teacher_prompt_len=args.teacher_max_prompt_tokens, micro_batch=args.micro_batch,
              rollout_batch=math.ceil(args.batch / world), teacher_batch_tokens=args.teacher_batch_tokens,
              rollout_attention=rollout_attention, rollout_chunk=args.rollout_chunk,
              teacher_offload=args.teacher_offload)
    return config_of(args.student), config_of(args.teacher), kw


def dry_run(args, gib=80.0, rollout_attention="fused", world=1):
    """The estimate for train.py's parsed args, as text. Reads configs and the problem file, loads no weights.
    Policies: 1 with --shared-policy, else one per role of the problem file (2 per domain)."""
    n = 1 if args.shared_policy else len({r for p in load_problems(args.problems) for r in ROLES[p["domain"]]})
    s, t, kw = plan_inputs(args, n, world, rollout_attention)
    return format_plan(plan(s, t, **kw)) + "\n" + fit_report(s, t, gib, **kw)


def available_bytes(device):
    """What a run on `device` may use: the GPU's free memory, or on a CPU the machine's available RAM."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    with open("/proc/meminfo") as f:  # Linux; elsewhere all physical memory
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _where(device, free):
    return f"{free / GiB:.1f} GiB {'free on ' + device if device.startswith('cuda') else 'of RAM available'}"


def check_fits(args, n_policies, world=1, reserve=0.1):
    """Refuse (ValueError, one line) a train.py run whose plan (the phases of Algorithm 1, App. C) cannot fit in
    what its device has free, naming the flags of the smallest change that would fit. Reads configs only: run it
    before any weights load."""
    s, t, kw = plan_inputs(args, n_policies, world)
    pl, free = plan(s, t, **kw), available_bytes(args.device)
    if fits(pl, free / GiB, reserve):
        return pl
    where = _where(args.device, free)
    found = fixes(s, t, free / GiB, reserve, **kw)
    if found:
        chosen, rb, _ = found[0]
        flags = [re.search(r"\((--[^)]*)\)", name).group(1) for name in chosen]
        if rb < kw["rollout_batch"]:
            flags.append(f"--batch {rb * world}")
        hint = "it would fit with " + " ".join(flags)
    else:
        hint = "no combination of the memory flags fits: choose smaller models or a larger device"
    raise ValueError(f"memory: one training step needs about {pl['total'] / GiB:.1f} GiB (persistent "
                     f"{pl['persistent'] / GiB:.1f} + {pl['peak_phase']} phase), but this machine has {where} "
                     f"({reserve:.0%} kept in reserve); {hint} (python -m tools.memory prints the whole plan)")


# ------------------------------------------------------------------------------ evaluation (eval.py)

def eval_plan(student_cfg, teacher_cfg=None, *, n_models=1, precision="bf16", prompt_len=PAPER["max_prompt_tokens"],
              response_len=PAPER["max_new_tokens"], prompts=1, rollout_chunk=0,
              teacher_batch_tokens=TEACHER_BATCH_TOKENS, lm_head_chunk=1024, rollout_attention="fused"):
    """Estimated bytes of eval.py (§4, App. D.5; with teacher_cfg the heat map of App. G.2), a dict like plan's:
    settings, params, bytes, phases, persistent, peak_phase, total. eval.py loads its models in --precision's dtype
    outright (e bytes: 2 bf16, 4 fp32; no fp32 masters, no autocast), so its KV cache is in e too:
        persistent = n_models x e x P_student   (one model in every seat: 1; a checkpoint's policies: one per role,
                                                 or 1 shared; all of one base model's shape, §2.1)
        rollout    = rollout_bytes of one generate call of min(prompts, rollout_chunk) prompts (0 = all `prompts`,
                     the most one policy samples in one turn), each up to prompt_len + response_len tokens
        heatmap    = e x P_teacher + scoring_bytes over prompt + response tokens (teacher.score's defaults): the
                     teacher loads after the team's decoder is released, beside the students, which stay loaded
    """
    if precision not in ("bf16", "fp32") or n_models < 1 or prompts < 1:
        raise ValueError("eval_plan: precision must be bf16|fp32, n_models >= 1, prompts >= 1")
    e = 2 if precision == "bf16" else 4
    B = min(prompts, rollout_chunk) if rollout_chunk else prompts
    Ps = param_count(student_cfg)
    b = {"student weights": n_models * e * Ps}
    b["KV cache (one generate call)"], b["rollout prefill/decode temporaries"] = rollout_bytes(
        student_cfg, B, prompt_len, response_len, e, e, rollout_attention)
    phases = {"rollout": b["KV cache (one generate call)"] + b["rollout prefill/decode temporaries"]}
    Pt = param_count(teacher_cfg) if teacher_cfg is not None else 0
    if teacher_cfg is not None:
        b["teacher weights"] = e * Pt
        b["teacher scoring activations"] = scoring_bytes(teacher_cfg, e, prompt_len + response_len, response_len,
                                                         teacher_batch_tokens, lm_head_chunk)[0]
        phases["heatmap"] = b["teacher weights"] + b["teacher scoring activations"]
    peak_phase = max(phases, key=phases.get)
    settings = dict(n_models=n_models, precision=precision, prompt_len=prompt_len, response_len=response_len,
                    prompts=prompts, generate_batch=B, rollout_attention=rollout_attention)
    return {"settings": settings, "params": {"student": Ps, "teacher": Pt}, "bytes": b, "phases": phases,
            "persistent": b["student weights"], "peak_phase": peak_phase,
            "total": b["student weights"] + phases[peak_phase]}


# eval.py's flags that trade memory for something else, as eval_plan keywords, besides --rollout-chunk
EVAL_FLAGS = {"precision": "--precision", "response_len": "--max-new-tokens"}


def _eval_changes(kw):
    """Changes to try when nothing fits, in order of preference: none (a smaller chunk alone), bf16 weights, then
    shorter responses (each with and without bf16)."""
    precisions = [{}] + ([{"precision": "bf16"}] if kw.get("precision") != "bf16" else [])
    longest = kw.get("response_len", PAPER["max_new_tokens"])
    lengths = [{}] + [{"response_len": n} for n in (2048, 1024, 512) if n < longest]
    return [{**length, **prec} for length in lengths for prec in precisions]


def check_eval_fits(student_cfg, teacher_cfg, device, rollout_chunk=None, reserve=0.1, **kw):
    """eval.py's memory check, from configs only (run it before any weights load): -> (chunk, one start-up line).
    rollout_chunk: --rollout-chunk as given, or None for the largest number of prompts per generate call that
    eval_plan fits in what `device` has free (0 = all kw["prompts"] in one call). Raises ValueError (one line) when
    it does not fit, naming the flags of the first change (_eval_changes) with which a chunk of 1 or more would."""
    free = available_bytes(device)
    at = lambda chunk, **change: eval_plan(student_cfg, teacher_cfg, **{**kw, **change, "rollout_chunk": chunk})
    largest = lambda **change: _largest(lambda c: fits(at(c, **change), free / GiB, reserve), kw["prompts"])
    if rollout_chunk is None:
        c = largest()
        chunk, pl, ok = (0 if c == kw["prompts"] else c), at(c or 1), c > 0  # 0: all of them in one call
    else:
        chunk, pl = rollout_chunk, at(rollout_chunk)
        ok = fits(pl, free / GiB, reserve)
    told = pl["settings"]["generate_batch"]
    if ok:
        return chunk, (f"rollout chunk: {told} of up to {kw['prompts']} prompts per generate call "
                       f"({'--rollout-chunk' if rollout_chunk is not None else 'the most that fit'}); memory: about "
                       f"{pl['total'] / GiB:.1f} GiB (models {pl['persistent'] / GiB:.1f} + {pl['peak_phase']} "
                       f"phase) of {_where(device, free)} ({reserve:.0%} kept in reserve)")
    hint = "nothing fits: choose smaller models (or --teacher) or a larger device"
    for change in _eval_changes(kw):
        c = largest(**change)
        if c:
            hint = "it would fit with " + " ".join([f"{EVAL_FLAGS[k]} {v}" for k, v in change.items()]
                                                   + [f"--rollout-chunk {c}"])
            break
    raise ValueError(f"memory: evaluation needs about {pl['total'] / GiB:.1f} GiB (models {pl['persistent'] / GiB:.1f}"
                     f" + {pl['peak_phase']} phase at {told} prompt{'s' * (told != 1)} per generate call), but this "
                     f"machine has {_where(device, free)} ({reserve:.0%} kept in reserve); {hint}")
