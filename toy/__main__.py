"""The laptop demo: the toy world's problems and models through the real train.py (README, "The toy world").

    python -m toy                      # build the toy models once (cached), evaluate, train, evaluate, print
    python -m toy --steps 4            # any train.py flag is passed on and overrides the preset (world.PRESET)
    python -m toy --teacher hand       # the hand-written teacher of toy/expert.py instead of the learned one

The toy models and problems are plain files under CACHE/toy-vN (student/, teacher/, train.jsonl, test.jsonl), so
eval.py reads them like any others, e.g. `python eval.py --problems .cache/toy-v5/test.jsonl --run runs/toy`.
"""
import argparse
import os
import sys

import train
from toy.expert import toy_teacher
from toy.world import build_toy, train_args


def main(argv=None):
    ap = argparse.ArgumentParser(description="MAS-OPD in the toy world: train.py with the toy preset. Any other "
                                 "train.py flag is passed on.")
    ap.add_argument("--cache", default=".cache", help="where the toy models and problems are built once")
    ap.add_argument("--out", default="runs/toy", help="train.py's --out")
    ap.add_argument("--teacher", choices=("learned", "hand"), default="learned",
                    help="learned: the toy teacher fine-tuned from the base student; hand: toy/expert.py")
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    root = build_toy(args.cache)
    train.main(train_args(root, args.out, args.teacher == "learned") + ["--eval-problems",
               os.path.join(root, "test.jsonl")] + rest, teacher=toy_teacher(args.teacher, root))


if __name__ == "__main__":
    main()
