"""One prepared GPU check of one GPU at 1.7B: real Qwen3 shapes, random weights; checks first, then timing.

    python -m tools.device_check --out $OUT/device_check.txt  # 2 x Qwen3-1.7B students (fp32) + Qwen3-14B teacher
    python -m tools.device_check --tiny --out /tmp/dc.txt     # the same script, tiny shapes, on the CPU

It first builds everything train.py keeps on the GPU at once -- two students in fp32 with their AdamW moments, the
frozen teacher in bf16 -- and then, before anything is timed, checks that the decode path computes what it should:
  correctness: the students' weights made peaked (random weights give near-uniform distributions, which hide
      errors), fp32, at the real shapes: the recorded step (CUDA graph), the compiled step, each SDPA kernel that
      can run (flash, memory-efficient, cuDNN, math), two models in turn, and a recording replayed after an
      in-place refresh give plain decoding's tokens (same draws) and log-probs within TOL of sequence_logprobs on
      those tokens; then the bf16 rollout copy's log-prob gap against its fp32 master after ~4k-token prompts
      (GAP_RATIO; the checks: tools/decode_checks.py). One line per check, ok or FAIL; the exit status is 1 if
      any check failed.
Then it measures each phase with train.py's own building blocks, as train.py runs them under --precision bf16,
memory first and decode speed last (--budget-s skips what is left once spent; it never cuts the checks):
  (a4) one long-prompt generate: the prefill and KV-cache memory
  (b) teacher scoring: teacher.score of responses at realistic lengths (one pass; train.py makes two)
  (c) update: train.update, train_step's Phase 3 itself (Eq. 13 over one micro-batch, backward, clip, AdamW step
      for both students), with and without gradient checkpointing, and the last shape with --optimizer-offload
  (d) one train_step end to end at these shapes, per-phase seconds, with the rollout on bf16 copies and under
      autocast over fp32 (the rollout phase's ratio), and the sampler/trainer log-prob gap
  (a) rollout: the copy bandwidth and the HBM roofline it implies; sampler.generate (the CUDA-graph decode step)
      vs transformers generate with a static cache on a bf16 copy of one student at batch 1, 16 and 128 (tokens/s
      and their ratio); ours under autocast over the fp32 weights for reference
Per phase: seconds, the measured peak (torch.cuda.max_memory_allocated since the phase began; everything
persistent included) and memory.plan's prediction for the same settings. Every line printed is also written
to --out as it is printed, so a run cut short still leaves its lines. No checkpoint or tokenizer is needed: the
token ids are random ids below 256, valid for the real 151,936-entry vocabulary.
"""

from config import parser
from infra.cli import flags_first


def check_args(argv=None):
    """python -m tools.device_check's command line."""
    ap = parser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="tiny shapes on the CPU (a smoke test of this script)",
    )
    ap.add_argument("--out", help="also write the printed lines to this file")
    ap.add_argument("--device", default=None, help="default: cuda, or cpu with --tiny")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=420,
        help="skip the remaining checks after this many seconds",
    )
    return ap.parse_args(argv)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(check_args)

import gc
import os
import time
from functools import partial
from types import SimpleNamespace

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.utils import logging as hf_logging

import config
import train
from attribution import attribute_episodes
from infra import launch
from infra.data import load_problems
from infra.models import QWEN3, make_tokenizer
from prompts import Segment
from rollout import Response, run_episodes
from sampler import generate, release_decoder, sequence_logprobs
from scaling import memory
from scaling.offload import MOMENTS, park
from teacher import score
from tools.decode_checks import (
    Log,
    attempt,
    check_bf16_gap,
    check_decoding,
    failed,
    peak,
    sdpa_ops,
)

EXAMPLES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "examples",
    "problems.jsonl",
)
TINY_S = dict(
    model_type="qwen3",
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=192,
    vocab_size=1024,
    tie_word_embeddings=True,
)
TINY_T = dict(
    TINY_S,
    hidden_size=96,
    num_attention_heads=4,
    head_dim=24,
    intermediate_size=256,
    tie_word_embeddings=False,
)
# Lengths per check: real (paper-like) and tiny. check: batch, prompt, new of the decoding checks; gap: batch,
# short and long prompt, new of the bf16 gap check (a response's 4k-th token in the paper). decode: batch x
# (prompt, new); long: the prefill/KV check; teacher: (teacher context, response, how many); update: (prompt,
# response, micro-batch, checkpointing).
REAL = dict(
    check=(16, 512, 128),
    gap=(4, 64, 4096, 64),
    decode=((1, 16, 128), 512, 128),
    step=(8, 2, 128),
    long=(4, 8192, 128),
    teacher=[(12288, 4096, 4), (6144, 2048, 4)],
    teacher_batch_tokens=16384,
    update=[
        (2048, 2048, 2, False),
        (2048, 2048, 2, True),
        (8192, 4096, 2, True),
        (8192, 4096, 4, True),
    ],
)
TINY = dict(
    check=(4, 24, 16),
    gap=(4, 64, 2048, 32),
    decode=((1, 4), 24, 8),
    step=(2, 2, 8),
    long=(2, 48, 4),
    teacher=[(48, 16, 2), (24, 8, 2)],
    teacher_batch_tokens=64,
    update=[
        (32, 16, 2, False),
        (32, 16, 2, True),
        (64, 32, 2, True),
        (64, 32, 4, True),
    ],
)


def build(shape, dtype, device):
    """A randomly initialised Qwen3ForCausalLM of these shapes, created directly on `device` in `dtype`."""
    cfg = Qwen3Config(
        **{k: v for k, v in shape.items() if k != "model_type"},
        max_position_embeddings=40960,
        attn_implementation="sdpa",
    )
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.eval()


def main(argv=None):
    args = check_args(argv)
    hf_logging.set_verbosity_error()
    dev = args.device or ("cpu" if args.tiny else "cuda")
    cuda = dev.startswith("cuda")
    sizes, S, T = (
        (TINY, TINY_S, TINY_T)
        if args.tiny
        else (REAL, QWEN3["Qwen3-1.7B"], QWEN3["Qwen3-14B"])
    )
    log = Log(args.out)
    unit, uname = (2**20, "MiB") if args.tiny else (memory.GiB, "GiB")
    start = time.perf_counter()
    # train.py's --precision bf16
    amp = lambda: torch.autocast(dev.split(":")[0], dtype=torch.bfloat16)
    torch.manual_seed(0)
    gen_ids = torch.Generator().manual_seed(0)
    rand_ids = lambda n: torch.randint(0, 256, (n,), generator=gen_ids).tolist()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def measure(name, fn, predicted=None, warm=None):
        """Run warm() (untimed but logged: recording, compiling) then fn() once; log seconds, measured and predicted
        peak (GiB). A failure is logged as one line and the check goes on. Returns (fn's result or None, seconds)."""
        if time.perf_counter() - start > args.budget_s:
            log(f"{name:<58} skipped: past --budget-s {args.budget_s:g}")
            return None, None
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        sync()
        out, status = None, ""
        try:
            if warm:
                t0 = time.perf_counter()
                warm()
                sync()
                status = f"  (warm-up {time.perf_counter() - t0:.1f} s)"
            t0 = time.perf_counter()
            out = fn()
            sync()
        except Exception as e:  # OOM included: one line, then the next check
            status = "  " + failed(e)
            log.failures += 1
        secs = time.perf_counter() - t0
        peak = f"{torch.cuda.max_memory_allocated() / unit:7.2f}" if cuda else "    n/a"
        pred = f"{predicted / unit:7.2f}" if predicted is not None else "      -"
        log(
            f"{name:<58}{secs:8.2f} s   measured peak {peak} {uname}   predicted {pred} {uname}{status}"
        )
        for opt in optims:
            opt.zero_grad(set_to_none=True)
        return out, (secs if out is not None else None)

    def predict(phase, **kw):
        pl = memory.plan(
            S,
            T,
            n_policies=2,
            precision="bf16",
            teacher_batch_tokens=sizes["teacher_batch_tokens"],
            **kw,
        )
        return pl["persistent"] + pl["phases"][phase]

    log(
        f"device_check: torch {torch.__version__}, device {torch.cuda.get_device_name() if cuda else dev}"
        + (
            f" ({torch.cuda.get_device_properties(0).total_memory / memory.GiB:.1f} GiB)"
            if cuda
            else ""
        )
        + f", {'tiny' if args.tiny else 'real'} shapes"
    )

    # Everything train.py keeps for a whole run: two students (fp32 master weights), their AdamW moments (made
    # here by one step on zero gradients), the frozen bf16 teacher.
    optims = []
    t0 = time.perf_counter()
    students = [build(S, torch.float32, dev) for _ in range(2)]
    teacher = build(T, torch.bfloat16, dev).requires_grad_(False)
    for m in students:
        opt = torch.optim.AdamW(m.parameters(), lr=1e-6, weight_decay=0.01)
        for p in m.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        opt.zero_grad(set_to_none=True)
        optims.append(opt)
    sync()
    base = memory.plan(S, T, n_policies=2, precision="bf16")
    measured = f"{torch.cuda.memory_allocated() / unit:.2f}" if cuda else "n/a"
    log(
        f"persistent (2 students fp32 + AdamW + bf16 teacher), built in {time.perf_counter() - t0:.1f} s: measured "
        f"{measured} {uname}, predicted {base['persistent'] / unit:.2f} {uname} "
        f"({base['params']['student']:,} x 2 + {base['params']['teacher']:,} params)"
    )

    # Correctness before anything is timed, so that --budget-s can only cut timing: fp32 decoding of the two
    # students, made peaked, at the real shapes, every way the decode step can run, against teacher forcing; then
    # the bf16 rollout copy's log-prob gap at a long position. (The weights stay peaked: random either way.)
    for m in students:
        peak(m)
    Bc, Pc, Nc = sizes["check"]
    log(
        "correctness: decoding vs teacher forcing (sequence_logprobs of the same tokens), fp32, peaked weights"
    )
    t0 = time.perf_counter()
    prompts = [rand_ids(n) for n in torch.linspace(Pc // 2, Pc, Bc).long().tolist()]
    attempt(
        log,
        "decoding checks",
        lambda: check_decoding(log, students[0], students[1], prompts, Nc),
    )
    Bg, Ps, Pg, Ng = sizes["gap"]
    short, long = (
        [rand_ids(Ps - 8 * i) for i in range(Bg)],
        [rand_ids(Pg - 8 * i) for i in range(Bg)],
    )
    attempt(
        log,
        "bf16 gap checks",
        lambda: check_bf16_gap(log, students[0], short, long, Ng),
    )
    log(f"correctness: {log.failures} failed, {time.perf_counter() - t0:.0f} s")

    # Which SDPA kernels run where (flash rejects explicit masks; torch's efficient kernel rejects GQA).
    student = students[0]
    probe = [rand_ids(24), rand_ids(16)]
    with amp():
        log(
            "SDPA kernels: sampler.generate (prefill + decode):",
            sdpa_ops(
                lambda: generate(
                    student, probe, 2, generator=torch.Generator(dev).manual_seed(0)
                )
            ),
        )
        with torch.no_grad():
            log(
                "SDPA kernels: sequence_logprobs, one sequence:",
                sdpa_ops(lambda: sequence_logprobs(student, probe[:1], [rand_ids(4)])),
            )
            log(
                "SDPA kernels: sequence_logprobs, two padded sequences:",
                sdpa_ops(
                    lambda: sequence_logprobs(
                        student, probe, [rand_ids(4), rand_ids(4)]
                    )
                ),
            )

    Bl, Pl, Nl = sizes["long"]
    # mixed lengths, as in real batches
    long_prompts = [rand_ids(Pl - Pl // 64 * i) for i in range(Bl)]
    fused = predict("rollout", prompt_len=Pl, response_len=Nl, rollout_batch=Bl)
    mathp = predict(
        "rollout",
        prompt_len=Pl,
        response_len=Nl,
        rollout_batch=Bl,
        rollout_attention="math",
    )
    with amp():
        measure(
            f"(a4) sampler.generate batch {Bl}, prompts {Pl}, {Nl} new",
            lambda: generate(
                student, long_prompts, Nl, generator=torch.Generator(dev).manual_seed(0)
            ),
            fused,
        )
    log(f"    (prediction with the math-fallback prefill: {mathp / unit:.2f} {uname})")

    # (b) Teacher scoring: one pass of teacher.score (train.py runs two per response: target and contrast).
    log(
        f"(b) teacher scoring: one pass of teacher.score, bf16 teacher, at most {sizes['teacher_batch_tokens']} "
        "padded tokens per forward"
    )
    for ctx_len, resp_len, n in sizes["teacher"]:
        ctxs, resps = (
            [rand_ids(ctx_len) for _ in range(n)],
            [rand_ids(resp_len) for _ in range(n)],
        )
        per_fwd = max(1, sizes["teacher_batch_tokens"] // (ctx_len + resp_len))
        pred = predict("teacher", teacher_prompt_len=ctx_len, response_len=resp_len)
        with amp():
            _, secs = measure(
                f"(b) teacher.score {n} x ({ctx_len} + {resp_len}), {per_fwd}/forward",
                lambda: score(
                    teacher, ctxs, resps, max_batch_tokens=sizes["teacher_batch_tokens"]
                ),
                pred,
            )
        if secs:
            per = secs / n
            log(
                f"    {per:.2f} s per response per pass, {(ctx_len + resp_len) / per:,.0f} tokens/s; a paper step "
                f"at these lengths, 128 episodes x 4 turns x 2 roles x 2 passes: {2048 * per / 60:.1f} min"
            )

    # (c) Update: train.update, train_step's Phase 3 itself, on one micro-batch of responses that alternate
    # between the two students, with random advantages; Eq. 13 weights, backward, clip, AdamW step on both.
    policies = {"a": students[0], "b": students[1]}

    def update(ctx_len, resp_len, mb, offload=False):
        items = []
        for i in range(mb):
            ctx, resp = (
                rand_ids(ctx_len - ctx_len // 32 * (i // 2)),
                rand_ids(resp_len),
            )  # mb > 2: padded per policy
            response = Response(
                "ab"[i % 2], [Segment("task", ctx)], resp, [0.0] * resp_len, ""
            )
            items.append(
                train.Scored(
                    0,
                    "ab"[i % 2],
                    response,
                    [],
                    [],
                    torch.zeros(resp_len),
                    adv=torch.randn(resp_len, device=dev),
                )
            )
        args = SimpleNamespace(
            mini_batch=1,
            micro_batch=mb,
            grad_clip=1.0,
            precision="bf16",
            device=dev,
            optimizer_offload=offload,
            fsdp=False,
        )
        return train.update(items, 1, policies, optims, args)

    log(
        "(c) update: both students, bf16 autocast, AdamW moments present; micro-batch responses alternate policies"
    )
    measure("(c) warm-up: micro-batch 2 x (64 + 32)", lambda: update(64, 32, 2))
    for ctx_len, resp_len, mb, ckpt in sizes["update"]:
        # transformers >= 5.2x: activation_checkpointing_*; older: gradient_checkpointing_*
        for model in students:
            if ckpt:
                (
                    getattr(model, "activation_checkpointing_enable", None)
                    or model.gradient_checkpointing_enable
                )()
            else:
                (
                    getattr(model, "activation_checkpointing_disable", None)
                    or model.gradient_checkpointing_disable
                )()
        pred = predict(
            "update",
            prompt_len=ctx_len,
            response_len=resp_len,
            micro_batch=mb,
            grad_checkpointing=ckpt,
        )
        measure(
            f"(c) micro-batch {mb} x ({ctx_len} + {resp_len}), checkpointing {'on' if ckpt else 'off'}",
            lambda: update(ctx_len, resp_len, mb),
            pred,
        )
    # The last of them again with --optimizer-offload: the moments in pinned host memory, each policy's on the GPU
    # for its own step only (scaling/offload.py); then back on the device for what follows.
    for opt in optims:
        park(opt)
    pred = predict(
        "update",
        prompt_len=ctx_len,
        response_len=resp_len,
        micro_batch=mb,
        grad_checkpointing=ckpt,
        optimizer_offload=True,
    )
    measure(
        "(c) the same with --optimizer-offload",
        lambda: update(ctx_len, resp_len, mb, offload=True),
        pred,
    )
    for opt in optims:
        for st in opt.state.values():
            st.update({k: st[k].to(dev) for k in MOMENTS if k in st})
    # (d) One train_step end to end at this shape (Algorithm 1: rollout, attribution, two teacher passes, update):
    # the example problems with the byte-level tokenizer (random weights never agree, so every episode runs all its
    # turns at full length), per-phase seconds; with the rollout on bf16 copies as train.py runs it under
    # --precision bf16, plain and with --compile, and under autocast over the fp32 weights (the path before the
    # copies). Each variant's step also updates the students: random weights either way.
    Bd, turns, new = sizes["step"]
    roles = {
        "coder": students[0],
        "reasoner": students[0],
        "tester": students[1],
        "tool_user": students[1],
    }
    targv = [
        "--problems",
        EXAMPLES,
        "--student",
        "tiny-qwen3",
        "--precision",
        "bf16",
        "--batch",
        str(Bd),
        "--mini-batch",
        str(Bd),
        "--micro-batch",
        "2",
        "--max-turns",
        str(turns),
        "--max-new-tokens",
        str(new),
        "--device",
        dev,
    ]
    problems, tok = load_problems(EXAMPLES), make_tokenizer()
    log(
        f"(d) train_step: {Bd} episodes x {turns} turns x {new} new tokens, bf16, teacher {T.get('hidden_size')} wide"
    )
    copies, steps = launch.rollout_copies(roles, config.get_args(targv)), {}
    for name, extra, rollout_models in (
        ("bf16 rollout copies", [], copies),
        ("bf16 rollout copies, --compile", ["--compile"], copies),
        ("autocast over fp32", [], None),
    ):
        targs = config.get_args(targv + extra)
        inputs = launch.Start(
            problems,
            roles,
            teacher,
            tok,
            optims,
            torch.Generator(dev).manual_seed(0),
            rollout_models or roles,
            play=run_episodes,
            attribute=attribute_episodes,
        )
        m, _ = measure(
            f"(d) train_step, rollout on {name}",
            lambda: train.train_step(0, inputs, targs),
        )
        if m:
            steps[name] = m["seconds"]
            log(
                f"    seconds {m['seconds']}, tokens {m['tokens']}, logprob_gap mean "
                f"{m.get('logprob_gap_mean', float('nan')):.2e} max {m.get('logprob_gap', float('nan')):.2e}"
            )
    del copies
    before = steps.get("autocast over fp32")
    for name in steps if before else ():
        if name != "autocast over fp32":
            log(
                f"    rollout phase on {name}: {before['rollout'] / steps[name]['rollout']:.2f}x faster than under "
                "autocast over fp32"
            )

    # (a) Rollout decode, on a bf16 copy of the student as train.py samples under --precision bf16: our sampler
    # (static-shape decode step replayed as a CUDA graph; plain, and with compiled=True as under --compile) vs
    # transformers generate with a static cache (its compiled decode), temperature 1, no stop tokens, so every row
    # produces exactly `new` tokens; each timed after a warm-up of the same shapes (our recording and compiling,
    # theirs). Then the training path before the copies, for reference: ours under bf16 autocast over the fp32
    # weights (eager: autocast's casts cannot be recorded).
    # as launch.rollout_copies makes them
    bf = build(S, torch.bfloat16, dev).requires_grad_(False)
    bf.load_state_dict(student.state_dict())
    batches, P, N = sizes["decode"]
    weight_bytes = 2 * base["params"]["student"]
    big = torch.empty(weight_bytes // 2, dtype=torch.bfloat16, device=dev)
    dst = torch.empty_like(big)
    dst.copy_(big)
    _, t_copy = measure(
        "(a0) copy of one student's bf16 weights (bandwidth)", partial(dst.copy_, big)
    )
    del big, dst
    if t_copy:
        bw = 2 * weight_bytes / t_copy  # read + write
        log(
            f"    {bw / 1e9:,.0f} GB/s -> HBM roofline at batch 1: {bw / weight_bytes:,.0f} tokens/s "
            f"({weight_bytes / bw * 1e3:.2f} ms per decode step to read the weights)"
        )
    log(
        f"(a) rollout decode: prompts {P // 2}-{P} tokens, {N} new tokens, bf16 weights"
    )
    for B in batches:
        lens = torch.linspace(P // 2, P, B).long().tolist()
        prompts = [rand_ids(n) for n in lens]
        ids = torch.tensor([[0] * (P - len(p)) + p for p in prompts], device=dev)
        attn = torch.tensor(
            [[0] * (P - len(p)) + [1] * len(p) for p in prompts], device=dev
        )
        ours = lambda new, compiled=False, bf=bf: generate(
            bf,
            prompts,
            new,
            generator=torch.Generator(dev).manual_seed(0),
            compiled=compiled,
        )

        def theirs(new, model=bf):
            with torch.inference_mode():
                return model.generate(
                    ids,
                    attention_mask=attn,
                    max_new_tokens=new,
                    min_new_tokens=new,
                    do_sample=True,
                    temperature=1.0,
                    top_p=1.0,
                    top_k=0,
                    eos_token_id=None,
                    pad_token_id=0,
                    cache_implementation="static",
                )

        _, t_ours = measure(
            f"(a1) sampler.generate, batch {B}", lambda: ours(N), warm=lambda: ours(4)
        )
        _, t_comp = measure(
            f"(a1) sampler.generate compiled=True, batch {B}",
            lambda: ours(N, True),
            warm=lambda: ours(4, True),
        )
        # which fused kernel the recorded step should use (cuDNN may lead)
        if B in (batches[0], batches[-1]):
            # the bucket's recording was made with the default kernel choice
            release_decoder()
            # the decode step's attention has no GQA left, so the memory-efficient kernel takes it; the prefill's
            # (GQA and a mask) then needs the math kernel
            with sdpa_kernel(
                ([SDPBackend.EFFICIENT_ATTENTION] if cuda else []) + [SDPBackend.MATH]
            ):
                _, t_eff = measure(
                    f"(a1) sampler.generate, {'memory-efficient' if cuda else 'math'} SDPA in the "
                    f"decode step, batch {B}",
                    lambda: ours(N),
                    warm=lambda: ours(4),
                )
            release_decoder()
            if t_eff:
                log(
                    f"    batch {B}: {B * N / t_eff:,.0f} tokens/s with that kernel alone"
                )
        _, t_theirs = measure(
            f"(a2) transformers generate, static cache, batch {B}",
            lambda: theirs(N),
            warm=lambda: theirs(N),
        )
        for name, t in (
            ("ours", t_ours),
            ("ours compiled", t_comp),
            ("transformers", t_theirs),
        ):
            if t:
                log(
                    f"    batch {B}: {name} {B * N / t:,.0f} tokens/s ({t / N * 1e3:.2f} ms/step)"
                    + (
                        f", {t_theirs / t:.2f}x transformers"
                        if t_theirs and name != "transformers"
                        else ""
                    )
                )
    Bm = batches[len(batches) // 2]
    mid = [rand_ids(n) for n in torch.linspace(P // 2, P, Bm).long().tolist()]
    with amp():
        _, t_amp = measure(
            f"(a3) sampler.generate, batch {Bm}, autocast over fp32 weights (eager)",
            lambda: generate(
                student, mid, N, generator=torch.Generator(dev).manual_seed(0)
            ),
            warm=lambda: generate(
                student, mid, 4, generator=torch.Generator(dev).manual_seed(0)
            ),
        )
    if t_amp:
        log(
            f"    batch {Bm} under autocast: {Bm * N / t_amp:,.0f} tokens/s ({t_amp / N * 1e3:.1f} ms/step)"
        )
    release_decoder()
    del bf

    log(
        f"device_check done in {time.perf_counter() - start:.0f} s: {log.failures} failed"
    )
    return 1 if log.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
