"""The laptop demo: the toy world's problems and models through the real train.py (docs/toy.md).

    python -m toy                      # set up the toy world once (cached), evaluate, train, evaluate, sum up
    python -m toy --steps 4            # any train.py flag is passed on and overrides the toy preset (config.py, TOY)
    python -m toy --build-only         # only build the toy world (what `python -m tools.transcripts` runs by default)
    python -m toy --rebuild            # train the toy student here (minutes) instead of copying the shipped one
    python -m toy --learned-teacher    # the same with a teacher that was trained, not written (toy/learned.py),
                                       # into runs/toy-learned

The toy student is shipped in toy/student/ (toy/build.py: how it was built, and when it is trained here instead);
it and the problems are plain files under CACHE/toy-vN (student/, train.jsonl, valid.jsonl, test.jsonl),
so eval.py reads them like any others, e.g. `python eval.py --problems .cache/toy-v10/test.jsonl --run runs/toy`.
The teacher is toy/expert.py's hand-written one, handed to train.main as an object; with --learned-teacher it
is toy/learned.py's model (built once, cached beside the student), loaded with infra.models.load_model and handed
over the same way. The run ends with train.py's
full table and report, then a summary of the rows that matter (summary).
"""

import os
import sys

from config import get_args, parser
from infra.cli import flags_first
from toy.cli import PASSED_ON, toy_root, train_args


def demo_args(argv=None):
    """The demo's command line: its own flags, then train.py's for the toy world, those it does not know passed on.
    -> (its args, train.py's argv, train.py's args)"""
    ap = parser(
        description="MAS-OPD in the toy world: train.py with the toy preset.",
        epilog=PASSED_ON,
    )
    ap.add_argument(
        "--cache",
        default=".cache",
        help="where the toy student and problems are built once",
    )
    ap.add_argument(
        "--out",
        help="train.py's --out [runs/toy; with --learned-teacher runs/toy-learned, so that the two demos' runs "
        "sit side by side]",
    )
    ap.add_argument(
        "--build-only",
        action="store_true",
        help="build the toy student and problems (cached) and stop",
    )
    ap.add_argument(
        "--rebuild",
        action="store_true",
        help="train the toy student here from scratch (minutes; "
        "replaces the cache's) instead of copying the shipped toy/student/, and say if it is the same",
    )
    ap.add_argument(
        "--learned-teacher",
        action="store_true",
        help="train with toy/learned.py's model teacher (built "
        "once, cached; loaded as a model and handed to train.py) instead of the hand-written one",
    )
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    args.out = args.out or ("runs/toy-learned" if args.learned_teacher else "runs/toy")
    root = toy_root(args.cache)
    targv = (
        train_args(root, args.out)
        + ["--eval-problems", os.path.join(root, "test.jsonl")]
        + rest
    )
    # a bad flag stops the demo here, before the build; --threads holds for the build too
    return args, targv, get_args(targv)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(demo_args)

import json
import time

import train
from eval import markdown
from infra.data import load_problems, write_atomic
from infra.models import load_model, machine
from infra.report import KEY_ROWS, wall_time, write_report
from infra.runs import check_run
from toy.build import start_toy
from toy.expert import HandTeacher
from toy.learned import build_learned, check_rows, check_table

LEGEND = """acc_D: team accuracy on domain D (%).
exchange_penalty_D: the accuracy lost when the two policies swap seats (points; role-specific policies
  lose more, Fig. 3a: what RAS should raise).
revise_iff_wrong_R: of the turns where the team disagreed, the % where role R revised exactly when its
  own output was wrong (Fig. 4: what PAC should raise)."""


def summary(results, problems, seeds, report, seconds):
    """The demo's closing lines: the KEY_ROWS of results.json (accuracy, App. D.5; exchange penalty, Fig. 3a;
    revise-iff-wrong, Fig. 4; before -> after, mean ± std over the evaluation seeds), what one problem is worth,
    where the report is, the wall time and the CPU kernels it was made with. results: {"before", "after"} ->
    eval.mean_std dicts; problems: the held-out problems; seconds: the demo's wall time."""
    count = {d: sum(p["domain"] == d for p in problems) for d in ("code", "math")}
    worth = ", ".join(
        f"{n} {d} problems (one = {100 / n:.1f} points)" for d, n in count.items() if n
    )
    rows = {
        name: {k: v for k, v in m.items() if k.startswith(KEY_ROWS)}
        for name, m in results.items()
    }
    head = f"\n== summary: mean ± std over evaluation seeds {', '.join(map(str, seeds))} on the held-out problems:"
    return "\n".join(
        [
            head,
            f"   {worth}",
            markdown(rows),
            LEGEND,
            f"report: {report} (learning curves, every metric, heat maps)",
            f"wall time: {wall_time(seconds)}",
            # the figures' last bits are the kernels', and an episode that flips parts ways from there
            f"made with {machine()}; the README shows this summary from AVX-512 and from AVX2 kernels side by "
            "side: another CPU's 'after' figures may differ by several points (README: what the figures depend on)",
        ]
    )


def main(argv=None):
    start = time.monotonic()
    args, targv, targs = demo_args(argv)
    root = toy_root(args.cache)
    if not args.build_only:  # a run there, or a running one: refused before the build
        try:
            check_run(targs)
        except ValueError as e:
            sys.exit(f"error: {e}")
    start_toy(args.cache, targs.threads, args.rebuild)
    if args.build_only:
        return
    student, tok = load_model(os.path.join(root, "student"))
    teacher = hand = HandTeacher(tok)
    check = None
    # a model directory, loaded as a real teacher is (as object: train.py's memory plan
    if args.learned_teacher:
        # is written for real models, and refuses the toy preset's limits)
        path = build_learned(root)
        print(f"teacher: the learned toy teacher, {path}", flush=True)
        teacher = load_model(path)[0]
        check = check_rows(
            {"learned": teacher, "hand-written": hand},
            tok,
            load_problems(targs.eval_problems),
            student=student,
        )
        print(
            "\nThe teacher's check on held-out base-student responses (60 episodes, seed 901):\n\n"
            + check_table(check)
            + "\n",
            flush=True,
        )
    train.main(targv, teacher=teacher)
    if check:  # beside the run, and in its report
        write_atomic(
            os.path.join(args.out, "teacher_check.json"), json.dumps(check, indent=1)
        )
        write_report(args.out)
    with open(os.path.join(args.out, "results.json")) as f:
        results = json.load(f)
    print(
        summary(
            results,
            load_problems(targs.eval_problems),
            targs.eval_seeds,
            os.path.join(args.out, "report.html"),
            time.monotonic() - start,
        )
    )


if __name__ == "__main__":
    main()
