"""The ablation of Table 2 (§4.3) in the toy world, plus the coordination analysis of Figs. 3-4.

    python -m toy.ablation                            # the toy preset; about half an hour on 2 CPU cores
    python -m toy.ablation --steps 4 --eval-seeds 7   # a quick look

Trains, from the same base students with the same training seed, MAS-OPD, w/o RAS (lambda = 0) and w/o PAC
(the teacher sees only the student-visible context), then evaluates them and the untrained students on the
held-out toy problems with the evaluation decoding of App. D.5 over the same seeds. Prints two Markdown tables
(accuracy: the Table 2 analogue; coordination: exchange penalty, revise-iff-wrong with its failure modes,
turns) and writes everything to OUT/ablation.json. Any other train.py flag is passed on, e.g. `--lr 1e-4`.
"""
import argparse
import json
import os
import sys

import train
from data import load_problems, write_atomic
from eval import load_policies, markdown
from models import load_model
from rollout import ROLES
from toy.expert import toy_teacher
from toy.world import build_toy, train_args

VARIANTS = {"MAS-OPD": [], "w/o RAS (lambda=0)": ["--lam", "0"], "w/o PAC": ["--no-pac"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description="Table 2 of the paper, in the toy world.")
    ap.add_argument("--out", default="runs/ablation")
    ap.add_argument("--eval-seeds", type=int, nargs="+", default=[2000, 2001, 2002])
    ap.add_argument("--cache", default=".cache")
    ap.add_argument("--eval-problems", help="held-out problem file (default: the toy world's test split)")
    ap.add_argument("--teacher", choices=("learned", "hand"), default="learned", help="as for python -m toy")
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    root = build_toy(args.cache)
    common = (train_args(root, args.out, args.teacher == "learned") + ["--eval-seeds"]
              + [str(s) for s in args.eval_seeds] + rest)
    print("config:", json.dumps({**vars(args), "train_args": common}))
    targs = train.get_args(common)  # the shared settings, also those of the evaluation below
    teacher = toy_teacher(args.teacher, root)  # frozen: one for all variants
    for name, flags in VARIANTS.items():
        print(f"== training {name}")
        train.main(common + flags + ["--out", os.path.join(args.out, _slug(name))],  # evaluated together below
                   teacher=teacher)

    problems = load_problems(args.eval_problems or os.path.join(root, "test.jsonl"))
    roles = sorted({r for p in problems for r in ROLES[p["domain"]]})
    base, tok = load_model(targs.student, device=targs.device)
    systems = {"untrained": {r: base for r in roles}}
    for name in VARIANTS:
        systems[name] = load_policies(os.path.join(args.out, _slug(name), "checkpoint"), roles, targs.device)[0]
    results = {}
    for name, policies in systems.items():
        print(f"== evaluating {name} on {len(problems)} held-out problems, seeds {args.eval_seeds}")
        results[name] = train.evaluate_policies(problems, policies, tok, targs, exchange=True)
    accuracy = {n: {k: v for k, v in m.items() if k.startswith("acc_")} for n, m in results.items()}
    coordination = {n: {k: v for k, v in m.items() if not k.startswith("acc_")} for n, m in results.items()}
    print("\nTable 2 analogue: team accuracy / Pass@1 (%), held-out toy problems, mean ± std over seeds\n")
    print(markdown(accuracy))
    print("\nCoordination (Figs. 3-4): exchange penalty (points), revise-iff-wrong and its failure modes (% of "
          "disagreeing turns), turns to agreement\n")
    print(markdown(coordination))
    write_atomic(os.path.join(args.out, "ablation.json"), json.dumps(results, indent=1))
    print(f"\nwrote {os.path.join(args.out, 'ablation.json')}")


def _slug(name):
    return "".join(c if c.isalnum() else "_" for c in name.split(" (")[0]).strip("_").lower()


if __name__ == "__main__":
    main()
