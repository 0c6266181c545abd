"""Training-time verifier of PAC (privileged attribution for coordination).

After a turn completes, two independent checks each compare one role's output with a
training-time reference (never with the other role's output): a^t = V(q, y^t, e^t)
[paper §3.3, Eq. 11; App. F.6]. The outcome is rendered as a three-line factual
description c^t that only the teacher reads, starting at the next turn. c^t restates
values the agents produced and says which side agrees with the reference; it never
contains a reference value (answer, reference-solution output, golden test).

It needs the program runner (sandbox/cases.py, which runs programs in the jail), the two
judges (infra/answers.py), the artefact records of prompts.py and the timeouts of
config.py; nothing of the rollout or the teacher. A team of 2n agents renders one line
per agent on top of these checks (teams/verdicts.py).
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from config import CODE_TIMEOUT, WORKERS
from infra.answers import answers_equivalent, outputs_match
from prompts import CodeArtefacts, MathArtefacts
from sandbox.cases import run_case, run_cases

HEADER = "Verification result for the previous turn:"
SHOW_CHARS = 200  # longest value rendered in the observation line; the rest is elided


@dataclass
class Attribution:
    outcome: str  # one of the outcome names of App. F.6 (see the tables below)
    description: str  # c^t: header, observation line, conclusion line
    # the two Boolean checks; None = could not be decided
    checks: dict[str, bool | None]
    # code: index of the first golden test the program fails. Verifier-side bookkeeping
    # only, never rendered into c^t.
    first_failing_test: int | None = None
    # a^t per agent (Eq. 24): seat -> the check of its own artefact (ROLE_CHECK)
    agents: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------- rendering


def show(value: str) -> str:
    """One-line rendering of an agent value: repr() shows newlines as \\n; long values
    are elided."""
    if len(value) <= SHOW_CHARS:
        return repr(value)
    return repr(value[:SHOW_CHARS]) + f"... ({len(value) - SHOW_CHARS} more characters)"


def render(observation: str, conclusion: str) -> str:
    """c^t: exactly three lines [App. F.6]."""
    return f"{HEADER}\n- {observation}\n- {conclusion}"


# ---------------------------------------------------------------------- code [App. F.6]

# (program_correct, test_correct) -> (outcome, conclusion). Conclusions state facts and
# address no role.
CODE_OUTCOMES = {
    (False, True): (
        "PROGRAM_INCONSISTENT",
        "The declared expected output agrees with the reference behaviour on that "
        "input, but the program does not pass the reference tests; the inconsistency "
        "originates in the program.",
    ),
    (True, False): (
        "TEST_INCONSISTENT",
        "The program passes the reference tests, but the declared expected output does "
        "not agree with the reference behaviour on that input; the inconsistency "
        "originates in the test case.",
    ),
    (False, False): (
        "BOTH_INCONSISTENT",
        "The program does not pass the reference tests and the declared expected "
        "output does not agree with the reference behaviour on that input; the "
        "inconsistency originates in both.",
    ),
    (True, True): (
        "BOTH_CONSISTENT",
        "The program passes the reference tests and the declared expected output "
        "agrees with the reference behaviour on that input; any remaining difference "
        "lies in output format or interface, not in the logic of either.",
    ),
    # No oracle for the declared output (see attribute_code): the outcome names only
    # what was checked.
    (False, None): (
        "PROGRAM_INCONSISTENT",
        "The program does not pass the reference tests, so the inconsistency "
        "originates at least in the program; whether the declared expected output is "
        "correct could not be checked.",
    ),
    (True, None): (
        "UNDECIDED",
        "The program passes the reference tests, but whether the declared expected "
        "output is correct could not be checked; where the inconsistency originates "
        "could not be determined.",
    ),
}


def attribute_code(
    problem: dict,
    program: str | None,
    test_case: tuple[str, str] | None,
    *,
    program_output: str | None = None,
    timeout: float = CODE_TIMEOUT,
) -> Attribution:
    """Coder/Tester attribution. program_correct: the program passes every golden test.
    test_correct: a reference run on the declared input reproduces the declared expected
    output (Eq. 22); the test's layout is not judged on its own [App. F.6], but a
    degenerate case is never a correct test: a blank (empty or whitespace only) input
    where none of the problem's golden inputs is blank, i.e. outside its input format,
    where the reference's behaviour specifies nothing; and a blank expected output where
    none of the golden outputs is blank: on an input where the reference prints nothing
    (one that declares zero cases) every program that prints nothing passes it, and on
    any other it is wrong, so no oracle is needed to judge it. program_output: what the
    program printed (or its "error: ..." string) on the declared input, if the
    environment already ran it."""
    fmt, tests = problem["format"], problem["tests"]
    program_correct, first_failing = False, None
    if program is not None:
        passes = lambda i, r: r.ok and outputs_match(fmt, r.stdout, tests[i]["output"])
        # the check stops at the first failing test: a program that hangs costs one
        # timeout, not one per test
        results = run_cases(
            problem,
            program,
            [t["input"] for t in tests],
            timeout=timeout,
            stop=lambda i, r: not passes(i, r),
        )
        failing = [
            i for i, r in enumerate(results) if r is not None and not passes(i, r)
        ]
        program_correct = not failing
        first_failing = failing[0] if failing else None

    if program is not None and test_case is not None and program_output is None:
        run = run_case(problem, program, test_case[0], timeout=timeout)
        program_output = run.stdout if run.ok else run.error

    test_correct: bool | None = False
    if test_case is not None:
        declared_input, declared_output = test_case
        # Oracle for the declared output, best first. Without a reference solution (the
        # paper leaves this open, DECISIONS.md D6): a golden test on the same input;
        # else nothing: undecided (None), and metrics skip it. A program that passes
        # every golden test is no oracle: off those inputs it may still be wrong, and
        # then it would certify the same wrong output in the test.
        golden = next(
            (t for t in tests if t["input"].strip() == declared_input.strip()), None
        )
        blank = [(declared_input, "input"), (declared_output, "output")]
        if any(
            not text.strip() and all(t[k].strip() for t in tests) for text, k in blank
        ):
            test_correct = False  # degenerate (see above), whichever oracle there is
        elif problem.get("solution"):
            ref = run_case(
                problem, problem["solution"], declared_input, timeout=timeout
            )
            # a crashing reference is not ok
            test_correct = ref.ok and outputs_match(fmt, ref.stdout, declared_output)
        elif golden is not None:
            test_correct = outputs_match(fmt, golden["output"], declared_output)
        else:
            test_correct = None

    return render_code(
        program is not None,
        test_case,
        program_output,
        program_correct,
        test_correct,
        first_failing,
    )


def render_code(
    has_program: bool,
    test_case: tuple[str, str] | None,
    program_output: str | None,
    program_correct: bool,
    test_correct: bool | None,
    first_failing: int | None = None,
) -> Attribution:
    """Render code checks that are already decided into a^t and c^t (attribute_code runs
    them; the toy world, whose programs it can evaluate without a sandbox, calls this
    directly). a^t per agent: the Coder's program_correct, the Tester's test_correct
    (ROLE_CHECK)."""
    if test_case is None:
        shown_input = shown_declared = "[none: no test case was declared]"
    else:
        shown_input, shown_declared = show(test_case[0]), show(test_case[1])
    if not has_program:
        shown_output = "[none: no program was produced]"
    elif test_case is None:
        shown_output = "[nothing: the program was not run, as there was no test input]"
    else:
        shown_output = show(program_output)
    observation = (
        f"On the test input {shown_input} the program printed {shown_output}, while "
        f"the declared expected output was {shown_declared}."
    )
    outcome, conclusion = CODE_OUTCOMES[(program_correct, test_correct)]
    return Attribution(
        outcome,
        render(observation, conclusion),
        {"program_correct": program_correct, "test_correct": test_correct},
        first_failing,
        agents={"coder": program_correct, "tester": test_correct},
    )


# ---------------------------------------------------------------------- math [App. F.6]

# (derivation_correct, program_correct) -> (outcome, conclusion)
MATH_OUTCOMES = {
    (False, True): (
        "DERIVATION_INCONSISTENT",
        "The printed result agrees with the reference answer and the derived answer "
        "does not; the inconsistency originates in the derivation.",
    ),
    (True, False): (
        "COMPUTATION_INCONSISTENT",
        "The derived answer agrees with the reference answer and the printed result "
        "does not; the inconsistency originates in the program's computation.",
    ),
    (False, False): (
        "BOTH_INCONSISTENT",
        "Neither the derived answer nor the printed result agrees with the reference "
        "answer; the inconsistency originates in both.",
    ),
    (True, True): (
        "BOTH_CONSISTENT",
        "Both the derived answer and the printed result agree with the reference "
        "answer; any difference between them lies only in how the answer is written.",
    ),
}

# Which check judges each role's own artefact (App. F.6, Eq. 11): the programs of the
# Coder and the Tool-User, the Tester's declared case (Eq. 22; its oracle without a
# reference solution: DECISIONS.md D6), the Reasoner's derivation. The evaluation's
# per-role figures (revise-iff-wrong, a single agent's accuracy) read it from here.
ROLE_CHECK = {
    "coder": "program_correct",
    "tester": "test_correct",
    "reasoner": "derivation_correct",
    "tool_user": "program_correct",
}


def attribute_math(
    problem: dict,
    derivation_answer: str | None,
    program_answer: str | None,
    program_ran: bool,
) -> Attribution:
    """Reasoner/Tool-User attribution: each answer is checked for equivalence with the
    reference. program_ran: the program ran to its end (RunResult.ok), else
    program_answer is its "error: ..." string, which never counts as an answer (its text
    could contain a number, e.g. a timeout in seconds)."""
    reference = problem["answer"]
    derivation_correct = answers_equivalent(derivation_answer, reference)
    program_correct = program_ran and answers_equivalent(program_answer, reference)
    return render_math(
        derivation_answer, program_answer, derivation_correct, program_correct
    )


def render_math(
    derivation_answer: str | None,
    program_answer: str | None,
    derivation_correct: bool,
    program_correct: bool,
) -> Attribution:
    """Render math checks that are already decided into a^t and c^t (attribute_math runs
    them). a^t per agent: the Reasoner's derivation_correct, the Tool-User's
    program_correct."""
    if derivation_answer is None:
        shown_derived = "[none: no answer after '####']"
    else:
        shown_derived = show(derivation_answer)
    shown_printed = (
        "[none: no printed result]" if program_answer is None else show(program_answer)
    )
    observation = (
        f"The derivation reported {shown_derived} and the program printed "
        f"{shown_printed}."
    )
    outcome, conclusion = MATH_OUTCOMES[(derivation_correct, program_correct)]
    return Attribution(
        outcome,
        render(observation, conclusion),
        {"derivation_correct": derivation_correct, "program_correct": program_correct},
        agents={"reasoner": derivation_correct, "tool_user": program_correct},
    )


# ---------------------------------------------------------------------- a turn, a batch


def attribute_turn(
    problem: dict,
    artefacts: CodeArtefacts | MathArtefacts,
    *,
    timeout: float = CODE_TIMEOUT,
) -> Attribution:
    """a^t for one completed turn of a pair, read from what its environment recorded
    (Eq. 11)."""
    if problem["domain"] == "math":
        return attribute_math(
            problem,
            artefacts.derivation_answer,
            artefacts.program_answer,
            artefacts.program_ran,
        )
    case = (
        None
        if artefacts.test_input is None
        else (artefacts.test_input, artefacts.test_output)
    )
    return attribute_code(
        problem,
        artefacts.program,
        case,
        program_output=artefacts.program_output,
        timeout=timeout,
    )


def attribute_episodes(
    episodes, *, timeout: float = CODE_TIMEOUT, workers: int = WORKERS
) -> list[list[Attribution]]:
    """a^t (Eq. 11) of every turn of every episode (rollout.Episode): Alg. 1 Phase 2a,
    also used by evaluation. Returns one list per episode, in the order of `episodes`,
    of the Attributions of its turns 0, 1, ... (an episode stopped before its first turn
    has an empty list): zip it with `episodes`."""
    judge = lambda e, turn: attribute_turn(e.problem, turn.artefacts, timeout=timeout)
    return over_turns(judge, episodes, workers)


def over_turns(judge, episodes, workers):
    """judge(episode, turn) of every turn of every episode, `workers` turns at a time,
    since most of a code turn's cost is waiting on sandboxed runs. -> one list per
    episode."""
    jobs = [(e, turn) for e in episodes for turn in e.turns]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        atts = iter(pool.map(lambda job: judge(*job), jobs))
    return [[next(atts) for _ in e.turns] for e in episodes]
