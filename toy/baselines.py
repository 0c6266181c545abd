"""Table 1's comparison in the toy world: MAS-OPD against the GRPO baselines trained on the same rollout budget.

    python -m toy.baselines                                   # 4 rows x 3 training seeds, one thread (docs/toy.md)
    python -m toy.baselines --train-seeds 0 --eval-seeds 7 --steps 4   # a quick look
    python -m toy.baselines --reuse                           # evaluate the runs in OUT, training only missing ones

Trains MAS-OPD (the hand-written teacher's dense per-token signal), MAS+GRPO, MAGRPO and SA+ST+GRPO (a sparse
reward per response, App. D.4) from the same base students, once per training seed, on the same budget of
rollouts: the toy preset's 16 episodes per step are 4 problems x G = 4 rollouts for GRPO, two optimizer updates per
step for all.
Then evaluates every trained system and the untrained ones (the team, and SA+ST: the main role alone) on the
held-out toy problems with the evaluation decoding of App. D.5 over the same evaluation seeds, teams with their
seats exchanged too (Fig. 3a). A figure is mean +- std over training runs, each the mean over evaluation seeds, as in
Table 1. Prints two Markdown tables and writes OUT/baselines.json. Any other train.py flag is passed on.
"""

import sys

from config import SEED, get_args, parser
from infra.cli import flags_first
from toy.cli import PASSED_ON, toy_root, train_args


def baselines_args(argv=None):
    """python -m toy.baselines' command line: its own flags, then train.py's for the toy world, those it does not
    know passed on. -> (its args, train.py's argv)"""
    ap = parser(
        description="MAS-OPD against the GRPO baselines of Table 1, in the toy world.",
        epilog=PASSED_ON,
    )
    ap.add_argument("--out", default="runs/baselines")
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
        help="evaluate the runs already trained in OUT (and train only the "
        "missing ones, finish those that stopped early)",
    )
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    common = train_args(toy_root(args.cache), args.out) + rest
    get_args(common)  # train.py's flags: a bad one stops here (the GRPO rows' in main)
    return args, common


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(baselines_args)

import json
import os
import time

import train
from baselines import grpo
from baselines.single import single_agent_metrics
from config import EVAL_DECODING, GROUP_SIZE, TOY
from eval import evaluate_policies, markdown
from infra.checkpoint import load_policies
from infra.data import load_problems, write_atomic
from infra.metrics import mean_std
from infra.models import load_model
from infra.report import wall_time
from prompts import ROLES
from rollout import rollout_config
from toy.ablation import over_runs, plan_runs, train_runs, with_means
from toy.build import start_toy
from toy.expert import HandTeacher

# GRPO on the MAS-OPD rows' budget: batch x G = the toy preset's batch of episodes, and two updates per step
GRPO = [
    "--batch",
    str(TOY["batch"] // GROUP_SIZE),
    "--mini-batch",
    str(TOY["batch"] // GROUP_SIZE // (TOY["batch"] // TOY["mini_batch"])),
]
ROWS = {
    "MAS-OPD": [],
    "MAS+GRPO": GRPO + ["--grpo-variant", "mas"],
    "MAGRPO": GRPO + ["--grpo-variant", "magrpo"],
    "SA+ST+GRPO": GRPO + ["--grpo-variant", "sa-st"],
}


def main(argv=None):
    start = time.monotonic()
    args, common = baselines_args(argv)
    print("config:", json.dumps({**vars(args), "train_args": common, "rows": ROWS}))
    # a bad flag stops here, before training
    targs = {
        name: (get_args if name == "MAS-OPD" else grpo.grpo_args)(common + flags)
        for name, flags in ROWS.items()
    }
    plans = plan_runs(
        ROWS, args.train_seeds, args.out, args.reuse, targs["MAS-OPD"].overwrite
    )  # and a run in the way
    root = start_toy(args.cache, targs["MAS-OPD"].threads)
    base, tok = load_model(targs["MAS-OPD"].student, device=targs["MAS-OPD"].device)
    teacher = HandTeacher(tok)  # MAS-OPD's alone: the GRPO runs load none
    runs = train_runs(
        ROWS,
        plans,
        common,
        lambda name: teacher if name == "MAS-OPD" else None,
        lambda name: train.main if name == "MAS-OPD" else grpo.main,
    )

    problems = load_problems(args.eval_problems or os.path.join(root, "test.jsonl"))
    roles = sorted({r for p in problems for r in ROLES[p["domain"]]})
    seeds, opd = targs["MAS-OPD"].eval_seeds, targs["MAS-OPD"]
    print(
        f"== evaluating untrained on {len(problems)} held-out problems, seeds {seeds}"
    )
    cfg = rollout_config(opd, progress=True, **EVAL_DECODING)
    results = {
        "untrained MAS": with_means(
            evaluate_policies(problems, {r: base for r in roles}, tok, opd)
        ),
        "untrained SA+ST": mean_std(
            [single_agent_metrics(problems, base, tok, s, cfg) for s in seeds]
        ),
    }
    for name in ROWS:
        print(
            f"== evaluating {name} ({len(runs[name])} runs) on {len(problems)} held-out problems"
        )
        # SA+ST+GRPO: its agent alone
        evaluate = evaluate_policies if name == "MAS-OPD" else grpo.evaluate
        results[name] = over_runs(
            [
                with_means(
                    evaluate(
                        problems,
                        load_policies(
                            os.path.join(out, "checkpoint"), roles, opd.device
                        )[0],
                        tok,
                        targs[name],
                    )
                )
                for out in runs[name]
            ]
        )
    accuracy = {
        n: {k: v for k, v in m.items() if k.startswith("acc_")}
        for n, m in results.items()
    }
    coordination = {
        n: {
            k: v
            for k, v in m.items()
            if k.startswith(("exchange_penalty", "revise_iff_wrong_mean", "turns_"))
        }
        for n, m in results.items()
    }
    print(
        f"\nTable 1 analogue: accuracy / Pass@1 (%), held-out toy problems; trained systems: mean ± std over "
        f"training seeds {args.train_seeds}, each the mean over evaluation seeds {seeds}; {opd.steps} steps of "
        f"{opd.batch} episodes each (GRPO: {targs['MAS+GRPO'].batch} problems x G = "
        f"{targs['MAS+GRPO'].group_size})\n"
    )
    print(markdown(accuracy))
    print(
        "\nCoordination (Figs. 3-4): exchange penalty (points), revise-iff-wrong (mean over roles), turns\n"
    )
    print(markdown(coordination))
    write_atomic(
        os.path.join(args.out, "baselines.json"), json.dumps(results, indent=1)
    )
    print(
        f"\nwrote {os.path.join(args.out, 'baselines.json')}; wall time {wall_time(time.monotonic() - start)}"
    )


if __name__ == "__main__":
    main()
