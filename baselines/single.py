"""The single agent of Table 1 (App. D.3): each workflow's main role alone, the Coder for code and the Reasoner for
math, with no teammate and no environment feedback. SA+ST answers once; SA+MT revises its own answer until it is
unchanged or T = 4 turns (App. D.3, the cap of App. D.6.1). Episodes of rollout.py's shape, so the verifier
(attribution.attribute_episodes), the evaluation and the GRPO baselines (baselines/grpo.py) read them as any.
The Coder alone is also the shared-ability check of Fig. 3c (tools/sweep.py).

    python -m baselines.single --problems FILE --model DIR                  # SA+ST, e.g. the teacher alone
    python -m baselines.single --problems FILE --model DIR --multi-turn     # SA+MT

The turn-0 prompt is the main role's own (prompts.build_context); later turns show the agent its earlier answers
and ask it, in our words, to check the latest and revise it or repeat it unchanged.
"""

from config import apply_preset, default_device, precision
from infra.cli import eval_parser, flags_first


def single_args(argv=None):
    """python -m baselines.single's command line: eval.py's flags (infra/cli.py, eval_parser), the model and
    --multi-turn; the preset applied."""
    ap, data, _ = eval_parser(
        "A model alone (SA+ST; SA+MT with --multi-turn), a baseline of Table 1 (App. D.3)."
    )
    data.add_argument(
        "--model",
        required=True,
        help="a model spec (tiny-qwen3 | local dir | .gguf | hub id), e.g. "
        "a student or the teacher",
    )
    data.add_argument(
        "--multi-turn",
        action="store_true",
        help="SA+MT: the agent revises its own answer until it is "
        "unchanged or T turns (App. D.3)",
    )
    args = ap.parse_args(argv)
    apply_preset(args)
    args.device = args.device or default_device()
    args.precision = precision(args.precision, args.device)
    return args


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(single_args)

import sys
import time

from attribution import ROLE_CHECK, attribute_episodes
from config import MAX_TURNS
from eval import decoding_config, markdown, report_run, start
from infra.data import ProblemError, json_text, write_atomic
from infra.metrics import format_metrics, mean_std
from infra.models import DTYPES, forget_gguf, load_model
from infra.progress import TurnProgress
from prompts import (
    ANSWER_FMT,
    NO_ANSWER,
    NO_CODE_BLOCK,
    NO_PROGRAM,
    OPENING,
    ROLES,
    CodeArtefacts,
    MathArtefacts,
    Segment,
    _fence,
    build_context,
    check_prompt_limit,
    encode_text,
    extract_answer,
    extract_program,
    fit_context,
)
from rollout import Episode, Turn, final_answer, sample_turn, seeded_generator

# ("coder", "reasoner"): who answers alone
MAIN_ROLES = tuple(roles[0] for roles in ROLES.values())
# The single-agent variants of the GRPO baselines (baselines/grpo.py) and their turn caps (App. D.3).
SINGLE = {"sa-st": 1, "sa-mt": MAX_TURNS}
REVISE_OWN = {  # SA+MT's later turns (App. D.3): no feedback, the agent's own earlier answers only
    "coder": "Your earlier programs are shown above. Check the latest one against the problem. If it is wrong, "
    "write a corrected program; if it is right, give it again unchanged.",
    "reasoner": "Your earlier derivations are shown above. Check the latest one against the problem. If it is "
    "wrong, fix the faulty step and give the corrected answer; if it is right, give the same answer "
    "again.",
}


def own_entry(role, t, artefacts):
    """The history entry of earlier turn t: the agent's own artefact, nothing else (there is no feedback)."""
    if role == "coder":
        lines = ["Your program:", _fence(artefacts.program or NO_PROGRAM, "python")]
    else:
        lines = [
            "Your derivation:",
            artefacts.derivation.strip(),
            f"Your answer: {artefacts.derivation_answer or NO_ANSWER}",
        ]
    return f"Turn {t + 1}:\n" + "\n".join(lines) + "\n\n"


def self_context(tokenizer, problem, role, turns):
    """x^t of the single agent as segments: turn 0 is the role's own prompt; later turns keep its head, task and
    tail, open with the role's refining line and put the earlier answers and REVISE_OWN before the answer format."""
    # head | opening | task | instruction | tail
    segs = build_context(tokenizer, problem, role, [])
    if not turns:
        return segs
    text = lambda kind, s, turn=-1: Segment(kind, encode_text(tokenizer, s), turn)
    history = [text("history", "History of your earlier turns:\n\n")]
    history += [
        text("history", own_entry(role, i, turn.artefacts), i)
        for i, turn in enumerate(turns)
    ]
    return [
        segs[0],
        text("opening", OPENING[role][1]),
        segs[2],
        *history,
        text("instruction", REVISE_OWN[role] + "\n\n" + ANSWER_FMT[role]),
        segs[-1],
    ]


def artefacts_of(problem, role, text):
    """What the verifier judges of a single agent's response: the Coder's program, the Reasoner's answer; the
    partner's fields empty (no test case; no program, whose outcome is then NO_CODE_BLOCK, never an answer)."""
    if problem["domain"] == "code":
        program, rule = extract_program(text)
        return CodeArtefacts(program, None, None, None, {role: rule})
    answer, rule = extract_answer(text)
    return MathArtefacts(text, answer, None, NO_CODE_BLOCK, {role: rule})


def unchanged(before, after, role):
    """SA+MT's stop: the role's own artefact is the same text as the turn before, whitespace aside (the rule of
    "revised", DECISIONS.md D10)."""
    squash = lambda v: None if v is None else " ".join(v.split())
    return all(
        squash(b) == squash(a) for b, a in zip(before.own(role), after.own(role))
    )


def run_single(problems, policies, tokenizer, cfg, generator, max_turns):
    """Episodes of each problem's main role alone: one turn (SA+ST) or up to max_turns, stopping as soon as its
    answer is unchanged (SA+MT, App. D.3). policies: role -> model (only the main roles are used); sampling as in
    rollout.run_episodes. A turn's `agree` marks an unchanged answer; `stopped` is "unchanged", "max_turns" or
    "prompt_too_long". Returns one Episode per problem."""
    episodes = [Episode(p, []) for p in problems]

    def finish(e, why):
        e.stopped, e.final = why, final_answer(e, cfg)

    for t in range(max_turns):
        contexts = {}
        for k, e in enumerate(episodes):
            role = ROLES[e.problem["domain"]][0]
            if not e.stopped:
                ctx = fit_context(
                    self_context(tokenizer, e.problem, role, e.turns),
                    cfg.max_prompt_tokens,
                )
                if ctx is None:
                    finish(e, "prompt_too_long")
                else:
                    contexts[k] = {role: ctx}
        if not contexts:
            break
        live = TurnProgress.open(t, cfg, len(contexts))
        # out[k]: role -> y^t
        out = sample_turn(policies, episodes, contexts, tokenizer, cfg, generator, live)
        live.close()
        for k in contexts:
            e, (role, resp) = episodes[k], next(iter(out[k].items()))
            artefacts = artefacts_of(e.problem, role, resp.text)
            same = bool(e.turns) and unchanged(e.turns[-1].artefacts, artefacts, role)
            e.turns.append(Turn(t, out[k], artefacts, same))
            if same:
                finish(e, "unchanged")
    for e in episodes:
        if not e.stopped:
            finish(e, "max_turns")
    return episodes


def single_metrics(problems, policies, tok, seed, cfg, max_turns, on_run=None):
    """SA+ST (max_turns 1) or SA+MT (max_turns T) of one evaluation seed: accuracy per domain by the main role's
    own check on its last turn (its submitted answer), turns used, and how its responses were parsed (DECISIONS.md
    D5); a single turn (SA+ST) has no turns figure. on_run(seed, seats, episodes, metrics, seconds) as for
    eval.evaluate, seats "single"."""
    start = time.perf_counter()
    gen = seeded_generator(policies, seed)
    episodes = run_single(problems, policies, tok, cfg, gen, max_turns)
    atts = attribute_episodes(episodes, timeout=cfg.code_timeout, workers=cfg.workers)
    m = {}
    for domain, roles in ROLES.items():
        mine = [(e, a) for e, a in zip(episodes, atts) if e.problem["domain"] == domain]
        if mine:
            m[f"acc_{domain}"] = (
                100
                * sum(bool(a and a[-1].checks[ROLE_CHECK[roles[0]]]) for _, a in mine)
                / len(mine)
            )
            if max_turns > 1:  # SA+ST's is always 1
                m[f"turns_{domain}"] = sum(len(e.turns) for e, _ in mine) / len(mine)
    m.update(format_metrics(episodes))
    if on_run:
        on_run(seed, "single", episodes, m, time.perf_counter() - start)
    return m


def single_agent_metrics(
    problems, model, tok, seed, cfg, on_run=None, multi_turn=False
):
    """SA+ST (App. D.3): the main role alone for one turn (Coder for code, Reasoner for math),
    judged by its own check; multi_turn, SA+MT: it revises its own answer until unchanged or
    cfg.max_turns turns. model: one model in both main seats, or role -> model. on_run as for
    eval.evaluate (seats "single")."""
    seats = model if isinstance(model, dict) else dict.fromkeys(MAIN_ROLES, model)
    turns = cfg.max_turns if multi_turn else 1
    return single_metrics(problems, seats, tok, seed, cfg, turns, on_run)


def main(argv=None):
    """python -m baselines.single: one model alone on a problem file, SA+ST or --multi-turn SA+MT, over the
    evaluation seeds (eval.py's flags)."""
    args = single_args(argv)
    try:
        problems = start(args, {"--json": args.json, "--episodes": args.episodes})
        # one model, every problem's main role at once
        cfg = decoding_config(args, problems, args.model, 1, len(problems))
        model, tok = load_model(args.model, seed=1, dtype=DTYPES[args.precision])
        check_prompt_limit(problems, tok, cfg.max_prompt_tokens)
        forget_gguf()
        model = model.to(args.device)
        on_run = report_run(args.episodes)
        per_seed = [
            single_agent_metrics(problems, model, tok, s, cfg, on_run, args.multi_turn)
            for s in args.seeds
        ]
        result = {
            f"single agent {args.model}"
            + (", multi-turn" if args.multi_turn else ""): mean_std(per_seed)
        }
        print(markdown(result))
        if args.json:
            write_atomic(args.json, json_text(result, indent=1))
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
