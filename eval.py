"""Evaluation and the paper's analysis (§4.2-4.4, App. D.5, App. G.2).

A trained run (its checkpoint's policies in their seats); untrained students (one base
model in every seat); a team of 2n agents trained with --agents-per-role; the heat map
of App. G.2:

    python eval.py --problems FILE --run runs/default
    python eval.py --problems FILE --student DIR
    python eval.py --problems FILE --run runs/team --agents-per-role 2
    python eval.py --problems FILE --run runs/default --teacher DIR --heatmap heat.html

A model alone, one turn (SA+ST, e.g. the teacher) or revising its own answer (SA+MT), is
a baseline of Table 1: python -m baselines.single.

Problems: any problem file (infra/data.py), e.g. examples/problems.jsonl or a benchmark
converted by tools/loaders.py. Evaluation decoding (App. D.5): temperature 0.6, top-p
0.95, top-k 20, T = 4, over several seeds, mean +- std. Reports team accuracy / Pass@1
per domain and: the exchange penalty (Fig. 3a), the revise-iff-wrong rate per role with
its two failure modes (Fig. 4a-b), turns to agreement (Fig. 4c), and how each role's
artefacts were parsed (format failures apart from wrong work); optionally the
token-level role-advantage heat map of App. G.2 as one HTML file. A Markdown table on
stdout, everything in a JSON file. The verifier scores; no model ever sees a verdict
here.
"""

from infra.cli import eval_args, flags_first

if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(eval_args)

import dataclasses
import json
import os
import sys
import time
from functools import partial

from tqdm import tqdm

from attribution import attribute_episodes
from config import (
    EVAL_DECODING,
    TEACHER_BATCH_TOKENS,
    preset_line,
    response_limit,
)
from infra.answers import answers_equivalent
from infra.checkpoint import load_policies, policy_dirs
from infra.data import (
    ProblemError,
    append_episodes,
    check_writable,
    json_text,
    load_problems,
    write_atomic,
)
from infra.metrics import exchange_penalty, mean_std, run_figures, token_pieces
from infra.models import (
    DTYPES,
    config_of,
    cpu_threads,
    forget_gguf,
    load_model,
    same_tokenizer_specs,
)
from infra.report import heatmap, page, table_rows
from infra.seats import team_seats
from infra.stopping import eval_stop_line, stop_on_signals
from loss import role_advantage
from prompts import check_prompt_limit, teammate
from rollout import rollout_config, run_episodes, seeded_generator
from sampler import release_decoder
from sandbox.jail import check_isolation, jail_line
from scaling.eval_memory import check_eval_fits
from teacher import score_both_passes, teacher_inputs
from teams.evaluation import evaluate_team, play_team


def solved(episode, atts):
    """Pass@1 (code: the submitted program, the last turn's, passes every golden test)
    or accuracy (math), by the verifier."""
    if episode.final is None:
        return False
    if episode.problem["domain"] == "code":
        return bool(atts[-1].checks["program_correct"])
    return answers_equivalent(episode.final, episode.problem["answer"])


def decisions(episodes, attributions):
    """Fig. 4a-b's decisions: at every disagreeing turn t with a turn t+1, each role's
    own check at t (a^t per agent, Eq. 11) and its own artefact at t and t+1, as (role,
    ok, before, after). attributions: one list per episode (attribute_episodes)."""
    for e, atts in zip(episodes, attributions):
        for t in range(len(e.turns) - 1):
            if not e.turns[t].agree:
                for role, ok in atts[t].agents.items():
                    before, after = e.turns[t].artefacts, e.turns[t + 1].artefacts
                    yield role, ok, before.own(role), after.own(role)


def play(problems, policies, tok, seed, cfg):
    """One evaluation run of the pair: its episodes (sampled with generator seed `seed`)
    and their attributions (the verifier's checks of every turn, one list per
    episode)."""
    gen = seeded_generator(policies, seed)
    episodes = run_episodes(problems, policies, tok, cfg, generator=gen)
    return episodes, attribute_episodes(
        episodes, timeout=cfg.code_timeout, workers=cfg.workers
    )


def figures(episodes, attributions):
    """The figures of one run of the pair (App. D.5, Fig. 4; infra.metrics.run_figures):
    accuracy and turns per domain, revise-iff-wrong per role, the parsing shares."""
    return run_figures(episodes, attributions, solved, decisions)


def evaluate(problems, policies, tok, seeds, cfg, exchange=True, on_run=None):
    """The pair's evaluation over seeds; with exchange=True also the swapped seats and
    the exchange penalty. on_run: called after every run as on_run(seed, seats,
    episodes, metrics, seconds), seats "own" or "exchanged"."""
    own = []
    for seed in seeds:
        own.append(_run(problems, policies, tok, seed, cfg, "own", on_run))
        if exchange:
            # each policy plays its teammate's seat and receives that seat's prompt
            # (Fig. 3a)
            swapped = {role: policies[teammate(role)] for role in policies}
            m = _run(problems, swapped, tok, seed, cfg, "exchanged", on_run)
            own[-1].update(exchange_penalty(own[-1], m))
    return mean_std(own)


def _run(problems, policies, tok, seed, cfg, seats, on_run):
    start = time.perf_counter()
    episodes, atts = play(problems, policies, tok, seed, cfg)
    m = figures(episodes, atts)
    if on_run:
        on_run(seed, seats, episodes, m, time.perf_counter() - start)
    return m


def run_line(seed, seats, episodes, metrics, seconds):
    """The progress line of one evaluation run: seed, seats, time and accuracy per
    domain."""
    acc = ", ".join(f"{k} {v:.1f}" for k, v in metrics.items() if k.startswith("acc_"))
    return f"eval seed {seed}, {seats} seats: {len(episodes)} episodes in {seconds:.1f} s; {acc}"


def evaluate_policies(problems, policies, tok, args):
    """evaluate with train.py's parsed args (config.get_args): team accuracy,
    revise-iff-wrong and turns on held-out problems over args.eval_seeds, with the
    evaluation decoding (App. D.5); with args.eval_exchange also the exchange penalty
    (Fig. 3a). A line per run as it ends, above any progress bar. A team of 2n agents is
    evaluated as one (teams/evaluation.py)."""
    cfg = rollout_config(args, progress=True, **EVAL_DECODING)
    on_run = lambda *one: tqdm.write(run_line(*one))
    system = evaluator(args.agents_per_role)
    out = system(
        problems, policies, tok, args.eval_seeds, cfg, args.eval_exchange, on_run
    )
    release_decoder()
    return out


def evaluator(n):
    """evaluate for the pair (n = 1), or a team of 2n agents' own (teams/evaluation.py)."""
    return partial(evaluate_team, n=n) if n > 1 else evaluate


def heatmap_html(teacher, tok, episodes, attributions, limit, block=4, levels=11):
    """App. G.2: the role-advantage heat map (report.heatmap) of every response of the
    episodes' first turns, scored by the teacher under both role conditions as training
    scores them (teacher.teacher_inputs, score_both_passes; limit: the teacher prompt
    limit). attributions: one list per episode. One self-contained HTML page."""
    firsts = [dataclasses.replace(e, turns=e.turns[:1]) for e in episodes]
    inputs, _ = teacher_inputs(firsts, attributions, tok, limit)
    targets, contrasts = [x[3] for x in inputs], [x[4] for x in inputs]
    lps = score_both_passes(
        teacher, targets, contrasts, [x[2].tokens for x in inputs], TEACHER_BATCH_TOKENS
    )
    rows = [
        (
            f"{episodes[k].problem['id']} turn 1",
            seat,
            token_pieces(tok, resp.tokens),
            role_advantage(lp_target, lp_contrast).tolist(),
        )
        for (k, seat, resp, _, _), lp_target, lp_contrast in zip(inputs, *lps)
    ]
    title = "<h1>Token-level role advantage (App. G.2)</h1>"
    return page("Role advantage", title + heatmap(rows, block, levels))


def markdown(rows):
    """rows: system name -> mean_std dict. One row per metric, one column per system."""
    lines = ["| metric | " + " | ".join(rows) + " |", "|---" * (len(rows) + 1) + "|"]
    lines += [f"| {k} | " + " | ".join(cells) + " |" for k, cells in table_rows(rows)]
    return "\n".join(lines)


def report_run(path):
    """-> on_run for evaluate: a progress line per run, and with a path its episodes
    appended there (JSONL)."""

    def on_run(seed, seats, episodes, metrics, seconds):
        print(run_line(seed, seats, episodes, metrics, seconds), flush=True)
        if path:
            append_episodes(path, episodes, seed=seed, seats=seats)

    return on_run


# --------------------------------------------------------------------------------------
# The command line: its flags (infra/cli.py, eval_args), the checks and the memory plan
# before any weights load (start, plan), then the evaluation (main)


def start(args, outputs):
    """What an evaluation command does before it reads any model: the preset and the
    options filled in, the start-up lines, the signals, the sandbox's check, and each
    output path of `outputs` (flag -> path) checked. -> the problems."""
    print(preset_line(args))
    print("config:", json.dumps(vars(args)))
    print(cpu_threads(args.threads))
    # SIGINT, SIGTERM: exit 130, 143 and one line
    stop_on_signals(partial(eval_stop_line, args))
    print("sandbox:", jail_line())
    if note := check_isolation(args.unisolated_programs):  # before anything loads
        print(note)
    for flag, path in outputs.items():
        if path:  # before the run, not after it
            check_writable(path, flag, overwrite=args.overwrite)
    if args.episodes:
        open(args.episodes, "w").close()
    return load_problems(args.problems)


def decoding_config(args, problems, spec, n_models, prompts, teacher=None):
    """The evaluation decoding's RolloutConfig, its prompts per generate call picked by
    the memory plan from configs only (scaling/eval_memory.py) unless --rollout-chunk
    did; refuses in one line what cannot fit. spec: the students' model; n_models: how
    many distinct ones load; prompts: the most one of them samples in one turn; teacher:
    the heat map's, or None."""
    cfg = rollout_config(args, progress=True, **EVAL_DECODING)
    teacher_cfg = config_of(teacher) if teacher else None
    longest = max(response_limit(cfg, p["domain"]) for p in problems)
    chunk, line = check_eval_fits(
        config_of(spec),
        teacher_cfg,
        args.device,
        args.rollout_chunk,
        n_models=n_models,
        precision=args.precision,
        prompt_len=cfg.max_prompt_tokens,
        response_len=longest,
        prompts=prompts,
    )
    print(line)
    return dataclasses.replace(cfg, rollout_chunk=chunk)


def seat_plan(args, problems, seats):
    """What eval.py's args put in the seats, for the memory plan and the tokenizer
    check, before any weights load: (a spec or directory of the students, how many
    distinct models load, the most prompts one of them samples in one turn). One model
    in every seat samples all 2n seats of every problem in one call; a checkpoint's
    policy per seat its seat's problems."""
    every = 2 * args.agents_per_role * len(problems)  # 2n seats per problem
    if args.student:
        return args.student, 1, every
    dirs = policy_dirs(os.path.join(args.run, "checkpoint"), seats)
    if len(set(dirs.values())) == 1:
        return dirs[seats[0]], 1, every
    most = max(
        sum(s in team_seats([p], args.agents_per_role) for p in problems) for s in seats
    )
    return dirs[seats[0]], len(seats), most


def load_seats(args, seats, dtype):
    """(seat -> policy, tokenizer): a run's checkpoint, its policy per seat (--run), or
    one untrained model in every seat (--student), on args.device in `dtype`."""
    if args.run:
        checkpoint = os.path.join(args.run, "checkpoint")
        return load_policies(checkpoint, seats, args.device, dtype)
    model, tok = load_model(args.student, dtype=dtype)
    return {s: model.to(args.device) for s in seats}, tok


def write_heatmap(args, problems, policies, tok, cfg, dtype):
    """App. G.2's page for args.heatmap: one run's first turns, scored by args.teacher."""
    n = args.agents_per_role
    play_system = partial(play_team, n=n) if n > 1 else play
    episodes, attributions = play_system(problems, policies, tok, args.seeds[0], cfg)
    # the students' KV cache, before the teacher needs the memory (as the plan assumes)
    release_decoder()
    teacher = load_model(args.teacher, seed=1, dtype=dtype)[0].to(args.device)
    limit = args.teacher_max_prompt_tokens
    write_atomic(
        args.heatmap, heatmap_html(teacher, tok, episodes, attributions, limit)
    )
    print(f"wrote {args.heatmap}")


def main(argv=None):
    args = eval_args(argv)
    # bf16 weights outright, no autocast: nothing is trained here, so no fp32 masters
    # are needed, and the decode step reads half the bytes and can be recorded
    # (sampler.decoder). These are the models train.py samples with.
    dtype = DTYPES[args.precision]
    outputs = {
        "--json": args.json,
        "--heatmap": args.heatmap,
        "--episodes": args.episodes,
    }
    try:
        problems = start(args, outputs)
        seats = team_seats(problems, args.agents_per_role)  # 2n per domain
        spec, n_models, prompts = seat_plan(args, problems, seats)
        if args.heatmap:  # the teacher scores the students' token ids (Eq. 7)
            who = f"--run {args.run}" if args.run else f"--student {args.student}"
            same_tokenizer_specs(args.teacher, spec, (f"--teacher {args.teacher}", who))
        teacher = args.heatmap and args.teacher
        cfg = decoding_config(args, problems, spec, n_models, prompts, teacher)
        policies, tok = load_seats(args, seats, dtype)
        forget_gguf()
        check_prompt_limit(problems, tok, cfg.max_prompt_tokens)
        system, exchange = evaluator(args.agents_per_role), not args.no_exchange
        on_run = report_run(args.episodes)
        figures = system(problems, policies, tok, args.seeds, cfg, exchange, on_run)
        result = {args.run or f"untrained {args.student}": figures}
        print(markdown(result))
        if args.json:  # before the heat map, whose teacher may still fail to load
            write_atomic(args.json, json_text(result, indent=1))
        if args.heatmap:
            write_heatmap(args, problems, policies, tok, cfg, dtype)
    except (ProblemError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
