"""The λ sweep of §4.3 and App. E.2 as one command: one training run per λ (train.py, any of its flags), each
evaluated on one or more held-out problem files (one per benchmark) for the figures the paper plots against λ:
accuracy per benchmark (Fig. 6), the exchange penalty (Fig. 3b) and the Coder alone under SA+ST, the shared-ability
check (Fig. 3c; the Reasoner alone for math). One run per λ, as the paper's (Fig. 6 caption).

    python -m tools.sweep --eval-problems lcb.jsonl apps.jsonl --out runs/sweep \\
        --problems train.jsonl --student DIR --teacher DIR          # Fig. 6's six values of λ, the paper's schedule
    python -m tools.sweep --lam 0 0.1 --eval-problems examples/problems.jsonl --problems examples/problems.jsonl \\
        --student tiny-qwen3 --teacher tiny-qwen3 --steps 2 --batch 2 --max-new-tokens 16   # seconds, tiny models
    python -m tools.sweep --reuse ...                                # evaluate the runs already in OUT again

Writes OUT/lam<λ>/ (each run, with its report), OUT/sweep.json (every figure, mean ± std over the evaluation seeds),
OUT/sweep.md (the table), OUT/sweep.png (three panels against λ) and OUT/report.html (table and figure).
"""

import os
import sys

from config import bounded, get_args, negative_values, parser
from infra.cli import flags_first

# Fig. 6's six values; the sixth not legible, 0.4 (DECISIONS.md D14)
LAMBDAS = [0.0, 0.05, 0.1, 0.2, 0.4, 0.5]


def sweep_args(argv=None):
    """python -m tools.sweep's command line: its own flags, then train.py's, those it does not know passed on.
    -> (its args, train.py's flags, lambda -> its run's directory, the first run's train.py args)"""
    ap = parser(
        description="The λ sweep (Fig. 3b-c, Fig. 6): one run per λ, evaluated. Any "
        "other flag goes to train.py (python train.py --help)."
    )
    negative_values(ap)
    ap.add_argument(
        "--lam",
        type=bounded(float, 0),
        nargs="+",
        default=LAMBDAS,
        help="[%(default)s]",
    )
    ap.add_argument(
        "--eval-problems",
        nargs="+",
        required=True,
        help="held-out problem files, one per benchmark",
    )
    ap.add_argument("--out", default="runs/sweep", help="[%(default)s]")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="evaluate the runs already trained in OUT (and finish "
        "those that stopped early)",
    )
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    runs = {v: os.path.join(args.out, f"lam{v:g}") for v in args.lam}
    # train.py's flags checked once, before any run: a bad one is its one-line refusal (exit 2)
    targs = get_args(
        rest
        + ["--lam", str(args.lam[0]), "--out", runs[args.lam[0]], "--eval-exchange"]
    )
    return args, rest, runs, targs


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(sweep_args)

import base64

import train
from baselines.single import single_agent_metrics
from config import EVAL_DECODING
from eval import evaluate_policies, markdown
from infra.checkpoint import load_policies
from infra.data import (
    ProblemError,
    check_writable,
    json_text,
    load_problems,
    write_atomic,
)
from infra.metrics import mean_std
from infra.png import chart_pixels, write_png
from infra.report import page, results_html
from infra.runs import study_run
from infra.seats import team_seats
from rollout import rollout_config

PALETTE = [
    "#e69f00",
    "#cc79a7",
    "#009e73",
    "#56b4e9",
    "#d55e00",
    "#0072b2",
    "#555555",
    "#f0e442",
]
PANELS = {
    "acc_": "ACCURACY VS LAMBDA (FIG. 6)",
    "exchange_penalty_": "EXCHANGE PENALTY (FIG. 3B)",
    "alone_acc_": "ALONE, SA+ST (FIG. 3C)",
}


def evaluate_run(run, benchmarks, targs):
    """One trained run on every benchmark: the team with its seats exchanged too (accuracy, exchange penalty) and
    each main role's policy alone under SA+ST (alone_acc_D). benchmarks: name -> problems. -> {"NAME/metric":
    mean_std entry}."""
    cfg, out = rollout_config(targs, progress=True, **EVAL_DECODING), {}
    for name, problems in benchmarks.items():
        # a policy per agent (App. E.1)
        roles = team_seats(problems, targs.agents_per_role)
        policies, tok = load_policies(
            os.path.join(run, "checkpoint"), roles, targs.device
        )
        team = evaluate_policies(problems, policies, tok, targs)
        mains = {r: policies[r] for r in ("coder", "reasoner") if r in policies}
        alone = mean_std(
            [
                single_agent_metrics(problems, mains, tok, s, cfg)
                for s in targs.eval_seeds
            ]
        )
        out.update({f"{name}/{k}": v for k, v in team.items()})
        out.update(
            {f"{name}/alone_{k}": v for k, v in alone.items() if k.startswith("acc_")}
        )
    return out


def figure(results, lams):
    """The three panels (PANELS) against λ: one series per benchmark and domain. -> (H, W, 3) pixels."""
    panels = []
    for prefix, title in PANELS.items():
        keys = sorted(
            {
                k
                for r in results.values()
                for k in r
                if k.split("/", 1)[1].startswith(prefix)
            }
        )
        series = {
            k.replace("/" + prefix, " "): (
                [results[v].get(k, {}).get("mean") for v in lams],
                PALETTE[i % len(PALETTE)],
            )
            for i, k in enumerate(keys)
        }
        panels.append((title, lams, series))
    return chart_pixels(panels)


def main(argv=None, teacher=None):
    """teacher: a teacher module handed to every train.main (as python -m toy does), instead of --teacher."""
    args, rest, runs, targs = sweep_args(argv)
    try:
        check_writable(args.out, "--out", directory=True)
        names = [os.path.splitext(os.path.basename(p))[0] for p in args.eval_problems]
        if len(set(names)) < len(names):
            raise ValueError(
                f"--eval-problems: two files share the name {names}; a benchmark is named by its file"
            )
        benchmarks = {n: load_problems(p) for n, p in zip(names, args.eval_problems)}
        plans = {
            v: study_run(run, args.reuse, targs.overwrite) for v, run in runs.items()
        }  # before any trains
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    for v, run in runs.items():
        if plans[v] == "reuse":
            print(f"== reusing λ = {v:g}: {run}")
            continue
        print(
            f"== {'training' if plans[v] == 'train' else 'resuming'} λ = {v:g}: {run}"
        )
        resume = ["--resume"] if plans[v] == "resume" else []
        train.main(
            rest + ["--lam", str(v), "--out", run] + resume,
            teacher=teacher,
            again="--reuse",
        )
    results = {}
    for v, run in runs.items():
        print(f"== evaluating λ = {v:g} on {', '.join(names)}")
        results[v] = evaluate_run(run, benchmarks, targs)
    table = markdown({f"λ = {v:g}": m for v, m in results.items()})
    print(
        f"\nThe λ sweep: mean ± std over evaluation seeds {targs.eval_seeds}, one training run per λ\n\n{table}"
    )
    write_atomic(
        os.path.join(args.out, "sweep.json"),
        json_text({f"{v:g}": m for v, m in results.items()}, indent=1),
    )
    write_atomic(os.path.join(args.out, "sweep.md"), table + "\n")
    png = os.path.join(args.out, "sweep.png")
    write_png(png, figure(results, args.lam))
    with open(png, "rb") as f:
        img = base64.b64encode(f.read()).decode()
    links = "".join(
        f"<li><a href='lam{v:g}/report.html'>λ = {v:g}</a></li>" for v in args.lam
    )
    body = (
        f"<h1>The λ sweep</h1><img src='data:image/png;base64,{img}' alt='accuracy, exchange penalty and "
        f"single-agent accuracy against λ'><h2>Figures</h2>"
        + results_html({f"λ = {v:g}": m for v, m in results.items()})
        + f"<h2>Runs</h2><ul>{links}</ul>"
    )
    write_atomic(os.path.join(args.out, "report.html"), page("λ sweep", body))
    print(
        f"wrote {os.path.join(args.out, 'sweep.md')}, {png} and {os.path.join(args.out, 'report.html')}"
    )


if __name__ == "__main__":
    main()
