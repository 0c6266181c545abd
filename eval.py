"""Evaluation and the paper's analysis (§4.2-4.4, App. D.5, App. G.2).

    python eval.py --problems FILE --run runs/default     # a trained run (its checkpoint/ policies
    in their seats) python eval.py --problems FILE --student DIR          # untrained students (one
    base model in every seat) python eval.py --problems FILE --single-agent DIR     # one model
    alone, one turn (SA+ST, e.g. the teacher) python eval.py --problems FILE --single-agent DIR
    --multi-turn   # ... revising its own answer (SA+MT)

Problems: any problem file (infra/data.py), e.g. examples/problems.jsonl or a benchmark converted by
tools/loaders.py. Evaluation decoding (App. D.5): temperature 0.6, top-p 0.95, top-k 20, T = 4, over
several seeds, mean +- std. Reports team accuracy / Pass@1 per domain and, for teams: the exchange
penalty (Fig. 3a), the revise-iff-wrong rate per role with its two failure modes (Fig. 4a-b), turns
to agreement (Fig. 4c), and how each role's artefacts were parsed (format failures apart from wrong
work); optionally the token-level role-advantage heat map of App. G.2 as one HTML file. A Markdown
table on stdout, everything in a JSON file. The verifier scores; no model ever sees a verdict here.
"""
import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from functools import partial

import torch
from tqdm import tqdm

from attribution import attribute_episodes
from baselines.single import MAIN_ROLES, SINGLE, single_metrics
from config import (AGENTS_PER_ROLE, COUNT, DEVICE, DTYPES, EVAL_DECODING, PRESETS, SEED,
                    TEACHER_BATCH_TOKENS, add_unisolated_flag, apply_preset, bounded, device,
                    precision, preset_help, preset_line, response_limit)
from infra.answers import answers_equivalent
from infra.checkpoint import load_policies, policy_dirs
from infra.data import (ProblemError, append_episodes, check_writable, json_text, load_problems,
                        write_atomic)
from infra.models import config_of
from scaling.eval_memory import check_eval_fits
from infra.metrics import format_counts, format_shares
from infra.models import cpu_threads, forget_gguf, load_model, same_tokenizer_specs
from infra.report import heatmap, page, table_rows, token_pieces
from sandbox.jail import check_isolation, describe
from infra.stopping import eval_stop_line, stop_on_signals
from infra.seats import own_artefact, partner, team_seats
from loss import role_advantage
from prompts import check_prompt_limit, role_of
from rollout import rollout_config, run_episodes
from sampler import release_decoder
from teacher import KAPPA, score_both_passes, teacher_inputs
from teams.verdicts import phase_2a



def _squash_spaces(value):
    """Artefacts compared for 'revised': whitespace-insensitive text, not meaning
    (DECISIONS.md D10)."""
    return None if value is None else " ".join(value.split())


def solved(episode, atts):
    """Pass@1 (code: the submitted program passes every golden test) or accuracy (math), by the
    verifier."""
    if episode.final is None:
        return False
    # the final program is the last turn's: its Coder's check is run
    if episode.problem["domain"] == "code":
        return bool(next(atts[-1].agents[a] for (a, _), art in episode.turns[-1].pairs.items()
                         if art.program == episode.final))
    return answers_equivalent(episode.final, episode.problem["answer"])


def revision_stats(episodes, attributions):
    """Fig. 4a-b: at every disagreeing turn t with a turn t+1, an agent succeeds iff it revised its
    own artefact exactly when its own check failed at t (a^t per agent, Eq. 24; with replicas, a
    turn disagrees when any pairing does, DECISIONS.md D15). attributions: one list per episode
    (attribute_episodes). Returns per role counts of success / revised-when-right / kept-when-wrong,
    summed over the role's agents (turns whose check is undecided, test_correct None, are
    skipped)."""
    stats = {}
    for e, atts in zip(episodes, attributions):
        for t in range(len(e.turns) - 1):
            if e.turns[t].agree:
                continue
            for name, ok in atts[t].agents.items():
                if ok is None:
                    continue
                before = own_artefact(name, e.turns[t].pairs)
                after = own_artefact(name, e.turns[t + 1].pairs)
                revised = any(_squash_spaces(b) != _squash_spaces(a) for b, a in zip(before, after))
                s = stats.setdefault(role_of(name), {"n": 0, "success": 0, "revised_when_right": 0,
                                                     "kept_when_wrong": 0})
                s["n"] += 1
                s["success"] += revised == (not ok)
                s["revised_when_right"] += revised and ok
                s["kept_when_wrong"] += (not revised) and (not ok)
    return stats


def run_team(problems, policies, tok, seed, cfg):
    """Episodes plus their attributions (the verifier's checks of every turn, one list per
    episode)."""
    device = next((p.device for p in policies.values() if isinstance(p, torch.nn.Module)), "cpu")
    gen = torch.Generator(device=device).manual_seed(seed)
    episodes = run_episodes(problems, policies, tok, cfg, generator=gen)
    # a team's verifier writes a verdict line per agent (App. E.1.3)
    attribute = phase_2a(cfg.agents_per_role) or attribute_episodes
    return episodes, attribute(episodes, timeout=cfg.code_timeout, workers=cfg.workers)


def team_metrics(episodes, attributions):
    m = {}
    for domain in ("code", "math"):
        mine = [(e, atts) for e, atts in zip(episodes, attributions)
                if e.problem["domain"] == domain]
        if mine:
            m[f"acc_{domain}"] = 100 * sum(solved(e, atts) for e, atts in mine) / len(mine)
            # no agreement: T turns
            m[f"turns_{domain}"] = sum(len(e.turns) for e, _ in mine) / len(mine)
    for role, s in revision_stats(episodes, attributions).items():
        if s["n"]:
            m[f"revise_iff_wrong_{role}"] = 100 * s["success"] / s["n"]
            m[f"revised_when_right_{role}"] = 100 * s["revised_when_right"] / s["n"]
            m[f"kept_when_wrong_{role}"] = 100 * s["kept_when_wrong"] / s["n"]
    return {**m, **format_metrics(episodes)}


def format_metrics(episodes, roles=None):
    """Per role (of `roles`, default all), the % of its responses read by each parsing rule
    (DECISIONS.md D5) and the % whose artefact could not be read at all: parse_truncated_ROLE when
    the response limit cut it (a length problem), parse_unparsed_ROLE when it ended without one (a
    format problem); neither is wrong work (App. D.5 scoring)."""
    shares = format_shares(format_counts(episodes))
    return {f"parse_{rule}_{role}": v for role, of_role in shares.items()
            if roles is None or role in roles for rule, v in of_role.items()}


def single_agent_metrics(problems, model, tok, seed, cfg, on_run=None, multi_turn=False):
    """SA+ST (App. D.3): the main role alone for one turn (Coder for code, Reasoner for math),
    judged by its own check; multi_turn, SA+MT: it revises its own answer until unchanged or
    cfg.max_turns turns (baselines/single.py). model: one model in both main seats, or role ->
    model. on_run as for evaluate (seats "single")."""
    seats = model if isinstance(model, dict) else dict.fromkeys(MAIN_ROLES, model)
    turns = cfg.max_turns if multi_turn else 1
    return single_metrics(problems, seats, tok, seed, cfg, turns, on_run)


def mean_std(per_seed):
    keys = sorted({k for m in per_seed for k in m})
    out = {}
    for k in keys:
        vals = [m[k] for m in per_seed if k in m]
        std = statistics.stdev(vals) if len(vals) > 1 else 0.0
        out[k] = {"mean": statistics.fmean(vals), "std": std}
    return out


def evaluate(problems, policies, tok, seeds, cfg, exchange=True, on_run=None):
    """Team evaluation over seeds; with exchange=True also the swapped seats and the exchange
    penalty. on_run: called after every run as on_run(seed, seats, episodes, metrics, seconds),
    seats "own" or "exchanged"."""
    own = []
    for seed in seeds:
        own.append(_run(problems, policies, tok, seed, cfg, "own", on_run))
        if exchange:
            # each policy plays its partner's seat (kappa of its own role, the agent of the same
            # number: DECISIONS.md D15) and receives that seat's prompt (Fig. 3a)
            swapped = {s: policies[partner(s, KAPPA)] for s in policies}
            m = _run(problems, swapped, tok, seed, cfg, "exchanged", on_run)
            own[-1].update({f"exchange_penalty_{d}": own[-1][f"acc_{d}"] - m[f"acc_{d}"]
                            for d in ("code", "math") if f"acc_{d}" in m})
    return mean_std(own)


def _run(problems, policies, tok, seed, cfg, seats, on_run):
    start = time.perf_counter()
    episodes, atts = run_team(problems, policies, tok, seed, cfg)
    m = team_metrics(episodes, atts)
    if on_run:
        on_run(seed, seats, episodes, m, time.perf_counter() - start)
    return m


def run_line(seed, seats, episodes, metrics, seconds):
    """The progress line of one evaluation run: seed, seats, time and accuracy per domain."""
    acc = ", ".join(f"{k} {v:.1f}" for k, v in metrics.items() if k.startswith("acc_"))
    return f"eval seed {seed}, {seats} seats: {len(episodes)} episodes in {seconds:.1f} s; {acc}"


def evaluate_policies(problems, policies, tok, args):
    """evaluate with train.py's parsed args (config.get_args): team accuracy, revise-iff-wrong and
    turns on held-out problems over args.eval_seeds, with the evaluation decoding (App. D.5); with
    args.eval_exchange also the exchange penalty (Fig. 3a). A line per run as it ends, above any
    progress bar."""
    cfg = rollout_config(args, progress=True, **EVAL_DECODING)
    on_run = lambda *run: tqdm.write(run_line(*run))
    if args.objective == "grpo" and args.grpo_variant in SINGLE:  # a single agent alone (App. D.3)
        multi = SINGLE[args.grpo_variant] > 1
        out = mean_std([single_agent_metrics(problems, policies, tok, s, cfg, on_run, multi)
                        for s in args.eval_seeds])
    else:
        out = evaluate(problems, policies, tok, args.eval_seeds, cfg, exchange=args.eval_exchange,
                       on_run=on_run)
    release_decoder()
    return out


def heatmap_html(teacher, tok, episodes, attributions, limit, block=4, levels=11):
    """App. G.2: the role-advantage heat map (report.heatmap) of every response of the episodes'
    first turns, scored by the teacher under both role conditions as training scores them
    (teacher.teacher_inputs, score_both_passes; limit: the teacher prompt limit). attributions: one
    list per episode. One self-contained HTML page."""
    firsts = [dataclasses.replace(e, turns=e.turns[:1]) for e in episodes]
    inputs, _ = teacher_inputs(firsts, attributions, tok, limit)
    targets, contrasts = [x[3] for x in inputs], [x[4] for x in inputs]
    lps = score_both_passes(teacher, targets, contrasts, [x[2].tokens for x in inputs],
                            TEACHER_BATCH_TOKENS)
    rows = [(f"{episodes[k].problem['id']} turn 1", role, token_pieces(tok, resp.tokens),
             role_advantage(lp_target, lp_contrast).tolist())
            for (k, role, resp, _, _), lp_target, lp_contrast in zip(inputs, *lps)]
    title = "<h1>Token-level role advantage (App. G.2)</h1>"
    return page("Role advantage", title + heatmap(rows, block, levels))


def seat_plan(args, problems, roles):
    """What eval.py's args put in the seats, for the memory plan and the tokenizer check, before any
    weights load: (a spec or directory of the students, how many distinct models load, the most
    prompts one of them samples in one turn). One model in every seat samples all 2n seats of every
    problem in one call; a checkpoint's policy per seat its seat's problems; a single agent the main
    role of every problem."""
    if args.single_agent:
        return args.single_agent, 1, len(problems)
    every = 2 * args.agents_per_role * len(problems)  # 2n seats per problem
    if args.student:
        return args.student, 1, every
    dirs = policy_dirs(os.path.join(args.run, "checkpoint"), roles)
    if len(set(dirs.values())) == 1:
        return dirs[roles[0]], 1, every
    most = max(sum(s in team_seats([p], args.agents_per_role) for p in problems) for s in roles)
    return dirs[roles[0]], len(roles), most


def markdown(rows):
    """rows: system name -> mean_std dict. One row per metric, one column per system."""
    lines = ["| metric | " + " | ".join(rows) + " |", "|---" * (len(rows) + 1) + "|"]
    lines += [f"| {k} | " + " | ".join(cells) + " |" for k, cells in table_rows(rows)]
    return "\n".join(lines)


def report_run(path):
    """-> on_run for evaluate: a progress line per run, and with a path its episodes appended
    there (JSONL)."""
    def on_run(seed, seats, episodes, metrics, seconds):
        print(run_line(seed, seats, episodes, metrics, seconds), flush=True)
        if path:
            append_episodes(path, episodes, seed=seed, seats=seats)
    return on_run


def main(argv=None):
    ap = argparse.ArgumentParser(description="Evaluate a team or a single agent; the paper's "
                                 "analysis metrics. Defaults in brackets; a (preset) flag lists "
                                 "each preset's value.")
    group = ap.add_argument_group("data and models")
    add, who = group.add_argument, group.add_mutually_exclusive_group(required=True)
    who.add_argument("--run", help="a train.py output directory")
    who.add_argument("--student", help="untrained: this model in every seat")
    who.add_argument("--single-agent", help="this model alone, one turn (SA+ST, e.g. the teacher)")
    add("--multi-turn", action="store_true", help="with --single-agent: SA+MT, the agent revises "
        "its own answer until it is unchanged or T turns (App. D.3)")
    add("--problems", required=True, help="JSONL problem file (schema: infra/data.py)")
    add("--agents-per-role", type=COUNT, default=AGENTS_PER_ROLE, help="n: a team of 2n agents, n "
        "per role (App. E.1); with --run, the n it was trained with [%(default)s]")
    add("--teacher", help="the teacher of --heatmap, a model spec as for --student (required with "
                          "--heatmap)")
    add("--preset", choices=sorted(PRESETS), default="paper", help="defaults of the flags marked "
        "(preset): the paper's, a first GPU run's, a first CPU run's or the toy world's "
        "(config.py, PRESETS); explicit flags win [%(default)s]")
    add_unisolated_flag(add)
    add = ap.add_argument_group("sampling (evaluation decoding, App. D.5)").add_argument
    add("--seeds", type=SEED, nargs="+", help=preset_help("seeds", "one evaluation per seed"))
    add("--max-new-tokens", type=COUNT, help=preset_help("max_new_tokens", "response limit"))
    add("--teacher-max-prompt-tokens", type=COUNT,
        help=preset_help("teacher_max_prompt_tokens", "the teacher prompt limit of --heatmap"))
    add("--math-max-new-tokens", type=bounded(int, 0),
        help=preset_help("math_max_new_tokens", "the math roles' response limit, 0 = "
                         "--max-new-tokens (given alone, --max-new-tokens sets this to 0)"))
    add = ap.add_argument_group("memory and speed").add_argument
    add("--device", type=device, default=DEVICE, help="[%(default)s]")
    add("--precision", choices=tuple(DTYPES), default=None,
        help="the weights' dtype while decoding; default: bf16 on GPU, fp32 on CPU")
    add("--rollout-chunk", type=bounded(int, 0), default=None, help="prompts per generate call, 0 "
        "= all (bounds the KV cache); default: the most that the memory plan fits on --device")
    add("--compile", action="store_true", help="compile the sampler's decode step (as train.py)")
    add("--threads", type=bounded(int, 0), help=preset_help("threads", "torch CPU threads; 0 = the "
                                                                       "free cores"))
    add = ap.add_argument_group("output").add_argument
    add("--json", help="write all figures here")
    add("--episodes", help="append every run's episodes here as JSONL as each run ends")
    add("--no-exchange", action="store_true", help="skip the seat-exchange evaluation")
    add("--heatmap", help="write the App. G.2 role-advantage heat map (needs --teacher) here")
    add("--overwrite", action="store_true", help="replace the files of --json, --episodes and "
        "--heatmap where they exist (without it, an existing one is refused)")
    args = ap.parse_args(argv)
    apply_preset(args)
    args.precision = precision(args.precision, args.device)
    # bf16 weights outright, no autocast: nothing is trained here, so no fp32 masters are needed,
    # and the decode step reads half the bytes and can be recorded (sampler.decoder). These are the
    # models train.py samples with.
    dtype = DTYPES[args.precision]
    if args.multi_turn and not args.single_agent:
        ap.error("--multi-turn needs --single-agent (SA+MT); a team is multi-turn already")
    if args.heatmap and args.single_agent:
        ap.error("--heatmap needs a team (--run or --student), not --single-agent")
    if args.heatmap and not args.teacher:
        ap.error("--heatmap needs --teacher, the model that scores the responses")
    print(preset_line(args))
    print("config:", json.dumps(vars(args)))
    print(cpu_threads(args.threads))
    stop_on_signals(partial(eval_stop_line, args))  # SIGINT, SIGTERM: exit 130, 143 and one line
    print("sandbox:", describe())
    try:
        if note := check_isolation(args.unisolated_programs):  # before anything loads
            print(note)
        outputs = {"--json": args.json, "--heatmap": args.heatmap, "--episodes": args.episodes}
        for flag, path in outputs.items():
            if path:  # before the run, not after it
                check_writable(path, flag, overwrite=args.overwrite)
        if args.episodes:
            open(args.episodes, "w").close()
        problems = load_problems(args.problems)
        on_run = report_run(args.episodes)
        # a seat per agent, 2n per domain (App. E.1)
        roles = team_seats(problems, args.agents_per_role)
        spec, n_models, prompts = seat_plan(args, problems, roles)
        # the teacher scores the students' token ids (Eq. 7): one tokenizer, checked before any load
        if args.heatmap:
            who = f"--run {args.run}" if args.run else f"--student {args.student}"
            same_tokenizer_specs(args.teacher, spec, (f"--teacher {args.teacher}", who))
        cfg = rollout_config(args, progress=True, **EVAL_DECODING)
        # the memory plan from configs only, before any weights load; it picks the chunk unless
        # --rollout-chunk did
        teacher_cfg = config_of(args.teacher) if args.heatmap else None
        longest = max(response_limit(cfg, p["domain"]) for p in problems)
        chunk, line = check_eval_fits(config_of(spec), teacher_cfg, args.device, args.rollout_chunk,
                                      n_models=n_models, precision=args.precision,
                                      prompt_len=cfg.max_prompt_tokens, response_len=longest,
                                      prompts=prompts)
        print(line)
        cfg = dataclasses.replace(cfg, rollout_chunk=chunk)
        if args.single_agent:
            model, tok = load_model(args.single_agent, seed=1, dtype=dtype)
            check_prompt_limit(problems, tok, cfg.max_prompt_tokens)
            forget_gguf()
            model = model.to(args.device)
            per_seed = [single_agent_metrics(problems, model, tok, s, cfg, on_run, args.multi_turn)
                        for s in args.seeds]  # SA+MT or SA+ST (App. D.3)
            name = f"single agent {args.single_agent}"
            result = {name + (", multi-turn" if args.multi_turn else ""): mean_std(per_seed)}
        else:
            if args.run:
                checkpoint = os.path.join(args.run, "checkpoint")
                policies, tok = load_policies(checkpoint, roles, args.device, dtype)
            else:
                model, tok = load_model(args.student, dtype=dtype)
                policies = {r: model.to(args.device) for r in roles}
            forget_gguf()
            check_prompt_limit(problems, tok, cfg.max_prompt_tokens)
            name = args.run or f"untrained {args.student}"
            result = {name: evaluate(problems, policies, tok, args.seeds, cfg,
                                     exchange=not args.no_exchange, on_run=on_run)}
        print(markdown(result))
        if args.json:  # before the heat map, whose teacher may still fail to load
            write_atomic(args.json, json_text(result, indent=1))
        if args.heatmap:
            episodes, attributions = run_team(problems, policies, tok, args.seeds[0], cfg)
            # the team's KV cache, before the teacher needs the memory (as the plan assumes)
            release_decoder()
            teacher, _ = load_model(args.teacher, seed=1, dtype=dtype)
            html = heatmap_html(teacher.to(args.device), tok, episodes, attributions,
                                args.teacher_max_prompt_tokens)
            write_atomic(args.heatmap, html)
            print(f"wrote {args.heatmap}")
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
