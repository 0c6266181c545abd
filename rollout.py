"""Phase 1 of Algorithm 1 (App. C): the students' joint rollout in the two parallel, multi-turn workflows of
App. D.6.1 (code: Coder + Tester; math: Reasoner + Tool-User), sampled with sampler.generate.

    python rollout.py                  # the toy student on held-out toy problems: every step of the protocol
    python rollout.py --model tiny-qwen3 --problems examples/problems.jsonl   # any model, any problem file

Top to bottom: the rollout's configuration and records; the environment of each workflow (Table 3), which reads
the responses with the parsing rules of prompts.py; the turn loop `run_episodes` (Eq. 1-3), then its helpers
(batching, scripted agents, the progress line); a command line that prints transcripts. The prompts themselves
(App. F.1-F.2) and how a student context is built are prompts.py's.
"""
import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields

import torch
from tqdm import tqdm

from attribution import attribute_team
from infra.answers import answers_equivalent
from infra.cases import outputs_match, run_case, run_once
from config import (AGENTS_PER_ROLE, CODE_TIMEOUT, MATH_FINAL, MATH_TIMEOUT, MAX_TURNS, PAPER, ROLLOUT_CHUNK,
                    TEMPERATURE, TOP_K, TOP_P, WORKERS)
from infra.data import COUNT, SEED, ProblemError, bounded, check_writable, json_text, load_problems, response_limit
from infra.models import load_model, stop_ids_of
from infra.progress import TurnProgress
from infra.sandbox import stop_on_sigterm
from infra.team import number_of, pairings, pairs_of, role_of, seats
from prompts import (NO_CODE_BLOCK, ROLE_NAMES, ROLES, CodeArtefacts, MathArtefacts, Segment, build_context,
                     check_prompt_limit, extract_answer, extract_program, extract_test_case, fit_context,
                     printed_answer)
from sampler import Generation, generate

# ----------------------------------------------------------------------------------------------------------
# The two parallel workflows (§2.1, App. D.6.1)
#
# Each turn both agents answer the same state independently (neither sees the other's same-turn output); the
# environment compares their artefacts; agreement ends the episode, otherwise both see the mismatch history and
# are asked, in the same terms, to locate the fault and revise or keep their own artefact; at most T turns. A team
# of 2n agents (App. E.1) plays every pairing of the two roles' agents the same way (DECISIONS.md D15).


@dataclass
class RolloutConfig:
    # Every default is config.py's, where each value is typed once with its source: the limits the paper preset's,
    # the rest the values that do not depend on the scale of a run.
    max_turns: int = MAX_TURNS      # T (App. D.6.1)
    max_new_tokens: int = PAPER["max_new_tokens"]  # student response limit (App. D.6.3)
    # The math roles' limit, when it differs (0: max_new_tokens). The paper has one limit for both domains; on a
    # CPU the time of a rollout is its longest response, and small models' programs need more tokens than their
    # math answers (measured in docs/cpu.md).
    math_max_new_tokens: int = PAPER["math_max_new_tokens"]
    max_prompt_tokens: int = PAPER["max_prompt_tokens"]  # student prompt limit (App. D.6.3)
    temperature: float = TEMPERATURE  # training sampling (App. D.6.1); eval.py's is config.EVAL_DECODING (App. D.5)
    top_p: float = TOP_P
    top_k: int = TOP_K
    code_timeout: float = CODE_TIMEOUT  # sandbox wall clock (App. D.6.1)
    math_timeout: float = MATH_TIMEOUT
    # Which answer a math episode submits when the roles never agree: the paper is silent (DECISIONS.md D7).
    # Default: the Reasoner's, since it exists whenever the format is followed while a crashing program prints
    # nothing; each choice falls back to the other answer when its own is missing.
    math_final: str = MATH_FINAL
    workers: int = WORKERS          # episodes whose programs run at once
    rollout_chunk: int = ROLLOUT_CHUNK  # prompts per generate call (0 = all of a turn at once); bounds the KV cache
    compile: bool = False           # the sampler's decode step through torch.compile (sampler.compiled_decode_one)
    progress: bool = False          # a live line while episodes run: turn, responses done, tokens per second
    agents_per_role: int = AGENTS_PER_ROLE  # n: 2n agents, n per role (App. E.1; protocol: DECISIONS.md D15)


def rollout_config(args, **overrides):
    """A RolloutConfig from a command line's parsed args: every field named like one of args' attributes (e.g.
    --max-new-tokens), then `overrides` (e.g. the evaluation decoding of App. D.5); the rest keep their defaults
    (App. D.6.1, D.6.3)."""
    names = {f.name for f in fields(RolloutConfig)}
    return RolloutConfig(**{**{k: v for k, v in vars(args).items() if k in names}, **overrides})


@dataclass
class Response:
    role: str
    context: list[Segment]  # the student's input x_i^t, exactly as the student saw it
    tokens: list[int]       # y_i^t, as sampled (never re-tokenized)
    logprobs: list[float]   # log pi_theta_i(y_k | x, y_<k) per token, from the sampler (Eq. 8)
    text: str
    truncated: bool = False  # cut by the response limit: it reached the limit without a stop token

    @property
    def context_ids(self):
        return [i for s in self.context for i in s.ids]


@dataclass
class Turn:
    t: int
    responses: dict         # seat -> Response (infra/team.py: a role's own name when one agent plays it)
    artefacts: CodeArtefacts | MathArtefacts  # what the environment read and observed (code_env / math_env) of
                                              # agent 1 of each role: a pair's only pairing
    agree: bool             # every pairing agreed: the workflow's stop (D15)
    pairs: dict = None      # (first seat, second seat) -> artefacts of every pairing (Table 3 generalised, D15)
    agreed: dict = None     # ... -> whether that pairing agreed

    def __post_init__(self):  # a pair's turn, given its one pairing
        first = ROLES["code" if isinstance(self.artefacts, CodeArtefacts) else "math"]
        self.pairs, self.agreed = self.pairs or {first: self.artefacts}, self.agreed or {first: self.agree}


@dataclass
class Episode:
    problem: dict
    turns: list
    final: str | None = None     # the submitted program (code) or answer (math)
    stopped: str = ""            # "agreed", "max_turns" or "prompt_too_long"


def code_env(problem, texts, cfg):
    """Run the Coder's program on the Tester's case (Table 3, run 1: the only outcome agents see). Golden tests
    are not run here: they belong to the verifier (attribution.py)."""
    (program, by_coder), (case, by_tester) = extract_program(texts["coder"]), extract_test_case(texts["tester"])
    output, agree = NO_CODE_BLOCK if program is None else None, False  # None: no test case to run it on
    if program is not None and case is not None:
        r = run_case(problem, program, case[0], timeout=cfg.code_timeout)
        output, agree = r.stdout if r.ok else r.error, r.ok and outputs_match(problem["format"], r.stdout, case[1])
    return CodeArtefacts(program, case and case[0], case and case[1], output,
                         {"coder": by_coder, "tester": by_tester}), agree


def math_env(problem, texts, cfg):
    """Parse the derivation's answer, run the program, compare the two with the symbolic verifier (App. D.6.1)."""
    (program, by_tool_user), (answer, by_reasoner) = extract_program(texts["tool_user"]), \
        extract_answer(texts["reasoner"])
    run = None if program is None else run_once(program, timeout=cfg.math_timeout)
    printed = NO_CODE_BLOCK if run is None else printed_answer(run)
    artefacts = MathArtefacts(texts["reasoner"], answer, program, printed,
                              {"reasoner": by_reasoner, "tool_user": by_tool_user},
                              run is not None and run.ok)
    return artefacts, artefacts.program_ran and answers_equivalent(answer, printed)


def final_answer(episode, cfg):
    """The submitted answer of the last turn (DECISIONS.md D15 for several agents per role): code, the program
    (Eq. 20) of the Coder whose program agreed with the most test cases, the first on a tie (a pair: the Coder's);
    math, y-hat (Eq. 17), the answer most of the team's answers are equivalent to, on a tie the first in the order
    RolloutConfig.math_final gives (its role's agents first, D7)."""
    if cfg.math_final not in ("reasoner", "tool_user"):
        raise ValueError(f"RolloutConfig.math_final must be 'reasoner' or 'tool_user', got {cfg.math_final!r}")
    if not episode.turns:  # the first prompt was already too long
        return None
    last = episode.turns[-1]
    if episode.problem["domain"] == "code":
        votes = {}
        for (coder, _), art in last.pairs.items():
            votes.setdefault(coder, [art.program, 0])[1] += last.agreed[(coder, _)]
        return max(votes.values(), key=lambda v: v[1])[0]  # max keeps the first of equal counts
    answers = {**{a: art.derivation_answer for (a, _), art in last.pairs.items()},
               **{b: art.program_answer if art.program_ran else None
                  for (_, b), art in last.pairs.items()}}
    order = sorted(answers, key=lambda s: (role_of(s) != cfg.math_final, number_of(s)))
    said = [answers[s] for s in order if answers[s] is not None]
    return max(said, key=lambda a: sum(answers_equivalent(a, b) for b in said), default=None)


def run_episodes(problems, policies, tokenizer, cfg=None, generator=None, on_done=None):
    """Algorithm 1, Phase 1: joint rollouts of a batch of problems, all episodes advancing turn by turn.

    policies: seat -> model, e.g. {"coder": m1, "tester": m2} (cfg.agents_per_role n > 1: also "coder2", ...,
    infra/team.py); one model may sit in several seats. All prompts of a
    turn that go to the same model with the same response limit (response_limit) are sampled in one `generate`
    call (cfg.rollout_chunk at most). A policy may also be any function list[list[int]] -> Generation (scripted
    agents in tests). on_done: called with each episode as soon as it stops (its transcript can be written while
    the others go on). With cfg.progress a line shows the turn, responses done and tokens per second.
    Returns one Episode per problem.
    """
    cfg = cfg or RolloutConfig()
    check_policies(problems, policies, cfg.agents_per_role)
    episodes = [Episode(p, []) for p in problems]
    with ThreadPoolExecutor(max(1, cfg.workers)) as pool:  # the episodes' programs run at once
        for t in range(cfg.max_turns):                        # at most T turns
            # Eq. 1: each role's input x_i^t = P_i(s^t, r_i), s^t = (q, e^{t-1}, h^t): the task, the last feedback
            # and the episode's history, within the prompt limit (None: it no longer fits, the episode stops)
            # (D15: each agent sees the pairings it took part in, of completed turns only)
            contexts = {k: {s: fit_context(build_context(tokenizer, e.problem, role_of(s),
                                                         [pairs_of(s, turn.pairs) for turn in e.turns]),
                                           cfg.max_prompt_tokens)
                            for s in seats(e.problem["domain"], cfg.agents_per_role)}
                        for k, e in enumerate(episodes) if not e.stopped}
            for k in [k for k, ctxs in contexts.items() if any(c is None for c in ctxs.values())]:
                _finish(episodes[k], "prompt_too_long", cfg, on_done)
                del contexts[k]
            if not contexts:
                break
            live = TurnProgress.open(t, cfg, sum(map(len, contexts.values())))
            # Eq. 2: y_i^t ~ pi_theta_i(. | x_i^t), every role of every episode sampled together, so that no
            # student sees a teammate's same-turn response (the parallel workflow, §2.1)
            out = sample_turn(policies, episodes, contexts, tokenizer, cfg, generator, live)  # out[k]: seat -> y_i^t
            # the environment reads y^t = (y_1^t, ..., y_2n^t) and returns its feedback e^t (Table 3, D15)
            live.running_programs()
            stepped = [k for k, responses in enumerate(out) if responses]
            feedback = pool.map(lambda k: environment(episodes[k], out[k], cfg), stepped)  # (pairs, agreed)
            for k, (pairs, agreed) in zip(stepped, feedback):
                first, agree = next(iter(pairs)), all(agreed.values())       # the roles agree: every pairing (D15)
                episodes[k].turns.append(Turn(t, out[k], pairs[first], agree, pairs, agreed))  # Eq. 3: one sample
                if agree:                                                    # the workflow's stop (§2.1)
                    _finish(episodes[k], "agreed", cfg, on_done)
            live.close()
    for e in episodes:
        if not e.stopped:
            _finish(e, "max_turns", cfg, on_done)
    return episodes


def check_policies(problems, policies, n):
    """Refuse, before any sampling, a problem whose workflow has a seat (n agents per role) without a policy."""
    for p in problems:
        missing = [s for s in seats(p["domain"], n) if s not in policies]
        if missing:
            raise ValueError(f"run_episodes: problem {p['id']!r} needs a policy for {missing}")


def sample_turn(policies, episodes, contexts, tokenizer, cfg, generator, live):
    """One turn's responses (Eq. 2) to contexts ({episode index: {role: context}}), each from its role's policy:
    the prompts that go to the same model with the same response limit (response_limit) are sampled together
    (sample_prompts). -> a list aligned with episodes of {role: Response} (empty for an episode not running)."""
    stops = stop_ids_of(tokenizer)
    jobs = [(k, r, c) for k, ctxs in contexts.items() for r, c in ctxs.items()]
    out = [{} for _ in episodes]
    group = lambda job: (policies[job[1]], response_limit(cfg, episodes[job[0]].problem["domain"]))
    for key in dict.fromkeys(map(group, jobs)):  # each (model, limit) once, in the order of the jobs
        mine = [j for j in jobs if group(j) == key]
        (model, limit), prompts = key, [[i for s in c for i in s.ids] for _, _, c in mine]
        gen = sample_prompts(model, prompts, limit, stops, cfg, generator, live)
        for (k, r, c), toks, lps in zip(mine, gen.tokens, gen.logprobs):
            text = tokenizer.decode(toks, skip_special_tokens=True)
            cut = bool(toks) and len(toks) >= limit and toks[-1] not in stops
            out[k][r] = Response(r, c, toks, lps, text, cut)
    return out


def sample_prompts(model, prompts, limit, stops, cfg, generator, live):
    """Prompts sampled by one model with one response limit, in rounds of at most cfg.rollout_chunk prompts (the
    bound of the KV cache). model: a torch module, sampled with sampler.generate; or a scripted agent or another
    sampler, any function list[list[int]] -> Generation. -> one Generation, rows in the order of prompts."""
    step = cfg.rollout_chunk or len(prompts)
    gen = Generation([], [])
    for lo in range(0, len(prompts), step):
        chunk = prompts[lo:lo + step]
        if isinstance(model, torch.nn.Module):
            live.reading(len(chunk))
            part = generate(model, chunk, limit, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                            stop_ids=stops, generator=generator, compiled=cfg.compile, on_check=live.check)
        else:
            part = model(chunk)
        live.call_done(part)
        gen.tokens += part.tokens
        gen.logprobs += part.logprobs
    return gen


def environment(episode, responses, cfg):
    """e^t of one turn: its workflow's environment (Table 3) on the texts of every pairing of the team (D15) ->
    ({(first seat, second seat): artefacts}, {(first seat, second seat): agree})."""
    domain = episode.problem["domain"]
    env, pairs, agreed = {"code": code_env, "math": math_env}[domain], {}, {}
    for key in pairings(domain, cfg.agents_per_role):
        pairs[key], agreed[key] = env(episode.problem, {role_of(s): responses[s].text for s in key}, cfg)
    return pairs, agreed


def _finish(e, stopped, cfg, on_done):
    e.stopped, e.final = stopped, final_answer(e, cfg)
    if on_done:
        on_done(e)


# ----------------------------------------------------------------------------------------------------------
# Command line: run episodes and print their transcripts (every step of the protocol, tiny models)


def episode_record(e):
    """A JSON-ready record of one episode: everything the teacher needs later, nothing recomputed."""
    turns = [{"t": t.t, "agree": t.agree, "artefacts": asdict(t.artefacts),
              "pairs": {"|".join(key): {**asdict(a), "agree": t.agreed[key]} for key, a in t.pairs.items()},
              "responses": {r: {"context": [[s.kind, s.turn, s.ids] for s in x.context], "tokens": x.tokens,
                                "logprobs": x.logprobs, "text": x.text, "truncated": x.truncated}
                            for r, x in t.responses.items()}}
             for t in e.turns]
    return {"id": e.problem["id"], "stopped": e.stopped, "final": e.final, "turns": turns}


def append_episodes(path, episodes, **fields):
    """Append one JSONL line per episode of Phase 1 (App. C; episode_record plus `fields`, e.g. its step or seed)
    and close the file, so that a crash loses no episode already written."""
    with open(path, "a") as f:
        f.writelines(json_text({**fields, **episode_record(e)}) + "\n" for e in episodes)


def print_transcript(e, attributions, width=400):
    cut = lambda s: s if len(s) <= width else s[:width] + f" ...[{len(s) - width} more chars]"
    print(f"=== {e.problem['id']} ({e.problem['domain']}) -- {len(e.turns)} turn(s), {e.stopped}")
    for turn, att in zip(e.turns, attributions):
        for role, resp in turn.responses.items():
            name = ROLE_NAMES[role_of(role)] + role[len(role_of(role)):]  # "Coder", "Coder2"
            print(f"--- turn {turn.t + 1} · {name} ({len(resp.tokens)} tokens)\n{cut(resp.text)}")
        shown = {k: v for k, v in asdict(turn.artefacts).items() if k != "derivation"}
        print(f"--- environment: {'AGREE' if turn.agree else 'MISMATCH'} {shown}")
        print(f"--- verifier, teacher-only ({att.outcome}):\n{att.description}")
    print(f"=== submitted: {e.final!r}\n")


# The toy world's build, where `python -m toy` caches it (toy/world.py, build_toy): a model directory and problem
# files like any others, named here as paths since the paper's files never import the toy world.
TOY = os.path.join(".cache", "toy-v10")


def toy_built(path):
    """`path`, or ValueError naming the command that builds it when it lies in the toy build (TOY) not built yet."""
    if path.startswith(TOY) and not os.path.exists(path):
        raise ValueError(f"{path} is not built yet: build the toy student once with `python -m toy --build-only`, "
                         f"or pass --model and --problems")
    return path


def main(argv=None):
    """Transcripts of two-agent episodes. By default the toy student in every seat on the toy world's held-out
    problems (TOY/test.jsonl, written by its build): a model that writes real answers, and only to the problems it
    was built for; any model and problem file by flag. Without the toy build, one line names the command that
    builds it and the exit code is 2, as for any missing file."""
    ap = argparse.ArgumentParser(description="Run two-agent episodes with the student models and print them. "
                                 "Defaults in brackets.")
    d = RolloutConfig()  # the defaults below are RolloutConfig's, except this demo's short responses
    ap.add_argument("--problems", default=os.path.join(TOY, "test.jsonl"), help="JSONL problem file (schema: "
                    "infra/data.py) [%(default)s, the toy world's held-out problems]")
    ap.add_argument("--model", default=os.path.join(TOY, "student"), help="local dir | .gguf | hub id | tiny-qwen3 | "
                    "tiny-llama (random weights), in every seat [%(default)s, the toy student: python -m toy "
                    "--build-only]")
    ap.add_argument("--per-domain", type=bounded(int, 0), default=2, help="the first N problems of each domain in "
                    "the file, 0 = all: a walk-through, not an evaluation [%(default)s]")
    ap.add_argument("--max-turns", type=COUNT, default=d.max_turns, help="T [%(default)s]")
    ap.add_argument("--max-new-tokens", type=COUNT, default=96, help="response limit [%(default)s]")
    ap.add_argument("--temperature", type=bounded(float, 0), default=d.temperature, help="0 = greedy [%(default)s]")
    ap.add_argument("--top-p", type=bounded(float, 0, 1, low_open=True), default=d.top_p, help="[%(default)s]")
    ap.add_argument("--top-k", type=bounded(int, 0), default=d.top_k, help="0 = off [%(default)s]")
    ap.add_argument("--math-final", choices=("reasoner", "tool_user"), default=d.math_final, help="[%(default)s]")
    ap.add_argument("--seed", type=SEED, default=0, help="[%(default)s]")
    ap.add_argument("--out", help="also write the episodes as JSONL here")
    args = ap.parse_args(argv)
    print("config:", vars(args))
    stop_on_sigterm()
    cfg = rollout_config(args, progress=True)
    try:
        if args.out:
            check_writable(args.out, "--out")  # before the run, not after it
        problems = load_problems(toy_built(args.problems))
        if args.per_domain:  # in the file's order
            problems = [p for k, p in enumerate(problems)
                        if sum(q["domain"] == p["domain"] for q in problems[:k]) < args.per_domain]
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

    def done(e):  # each transcript as its episode stops, while the others go on (the progress line cleared)
        with tqdm.external_write_mode():
            print_transcript(e, [attribute_team(e.problem, t, timeout=cfg.code_timeout) for t in e.turns])
        if args.out:
            append_episodes(args.out, [e])
    episodes = run_episodes(problems, {r: model for r in roles}, tok, cfg, generator=gen, on_done=done)
    if args.out:
        print(f"wrote {len(episodes)} episodes to {args.out}")


if __name__ == "__main__":
    main()
