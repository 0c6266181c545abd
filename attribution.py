"""Training-time verifier of PAC (privileged attribution for coordination).

After a turn completes, two independent checks each compare one role's output with a training-time
reference (never with the other role's output): a^t = V(q, y^t, e^t)  [paper §3.3, Eq. 11; App. F.6].
The outcome is rendered as a three-line factual description c^t that only the teacher reads, starting
at the next turn. c^t restates values the agents produced and says which side agrees with the
reference; it never contains a reference value (answer, reference-solution output, golden test).
"""
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from config import CODE_TIMEOUT, WORKERS
from infra.answers import answers_equivalent
from infra.cases import outputs_match, run_case, run_cases
from infra.models import encode_text
from infra.team import diagonal, number_of, pairs_of, role_of, seat_order
from prompts import ROLE_NAMES, CodeArtefacts, MathArtefacts

HEADER = "Verification result for the previous turn:"
SHOW_CHARS = 200  # longest value rendered in the observation line; the rest is elided


@dataclass
class Attribution:
    outcome: str                      # one of the outcome names of App. F.6 (see the tables below)
    description: str                  # c^t: header, observation line, conclusion line
    checks: dict[str, bool | None]    # the two Boolean checks; None = could not be decided
    first_failing_test: int | None = None  # code: index of the first golden test the program fails.
                                           # Verifier-side bookkeeping only, never rendered into c^t.
    agents: dict = field(default_factory=dict)  # a^t per agent (Eq. 24): seat -> its own check (ROLE_CHECK)


# ----------------------------------------------------------------------------- rendering

def _show(value: str) -> str:
    """One-line rendering of an agent value: repr() shows newlines as \\n; long values are elided."""
    if len(value) <= SHOW_CHARS:
        return repr(value)
    return repr(value[:SHOW_CHARS]) + f"... ({len(value) - SHOW_CHARS} more characters)"


def _describe(observation: str, conclusion: str) -> str:
    """c^t: exactly three lines [App. F.6]."""
    return f"{HEADER}\n- {observation}\n- {conclusion}"


# ----------------------------------------------------------------------------- code  [App. F.6]

# (program_correct, test_correct) -> (outcome, conclusion). Conclusions state facts and address no role.
CODE_OUTCOMES = {
    (False, True): ("PROGRAM_INCONSISTENT",
                    "The declared expected output agrees with the reference behaviour on that input, but "
                    "the program does not pass the reference tests; the inconsistency originates in the "
                    "program."),
    (True, False): ("TEST_INCONSISTENT",
                    "The program passes the reference tests, but the declared expected output does not "
                    "agree with the reference behaviour on that input; the inconsistency originates in "
                    "the test case."),
    (False, False): ("BOTH_INCONSISTENT",
                     "The program does not pass the reference tests and the declared expected output does "
                     "not agree with the reference behaviour on that input; the inconsistency originates "
                     "in both."),
    (True, True): ("BOTH_CONSISTENT",
                   "The program passes the reference tests and the declared expected output agrees with "
                   "the reference behaviour on that input; any remaining difference lies in output format "
                   "or interface, not in the logic of either."),
    # No oracle for the declared output (see attribute_code): the outcome names only what was checked.
    (False, None): ("PROGRAM_INCONSISTENT",
                    "The program does not pass the reference tests, so the inconsistency originates at "
                    "least in the program; whether the declared expected output is correct could not be "
                    "checked."),
    (True, None): ("UNDECIDED",
                   "The program passes the reference tests, but whether the declared expected output is "
                   "correct could not be checked; where the inconsistency originates could not be "
                   "determined."),
}


def attribute_code(problem: dict, program: str | None, test_case: tuple[str, str] | None, *,
                   program_output: str | None = None, timeout: float = CODE_TIMEOUT) -> Attribution:
    """Coder/Tester attribution. program_correct: the program passes every golden test.
    test_correct: a reference run on the declared input reproduces the declared expected output (Eq. 22);
    the test's layout is not judged on its own [App. F.6], but a degenerate case is never a correct test: a
    blank (empty or whitespace only) input where none of the problem's golden inputs is blank, i.e. outside
    its input format, where the reference's behaviour specifies nothing; and a blank expected output
    where none of the golden outputs is blank: on an input where the reference prints nothing (one
    that declares zero cases) every program that prints nothing passes it, and on any other it is
    wrong, so no oracle is needed to judge it. program_output: what the program printed (or its
    "error: ..." string) on the declared input, if the environment already ran it."""
    fmt, tests = problem["format"], problem["tests"]
    program_correct, first_failing = False, None
    if program is not None:
        passes = lambda i, r: r.ok and outputs_match(fmt, r.stdout, tests[i]["output"])
        # the check stops at the first failing test: a program that hangs costs one timeout, not one per test
        results = run_cases(problem, program, [t["input"] for t in tests], timeout=timeout,
                            stop=lambda i, r: not passes(i, r))
        failing = [i for i, r in enumerate(results) if r is not None and not passes(i, r)]
        program_correct, first_failing = not failing, (failing[0] if failing else None)

    if program is not None and test_case is not None and program_output is None:
        run = run_case(problem, program, test_case[0], timeout=timeout)
        program_output = run.stdout if run.ok else run.error

    test_correct: bool | None = False
    if test_case is not None:
        declared_input, declared_output = test_case
        # Oracle for the declared output, best first. Without a reference solution (the paper leaves
        # this open, DECISIONS.md D6): a golden test on the same input; else nothing: undecided (None), and
        # metrics skip it. A program that passes every golden test is no oracle: off those inputs it may
        # still be wrong, and then it would certify the same wrong output in the test.
        if any(not blank.strip() and all(t[k].strip() for t in tests)
               for blank, k in ((declared_input, "input"), (declared_output, "output"))):
            test_correct = False  # degenerate (see above), whichever oracle there is
        elif problem.get("solution"):
            ref = run_case(problem, problem["solution"], declared_input, timeout=timeout)
            test_correct = ref.ok and outputs_match(fmt, ref.stdout, declared_output)  # crash = not ok
        elif (golden := next((t for t in tests if t["input"].strip() == declared_input.strip()),
                             None)) is not None:
            test_correct = outputs_match(fmt, golden["output"], declared_output)
        else:
            test_correct = None

    return describe_code(program is not None, test_case, program_output, program_correct, test_correct,
                         first_failing)


def describe_code(has_program: bool, test_case: tuple[str, str] | None, program_output: str | None,
                  program_correct: bool, test_correct: bool | None, first_failing: int | None = None) -> Attribution:
    """Render code checks that are already decided into a^t and c^t (attribute_code runs them; the toy world,
    whose programs it can evaluate without a sandbox, calls this directly)."""
    if test_case is None:
        shown_input = shown_declared = "[none: no test case was declared]"
    else:
        shown_input, shown_declared = _show(test_case[0]), _show(test_case[1])
    if not has_program:
        shown_output = "[none: no program was produced]"
    elif test_case is None:
        shown_output = "[nothing: the program was not run, as there was no test input]"
    else:
        shown_output = _show(program_output)
    observation = (f"On the test input {shown_input} the program printed {shown_output}, while the "
                   f"declared expected output was {shown_declared}.")
    outcome, conclusion = CODE_OUTCOMES[(program_correct, test_correct)]
    return Attribution(outcome, _describe(observation, conclusion),
                       {"program_correct": program_correct, "test_correct": test_correct}, first_failing)


# ----------------------------------------------------------------------------- math  [App. F.6]

# (derivation_correct, program_correct) -> (outcome, conclusion)
MATH_OUTCOMES = {
    (False, True): ("DERIVATION_INCONSISTENT",
                    "The printed result agrees with the reference answer and the derived answer does not; "
                    "the inconsistency originates in the derivation."),
    (True, False): ("COMPUTATION_INCONSISTENT",
                    "The derived answer agrees with the reference answer and the printed result does not; "
                    "the inconsistency originates in the program's computation."),
    (False, False): ("BOTH_INCONSISTENT",
                     "Neither the derived answer nor the printed result agrees with the reference answer; "
                     "the inconsistency originates in both."),
    (True, True): ("BOTH_CONSISTENT",
                   "Both the derived answer and the printed result agree with the reference answer; any "
                   "difference between them lies only in how the answer is written."),
}

# Which check judges each role's own artefact (App. F.6, Eq. 11): the programs of the Coder and the Tool-User, the
# Tester's declared case (Eq. 22; its oracle without a reference solution: DECISIONS.md D6), the Reasoner's
# derivation. The evaluation's per-role figures (revise-iff-wrong, a single agent's accuracy) read it from here.
ROLE_CHECK = {"coder": "program_correct", "tester": "test_correct", "reasoner": "derivation_correct",
              "tool_user": "program_correct"}


def attribute_math(problem: dict, derivation_answer: str | None, program_answer: str | None,
                   program_ran: bool) -> Attribution:
    """Reasoner/Tool-User attribution: each answer is checked for equivalence with the reference.
    program_ran: the program ran to its end (RunResult.ok), else program_answer is its
    "error: ..." string, which never counts as an answer (its text could contain a number, e.g. a
    timeout in seconds)."""
    reference = problem["answer"]
    derivation_correct = answers_equivalent(derivation_answer, reference)
    program_correct = program_ran and answers_equivalent(program_answer, reference)
    return describe_math(derivation_answer, program_answer, derivation_correct, program_correct)


def describe_math(derivation_answer: str | None, program_answer: str | None, derivation_correct: bool,
                  program_correct: bool) -> Attribution:
    """Render math checks that are already decided into a^t and c^t (attribute_math runs them)."""
    shown_derived = "[none: no answer after '####']" if derivation_answer is None else _show(derivation_answer)
    shown_printed = "[none: no printed result]" if program_answer is None else _show(program_answer)
    observation = f"The derivation reported {shown_derived} and the program printed {shown_printed}."
    outcome, conclusion = MATH_OUTCOMES[(derivation_correct, program_correct)]
    return Attribution(outcome, _describe(observation, conclusion),
                       {"derivation_correct": derivation_correct, "program_correct": program_correct})


# ----------------------------------------------------------------------------- a team of 2n agents [App. E.1.3]

AGENT_LINES = {  # one line per agent (Eq. 24): what that agent produced and its own check, facts only
    "coder": ("printed {shown}; the program passes the reference tests.",
              "printed {shown}; the program does not pass the reference tests."),
    "tester": ("declared the expected output {shown}; it agrees with the reference behaviour on that input.",
               "declared the expected output {shown}; it does not agree with the reference behaviour on that input."),
    "reasoner": ("reported {shown}; the derived answer agrees with the reference answer.",
                 "reported {shown}; the derived answer does not agree with the reference answer."),
    "tool_user": ("printed {shown}; the printed result agrees with the reference answer.",
                  "printed {shown}; the printed result does not agree with the reference answer."),
}


def agent_line(name: str, pairs: dict, ok: bool | None) -> str:
    """The verdict line of agent `name` (Eq. 24): it names that agent's own output only, never a teammate's, and
    its check ok (None: the check could not be decided, DECISIONS.md D6). pairs: the turn's pairings (D15)."""
    role, mine = role_of(name), pairs_of(name, pairs)
    who = f"{ROLE_NAMES[role]} {number_of(name)}"
    if role == "coder":
        shown = ", ".join(_show(a.program_output or "") for a in mine) + " on the declared test inputs"
        missing = mine[0].program is None and "no program was produced"
    elif role == "tester":
        shown = f"{_show(mine[0].test_output or '')} for the test input {_show(mine[0].test_input or '')}"
        missing = mine[0].test_input is None and "no test case was declared"
    elif role == "reasoner":
        shown, missing = _show(mine[0].derivation_answer or ""), mine[0].derivation_answer is None and \
            "no answer after '####' was given"
    else:
        shown, missing = _show(mine[0].program_answer or ""), mine[0].program is None and "no program was produced"
    if missing:
        return f"{who}: {missing}."
    if ok is None:
        return f"{who}: " + AGENT_LINES[role][0].format(shown=shown).split(";")[0] + \
            "; whether it is correct could not be checked."
    return f"{who}: " + AGENT_LINES[role][0 if ok else 1].format(shown=shown)


def team_attribution(problem: dict, pairs: dict, agents: dict, pair: Attribution | None = None) -> Attribution:
    """a^t = (a_1^t, ..., a_2n^t) of a turn rendered into one c^t (Eq. 24): a pair team's is App. F.6's three
    lines (`pair`, the verifier's attribution of it, else rendered from the agents' checks); a larger team's the
    header and one line per agent (agent_line), in seat order (DECISIONS.md D15). outcome and checks sum the agents
    up per role: a check fails when any agent of its role fails it, and is undecided when none fails and one is."""
    if len(pairs) == 1:
        (first, second), art = next(iter(pairs.items()))
        if pair is None and problem["domain"] == "code":
            case = None if art.test_input is None else (art.test_input, art.test_output)
            pair = describe_code(art.program is not None, case, art.program_output, agents[first], agents[second])
        elif pair is None:
            pair = describe_math(art.derivation_answer, art.program_answer, agents[first], agents[second])
        return replace(pair, agents=agents)
    checks = {}
    for name, ok in agents.items():
        key, before = ROLE_CHECK[role_of(name)], checks.get(ROLE_CHECK[role_of(name)], True)
        checks[key] = False if False in (before, ok) else None if None in (before, ok) else True
    table = CODE_OUTCOMES if problem["domain"] == "code" else MATH_OUTCOMES
    first, second = ("program_correct", "test_correct") if problem["domain"] == "code" else \
        ("derivation_correct", "program_correct")
    lines = [agent_line(name, pairs, agents[name]) for name in sorted(agents, key=seat_order(pairs))]
    return Attribution(table[(checks[first], checks[second])][0], "\n".join([HEADER] + ["- " + x for x in lines]),
                       checks, agents=agents)


def attribute_team(problem: dict, turn, *, timeout: float = CODE_TIMEOUT) -> Attribution:
    """a^t of one completed turn of a team (rollout.Turn, Eq. 11 and 24): each agent's own check, run once per
    agent on the pairings (agent m, agent m) that hold every agent's artefact once (infra.team.diagonal), and c^t
    (team_attribution); for a pair exactly attribute_turn's."""
    agents, pair = {}, None
    for key, artefacts in diagonal(turn.pairs).items():
        pair = attribute_turn(problem, artefacts, timeout=timeout)
        agents.update({name: pair.checks[ROLE_CHECK[role_of(name)]] for name in key})
    return team_attribution(problem, turn.pairs, agents, pair)


# ----------------------------------------------------------------------------- c^{<t}

def verdicts_before(attributions: list[Attribution], t: int) -> list[str]:
    """c^{<t} = (c^0, ..., c^{t-1}): verdicts of completed turns only, empty at t = 0 [§3.3, Eq. 12].
    A verdict on turn t' becomes usable at turn t' + 1, so t may not exceed the number attributed."""
    if not 0 <= t <= len(attributions):
        raise ValueError(f"turn {t}: only {len(attributions)} completed turns are attributed")
    return [a.description for a in attributions[:t]]


def attribute_turn(problem: dict, artefacts: CodeArtefacts | MathArtefacts, *,
                   timeout: float = CODE_TIMEOUT) -> Attribution:
    """a^t for one completed turn of rollout.py, read from what its environment recorded [Eq. 11]."""
    if problem["domain"] == "math":
        return attribute_math(problem, artefacts.derivation_answer, artefacts.program_answer,
                              artefacts.program_ran)
    case = None if artefacts.test_input is None else (artefacts.test_input, artefacts.test_output)
    return attribute_code(problem, artefacts.program, case, program_output=artefacts.program_output,
                          timeout=timeout)


# The attribution model's route (App. E.1.3, E.1.5): a model, not an agent of the team and never trained, reads
# the turn's outputs beside the reference and says, one line per agent, whose output agrees with it. Its answers
# are a^t in the verifier's form (the agents' checks), rendered by team_attribution alike.
JUDGE_PROMPT = ("Here is a problem, its reference {reference}, and what each agent of a team produced for it in one "
                "turn. For every agent, say whether its output is consistent with the reference. Answer with one "
                "line per agent, exactly \"<agent>: consistent\" or \"<agent>: inconsistent\", and nothing else."
                "\n\nProblem:\n{question}\n\nReference {reference}:\n{shown}\n\nOutputs:\n{outputs}")


JUDGED = {  # what the attribution model reads of each agent: its own output, as the verifier checks it
    "coder": lambda a: "the program\n" + (a.program or "[none]").rstrip("\n"),
    "tester": lambda a: f"the test input {_show(a.test_input or '')} with expected output {_show(a.test_output or '')}",
    "reasoner": lambda a: f"the answer {_show(a.derivation_answer or '')}",
    "tool_user": lambda a: f"the printed result {_show(a.program_answer or '')}",
}


def judge_prompt(problem: dict, pairs: dict) -> str:
    """The attribution model's prompt for one turn (pairs: its pairings, D15): the problem, its reference (math:
    the answer; code: the reference solution, else the golden tests) and each agent's own output."""
    code = problem["domain"] == "code"
    reference = "solution" if code and problem.get("solution") else "tests" if code else "answer"
    shown = {"solution": problem.get("solution"), "answer": problem.get("answer")}.get(reference) or "\n".join(
        f"input {_show(t['input'])} -> output {_show(t['output'])}" for t in problem.get("tests", []))
    names = sorted({n for key in pairs for n in key}, key=seat_order(pairs))
    outputs = "\n".join(f"{ROLE_NAMES[role_of(n)]} {number_of(n)}: {JUDGED[role_of(n)](pairs_of(n, pairs)[0])}"
                        for n in names)
    return JUDGE_PROMPT.format(reference=reference, question=problem["question"].strip(), shown=shown,
                               outputs=outputs)


def read_judgement(text: str, names: list) -> dict:
    """The attribution model's answer -> {seat: True (consistent) | False}; an agent the answer has no line for
    counts as inconsistent, since the model did not confirm it (the verifier's tables have no undecided program)."""
    said = {}
    for line in text.splitlines():
        m = re.match(r"\W*([\w-]+) (\d+)\W*:\W*(consistent|inconsistent)\b", line.strip(), re.I)
        if m:
            said[(m.group(1).lower(), int(m.group(2)))] = m.group(3).lower() == "consistent"
    return {n: said.get((ROLE_NAMES[role_of(n)].lower(), number_of(n)), False) for n in names}


def attribute_by_model(episodes, judge, tokenizer) -> list[list[Attribution]]:
    """a^t of every turn by the attribution model (App. E.1.3): one judge call for all turns, one prompt per turn
    (judge_prompt), answered in one line per agent (read_judgement), rendered as the verifier's a^t would be.
    judge: a function list[list[int]] -> sampler.Generation (e.g. the teacher, sampled greedily by the caller).
    Returns one list per episode, as attribute_episodes."""
    jobs = [(e, turn) for e in episodes for turn in e.turns]
    prompts = [encode_text(tokenizer, judge_prompt(e.problem, turn.pairs)) for e, turn in jobs]
    answers = iter(judge(prompts).tokens if prompts else [])
    atts = iter([team_attribution(e.problem, turn.pairs, read_judgement(
        tokenizer.decode(next(answers), skip_special_tokens=True), list(turn.responses) or
        sorted({n for key in turn.pairs for n in key}))) for e, turn in jobs])
    return [[next(atts) for _ in e.turns] for e in episodes]


def attribute_episodes(episodes, *, timeout: float = CODE_TIMEOUT, workers: int = WORKERS) -> list[list[Attribution]]:
    """a^t (Eq. 11) of every turn of every episode (rollout.Episode): Alg. 1 Phase 2a, also used by evaluation.
    `workers` turns at a time, since most of a code turn's cost is waiting on sandboxed runs.
    Returns one list per episode, in the order of `episodes`, of the Attributions of its turns 0, 1, ... (an
    episode stopped before its first turn has an empty list): zip it with `episodes`."""
    jobs = [(e, turn) for e in episodes for turn in e.turns]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        atts = iter(pool.map(lambda j: attribute_team(j[0].problem, j[1], timeout=timeout), jobs))
    return [[next(atts) for _ in e.turns] for e in episodes]
