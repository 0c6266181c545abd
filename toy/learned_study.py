"""The ablation with a learned teacher beside the hand-written one: does the paper's ordering appear when the
teacher was trained rather than written (toy/learned.py, docs/toy.md)?

    python -m toy.learned_study                     # 5 rows x 3 training seeds x 3 evaluation seeds, both teachers,
                                                    # 50 steps a run, trained in two processes (--jobs)
    python -m toy.learned_study --quick             # a look: MAS-OPD and OPD, one training seed, 10 steps, one
                                                    # evaluation seed
    python -m toy.learned_study --reuse             # evaluate the runs already in OUT again

First the teachers' check on held-out base-student responses (learned.check_table), then, per teacher, MAS-OPD, w/o
RAS (lambda = 0), w/o PAC and plain OPD (neither) trained from the same base students with the same seeds, and the
untrained team; evaluated as toy/ablation.py evaluates (its plan_runs, train_runs, evaluate_runs and print_tables:
accuracy, exchange penalty, revise-iff-wrong, mean +- std over training runs). Everything goes to
OUT/learned_study.json, the check to OUT/teacher_check.json. Any other train.py flag is passed on, e.g.
`--eval-seeds 8000 8001 8002`.
"""

import sys

from config import SEED, get_args, parser
from infra.cli import flags_first
from toy.cli import PASSED_ON, toy_root, train_args

ROWS = {
    "MAS-OPD": [],
    "w/o RAS (lambda=0)": ["--lam", "0"],
    "w/o PAC": ["--no-pac"],
    "OPD (neither)": ["--lam", "0", "--no-pac"],
}
# --rows' names for them
SHORT = dict(zip(("mas-opd", "no-ras", "no-pac", "opd"), ROWS))
# half the demo's: 24 runs within the study's time (docs/toy.md)
STUDY = ["--steps", "50"]
# --quick: a look in minutes, not a figure
QUICK = ["--steps", "10", "--eval-seeds", "4000"]


def study_args(argv=None):
    """python -m toy.learned_study's command line: its own flags, then train.py's for the toy world, those it does
    not know passed on. -> (its args, train.py's argv, train.py's args)"""
    ap = parser(
        description="The toy ablation with a learned teacher beside the hand-written one.",
        epilog=PASSED_ON,
    )
    ap.add_argument("--out", default="runs/learned-study")
    ap.add_argument(
        "--train-seeds",
        type=SEED,
        nargs="+",
        default=[0, 1, 2],
        help="one training run per seed",
    )
    ap.add_argument("--cache", default=".cache")
    ap.add_argument(
        "--teachers",
        nargs="+",
        choices=("learned", "hand"),
        default=["learned", "hand"],
    )
    ap.add_argument(
        "--rows",
        nargs="+",
        choices=list(SHORT),
        help="the trained rows (default: all four; with "
        "--quick, mas-opd and opd): MAS-OPD, w/o RAS, w/o PAC, OPD (neither)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"one training seed (the first), MAS-OPD and OPD only, {' '.join(QUICK)}",
    )
    ap.add_argument(
        "--split",
        default="test",
        choices=("valid", "test"),
        help="the held-out problems: 'valid' "
        "while choosing settings, 'test' for the figures reported",
    )
    ap.add_argument(
        "--reuse", action="store_true", help="evaluate the runs already trained in OUT"
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="train in N processes of one thread each, the rows dealt "
        "out in turn (each process trains both teachers' runs of its rows: equal work); 1: in this one",
    )
    ap.add_argument(
        "--train-only",
        action="store_true",
        help="train the runs and stop (what each --jobs process runs)",
    )
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    common = (
        train_args(toy_root(args.cache), args.out)
        + STUDY
        + (QUICK if args.quick else [])
        + rest
    )
    return args, common, get_args(common)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(study_args)

import json
import os
import signal
import subprocess

from infra.data import load_problems, write_atomic
from infra.models import load_model
from toy.ablation import evaluate_runs, plan_runs, print_tables, train_runs
from toy.build import start_toy
from toy.expert import HandTeacher
from toy.learned import build_learned, check_rows, check_table
from toy.world import toy_problems


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args, common, targs = study_args(argv)
    seeds = args.train_seeds[:1] if args.quick else args.train_seeds
    print("config:", json.dumps({**vars(args), "train_args": common}))
    rows = {
        SHORT[r]: ROWS[SHORT[r]]
        for r in args.rows or (["mas-opd", "opd"] if args.quick else SHORT)
    }
    plans = {
        t: plan_runs(
            rows, seeds, os.path.join(args.out, t), args.reuse, targs.overwrite
        )
        for t in args.teachers
    }
    root = start_toy(args.cache, targs.threads)
    base, tok = load_model(targs.student, device=targs.device)
    teachers = {
        "learned": load_model(build_learned(root), device=targs.device)[0],
        "hand": HandTeacher(tok),
    }
    teachers = {t: teachers[t] for t in args.teachers}
    if not args.train_only:
        print(
            f"\nThe teachers' check on held-out base-student responses (60 episodes of the {args.split} split, "
            f"seed 901):\n"
        )
        check = check_rows(teachers, tok, toy_problems(args.split), student=base)
        print(check_table(check))
        os.makedirs(args.out, exist_ok=True)
        write_atomic(
            os.path.join(args.out, "teacher_check.json"), json.dumps(check, indent=1)
        )
    todo = any(
        p != "reuse" for ps in plans.values() for r in ps.values() for _, _, p in r
    )
    if args.jobs > 1 and len(rows) > 1 and not args.train_only and todo:
        train_in_processes(argv, list(rows), args.jobs)
        plans = {
            t: plan_runs(rows, seeds, os.path.join(args.out, t), True, False)
            for t in args.teachers
        }
    runs = {}
    for t, teacher in teachers.items():
        trained = train_runs(rows, plans[t], common, lambda name: teacher)
        runs.update({f"{t}: {name}": outs for name, outs in trained.items()})
    if args.train_only:
        return
    problems = load_problems(os.path.join(root, f"{args.split}.jsonl"))
    results = evaluate_runs(problems, base, tok, runs, targs)
    print_tables(
        results,
        f"trained rows: mean ± std over training seeds {seeds}, each the mean over evaluation "
        f"seeds {targs.eval_seeds}, {targs.steps} steps; MAS-OPD and w/o PAC at lambda {targs.lam}",
    )
    write_atomic(
        os.path.join(args.out, "learned_study.json"), json.dumps(results, indent=1)
    )
    print(f"\nwrote {os.path.join(args.out, 'learned_study.json')}")


def train_in_processes(argv, rows, jobs):
    """Train the study's runs in `jobs` processes of this command (--train-only, one torch thread each), process
    k taking rows k, k + jobs, ... (with both teachers and every training seed); wait for all. A process that
    stops (Ctrl-C, an error) stops the study with its exit code and the command that finishes it."""
    names = {v: k for k, v in SHORT.items()}
    # (k = 0: mas-opd, no-pac)
    parts = [[names[r] for r in rows[k::jobs]] for k in range(min(jobs, len(rows)))]
    print(
        f"== training in {len(parts)} processes of one thread: rows {' | '.join(' '.join(p) for p in parts)}",
        flush=True,
    )
    # Ctrl-C a KeyboardInterrupt again (not flags_first's exit): this process waits below
    signal.signal(signal.SIGINT, signal.default_int_handler)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "toy.learned_study",
                *argv,
                "--train-only",
                "--rows",
                *part,
                "--threads",
                "1",
            ]
        )
        for part in parts
    ]
    try:
        codes = [p.wait() for p in procs]
    # the processes got the same SIGINT: each stops at its step and saves its run
    except KeyboardInterrupt:
        codes = [p.wait() for p in procs] + [130]
    failed = [c for c in codes if c]
    if failed:
        print(
            f"error: a training process stopped (exit {failed[0]}); the runs it finished are kept: run the same "
            f"command with --reuse to finish the others and evaluate",
            file=sys.stderr,
        )
        sys.exit(failed[0])


if __name__ == "__main__":
    main()
