"""The ablation of Table 2 (§4.3) in the toy world, plus the coordination analysis of Figs. 3-4.

    python -m toy.ablation                                    # 3 variants x 3 training seeds (docs/toy.md: its time)
    python -m toy.ablation --train-seeds 0 --eval-seeds 7 --steps 4   # a quick look
    python -m toy.ablation --reuse                            # evaluate the runs in OUT again, no training
    python -m toy.ablation --train-seeds 0 1 --train-only --threads 1 &   # on two cores: train in two processes,
    python -m toy.ablation --train-seeds 2 --train-only --threads 1; wait # then evaluate every run at once
    python -m toy.ablation --reuse

Trains MAS-OPD, w/o RAS (lambda = 0) and w/o PAC (the teacher sees only the student-visible context) from the same
base students, once per training seed, then evaluates each trained team and the untrained one on the held-out toy
problems with the evaluation decoding of App. D.5, over the same evaluation seeds, with the seats exchanged too
(Fig. 3a). As in the paper's Table 2, a figure is mean +- std over training runs (each run's figure being its mean
over the evaluation seeds). Prints two Markdown tables (accuracy: the Table 2 analogue; coordination: exchange
penalty, revise-iff-wrong with its failure modes, turns) and writes everything to OUT/ablation.json. Any other
train.py flag is passed on, e.g. `--lr 1e-4`.
"""

import sys

from config import SEED, get_args, parser
from infra.cli import flags_first
from toy.cli import PASSED_ON, toy_root, train_args


def ablation_args(argv=None):
    """python -m toy.ablation's command line: its own flags, then train.py's for the toy world, those it does not
    know passed on. -> (its args, train.py's argv, train.py's args)"""
    ap = parser(description="Table 2 of the paper, in the toy world.", epilog=PASSED_ON)
    ap.add_argument("--out", default="runs/ablation")
    ap.add_argument(
        "--train-seeds",
        type=SEED,
        nargs="+",
        default=[0, 1, 2],
        help="one training run per seed",
    )
    ap.add_argument("--cache", default=".cache")
    ap.add_argument(
        "--eval-problems",
        help="held-out problem file (default: the toy world's test split)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="evaluate the runs already trained in OUT (each run's "
        "checkpoint) instead of training them again, e.g. after a change to the evaluation; a run that "
        "stopped early is finished first",
    )
    ap.add_argument(
        "--train-only",
        action="store_true",
        help="train the runs and stop: on a machine with several "
        "cores, start one process per share of the seeds (with --threads 1), then evaluate all of them "
        "in one --reuse run",
    )
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    # e.g. --eval-seeds, over the toy preset's
    common = train_args(toy_root(args.cache), args.out) + rest
    # the shared settings, also those of the evaluation
    return args, common, get_args(common)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(ablation_args)

import json
import os
import statistics

import train
from eval import evaluate_policies, markdown
from infra.checkpoint import load_policies
from infra.data import load_problems, write_atomic
from infra.models import load_model
from infra.runs import study_run
from infra.seats import team_seats
from toy.build import start_toy
from toy.expert import HandTeacher

VARIANTS = {
    "MAS-OPD": [],
    "w/o RAS (lambda=0)": ["--lam", "0"],
    "w/o PAC": ["--no-pac"],
}


def with_means(m):
    """One evaluation's metrics plus the two summaries the ablation is judged on: revise-iff-wrong averaged over
    the roles and the exchange penalty averaged over the domains (each a mean_std entry, as eval.mean_std gives)."""
    out = dict(m)
    for name, prefix in (
        ("revise_iff_wrong_mean", "revise_iff_wrong_"),
        ("exchange_penalty_mean", "exchange_penalty_"),
    ):
        parts = [v["mean"] for k, v in m.items() if k.startswith(prefix)]
        if parts:
            out[name] = {"mean": statistics.fmean(parts), "std": 0.0}
    return out


def over_runs(runs):
    """Per metric, mean +- std over runs, each run a dict metric -> {"mean": its mean over evaluation seeds}."""
    keys = sorted({k for r in runs for k in r})
    out = {}
    for k in keys:
        vals = [r[k]["mean"] for r in runs if k in r]
        out[k] = {
            "mean": statistics.fmean(vals),
            "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        }
    return out


def main(argv=None):
    args, common, targs = ablation_args(argv)
    print("config:", json.dumps({**vars(args), "train_args": common}))
    plans = plan_runs(VARIANTS, args.train_seeds, args.out, args.reuse, targs.overwrite)
    root = start_toy(args.cache, targs.threads)
    base, tok = load_model(targs.student, device=targs.device)
    teacher = HandTeacher(tok)  # frozen: one for every run
    runs = train_runs(VARIANTS, plans, common, lambda name: teacher)
    if args.train_only:
        return

    problems = load_problems(args.eval_problems or os.path.join(root, "test.jsonl"))
    results = evaluate_runs(problems, base, tok, runs, targs)
    print_tables(
        results,
        f"trained systems: mean ± std over training seeds {args.train_seeds}, each the mean over "
        f"evaluation seeds {targs.eval_seeds}; MAS-OPD and w/o PAC at lambda {targs.lam}",
    )
    write_atomic(os.path.join(args.out, "ablation.json"), json.dumps(results, indent=1))
    print(f"\nwrote {os.path.join(args.out, 'ablation.json')}")


def evaluate_runs(problems, base, tok, runs, targs):
    """The untrained team (base, every seat) and each row's trained runs ({name: [run directory]}, their
    checkpoints) on `problems`, with targs' evaluation settings (seeds, decoding, exchange): {name: metrics},
    a row's metrics mean ± std over its runs (over_runs), each run's a mean over the evaluation seeds."""
    roles = team_seats(problems, targs.agents_per_role)  # a policy per agent (App. E.1)
    print(
        f"== evaluating untrained on {len(problems)} held-out problems, seeds {targs.eval_seeds}"
    )
    results = {
        "untrained": with_means(
            evaluate_policies(problems, {r: base for r in roles}, tok, targs)
        )
    }
    for name, outs in runs.items():
        print(
            f"== evaluating {name} ({len(outs)} runs) on {len(problems)} held-out problems"
        )
        results[name] = over_runs(
            [
                with_means(
                    evaluate_policies(
                        problems,
                        load_policies(
                            os.path.join(out, "checkpoint"), roles, targs.device
                        )[0],
                        tok,
                        targs,
                    )
                )
                for out in outs
            ]
        )
    return results


def print_tables(results, trained):
    """The Table 2 analogue (accuracy) and the coordination table (Figs. 3-4) of evaluate_runs' results, in
    Markdown; `trained` says over what the trained rows' figures are taken."""
    accuracy = {
        n: {k: v for k, v in m.items() if k.startswith("acc_")}
        for n, m in results.items()
    }
    coordination = {
        n: {k: v for k, v in m.items() if not k.startswith("acc_")}
        for n, m in results.items()
    }
    print(
        f"\nTable 2 analogue: team accuracy / Pass@1 (%), held-out toy problems; {trained}\n"
    )
    print(markdown(accuracy))
    print(
        "\nCoordination (Figs. 3-4): exchange penalty (points), revise-iff-wrong and its failure modes (% of "
        "disagreeing turns), turns to agreement\n"
    )
    print(markdown(coordination))


def plan_runs(rows, train_seeds, out, reuse, overwrite):
    """Each row's (name -> train.py flags) run directory per training seed, OUT/<slug>_seed<s>, and what becomes
    of it (checkpoint.study_run): {name: [(seed, directory, "train" | "resume" | "reuse")]}. A run already there,
    without --reuse to keep it or --overwrite to discard it, is refused before anything loads (exit 2)."""
    try:
        return {
            name: [
                (s, run, study_run(run, reuse, overwrite))
                for s in train_seeds
                for run in [os.path.join(out, f"{_slug(name)}_seed{s}")]
            ]
            for name in rows
        }
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def train_runs(rows, plans, common, teacher_of, main_of=lambda name: train.main):
    """Train every row's runs as plan_runs planned them, each with train.py's `common` flags, the row's own and
    teacher_of(name) (None: train.py loads its own or, for GRPO, none), by main_of(name) (train.main; a GRPO
    row's, baselines.grpo.main): a run to reuse is kept as it is, one that stopped early resumes. Returns
    {name: [run directory per seed]}."""
    for name, flags in rows.items():
        for seed, run, plan in plans[name]:
            if plan == "reuse":
                print(f"== reusing {name}, seed {seed}: {run}")
                continue
            print(
                f"== {'training' if plan == 'train' else 'resuming'} {name}, seed {seed}"
            )
            resume = ["--resume"] if plan == "resume" else []
            main_of(name)(
                common + flags + ["--seed", str(seed), "--out", run] + resume,
                teacher=teacher_of(name),
                again="--reuse",
            )
    return {name: [run for _, run, _ in plans[name]] for name in rows}


def _slug(name):
    return (
        "".join(c if c.isalnum() else "_" for c in name.split(" (")[0])
        .strip("_")
        .lower()
    )


if __name__ == "__main__":
    main()
