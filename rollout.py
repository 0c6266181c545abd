"""Phase 1 of Algorithm 1 (App. C): the students' joint rollout in the two parallel,
multi-turn workflows of App. D.6.1 (code: Coder + Tester; math: Reasoner + Tool-User),
one agent per role, sampled with sampler.generate.

Top to bottom: the rollout's configuration and records; the environment of each workflow
(Table 3), which reads the responses with the parsing rules of prompts.py; what the pair
submits (Eq. 17, 20); the turn loop `run_episodes` (Eq. 1-3), then its helpers
(batching, scripted agents). The prompts themselves (App. F.1-F.2) and how a student
context is built are prompts.py's.

It needs, besides the program runner and the judges its environments call
(sandbox/cases.py, infra/answers.py): config.py (defaults), prompts.py, sampler.py and
the live line of infra/progress.py. A team of 2n agents (App. E.1) plays the same
workflows with these functions in teams/workflow.py. `python -m tools.transcripts`
prints episodes turn by turn, with the verifier's verdicts.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import torch

from config import (
    CODE_TIMEOUT,
    MATH_FINAL,
    MATH_TIMEOUT,
    MAX_TURNS,
    PAPER,
    ROLLOUT_CHUNK,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    WORKERS,
    response_limit,
)
from infra.answers import answers_equivalent, outputs_match
from infra.progress import TurnProgress
from prompts import (
    NO_CODE_BLOCK,
    ROLES,
    CodeArtefacts,
    MathArtefacts,
    Segment,
    build_context,
    extract_answer,
    extract_program,
    extract_test_case,
    fit_context,
    printed_answer,
    stop_ids_of,
)
from sampler import Generation, generate
from sandbox.cases import run_case, run_once

# --------------------------------------------------------------------------------------
# The two parallel workflows (§2.1, App. D.6.1)
#
# Each turn both agents answer the same state independently (neither sees the other's
# same-turn output); the environment compares their artefacts; agreement ends the
# episode, otherwise both see the mismatch history and are asked, in the same terms, to
# locate the fault and revise or keep their own artefact; at most T turns.


@dataclass
class RolloutConfig:
    # Every default is config.py's, where each value is typed once with its source: the
    # limits the paper preset's, the rest the values that do not depend on the scale of
    # a run.
    max_turns: int = MAX_TURNS  # T (App. D.6.1)
    max_new_tokens: int = PAPER["max_new_tokens"]  # student response limit (App. D.6.3)
    # The math roles' limit, when it differs (0: max_new_tokens). The paper has one
    # limit for both domains; on a CPU the time of a rollout is its longest response,
    # and small models' programs need more tokens than their math answers (measured in
    # docs/cpu.md).
    math_max_new_tokens: int = PAPER["math_max_new_tokens"]
    # student prompt limit (App. D.6.3)
    max_prompt_tokens: int = PAPER["max_prompt_tokens"]
    # training sampling (App. D.6.1); eval.py's is config.EVAL_DECODING (App. D.5)
    temperature: float = TEMPERATURE
    top_p: float = TOP_P
    top_k: int = TOP_K
    code_timeout: float = CODE_TIMEOUT  # sandbox wall clock (App. D.6.1)
    math_timeout: float = MATH_TIMEOUT
    # Which answer a math episode submits when the roles never agree: the paper is
    # silent (DECISIONS.md D7). Default: the Reasoner's, since it exists whenever the
    # format is followed while a crashing program prints nothing; each choice falls back
    # to the other answer when its own is missing.
    math_final: str = MATH_FINAL
    workers: int = WORKERS  # episodes whose programs run at once
    # prompts per generate call (0 = all of a turn at once); bounds the KV cache
    rollout_chunk: int = ROLLOUT_CHUNK
    compile: bool = False  # the sampler's decode step through torch.compile
    # a live line while episodes run: turn, responses done, tokens/s
    progress: bool = False


def rollout_config(args, **overrides):
    """A RolloutConfig from a command line's parsed args: every field named like one of
    args' attributes (e.g. --max-new-tokens), then `overrides` (e.g. the evaluation
    decoding of App. D.5); the rest keep their defaults (App. D.6.1, D.6.3)."""
    names = {f.name for f in fields(RolloutConfig)}
    given = {k: v for k, v in vars(args).items() if k in names}
    return RolloutConfig(**{**given, **overrides})


@dataclass
class Response:
    role: str  # the role whose prompt it answered: its template and condition (App. F)
    context: list[Segment]  # the student's input x_i^t, exactly as the student saw it
    tokens: list[int]  # y_i^t, as sampled (never re-tokenized)
    # log pi_theta_i(y_k | x, y_<k) per token, from the sampler (Eq. 8)
    logprobs: list[float]
    text: str
    # cut by the response limit: it reached the limit without a stop token
    truncated: bool = False

    @property
    def context_ids(self):
        return [i for s in self.context for i in s.ids]


@dataclass
class Turn:
    t: int
    responses: dict  # seat -> Response; the pair's seats are its roles
    # what the environment read and observed (Table 3)
    artefacts: CodeArtefacts | MathArtefacts
    agree: bool  # the roles agree: the workflow's stop (§2.1)

    @property
    def parsed_by(self):
        """seat -> the parsing rule that read its response (DECISIONS.md D5)."""
        return self.artefacts.parsed_by


@dataclass
class Episode:
    problem: dict
    turns: list
    final: str | None = None  # the submitted program (code) or answer (math)
    stopped: str = ""  # "agreed", "max_turns" or "prompt_too_long"


def code_env(problem, texts, cfg):
    """Run the Coder's program on the Tester's case (Table 3, run 1: the only outcome
    agents see). Golden tests are not run here: they belong to the verifier
    (attribution.py)."""
    program, by_coder = extract_program(texts["coder"])
    case, by_tester = extract_test_case(texts["tester"])
    # None: no test case to run it on
    output, agree = NO_CODE_BLOCK if program is None else None, False
    if program is not None and case is not None:
        r = run_case(problem, program, case[0], timeout=cfg.code_timeout)
        output = r.stdout if r.ok else r.error
        agree = r.ok and outputs_match(problem["format"], r.stdout, case[1])
    artefacts = CodeArtefacts(
        program,
        case and case[0],
        case and case[1],
        output,
        {"coder": by_coder, "tester": by_tester},
    )
    return artefacts, agree


def math_env(problem, texts, cfg):
    """Parse the derivation's answer, run the program, compare the two with the symbolic
    verifier (App. D.6.1)."""
    program, by_tool_user = extract_program(texts["tool_user"])
    answer, by_reasoner = extract_answer(texts["reasoner"])
    run = None if program is None else run_once(program, timeout=cfg.math_timeout)
    printed = NO_CODE_BLOCK if run is None else printed_answer(run)
    artefacts = MathArtefacts(
        texts["reasoner"],
        answer,
        program,
        printed,
        {"reasoner": by_reasoner, "tool_user": by_tool_user},
        run is not None and run.ok,
    )
    return artefacts, artefacts.program_ran and answers_equivalent(answer, printed)


def final_answer(episode, cfg):
    """What the pair submits, read from its last turn: code, the Coder's program
    (Eq. 20); math, y-hat (Eq. 17): of the two answers the one more of them are
    equivalent to, first the answer of the role RolloutConfig.math_final names
    (DECISIONS.md D7), so that it falls back to the other when it is missing or is no
    answer even to itself (unparseable). None before the first turn."""
    if cfg.math_final not in ROLES["math"]:
        raise ValueError(
            f"RolloutConfig.math_final must be 'reasoner' or 'tool_user', "
            f"got {cfg.math_final!r}"
        )
    if not episode.turns:  # the first prompt was already too long
        return None
    last = episode.turns[-1].artefacts
    if episode.problem["domain"] == "code":
        return last.program
    answers = {
        "reasoner": last.derivation_answer,
        "tool_user": last.program_answer if last.program_ran else None,
    }
    order = sorted(answers, key=lambda role: role != cfg.math_final)
    return most_agreed([answers[role] for role in order])


def most_agreed(answers):
    """Of the answers given (None: none given), the one most of them are equivalent to,
    the first in their order on a tie; None when none was given."""
    said = [a for a in answers if a is not None]
    return max(
        said, key=lambda a: sum(answers_equivalent(a, b) for b in said), default=None
    )


def run_episodes(problems, policies, tokenizer, cfg=None, generator=None, on_done=None):
    """Algorithm 1, Phase 1: joint rollouts of a batch of problems, all episodes
    advancing turn by turn.

    policies: role -> model, e.g. {"coder": m1, "tester": m2}; one model may play
    several roles. All prompts of a turn that go to the same model with the same
    response limit (config.response_limit) are sampled in one `generate` call
    (cfg.rollout_chunk at most). A policy may also be any function list[list[int]] ->
    Generation (scripted agents in tests). on_done: called with each episode as soon as
    it stops (its transcript can be written while the others go on). With cfg.progress a
    line shows the turn, responses done and tokens per second. Returns one Episode per
    problem.
    """
    cfg = cfg or RolloutConfig()
    check_policies(problems, policies)
    episodes = [Episode(p, []) for p in problems]
    # the episodes' programs run at once
    with ThreadPoolExecutor(max(1, cfg.workers)) as pool:
        for t in range(cfg.max_turns):  # at most T turns
            # Eq. 1: each role's input x_i^t = P_i(s^t, r_i), s^t = (q, e^{t-1}, h^t):
            # the task, the last feedback and the episode's history, within the prompt
            # limit (None: it no longer fits, the episode stops)
            contexts = {
                k: {
                    role: student_context(tokenizer, e, role, cfg)
                    for role in ROLES[e.problem["domain"]]
                }
                for k, e in enumerate(episodes)
                if not e.stopped
            }
            for k in [k for k, ctxs in contexts.items() if None in ctxs.values()]:
                finish(
                    episodes[k],
                    "prompt_too_long",
                    final_answer(episodes[k], cfg),
                    on_done,
                )
                del contexts[k]
            if not contexts:
                break
            live = TurnProgress.open(t, cfg, sum(map(len, contexts.values())))
            # Eq. 2: y_i^t ~ pi_theta_i(. | x_i^t), every role of every episode sampled
            # together, so that no student sees a teammate's same-turn response (the
            # parallel workflow, §2.1). out[k]: role -> y_i^t
            out = sample_turn(
                policies, episodes, contexts, tokenizer, cfg, generator, live
            )
            # the environment reads y^t = (y_1^t, y_2^t) and returns its feedback e^t
            # (Table 3)
            live.running_programs()
            stepped = [k for k, responses in enumerate(out) if responses]
            feedback = pool.map(
                lambda k: environment(episodes[k], out[k], cfg), stepped
            )
            for k, (artefacts, agree) in zip(stepped, feedback):
                # Eq. 3: one sample of the joint trajectory
                episodes[k].turns.append(Turn(t, out[k], artefacts, agree))
                if agree:  # the workflow's stop (§2.1)
                    finish(
                        episodes[k], "agreed", final_answer(episodes[k], cfg), on_done
                    )
            live.close()
    for e in episodes:
        if not e.stopped:
            finish(e, "max_turns", final_answer(e, cfg), on_done)
    return episodes


def seeded_generator(policies, seed):
    """The sampling RNG of one run, seeded with `seed`, on the device of the policies (the
    CPU for scripted agents): what makes an evaluation run repeat its draws."""
    device = next(
        (p.device for p in policies.values() if isinstance(p, torch.nn.Module)), "cpu"
    )
    return torch.Generator(device=device).manual_seed(seed)


def student_context(tokenizer, episode, role, cfg):
    """x_i^t of `role` at the episode's next turn (Eq. 1), cut to the student prompt
    limit (prompts.fit_context; None: it no longer fits)."""
    seen = [turn.artefacts for turn in episode.turns]
    context = build_context(tokenizer, episode.problem, role, seen)
    return fit_context(context, cfg.max_prompt_tokens)


def check_policies(problems, policies):
    """Refuse, before any sampling, a problem whose workflow has a role without a
    policy."""
    for p in problems:
        missing = [role for role in ROLES[p["domain"]] if role not in policies]
        if missing:
            raise ValueError(
                f"run_episodes: problem {p['id']!r} needs a policy for {missing}"
            )


def sample_turn(policies, episodes, contexts, tokenizer, cfg, generator, live):
    """One turn's responses (Eq. 2) to contexts ({episode index: {role: context}}), each
    from its role's policy: the prompts that go to the same model with the same response
    limit (config.response_limit) are sampled together (sample_prompts). -> a list
    aligned with episodes of {role: Response} (empty for an episode not running)."""
    stops = stop_ids_of(tokenizer)
    jobs = [(k, r, c) for k, ctxs in contexts.items() for r, c in ctxs.items()]
    out = [{} for _ in episodes]
    group = lambda job: (
        policies[job[1]],
        response_limit(cfg, episodes[job[0]].problem["domain"]),
    )
    # each (model, limit) once, in the jobs' order
    for key in dict.fromkeys(map(group, jobs)):
        mine = [j for j in jobs if group(j) == key]
        model, limit = key
        prompts = [[i for s in c for i in s.ids] for _, _, c in mine]
        sampled = sample_prompts(model, prompts, limit, stops, cfg, generator, live)
        for (k, r, c), toks, lps in zip(mine, sampled.tokens, sampled.logprobs):
            text = tokenizer.decode(toks, skip_special_tokens=True)
            cut = bool(toks) and len(toks) >= limit and toks[-1] not in stops
            out[k][r] = Response(r, c, toks, lps, text, cut)
    return out


def sample_prompts(model, prompts, limit, stops, cfg, generator, live):
    """Prompts sampled by one model with one response limit, in rounds of at most
    cfg.rollout_chunk prompts (the bound of the KV cache). model: a torch module,
    sampled with sampler.generate; or a scripted agent or another sampler, any function
    list[list[int]] -> Generation. -> one Generation, rows in the order of prompts."""
    step = cfg.rollout_chunk or len(prompts)
    sampled = Generation([], [])
    for lo in range(0, len(prompts), step):
        chunk = prompts[lo : lo + step]
        if isinstance(model, torch.nn.Module):
            live.reading(len(chunk))
            part = generate(
                model,
                chunk,
                limit,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                top_k=cfg.top_k,
                stop_ids=stops,
                generator=generator,
                compiled=cfg.compile,
                on_check=live.check,
            )
        else:
            part = model(chunk)
        live.call_done(part)
        sampled.tokens += part.tokens
        sampled.logprobs += part.logprobs
    return sampled


def environment(episode, responses, cfg):
    """e^t of one turn: its workflow's environment (Table 3) on the two responses' texts
    -> (artefacts, agree)."""
    env = {"code": code_env, "math": math_env}[episode.problem["domain"]]
    return env(episode.problem, {role: r.text for role, r in responses.items()}, cfg)


def finish(e, stopped, final, on_done):
    """End episode e: why it stopped ("agreed", "max_turns", "prompt_too_long") and what
    it submits (final_answer), then on_done(e) if given."""
    e.stopped, e.final = stopped, final
    if on_done:
        on_done(e)
