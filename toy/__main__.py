"""The laptop demo: the toy world's problems and models through the real train.py (docs/toy.md).

    python -m toy                      # build the toy student once (cached), evaluate, train, evaluate, print
    python -m toy --steps 4            # any train.py flag is passed on and overrides the preset (world.PRESET)

The toy student and problems are plain files under CACHE/toy-vN (student/, train.jsonl, valid.jsonl, test.jsonl),
so eval.py reads them like any others, e.g. `python eval.py --problems .cache/toy-v10/test.jsonl --run runs/toy`.
The teacher is toy/expert.py's hand-written one, handed to train.main as an object.
"""
import argparse
import os
import sys

import train
from models import load_model
from toy.expert import HandTeacher
from toy.world import build_toy, train_args


def main(argv=None):
    ap = argparse.ArgumentParser(description="MAS-OPD in the toy world: train.py with the toy preset. Any other "
                                 "train.py flag is passed on.")
    ap.add_argument("--cache", default=".cache", help="where the toy student and problems are built once")
    ap.add_argument("--out", default="runs/toy", help="train.py's --out")
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    root = build_toy(args.cache)
    teacher = HandTeacher(load_model(os.path.join(root, "student"))[1])
    train.main(train_args(root, args.out) + ["--eval-problems", os.path.join(root, "test.jsonl")] + rest,
               teacher=teacher)


if __name__ == "__main__":
    main()
