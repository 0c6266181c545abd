"""How much memory one MAS-OPD training step needs, before any weights load: train.py refuses a run that cannot
fit (check_fits) and `python -m tools.memory` prints the whole plan for train.py's flags (reading model configs
only, never weights). eval.py's plan, on the same items, is scaling/eval_memory.py's.

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
Gradients exist only inside the update (train.py zeroes them with set_to_none after each optimizer step). What
scaling/offload.py keeps in host memory leaves the persistent sum for the phase that uses it: the teacher
(--teacher-offload) for the teacher phase, one policy's moments at a time (--optimizer-offload) for its step; the
plan counts that host memory too (`host`), which check_fits holds against the machine's RAM.
The items come from footprint.py (model shapes to bytes), whose size letters (P, C, L, p, a, t, ...) the comments
here use.
"""

import itertools
import math
import os
import re

import torch

from config import PAPER, TEACHER_BATCH_TOKENS, longest_response
from scaling.footprint import (
    autocast_params,
    layer_act_bytes,
    nograd_token_bytes,
    outside_layers_bytes,
    param_count,
    rollout_bytes,
    scoring_bytes,
    shape,
)

GiB = 2**30


def plan(
    student_cfg,
    teacher_cfg,
    *,
    n_policies=2,
    precision="bf16",
    grad_checkpointing=True,
    prompt_len=PAPER["max_prompt_tokens"],
    response_len=PAPER["max_new_tokens"],
    teacher_prompt_len=PAPER["teacher_max_prompt_tokens"],
    micro_batch=PAPER["micro_batch"],
    rollout_batch=PAPER["batch"],
    teacher_batch_tokens=TEACHER_BATCH_TOKENS,
    lm_head_chunk=1024,
    kv_bytes=None,
    rollout_attention="fused",
    teacher_offload=False,
    rollout_chunk=0,
    optimizer_offload=False,
    fsdp_ranks=0,
    fsdp_offload=False,
    agents_per_role=1,
):
    """Estimated bytes per item and per phase of one train.py step. Returns a dict:
      settings, params {student, teacher}, bytes {item: bytes}, phases {rollout, teacher, update: bytes},
      persistent, peak_phase, total (= persistent + the largest phase), host {item: bytes of host memory}.

    n_policies: 2 (one per role), 2n (--agents-per-role n: one per agent) or 1 (--shared-policy). precision:
    "bf16" (autocast over fp32 master weights, teacher stored in bf16, as train.py) or "fp32". rollout_batch:
    episodes sampled together (train.py: --batch); each policy's generate call gets rollout_batch * 2n /
    n_policies prompts (2n agents per episode, agents_per_role = n; a shared policy samples every seat's prompts in
    one call), in rounds of at most rollout_chunk prompts (--rollout-chunk; 0 = one call). micro_batch: responses
    per backward (--micro-batch), each taken at its longest, prompt_len + response_len tokens. kv_bytes: KV-cache
    element size; default = what sampler.generate allocates: the autocast dtype under bf16 (2 bytes), else fp32.
    rollout_attention: "fused" assumes a fused SDPA kernel serves generate's masked GQA attention; "math" assumes
    torch's math fallback (flash rejects explicit masks and the memory-efficient kernel rejects GQA in torch 2.13),
    which materialises (B, H, T, T) fp32 scores in the prefill. device_check.py prints which backend runs.
    teacher_offload: the teacher lives on the CPU except while it scores (--teacher-offload).
    optimizer_offload: each policy's AdamW moments live in pinned host memory except inside its own optimizer step,
    one policy at a time (--optimizer-offload).
    fsdp_ranks: 0, or the ranks FSDP2 shards each policy over (--fsdp under torchrun; scaling/sharding.py): fp32
    weights, gradients, moments and the step's temporary are 1/fsdp_ranks each; the update adds what FSDP2 gathers
    (the root unit whole through forward and backward, two decoder layers at a time, and their unsharded gradients),
    a micro-batch holds one policy, and a checkpoint gathers the full states in rank 0's host memory (`gather`).
    fsdp_offload: FSDP2's CPUOffloadPolicy (--fsdp-offload): the shards, gradients and the optimizer step on the host.
    """
    if (
        precision not in ("bf16", "fp32")
        or n_policies < 1
        or rollout_attention not in ("fused", "math")
    ):
        raise ValueError(
            "plan: precision must be bf16|fp32, n_policies >= 1, rollout_attention fused|math"
        )
    s = shape(student_cfg)
    Ps, Pt = param_count(student_cfg), param_count(teacher_cfg)
    p, a = 4, (2 if precision == "bf16" else 4)
    tb = a  # teacher bytes: bf16 with --precision bf16, else fp32
    kvb = kv_bytes or a
    n = n_policies
    b = {}
    Pl = math.ceil(Ps / max(1, fsdp_ranks))  # a policy's parameters held on this rank

    # Persistent: present in every phase.
    b["student weights (fp32 master)"] = n * 4 * Pl
    b["AdamW moments (2 x fp32)"] = n * 8 * Pl
    if a != p:
        b["rollout copies (bf16, launch.rollout_copies)"] = n * a * Ps
    b["teacher weights"] = tb * Pt
    host = {
        k: b[k]
        for k, off in (
            ("student weights (fp32 master)", fsdp_offload),
            ("AdamW moments (2 x fp32)", optimizer_offload or fsdp_offload),
            ("teacher weights", teacher_offload),
        )
        if off
    }
    persistent = sum(b.values()) - sum(host.values())
    casts = n * 2 * autocast_params(student_cfg) if a != p else 0

    # Phase 1, rollout (sampler.generate; under bf16 on the bf16 rollout copies, so no weight is cast): one generate
    # call of B prompts at a time (rollout_bytes).
    B = math.ceil(rollout_batch * 2 * agents_per_role / n)
    B = min(B, rollout_chunk) if rollout_chunk else B
    b["KV cache (one generate call)"], b["rollout prefill/decode temporaries"] = (
        rollout_bytes(
            student_cfg, B, prompt_len, response_len, a, kvb, rollout_attention
        )
    )
    rollout = (
        b["KV cache (one generate call)"] + b["rollout prefill/decode temporaries"]
    )

    # Phase 2, teacher scoring (teacher.score, no grad; scoring_bytes).
    b["teacher scoring activations"], Bt = scoring_bytes(
        teacher_cfg,
        tb,
        teacher_prompt_len + response_len,
        response_len,
        teacher_batch_tokens,
        lm_head_chunk,
    )
    teacher = b["teacher scoring activations"] + (
        b["teacher weights"] if teacher_offload else 0
    )

    # Phase 3, update: micro_batch responses, each recomputed with grad by its author's policy
    # (sampler.sequence_logprobs), all graphs alive until loss.backward(). Per token: L x layer_act_bytes (no
    # checkpointing) or L x pC (checkpointing keeps each layer's input) plus one layer recomputed in backward;
    # outside the layers outside_layers_bytes; response positions' hidden states pC (the LM head's checkpoint
    # input). A micro-batch of several sequences per policy is padded: the bool mask L^2 per sequence, and SDPA
    # saves its dtype-a copy in every layer (a L^2 per sequence per layer). Backward temporaries: residual-stream
    # gradients and the MLP's intermediate gradients, tokens x (2pC + 3aI). LM head: one checkpointed chunk
    # recomputed in backward: bf16 logits, fp32 copy, fp32 gradient, exp temporary, bf16 gradient = 16 bytes per
    # logit. The optimizer step (foreach AdamW) allocates one fp32 temporary of one policy's size (sqrt of v); with
    # --optimizer-offload the stepping policy's moments (2 x fp32) are on the device beside it.
    Ls = prompt_len + response_len
    tok = micro_batch * Ls
    # --fsdp: one policy per micro-batch
    masked = (micro_batch if fsdp_ranks else math.ceil(micro_batch / n)) > 1
    mask_bool = micro_batch * Ls * Ls if masked else 0
    mask_layer = a * micro_batch * Ls * Ls if masked else 0
    lay = layer_act_bytes(student_cfg, p, a, masked)
    common = (
        tok * outside_layers_bytes(student_cfg, p)
        + micro_batch * response_len * p * s["C"]
        + mask_bool
    )
    full = tok * s["L"] * lay + s["L"] * mask_layer + common
    ckpt = tok * s["L"] * p * s["C"] + tok * lay + mask_layer + common
    b["gradients (fp32, update only)"] = n * 4 * Pl
    b["autocast bf16 weight copies (update)"] = casts = (
        casts // n * (1 if fsdp_ranks else min(n, micro_batch))
    )
    b["activations, no checkpointing"] = full
    b["activations, checkpointing"] = ckpt
    b["backward temporaries"] = tok * (2 * p * s["C"] + 3 * a * s["I"])
    b["LM-head logits chunk"] = min(lm_head_chunk, micro_batch * response_len) * s[
        "V"
    ] * 16 + (2 * s["V"] * s["C"] if a != p else 0)  # + its recomputed weight cast
    b["AdamW step temporary"] = 4 * Pl
    b["AdamW step window"] = (
        0
        if fsdp_offload
        else b["AdamW step temporary"] + (8 * Pl if optimizer_offload else 0)
    )
    # FSDP2 (--fsdp): the root unit (embedding, final norm, an untied LM head) stays gathered from the forward to the
    # end of the backward, a decoder layer's unit is gathered while it runs and the next one is prefetched; in the
    # backward each unit's unsharded gradient waits for its reduce-scatter.
    root = s["V"] * s["C"] * (1 if s["tie"] else 2) + s["C"]
    units = 4 * (root + 2 * (Ps - root) / s["L"])
    b["FSDP2 gathered units (fp32)"] = b["FSDP2 unsharded gradients"] = (
        round(units) if fsdp_ranks else 0
    )
    if grad_checkpointing:
        # Autocast's cached weight copies live only through the forward (the checkpointed graph does not hold them,
        # and the cache empties when `with amp:` ends); the recompute in backward casts one layer at a time.
        saved = ckpt - tok * lay - mask_layer
        fwd = casts + tok * nograd_token_bytes(student_cfg, p, a, p)
        bwd = (
            tok * lay
            + mask_layer
            + b["backward temporaries"]
            + b["LM-head logits chunk"]
        )
        fwd_bwd = saved + max(fwd, bwd)
    else:  # the graph holds the bf16 weight copies until backward has used them
        fwd_bwd = casts + full + b["backward temporaries"] + b["LM-head logits chunk"]
    fwd_bwd += b["FSDP2 gathered units (fp32)"] + b["FSDP2 unsharded gradients"]
    grads = 0 if fsdp_offload else b["gradients (fp32, update only)"]
    update = grads + max(fwd_bwd, b["AdamW step window"])
    if fsdp_offload:
        host["gradients and AdamW step (--fsdp-offload)"] = (
            b["gradients (fp32, update only)"] + 4 * Pl
        )

    phases = {"rollout": rollout, "teacher": teacher, "update": update}
    peak_phase = max(phases, key=phases.get)
    settings = dict(
        n_policies=n,
        precision=precision,
        grad_checkpointing=grad_checkpointing,
        prompt_len=prompt_len,
        response_len=response_len,
        teacher_prompt_len=teacher_prompt_len,
        micro_batch=micro_batch,
        rollout_batch=rollout_batch,
        generate_batch=B,
        teacher_batch_tokens=teacher_batch_tokens,
        teacher_seqs_per_forward=Bt,
        lm_head_chunk=lm_head_chunk,
        kv_bytes=kvb,
        rollout_attention=rollout_attention,
        teacher_offload=teacher_offload,
        optimizer_offload=optimizer_offload,
        fsdp_ranks=fsdp_ranks,
        fsdp_offload=fsdp_offload,
    )
    return {
        "settings": settings,
        "params": {"student": Ps, "teacher": Pt},
        "bytes": b,
        "phases": phases,
        "persistent": persistent,
        "peak_phase": peak_phase,
        "total": persistent + phases[peak_phase],
        "host": host,
        "gather": n * 12 * Ps if fsdp_ranks else 0,
    }


def format_plan(pl):
    """A table in GiB, one item per line, grouped by phase; the total is persistent + the largest phase."""
    s, b, ph = pl["settings"], pl["bytes"], pl["phases"]
    g = lambda x: f"{x / GiB:9.2f} GiB"
    ckpt_item = (
        "activations, checkpointing"
        if s["grad_checkpointing"]
        else "activations, no checkpointing"
    )
    other = (
        "activations, no checkpointing"
        if s["grad_checkpointing"]
        else "activations, checkpointing"
    )
    lines = [
        f"memory estimate: {s['n_policies']} student polic{'y' if s['n_policies'] == 1 else 'ies'} of "
        f"{pl['params']['student']:,} params, teacher {pl['params']['teacher']:,}; "
        f"{s['precision']}, grad checkpointing {'on' if s['grad_checkpointing'] else 'off'}",
        f"  lengths: prompt {s['prompt_len']} + response {s['response_len']} (teacher prompt "
        f"{s['teacher_prompt_len']}); rollout batch {s['rollout_batch']} episodes = {s['generate_batch']} "
        f"prompts per generate call; micro-batch {s['micro_batch']}; KV cache {s['kv_bytes']} bytes/elem; "
        f"prefill attention {s['rollout_attention']}"
        + ("; teacher offloaded" if s["teacher_offload"] else "")
        + ("; optimizer offloaded" if s["optimizer_offload"] else "")
        + (
            f"; students sharded over {s['fsdp_ranks']} ranks (--fsdp)"
            if s["fsdp_ranks"]
            else ""
        )
        + ("; shards on the host (--fsdp-offload)" if s["fsdp_offload"] else ""),
        "persistent (every phase)",
    ]
    persistent = [
        k
        for k in (
            "student weights (fp32 master)",
            "AdamW moments (2 x fp32)",
            "rollout copies (bf16, launch.rollout_copies)",
            "teacher weights",
        )
        if k in b
    ]
    lines += [
        f"  {k:<46}{g(b[k])}"
        + ("  (host memory outside its use, below)" if k in pl["host"] else "")
        for k in persistent
    ]
    lines.append(f"  {'= persistent':<46}{g(pl['persistent'])}")
    groups = {
        "rollout": [
            "KV cache (one generate call)",
            "rollout prefill/decode temporaries",
        ],
        "teacher": ["teacher scoring activations"]
        + (["teacher weights"] if s["teacher_offload"] else []),
        "update": [
            "gradients (fp32, update only)",
            "autocast bf16 weight copies (update)",
            ckpt_item,
            "backward temporaries",
            "LM-head logits chunk",
        ]
        + (
            ["FSDP2 gathered units (fp32)", "FSDP2 unsharded gradients"]
            if s["fsdp_ranks"]
            else []
        ),
    }
    for name, items in groups.items():
        lines.append(
            f"phase {name}" + ("  <- largest" if name == pl["peak_phase"] else "")
        )
        lines += [f"  {k:<46}{g(b[k])}" for k in items]
        if name == "update":
            if s["grad_checkpointing"]:
                lines.append(
                    "  (with checkpointing the weight copies live in the forward only: the phase is the "
                    "larger of forward and backward, not the sum)"
                )
            lines.append(f"  {'(' + other + ')':<46}{g(b[other])}  not used")
            window = "(AdamW step" + (
                " + a policy's moments)" if s["optimizer_offload"] else " temporary)"
            )
            lines.append(f"  {window:<46}{g(b['AdamW step window'])}")
        lines.append(f"  {'= phase ' + name:<46}{g(ph[name])}")
    lines.append(
        f"{'TOTAL peak = persistent + ' + pl['peak_phase']:<48}{g(pl['total'])}"
    )
    if pl["host"]:
        lines.append("host memory (per process, beside the GPU's):")
        flag = {
            "AdamW moments (2 x fp32)": "AdamW moments ("
            + ("--fsdp-offload)" if s["fsdp_offload"] else "--optimizer-offload)"),
            "teacher weights": "teacher weights (--teacher-offload)",
            "student weights (fp32 master)": "student weights (--fsdp-offload)",
        }
        lines += [f"  {flag.get(k, k):<46}{g(v)}" for k, v in pl["host"].items()]
        lines.append(f"  {'= host':<46}{g(sum(pl['host'].values()))}")
    if pl["gather"]:
        lines.append(
            f"{'host memory of rank 0 while it saves (full states)':<48}{g(pl['gather'])}"
        )
    return "\n".join(lines)


def fits(pl, gib=80.0, reserve=0.1):
    """True when the estimate leaves `reserve` (a fraction of the card) for CUDA context, workspaces and
    allocator fragmentation, which max_memory_allocated does not count."""
    return pl["total"] <= gib * (1 - reserve) * GiB


# The knobs that trade memory for time, each a train.py flag, the paper's method's first. One policy in every seat is
# not the paper's method (§2.1 gives each role its own policy): it is offered last and marked so wherever it shows.
SHARED = "shared policy (--shared-policy)"
NOT_PAPER = " [not the paper's method: one policy for both roles]"
OPTIONS = {
    "AdamW moments on the host (--optimizer-offload)": dict(optimizer_offload=True),
    "teacher on the host (--teacher-offload)": dict(teacher_offload=True),
    "gradient checkpointing (--grad-checkpointing)": dict(grad_checkpointing=True),
    "micro-batch 1 (--micro-batch 1)": dict(micro_batch=1),
    "generate in rounds of 16 prompts (--rollout-chunk 16)": dict(rollout_chunk=16),
    "responses 2048 (--max-new-tokens 2048)": dict(response_len=2048),
    SHARED: dict(n_policies=1),
}


def named(chosen):
    """Option names joined for a report line, a shared policy marked as not the paper's method."""
    return " + ".join(chosen) + (NOT_PAPER if SHARED in chosen else "")


def max_rollout_batch(student_cfg, teacher_cfg, gib=80.0, reserve=0.1, **kw):
    """The largest rollout batch (episodes sampled together) that fits, given the other settings; 0 if none."""
    hi = kw.pop("rollout_batch", 128)
    return largest_fitting(
        lambda rb: fits(
            plan(student_cfg, teacher_cfg, rollout_batch=rb, **kw), gib, reserve
        ),
        hi,
    )


def largest_fitting(fits_at, hi):
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


def _lowers(change, kw):
    """Whether an OPTIONS change lowers something for these settings: a flag not yet on, or a limit below the one in
    effect (responses of 2,048 tokens lengthen a run of 1,024; rounds of 16 prompts change nothing for 16)."""
    for k, v in change.items():
        now = kw.get(k, plan.__kwdefaults__[k])
        if k == "rollout_chunk":
            now = now or math.ceil(
                kw.get("rollout_batch", plan.__kwdefaults__["rollout_batch"])
                * 2
                * kw.get("agents_per_role", 1)
                / kw.get("n_policies", plan.__kwdefaults__["n_policies"])
            )
        if now if isinstance(v, bool) else v >= now:
            return False
    return True


def fixes(student_cfg, teacher_cfg, gib=80.0, reserve=0.1, **kw):
    """Every combination of the OPTIONS that lower something here (_lowers) that fits, each at the largest rollout
    batch that fits (at most the one asked for): the paper's method first (no shared policy), then fewest knobs, then
    the largest batch. [(option names, rollout batch, plan)]."""
    combos = []
    names = [name for name, change in OPTIONS.items() if _lowers(change, kw)]
    for r in range(len(names) + 1):  # r = 0: a smaller rollout batch alone
        for chosen in itertools.combinations(names, r):
            change = {k: v for name in chosen for k, v in OPTIONS[name].items()}
            rb = max_rollout_batch(
                student_cfg, teacher_cfg, gib, reserve, **{**kw, **change}
            )
            if rb:
                combos.append(
                    (
                        SHARED in chosen,
                        len(chosen),
                        -rb,
                        chosen,
                        rb,
                        plan(
                            student_cfg,
                            teacher_cfg,
                            **{**kw, **change, "rollout_batch": rb},
                        ),
                    )
                )
    return [c[3:] for c in sorted(combos, key=lambda c: c[:3])]


def fit_report(student_cfg, teacher_cfg, gib=80.0, reserve=0.1, top=10, **kw):
    """Does it fit in `gib` GiB? If not: each knob that lowers something here alone (total and persistent + each
    phase), the largest rollout batch that fits, and the smallest combinations of knobs that fit, the paper's method
    first, each at the largest rollout batch that fits (at most the one asked for). Returns the text."""
    row = lambda pl: (
        f"{pl['total'] / GiB:7.1f}  (rollout {(pl['persistent'] + pl['phases']['rollout']) / GiB:6.1f}"
        f" | teacher {(pl['persistent'] + pl['phases']['teacher']) / GiB:5.1f}"
        f" | update {(pl['persistent'] + pl['phases']['update']) / GiB:5.1f})"
        f"  {'fits' if fits(pl, gib, reserve) else 'does not fit'}"
    )
    base = plan(student_cfg, teacher_cfg, **kw)
    out = [
        f"GPU {gib:g} GiB, usable {gib * (1 - reserve):.1f} GiB ({reserve:.0%} kept for CUDA context, workspaces "
        f"and fragmentation). Totals in GiB = persistent + largest phase:",
        f"  {'as given':<50}{row(base)}",
    ]
    if fits(base, gib, reserve):
        return "\n".join(out)
    out.append("one change at a time (those that lower something here):")
    for name, change in OPTIONS.items():
        if _lowers(change, kw):
            out.append(
                f"  {name:<50}{row(plan(student_cfg, teacher_cfg, **{**kw, **change}))}"
                + (NOT_PAPER if name == SHARED else "")
            )
    rb = max_rollout_batch(student_cfg, teacher_cfg, gib, reserve, **kw)
    out.append(
        f"  {'smaller rollout batch (--batch; the KV cache)':<50}"
        + (
            f"fits up to {rb} episodes per generate round"
            if rb
            else "none fits: the other phases alone are over (update / teacher above)"
        )
    )
    combos = fixes(student_cfg, teacher_cfg, gib, reserve, **kw)
    asked = kw.get("rollout_batch", plan.__kwdefaults__["rollout_batch"])
    out.append(
        f"smallest combinations that fit, the paper's method first, each at the largest rollout batch that "
        f"fits (asked: {asked}; {min(top, len(combos))} of {len(combos)} shown):"
    )
    for chosen, rb, pl in combos[:top]:
        out.append(
            f"  rollout batch {rb:>3}, total {pl['total'] / GiB:5.1f}: "
            + (named(chosen) or "no other change")
        )
    if not combos:
        out.append("  none, not even with every knob at once")
    return "\n".join(out)


def plan_keywords(args, n_policies, world=1, rollout_attention="fused"):
    """plan's keywords for train.py's parsed args: the plan of exactly the run they would start. world: ranks under
    torchrun; each rolls out its share of --batch; the teacher and the rollout copies are whole on every rank, and so
    are the policies and their optimizer states unless --fsdp shards them."""
    return dict(
        n_policies=n_policies,
        precision=args.precision,
        grad_checkpointing=args.grad_checkpointing,
        prompt_len=args.max_prompt_tokens,
        response_len=longest_response(args),
        teacher_prompt_len=args.teacher_max_prompt_tokens,
        micro_batch=args.micro_batch,
        rollout_batch=math.ceil(args.batch / world),
        teacher_batch_tokens=args.teacher_batch_tokens,
        rollout_attention=rollout_attention,
        rollout_chunk=args.rollout_chunk,
        teacher_offload=args.teacher_offload,
        optimizer_offload=args.optimizer_offload,
        fsdp_ranks=world if args.fsdp else 0,
        fsdp_offload=args.fsdp_offload,
        agents_per_role=args.agents_per_role,
    )


def available_bytes(device):
    """What a run on `device` may use: the GPU's free memory, or on a CPU the machine's available RAM."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    with open("/proc/meminfo") as f:  # Linux; elsewhere all physical memory
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def free_line(device, free):
    return f"{free / GiB:.1f} GiB {'free on ' + device if device.startswith('cuda') else 'of RAM available'}"


def check_fits(args, configs, n_policies, world=1, reserve=0.1):
    """Refuse (ValueError, one line) a train.py run whose plan (the phases of Algorithm 1, App. C) cannot fit in
    what its device has free, naming the flags of the smallest change that would fit (the paper's method first),
    or whose offloaded tensors (plan's `host`, once per process of this node) cannot fit in the machine's RAM. On a
    CPU device the offload flags move nothing: every byte counts against the RAM. Reads configs only: run it before
    any weights load. configs: (the student's, the teacher's) model config (infra.models.config_of)."""
    (s, t), kw = configs, plan_keywords(args, n_policies, world)
    on_gpu = args.device.startswith("cuda")
    if not on_gpu:
        kw.update(optimizer_offload=False, teacher_offload=False, fsdp_offload=False)
    pl, free = plan(s, t, **kw), available_bytes(args.device)
    if not fits(pl, free / GiB, reserve):
        found = [
            f
            for f in fixes(s, t, free / GiB, reserve, **kw)
            if on_gpu or not any("offload" in n for n in f[0])
        ]
        if found:
            chosen, rb, _ = found[0]
            flags = [re.search(r"\((--[^)]*)\)", name).group(1) for name in chosen]
            if rb < kw["rollout_batch"]:
                flags.append(f"--batch {rb * world}")
            hint = (
                "it would fit with "
                + " ".join(flags)
                + (NOT_PAPER if SHARED in chosen else "")
            )
        else:
            hint = "no combination of the memory flags fits: choose smaller models or a larger device"
        raise ValueError(
            f"memory: one training step needs about {pl['total'] / GiB:.1f} GiB (persistent "
            f"{pl['persistent'] / GiB:.1f} + {pl['peak_phase']} phase), but this machine has "
            f"{free_line(args.device, free)} ({reserve:.0%} kept in reserve); {hint} (python -m tools.memory "
            f"prints the whole plan)"
        )
    # torchrun's processes on this machine, each its own
    procs = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    host, ram = procs * sum(pl["host"].values()) + pl["gather"], available_bytes("cpu")
    if host > ram * (1 - reserve):
        held = " and ".join(f"{k} {v / GiB:.1f} GiB" for k, v in pl["host"].items())
        held += (
            f", and {pl['gather'] / GiB:.1f} GiB of full states while rank 0 saves"
            if pl["gather"]
            else ""
        )
        raise ValueError(
            f"memory: the offload flags keep {host / GiB:.1f} GiB in host memory ({held} per process, "
            f"{procs} process{'es' * (procs > 1)} here), but this machine has {free_line('cpu', ram)} "
            f"({reserve:.0%} kept in reserve); drop an offload flag or use a machine with more RAM"
        )
    return pl
