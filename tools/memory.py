"""How much GPU memory one MAS-OPD training step needs on one GPU, before you rent the GPU: scaling/memory.py's plan for
the run train.py's flags would start.

    python -m tools.memory --problems examples/problems.jsonl --student Qwen3-1.7B --teacher Qwen3-14B
                           # train.py's flags (the paper's lengths by default), 80 GiB
    python -m tools.memory --gib 141 --problems FILE --student Qwen3-4B --teacher Qwen3-14B --max-new-tokens 2048

It reads train.py's own flags (and `--gib`, `--rollout-attention`); it reads model configs only, never weights.
"""

import os
import sys

from config import COUNT, get_args, parser
from infra.cli import flags_first


def memory_args(argv=None):
    """python -m tools.memory's command line: its own flags, then train.py's. -> (its args, train.py's args)"""
    ap = parser(
        description="Estimate the GPU memory of one MAS-OPD training step for train.py's "
        "flags (given after these)."
    )
    ap.add_argument("--gib", type=float, default=80.0, help="GPU memory in GiB")
    ap.add_argument(
        "--rollout-attention",
        choices=("fused", "math"),
        default="fused",
        help="the SDPA backend of the rollout's prefill (device_check prints which one runs)",
    )
    ap.add_argument(
        "--world-size",
        type=COUNT,
        default=int(os.environ.get("WORLD_SIZE", "1")),
        help="GPUs under torchrun (train.py's ranks); each rolls out its share of --batch",
    )
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    # plan for a GPU
    targs = get_args(rest + ([] if "--precision" in rest else ["--precision", "bf16"]))
    return args, targs


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(memory_args)

from infra.data import ProblemError, load_problems
from infra.models import config_of
from prompts import ROLES
from scaling.memory import fit_report, format_plan, plan, plan_keywords


def dry_run(args, gib=80.0, rollout_attention="fused", world=1):
    """The estimate for train.py's parsed args, as text. Reads configs and the problem file, loads no weights.
    Policies: 1 with --shared-policy, else one per agent of the problem file (2n per domain, --agents-per-role n)."""
    domains = {p["domain"] for p in load_problems(args.problems, judge=False)}
    n = (
        1
        if args.shared_policy
        else sum(len(ROLES[d]) for d in domains) * args.agents_per_role
    )
    s, t = config_of(args.student), config_of(args.teacher)
    kw = plan_keywords(args, n, world, rollout_attention)
    return format_plan(plan(s, t, **kw)) + "\n" + fit_report(s, t, gib, **kw)


def main(argv=None):
    args, targs = memory_args(argv)
    print(
        "config:",
        vars(targs),
        f"gib {args.gib}, rollout attention {args.rollout_attention}, "
        f"world size {args.world_size}",
    )
    try:
        print(dry_run(targs, args.gib, args.rollout_attention, args.world_size))
    except (ProblemError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
