"""The agent-scaling study of App. E.1 (Fig. 5) in the toy world: teams of 2n agents, n = 1..4.

    python -m toy.scaling                                        # n = 1 2 3 4 x 3 training seeds (docs/toy.md)
    python -m toy.scaling --agents 1 2 --train-seeds 0 --eval-seeds 7 --steps 4   # a quick look
    python -m toy.scaling --train-only --train-seeds 0 --threads 1 &   # on two cores: train in two processes,
    python -m toy.scaling --train-only --train-seeds 1 2 --threads 1; wait  # then evaluate every run at once
    python -m toy.scaling --reuse

For each n, trains MAS-OPD with --agents-per-role n (each agent its own policy, all from the same toy student; the
same steps and problems per step for every n, so a larger team writes more responses per problem) once per
training seed, then evaluates the untrained team of that size and each trained team on the held-out toy problems
with the evaluation decoding of App. D.5 over the evaluation seeds. A figure is mean +- std over training runs, each
the mean over the evaluation seeds. Prints the per-domain accuracy table and writes OUT/scaling.json, OUT/scaling.png
(accuracy against the number of agents) and OUT/report.html (the figure and the tables). Any other train.py flag is
passed on; the defaults make it a shorter schedule than the demo's (STUDY), so that the study fits a 2-core CPU.
"""

import sys

from config import COUNT, SEED, get_args, parser
from infra.cli import flags_first
from toy.cli import PASSED_ON, toy_root, train_args

# ours: the demo's 100 steps of 16 episodes, a twentieth of them per run here (20 steps of 4 episodes), so that
# the runs (n = 1..4, two or three seeds) train in minutes on two cores: an 8-agent team costs four pairs per episode
STUDY = ["--steps", "20", "--batch", "4", "--mini-batch", "2"]


def scaling_args(argv=None):
    """python -m toy.scaling's command line: its own flags, then train.py's for the toy world, those it does not know
    passed on. -> (its args, train.py's argv, the rows' flags, each row's train.py args)"""
    ap = parser(
        description="The agent-scaling study (App. E.1, Fig. 5) in the toy world.",
        epilog=PASSED_ON,
    )
    ap.add_argument("--out", default="runs/scaling")
    ap.add_argument(
        "--agents",
        type=COUNT,
        nargs="+",
        default=[1, 2, 3, 4],
        help="n: teams of 2n agents",
    )
    ap.add_argument(
        "--train-seeds",
        type=SEED,
        nargs="+",
        default=[0, 1, 2],
        help="one training run per seed and n",
    )
    ap.add_argument("--cache", default=".cache")
    ap.add_argument(
        "--eval-problems",
        help="held-out problem file (default: the toy world's test split)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="evaluate the runs already trained in OUT (and train only "
        "the missing ones, finish those that stopped early)",
    )
    ap.add_argument(
        "--train-only",
        action="store_true",
        help="train the runs and stop (then evaluate with --reuse)",
    )
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    common = train_args(toy_root(args.cache), args.out) + STUDY + rest
    rows = {f"n={n}": ["--agents-per-role", str(n)] for n in args.agents}
    # a bad flag stops here
    targs = {name: get_args(common + flags) for name, flags in rows.items()}
    return args, common, rows, targs


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(scaling_args)

import base64
import json
import os
import time

from eval import evaluate_policies, markdown
from infra.checkpoint import load_policies
from infra.data import load_problems, write_atomic
from infra.models import load_model
from infra.png import chart_pixels, write_png
from infra.report import page, results_html, wall_time
from infra.seats import team_seats
from toy.ablation import over_runs, plan_runs, train_runs
from toy.build import start_toy
from toy.expert import HandTeacher

COLOURS = {"acc_code": "#e69f00", "acc_math": "#cc79a7"}


def figure(results, agents):
    """Accuracy against the number of agents 2n, trained and untrained, one line per domain. -> pixels."""
    xs = [2 * n for n in agents]
    panels = [
        (
            f"{title} ACCURACY VS AGENTS (FIG. 5)",
            xs,
            {
                f"{k[4:]}": (
                    [results[f"{kind} n={n}"].get(k, {}).get("mean") for n in agents],
                    c,
                )
                for k, c in COLOURS.items()
            },
        )
        for kind, title in (("trained", "TRAINED"), ("untrained", "UNTRAINED"))
    ]
    return chart_pixels(panels)


def main(argv=None):
    start = time.monotonic()
    args, common, rows, targs = scaling_args(argv)
    print("config:", json.dumps({**vars(args), "train_args": common}))
    first = targs[f"n={args.agents[0]}"]
    # and a run in the way
    plans = plan_runs(rows, args.train_seeds, args.out, args.reuse, first.overwrite)
    root = start_toy(args.cache, first.threads)
    base, tok = load_model(first.student, device=first.device)
    teacher = HandTeacher(tok)
    runs = train_runs(rows, plans, common, lambda name: teacher)
    if args.train_only:
        return
    problems = load_problems(args.eval_problems or os.path.join(root, "test.jsonl"))
    results = {}
    for n in args.agents:
        seats, t = team_seats(problems, n), targs[f"n={n}"]
        print(
            f"== evaluating {2 * n} agents, untrained and {len(runs[f'n={n}'])} trained runs, seeds {t.eval_seeds}"
        )
        results[f"untrained n={n}"] = evaluate_policies(
            problems, dict.fromkeys(seats, base), tok, t
        )
        results[f"trained n={n}"] = over_runs(
            [
                evaluate_policies(
                    problems,
                    load_policies(os.path.join(out, "checkpoint"), seats, t.device)[0],
                    tok,
                    t,
                )
                for out in runs[f"n={n}"]
            ]
        )
    accuracy = {
        f"{kind}, {2 * n} agents": {
            k: v
            for k, v in results[f"{kind} n={n}"].items()
            if k.startswith(("acc_", "turns_"))
        }
        for kind in ("untrained", "trained")
        for n in args.agents
    }
    seconds = time.monotonic() - start
    table = markdown(accuracy)
    print(
        f"\nAgent scaling (Fig. 5 analogue): accuracy / Pass@1 (%) and turns on {len(problems)} held-out toy "
        f"problems; trained: mean ± std over training seeds {args.train_seeds}, each the mean over evaluation "
        f"seeds {first.eval_seeds}; untrained: mean ± std over the evaluation seeds; {first.steps} steps of "
        f"{first.batch} episodes\n\n{table}"
    )
    write_atomic(os.path.join(args.out, "scaling.json"), json.dumps(results, indent=1))
    png = os.path.join(args.out, "scaling.png")
    write_png(png, figure(results, args.agents))
    with open(png, "rb") as f:
        img = base64.b64encode(f.read()).decode()
    links = "".join(
        f"<li><a href='{os.path.relpath(r, args.out)}/report.html'>{name}, seed {s}</a></li>"
        for name in rows
        for s, r in zip(args.train_seeds, runs[name])
    )
    body = (
        f"<h1>Agent scaling in the toy world</h1><img src='data:image/png;base64,{img}' alt='accuracy against "
        f"the number of agents'><h2>Figures</h2>"
        + results_html(accuracy)
        + f"<h2>Runs</h2><ul>{links}</ul>"
    )
    write_atomic(os.path.join(args.out, "report.html"), page("Agent scaling", body))
    print(
        f"\nwrote {os.path.join(args.out, 'scaling.json')}, {png} and {os.path.join(args.out, 'report.html')}; "
        f"wall time {wall_time(seconds)}"
    )


if __name__ == "__main__":
    main()
