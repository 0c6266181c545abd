"""What the teacher reads beside what the student read: for one problem and turn, (a) the student's context x_i^t,
(b) the teacher's target context u~ under the role condition r_i and (c) its contrast context under kappa(r_i)
(Eq. 6, 9, 12, 23), the role conditions and the verdicts c^{<t} marked, then the response y_i^t both score.

    python -m tools.contexts                     # the toy world (built once under .cache): a code problem, t = 1
    python -m tools.contexts --domain math --role tool_user --turn 2 --seed 3
    python -m tools.contexts --no-pac            # the teacher's view without PAC: no verdicts
    python -m tools.contexts --student DIR --problems FILE --index N      # a real student

One episode is rolled out with the student in both seats and attributed as in train.py; any other flag is
train.py's (--no-pac, --seed, --max-new-tokens, --preset, ...) and sets the rollout and the teacher contexts as it
does in training. The marked pieces are teacher.teacher_pieces', the very pieces train.py's contexts are joined from.
The toy student is built once, shared with `python -m toy` (minutes from an empty cache: the time it took is said
after it; docs/toy.md has measured ones); then a run takes seconds.
"""

import os
import sys

from config import bounded, get_args, parser
from infra.cli import flags_first
from prompts import ROLES
from toy.cli import toy_root, train_args


def contexts_args(argv=None):
    """python -m tools.contexts' command line: its own flags, then train.py's (the toy world's unless --student),
    those it does not know passed on. -> (its args, train.py's args)"""
    ap = parser(
        description="Print a student's context beside the teacher's target and contrast "
        "contexts for one problem and turn, role conditions and verdicts marked. Defaults "
        "in brackets.",
        epilog="Any other flag is train.py's (e.g. --no-pac, --seed, "
        "--max-new-tokens) and sets the rollout and the teacher contexts as in training.",
    )
    ap.add_argument(
        "--cache",
        default=".cache",
        help="the toy world: where it is built once [%(default)s]",
    )
    ap.add_argument(
        "--student",
        help="a real student instead of the toy one (local dir | .gguf | hub id); needs "
        "--problems",
    )
    ap.add_argument(
        "--problems",
        help="JSONL problem file (schema: infra/data.py) [the toy world's train.jsonl]",
    )
    ap.add_argument(
        "--problem",
        "--index",
        type=bounded(int, 0),
        default=0,
        help="which problem, counted from 0 among --domain's [%(default)s]",
    )
    ap.add_argument(
        "--domain",
        choices=tuple(ROLES),
        help="[the problem's; with --role, the role's]",
    )
    ap.add_argument(
        "--role",
        help="whose response: coder, tester, reasoner or tool_user [the domain's first]",
    )
    ap.add_argument(
        "--turn",
        type=bounded(int, 0),
        help="t, counted from 0 [1, the first turn with a verdict "
        "before it, or 0 when the episode ended there]",
    )
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.student and not args.problems:
        ap.error("--student needs --problems FILE")
    if args.student:
        targv = ["--problems", args.problems, "--student", args.student]
    else:  # the toy preset's limits; its --out is never written here
        targv = train_args(toy_root(args.cache), os.devnull) + (
            ["--problems", args.problems] if args.problems else []
        )
    return args, get_args(targv + rest)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(contexts_args)

import torch
from transformers.utils import logging as hf_logging

from attribution import attribute_episodes
from infra.data import ProblemError, load_problems
from infra.models import load_model
from prompts import ROLE_NAMES, check_prompt_limit
from rollout import rollout_config, run_episodes
from teacher import KAPPA, teacher_pieces, verdicts_before
from toy.build import start_toy

DOMAIN_OF = {r: d for d, roles in ROLES.items() for r in roles}
# ANSI magenta, cyan, yellow (on a terminal only)
COLOUR = {"opening": "35", "condition": "36", "verdict": "33"}


def choose(problems, path, args):
    """(problem, role) the flags pick among `problems` (read from `path`), or ValueError naming the flag."""
    if args.role is not None and args.role not in DOMAIN_OF:
        raise ValueError(
            f"--role {args.role!r}: not a role; the roles are {', '.join(DOMAIN_OF)}"
        )
    domain = args.domain or DOMAIN_OF.get(args.role)
    if args.role is not None and DOMAIN_OF[args.role] != domain:
        raise ValueError(
            f"--role {args.role}: not a role of the {domain} workflow ({', '.join(ROLES[domain])})"
        )
    mine = [p for p in problems if domain in (None, p["domain"])]
    if args.problem >= len(mine):
        raise ValueError(
            f"--problem {args.problem}: {path} holds {len(mine)} "
            f"{domain + ' ' if domain else ''}problem(s), counted from 0"
        )
    p = mine[args.problem]
    return p, args.role or ROLES[p["domain"]][0]


def render(tok, pieces, condition, colour):
    """The decoded (kind, turn, ids) pieces in order; the student's opening line, the role condition and each
    verdict between a bracketed mark and [end], each on lines of their own (the only text added or moved)."""
    out = ""
    for kind, t, ids in pieces:
        text = tok.decode(ids)
        mark = {
            "opening": "[the student's generic opening line]",
            "condition": f"[role condition {condition}]",
            "verdict": f"[verdict on turn {t} (c^{t}), teacher-only]",
        }.get(kind)
        if mark is None:
            out += text
            continue
        block = f"{mark}\n{text.strip(chr(10))}\n[end]"
        out += (
            ("" if not out or out.endswith("\n") else "\n")
            + (f"\033[{COLOUR[kind]}m{block}\033[0m" if colour else block)
            + "\n"
        )
    return out


def differences(student, pieces, role):
    """Two lines on what differs, read from the pieces: the student's context -> the target, target vs contrast."""
    tokens = lambda ps, kind: sum(len(ids) for k, _, ids in ps if k == kind)
    turns = lambda ps: {t for k, t, _ in ps if k == "history" and t >= 0}
    dropped = sorted(turns(student) - turns(pieces[0]))
    verdicts = sum(k == "verdict" for k, _, _ in pieces[0])
    a_b = (
        f"(a) -> (b): the opening line ({tokens(student, 'opening')} tokens) replaced by r_i "
        f"({tokens(pieces[0], 'condition')}), {verdicts} verdict(s) inserted ({tokens(pieces[0], 'verdict')})"
        + (
            f", the history of turn(s) {dropped} dropped for the teacher limit"
            if dropped
            else ""
        )
    )
    rest = [[p for p in ps if p[0] != "condition"] for ps in pieces]
    if rest[0] != rest[1]:
        return a_b, "(b) vs (c): they differ outside the role condition too"
    return a_b, (
        f"(b) vs (c): only the role condition differs ({role}: {tokens(pieces[0], 'condition')} tokens, "
        f"{KAPPA[role]}: {tokens(pieces[1], 'condition')}); the other "
        f"{sum(len(ids) for _, _, ids in rest[0])} tokens are identical"
    )


def show(tok, episode, t, role, verdicts, limit, colour):
    """Print (a), (b), (c), what differs and the response, for `role`'s response at turn t of `episode`."""
    resp = episode.turns[t].responses[role]
    p = episode.problem
    print(f"=== {p['id']} ({p['domain']}): {p['question'].strip()}")
    print(
        f"=== episode of {len(episode.turns)} turn(s), t = 0..{len(episode.turns) - 1} (the prompts' 'Turn t+1'), "
        f"stopped: {episode.stopped}; shown: t = {t}, the {ROLE_NAMES[role]}'s response; "
        + (
            "PAC off: no verdicts"
            if verdicts is None
            else f"PAC on: {len(verdicts)} verdict(s) c^{{<{t}}}"
        )
    )
    student = [(s.kind, s.turn, s.ids) for s in resp.context]
    print(
        f"\n--- (a) the student's context x_i^t, as the {ROLE_NAMES[role]} saw it ({len(resp.context_ids)} tokens)"
    )
    print(render(tok, student, "", colour))
    pieces = teacher_pieces(tok, resp.context, (role, KAPPA[role]), verdicts, limit)
    if pieces is None:
        print(
            f"--- the teacher contexts exceed the teacher limit ({limit} tokens): this response is left out of "
            f"the loss (DECISIONS.md D3)"
        )
        return
    for name, symbol, ps, r in (
        ("(b) the teacher's target context u~", "r_i", pieces[0], role),
        ("(c) the teacher's contrast context", "kappa(r_i)", pieces[1], KAPPA[role]),
    ):
        print(
            f"--- {name} under {symbol} = {r} ({sum(len(ids) for _, _, ids in ps)} tokens)"
        )
        print(render(tok, ps, f"{symbol}: {r}", colour))
    print("\n".join(f"--- {line}" for line in differences(student, pieces, role)))
    print(
        f"\n--- the response y_i^t, scored by the teacher after (b) and after (c) ({len(resp.tokens)} tokens)"
    )
    print(tok.decode(resp.tokens))


def main(argv=None):
    args, targs = contexts_args(argv)
    colour = sys.stdout.isatty()
    hf_logging.disable_progress_bar()  # the contexts, not a bar per loaded shard
    try:
        if not args.student:
            start_toy(args.cache, targs.threads)
        problem, role = choose(load_problems(targs.problems), targs.problems, args)
        cfg = rollout_config(targs)
        model, tok = load_model(targs.student, seed=targs.seed, device=targs.device)
        check_prompt_limit([problem], tok, cfg.max_prompt_tokens)
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    torch.manual_seed(targs.seed)
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(
        targs.seed
    )
    episode = run_episodes(
        [problem], {r: model for r in ROLES[problem["domain"]]}, tok, cfg, generator=gen
    )[0]
    last = len(episode.turns) - 1
    t = min(1, last) if args.turn is None else args.turn
    if t > last:
        print(
            f"error: --turn {t}: the episode has turns 0..{last} (it stopped: {episode.stopped}); try another "
            f"--turn, --seed or --problem",
            file=sys.stderr,
        )
        sys.exit(2)
    attributions = attribute_episodes([episode], timeout=cfg.code_timeout, workers=1)[0]
    verdicts = None if targs.no_pac else verdicts_before(attributions, t)
    show(tok, episode, t, role, verdicts, targs.teacher_max_prompt_tokens, colour)


if __name__ == "__main__":
    main()
