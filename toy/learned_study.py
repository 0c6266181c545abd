"""The ablation with a learned teacher beside the hand-written one: does the paper's ordering appear when the
teacher was trained rather than written (toy/learned.py, docs/toy.md)?

    python -m toy.learned_study                     # 5 rows x 3 training seeds x 3 evaluation seeds, both teachers,
                                                    # 50 steps a run
    python -m toy.learned_study --quick             # a look: MAS-OPD and OPD, one training seed, 10 steps, one
                                                    # evaluation seed
    python -m toy.learned_study --reuse             # evaluate the runs already in OUT again

First the teachers' check on held-out base-student responses (learned.check_table), then, per teacher, MAS-OPD,
w/o RAS (lambda = 0), w/o PAC and plain OPD (neither) trained from the same base students with the same seeds,
and the untrained team; evaluated as toy/ablation.py evaluates (its plan_runs, train_runs, evaluate_runs and
print_tables: accuracy, exchange penalty, revise-iff-wrong, mean +- std over training runs). Everything goes to
OUT/learned_study.json. Any other train.py flag is passed on, e.g. `--eval-seeds 8000 8001 8002`.
"""
import argparse
import json
import os
import sys

from config import SEED, get_args
from infra.data import load_problems, write_atomic
from infra.models import load_model
from toy.ablation import evaluate_runs, plan_runs, print_tables, train_runs
from toy.expert import HandTeacher
from toy.learned import build_learned, check_table
from toy.build import PASSED_ON, start_toy, toy_root, train_args
from toy.world import toy_problems

ROWS = {"MAS-OPD": [], "w/o RAS (lambda=0)": ["--lam", "0"], "w/o PAC": ["--no-pac"],
        "OPD (neither)": ["--lam", "0", "--no-pac"]}
SHORT = dict(zip(("mas-opd", "no-ras", "no-pac", "opd"), ROWS))  # --rows' names for them
STUDY = ["--steps", "50"]  # half the demo's: 24 runs within the study's time (docs/toy.md)
QUICK = ["--steps", "10", "--eval-seeds", "4000"]  # --quick: a look in minutes, not a figure


def main(argv=None):
    ap = argparse.ArgumentParser(description="The toy ablation with a learned teacher beside the hand-written one.",
                                 epilog=PASSED_ON)
    ap.add_argument("--out", default="runs/learned-study")
    ap.add_argument("--train-seeds", type=SEED, nargs="+", default=[0, 1, 2], help="one training run per seed")
    ap.add_argument("--cache", default=".cache")
    ap.add_argument("--teachers", nargs="+", choices=("learned", "hand"), default=["learned", "hand"])
    ap.add_argument("--rows", nargs="+", choices=list(SHORT), help="the trained rows (default: all four; with "
                    "--quick, mas-opd and opd): MAS-OPD, w/o RAS, w/o PAC, OPD (neither)")
    ap.add_argument("--quick", action="store_true", help=f"one training seed (the first), MAS-OPD and OPD only, "
                    f"{' '.join(QUICK)}")
    ap.add_argument("--split", default="test", choices=("valid", "test"), help="the held-out problems: 'valid' "
                    "while choosing settings, 'test' for the figures reported")
    ap.add_argument("--reuse", action="store_true", help="evaluate the runs already trained in OUT")
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    seeds = args.train_seeds[:1] if args.quick else args.train_seeds
    common = train_args(toy_root(args.cache), args.out) + STUDY + (QUICK if args.quick else []) + rest
    print("config:", json.dumps({**vars(args), "train_args": common}))
    targs = get_args(common)
    rows = {SHORT[r]: ROWS[SHORT[r]] for r in args.rows or (["mas-opd", "opd"] if args.quick else SHORT)}
    plans = {t: plan_runs(rows, seeds, os.path.join(args.out, t), args.reuse, targs.overwrite)
             for t in args.teachers}
    root = start_toy(args.cache, targs.threads)
    base, tok = load_model(targs.student, device=targs.device)
    teachers = {"learned": load_model(build_learned(root), device=targs.device)[0], "hand": HandTeacher(tok)}
    teachers = {t: teachers[t] for t in args.teachers}
    print(f"\nThe teachers' check on held-out base-student responses (60 episodes of the {args.split} split, "
          f"seed 901):\n")
    print(check_table(teachers, tok, toy_problems(args.split), student=base))
    runs = {}
    for t, teacher in teachers.items():
        trained = train_runs(rows, plans[t], common, lambda name: teacher)
        runs.update({f"{t}: {name}": outs for name, outs in trained.items()})
    problems = load_problems(os.path.join(root, f"{args.split}.jsonl"))
    results = evaluate_runs(problems, base, tok, runs, targs)
    print_tables(results, f"trained rows: mean ± std over training seeds {seeds}, each the mean over evaluation "
                 f"seeds {targs.eval_seeds}, {targs.steps} steps; MAS-OPD and w/o PAC at lambda {targs.lam}")
    write_atomic(os.path.join(args.out, "learned_study.json"), json.dumps(results, indent=1))
    print(f"\nwrote {os.path.join(args.out, 'learned_study.json')}")


if __name__ == "__main__":
    main()
