"""Phase 1 and PAC as a reader sees them: episodes rolled out with rollout.run_episodes, printed turn
by turn as each ends (every response, what the environment observed, and the verifier's verdict
c^t that only the teacher reads).

    python -m tools.transcripts      # the toy student on held-out toy problems: every step
    python -m tools.transcripts --model tiny-qwen3 --problems examples/problems.jsonl   # any model

By default the toy student sits in every seat on the toy world's held-out problems (written by its
build, `python -m toy --build-only`): a model that writes real answers, and only to the problems it
was built for. Without the toy build, one line names the command that builds it and the exit code
is 2, as for any missing file.
"""

import os

from config import (
    COUNT,
    MATH_FINAL,
    MAX_TURNS,
    SEED,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    bounded,
    parser,
)
from infra.cli import flags_first
from toy.cli import toy_root

# where `python -m toy` builds the toy student and its problem files
TOY = toy_root(".cache")


def transcripts_args(argv=None):
    """python -m tools.transcripts' command line."""
    ap = parser(
        description="Run two-agent episodes with the student models and "
        "print them. Defaults in brackets."
    )
    # the defaults below are the rollout's (config.py), except this demo's short responses
    ap.add_argument(
        "--problems",
        default=os.path.join(TOY, "test.jsonl"),
        help="JSONL problem file (schema: infra/data.py) [%(default)s, the toy world's "
        "held-out problems]",
    )
    ap.add_argument(
        "--model",
        default=os.path.join(TOY, "student"),
        help="local dir | .gguf | hub id | tiny-qwen3 | tiny-llama (random weights), "
        "in every seat [%(default)s, the toy student: python -m toy --build-only]",
    )
    ap.add_argument(
        "--per-domain",
        type=bounded(int, 0),
        default=2,
        help="the first N problems of each domain in the file, 0 = all: a "
        "walk-through, not an evaluation [%(default)s]",
    )
    ap.add_argument(
        "--max-turns", type=COUNT, default=MAX_TURNS, help="T [%(default)s]"
    )
    ap.add_argument(
        "--max-new-tokens", type=COUNT, default=96, help="response limit [%(default)s]"
    )
    ap.add_argument(
        "--temperature",
        type=bounded(float, 0),
        default=TEMPERATURE,
        help="0 = greedy [%(default)s]",
    )
    ap.add_argument(
        "--top-p",
        type=bounded(float, 0, 1, low_open=True),
        default=TOP_P,
        help="[%(default)s]",
    )
    ap.add_argument(
        "--top-k", type=bounded(int, 0), default=TOP_K, help="0 = off [%(default)s]"
    )
    ap.add_argument(
        "--math-final",
        choices=("reasoner", "tool_user"),
        default=MATH_FINAL,
        help="[%(default)s]",
    )
    ap.add_argument("--seed", type=SEED, default=0, help="[%(default)s]")
    ap.add_argument("--out", help="also write the episodes as JSONL here")
    return ap.parse_args(argv)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(transcripts_args)

import sys
from dataclasses import asdict

import torch
from tqdm import tqdm

from attribution import attribute_turn
from infra.data import ProblemError, append_episodes, check_writable, load_problems
from infra.models import load_model
from infra.seats import role_of
from prompts import ROLE_NAMES, ROLES, check_prompt_limit
from rollout import rollout_config, run_episodes
from sandbox.jail import stop_on_sigterm


def toy_built(path):
    """`path`, or ValueError naming the command that builds it when it lies in the toy build (TOY)
    not built yet."""
    if path.startswith(TOY) and not os.path.exists(path):
        raise ValueError(
            f"{path} is not built yet: build the toy student once with "
            f"`python -m toy --build-only`, or pass --model and --problems"
        )
    return path


def print_transcript(e, attributions, width=400):
    """One episode turn by turn: each response (cut to `width` characters), the environment's
    observation, the verifier's verdict (teacher-only), and what the team submitted."""
    cut = lambda s: (
        s if len(s) <= width else s[:width] + f" ...[{len(s) - width} more chars]"
    )
    print(
        f"=== {e.problem['id']} ({e.problem['domain']}) -- {len(e.turns)} turn(s), {e.stopped}"
    )
    for turn, att in zip(e.turns, attributions):
        for seat, resp in turn.responses.items():
            # "Coder", "Coder2"
            name = ROLE_NAMES[role_of(seat)] + seat[len(role_of(seat)) :]
            print(
                f"--- turn {turn.t + 1} · {name} ({len(resp.tokens)} tokens)\n{cut(resp.text)}"
            )
        shown = {k: v for k, v in asdict(turn.artefacts).items() if k != "derivation"}
        print(f"--- environment: {'AGREE' if turn.agree else 'MISMATCH'} {shown}")
        print(f"--- verifier, teacher-only ({att.outcome}):\n{att.description}")
    print(f"=== submitted: {e.final!r}\n")


def main(argv=None):
    args = transcripts_args(argv)
    print("config:", vars(args))
    stop_on_sigterm()
    cfg = rollout_config(args, progress=True)
    try:
        if args.out:
            check_writable(args.out, "--out")  # before the run, not after it
        problems = load_problems(toy_built(args.problems))
        if args.per_domain:  # in the file's order
            problems = [
                p
                for k, p in enumerate(problems)
                if sum(q["domain"] == p["domain"] for q in problems[:k])
                < args.per_domain
            ]
        model, tok = load_model(toy_built(args.model), seed=args.seed)
        check_prompt_limit(problems, tok, cfg.max_prompt_tokens)
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    torch.manual_seed(args.seed)
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(args.seed)
    roles = {r for p in problems for r in ROLES[p["domain"]]}
    if args.out:
        open(args.out, "w").close()

    def done(
        e,
    ):  # each transcript as its episode stops, the others going on (the progress cleared)
        verdicts = [
            attribute_turn(e.problem, t.artefacts, timeout=cfg.code_timeout)
            for t in e.turns
        ]
        with tqdm.external_write_mode():
            print_transcript(e, verdicts)
        if args.out:
            append_episodes(args.out, [e])

    episodes = run_episodes(
        problems, {r: model for r in roles}, tok, cfg, generator=gen, on_done=done
    )
    if args.out:
        print(f"wrote {len(episodes)} episodes to {args.out}")


if __name__ == "__main__":
    main()
