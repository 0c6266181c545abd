"""How much memory eval.py needs (§4, App. D.5; the heat map of App. G.2), before any weights load: its plan from
model configs (eval_plan, on scaling/footprint.py's items, as scaling/memory.py plans a training step), and the check
that picks how many prompts go into one generate call or refuses in one line (check_eval_fits).
"""

from config import PAPER, TEACHER_BATCH_TOKENS
from scaling.footprint import param_count, rollout_bytes, scoring_bytes
from scaling.memory import GiB, available_bytes, fits, free_line, largest_fitting


def eval_plan(
    student_cfg,
    teacher_cfg=None,
    *,
    n_models=1,
    precision="bf16",
    prompt_len=PAPER["max_prompt_tokens"],
    response_len=PAPER["max_new_tokens"],
    prompts=1,
    rollout_chunk=0,
    teacher_batch_tokens=TEACHER_BATCH_TOKENS,
    lm_head_chunk=1024,
    rollout_attention="fused",
):
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
        raise ValueError(
            "eval_plan: precision must be bf16|fp32, n_models >= 1, prompts >= 1"
        )
    e = 2 if precision == "bf16" else 4
    B = min(prompts, rollout_chunk) if rollout_chunk else prompts
    Ps = param_count(student_cfg)
    b = {"student weights": n_models * e * Ps}
    b["KV cache (one generate call)"], b["rollout prefill/decode temporaries"] = (
        rollout_bytes(student_cfg, B, prompt_len, response_len, e, e, rollout_attention)
    )
    phases = {
        "rollout": b["KV cache (one generate call)"]
        + b["rollout prefill/decode temporaries"]
    }
    Pt = param_count(teacher_cfg) if teacher_cfg is not None else 0
    if teacher_cfg is not None:
        b["teacher weights"] = e * Pt
        b["teacher scoring activations"] = scoring_bytes(
            teacher_cfg,
            e,
            prompt_len + response_len,
            response_len,
            teacher_batch_tokens,
            lm_head_chunk,
        )[0]
        phases["heatmap"] = b["teacher weights"] + b["teacher scoring activations"]
    peak_phase = max(phases, key=phases.get)
    settings = dict(
        n_models=n_models,
        precision=precision,
        prompt_len=prompt_len,
        response_len=response_len,
        prompts=prompts,
        generate_batch=B,
        rollout_attention=rollout_attention,
    )
    return {
        "settings": settings,
        "params": {"student": Ps, "teacher": Pt},
        "bytes": b,
        "phases": phases,
        "persistent": b["student weights"],
        "peak_phase": peak_phase,
        "total": b["student weights"] + phases[peak_phase],
    }


# eval.py's flags that trade memory for something else, as eval_plan keywords, besides --rollout-chunk
EVAL_FLAGS = {"precision": "--precision", "response_len": "--max-new-tokens"}


def _eval_changes(kw):
    """Changes to try when nothing fits, in order of preference: none (a smaller chunk alone), bf16 weights, then
    shorter responses (each with and without bf16)."""
    precisions = [{}] + (
        [{"precision": "bf16"}] if kw.get("precision") != "bf16" else []
    )
    longest = kw.get("response_len", PAPER["max_new_tokens"])
    lengths = [{}] + [{"response_len": n} for n in (2048, 1024, 512) if n < longest]
    return [{**length, **prec} for length in lengths for prec in precisions]


def check_eval_fits(
    student_cfg, teacher_cfg, device, rollout_chunk=None, reserve=0.1, **kw
):
    """eval.py's memory check, from configs only (run it before any weights load): -> (chunk, one start-up line).
    rollout_chunk: --rollout-chunk as given, or None for the largest number of prompts per generate call that
    eval_plan fits in what `device` has free (0 = all kw["prompts"] in one call). Raises ValueError (one line) when
    it does not fit, naming the flags of the first change (_eval_changes) with which a chunk of 1 or more would."""
    free = available_bytes(device)
    at = lambda chunk, **change: eval_plan(
        student_cfg, teacher_cfg, **{**kw, **change, "rollout_chunk": chunk}
    )
    largest = lambda **change: largest_fitting(
        lambda c: fits(at(c, **change), free / GiB, reserve), kw["prompts"]
    )
    if rollout_chunk is None:
        c = largest()
        # 0: all of them in one call
        chunk, pl, ok = ((0 if c == kw["prompts"] else c), at(c or 1), c > 0)
    else:
        chunk, pl = rollout_chunk, at(rollout_chunk)
        ok = fits(pl, free / GiB, reserve)
    told = pl["settings"]["generate_batch"]
    if ok:
        return chunk, (
            f"rollout chunk: {told} of up to {kw['prompts']} prompts per generate call "
            f"({'--rollout-chunk' if rollout_chunk is not None else 'the most that fit'}); memory: about "
            f"{pl['total'] / GiB:.1f} GiB (models {pl['persistent'] / GiB:.1f} + {pl['peak_phase']} "
            f"phase) of {free_line(device, free)} ({reserve:.0%} kept in reserve)"
        )
    hint = "nothing fits: choose smaller models (or --teacher) or a larger device"
    for change in _eval_changes(kw):
        c = largest(**change)
        if c:
            hint = "it would fit with " + " ".join(
                [f"{EVAL_FLAGS[k]} {v}" for k, v in change.items()]
                + [f"--rollout-chunk {c}"]
            )
            break
    raise ValueError(
        f"memory: evaluation needs about {pl['total'] / GiB:.1f} GiB (models {pl['persistent'] / GiB:.1f}"
        f" + {pl['peak_phase']} phase at {told} prompt{'s' * (told != 1)} per generate call), but this "
        f"machine has {free_line(device, free)} ({reserve:.0%} kept in reserve); {hint}"
    )
