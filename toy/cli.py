"""What the toy commands' command lines share, loading nothing heavy (infra/cli.py): where the toy world is built
(toy_root), the train.py flags each of them passes (train_args) and the close of each --help (PASSED_ON). Each
command reads its flags at the top of its own file, before torch loads."""

import os

# bump when the world, the prompts, parsing or teacher contexts change what gets built
TOY_VERSION = "toy-v10"


def toy_root(cache):
    """The directory build_toy(cache) builds and returns (`python -m tools.transcripts` reads its default one)."""
    return os.path.join(cache, TOY_VERSION)


def train_args(root, out):
    """train.py's arguments for the toy world built at `root` (build_toy), writing to `out`, with the toy preset
    (config.py, TOY); the caller hands train.main the hand-written teacher (toy/expert.py), so there is no
    --teacher."""
    return [
        "--problems",
        os.path.join(root, "train.jsonl"),
        "--student",
        os.path.join(root, "student"),
        "--out",
        out,
        "--preset",
        "toy",
    ]


# The close of every toy command's --help: each passes the flags it does not know on to train.py
PASSED_ON = (
    "Every other flag is passed on to train.py, and described by python train.py --help: --steps, "
    "--batch, --lr, --eval-seeds, --threads, --overwrite and the rest; the toy preset (config.py, TOY) "
    "gives the defaults."
)
