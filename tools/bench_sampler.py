"""Tokens/s of our `generate` vs transformers `model.generate`, same model, batch, lengths and settings.

    python -m tools.bench_sampler              # 4-layer d=256 Qwen3 (Qwen3's 151,936-entry vocabulary),
                                               # batch 16, prompts of 16-32 tokens, 128 new, 2 threads
    python -m tools.bench_sampler --vocab 261  # the same with the tiny byte tokenizer's vocabulary

Both samplers are timed side by side in one process, alternating, best of --repeats; prompts have mixed
lengths (left-padded for transformers). No stop tokens, so both produce exactly --new tokens per row.
The load average is printed with the ratio: on a shared machine the ratio moves with it.
"""

import argparse

from config import default_device, device, parser
from infra.cli import flags_first


def bench_args(argv=None):
    """python -m tools.bench_sampler's command line."""
    ap = parser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument(
        "--prompt",
        type=int,
        default=32,
        help="longest prompt; rows range from half of it to it",
    )
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (CPU)")
    ap.add_argument(
        "--device", type=device, help="[cuda where torch sees a GPU, else cpu]"
    )
    args = ap.parse_args(argv)
    args.device = args.device or default_device()
    return args


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(bench_args)

import os
import time

import torch

from infra.models import tiny_model
from sampler import generate


def main():
    args = bench_args()
    torch.set_num_threads(args.threads)
    print(vars(args))

    model = tiny_model(
        "qwen3",
        vocab_size=args.vocab,
        hidden=args.hidden,
        layers=args.layers,
        heads=4,
        kv_heads=2,
    )
    model.to(args.device)
    g = torch.Generator().manual_seed(0)
    lens = torch.linspace(args.prompt // 2, args.prompt, args.batch).long().tolist()
    prompts = [
        torch.randint(0, min(args.vocab, 256), (n,), generator=g).tolist() for n in lens
    ]
    T = max(lens)
    ids = torch.tensor([[0] * (T - len(p)) + p for p in prompts], device=args.device)
    attn = torch.tensor(
        [[0] * (T - len(p)) + [1] * len(p) for p in prompts], device=args.device
    )
    greedy = args.temperature == 0

    def ours():
        gen = torch.Generator(device=args.device).manual_seed(0)
        out = generate(
            model, prompts, args.new, temperature=args.temperature, generator=gen
        )
        return sum(len(t) for t in out.tokens)

    def theirs():
        sampling = (
            {} if greedy else dict(temperature=args.temperature, top_p=1.0, top_k=0)
        )
        out = model.generate(
            ids,
            attention_mask=attn,
            max_new_tokens=args.new,
            min_new_tokens=args.new,
            do_sample=not greedy,
            eos_token_id=None,
            pad_token_id=0,
            **sampling,
        )
        return (out.shape[1] - T) * args.batch

    best = {"ours": float("inf"), "transformers": float("inf")}
    counts = {}
    for _ in range(args.repeats):
        for name, fn in (("ours", ours), ("transformers", theirs)):
            if args.device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            counts[name] = fn()
            if args.device == "cuda":
                torch.cuda.synchronize()
            best[name] = min(best[name], time.perf_counter() - t0)
    rate = {k: counts[k] / best[k] for k in best}
    for k in best:
        print(
            f"{k:>13}: {counts[k]} tokens in {best[k]:.3f} s = {rate[k]:,.0f} tokens/s"
        )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"ratio ours/transformers: {rate['ours'] / rate['transformers']:.2f}x (load average {load})"
    )


if __name__ == "__main__":
    main()
