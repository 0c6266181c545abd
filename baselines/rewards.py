"""The rewards of the RL baselines (App. D.4, Eq. 14-22): a team reward on what the system submits plus a local
reward on each role's own artefact, R_i = R_team + alpha * R_i^local with alpha = 1 (Eq. 14). MAS-OPD uses none.

Every reward is read from what one turn of rollout.py already holds: the environment's artefacts (prompts.py's
CodeArtefacts / MathArtefacts) and the verifier's checks of that turn (attribution.attribute_turn). One function
per reward; a local reward is the weighted sum of its parts with the paper's weights (LOCAL_WEIGHTS). What the
paper names but does not define (what "build", "run", "parse", "valid" and "format" test): DECISIONS.md D12.
"""

import ast

from config import ALPHA
from infra.answers import answers_equivalent
from sandbox.cases import run_case

# App. D.4: the parts of each role's local reward and their weights (each role's sum to 1)
LOCAL_WEIGHTS = {
    "reasoner": {"format": 0.2, "answer": 0.8},
    "tool_user": {"run": 0.1, "parse": 0.1, "answer": 0.8},
    "coder": {"build": 0.1, "run": 0.1, "pass": 0.8},
    "tester": {"valid": 0.2, "spec": 0.8},
}


# ----------------------------------------------------------------------------- team rewards (App. D.4.1, D.4.2)


def code_team_reward(checks):
    """Eq. 20: 1 iff the submitted program (the Coder's, of this turn) passes every golden test (Pass@1)."""
    return float(bool(checks["program_correct"]))


def math_team_reward(problem, final):
    """App. D.4.1: 1 iff the system's answer y-hat (Eq. 17) equals the reference by NUMEQ or symbolically (Eq. 16);
    a missing or unparseable answer is wrong (Eq. 18)."""
    return float(answers_equivalent(final, problem["answer"]))


# ----------------------------------------------------------------------------- math local rewards (App. D.4.1)


def reasoner_format(artefacts):
    """The Reasoner's format part: its answer stands on a "####" line, the format its prompt asks for (not read
    from a \\boxed{} or a last number by the tolerant rules of DECISIONS.md D5)."""
    return float(artefacts.parsed_by.get("reasoner") == "hash_line")


def reasoner_answer(checks):
    """The Reasoner's answer part: its derived answer equals the reference (Eq. 16)."""
    return float(bool(checks["derivation_correct"]))


def tool_user_run(artefacts):
    """The Tool-User's run part: a program was written and ran to its end without an error or a timeout (printing
    nothing is a run), as the sandbox's result says (MathArtefacts.program_ran), never what the program wrote."""
    return float(artefacts.program is not None and artefacts.program_ran)


def tool_user_parse(artefacts):
    """The Tool-User's parse part: what it printed reads as an answer (Eq. 18: an unparseable answer equals
    nothing, not even itself)."""
    answer = artefacts.program_answer
    return float(artefacts.program_ran and answers_equivalent(answer, answer))


def tool_user_answer(checks):
    """The Tool-User's answer part: its printed answer equals the reference (Eq. 16)."""
    return float(bool(checks["program_correct"]))


# ----------------------------------------------------------------------------- code local rewards (App. D.4.2)


def coder_build(artefacts):
    """The Coder's build part: a program was written and Python compiles it (nothing runs)."""
    if artefacts.program is None:
        return 0.0
    try:
        compile(artefacts.program, "<program>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return 0.0
    return 1.0


def coder_run(problem, artefacts, timeout):
    """The Coder's run part: the program runs without an error on the problem's first golden input. That is the
    verifier's first run of it (attribution.attribute_code), remembered per process (sandbox.cases.run_once), so it
    costs no second process."""
    if artefacts.program is None or not problem["tests"]:
        return 0.0
    return float(
        run_case(
            problem, artefacts.program, problem["tests"][0]["input"], timeout=timeout
        ).ok
    )


def coder_pass(checks):
    """The Coder's pass part: its program passes every golden test (Eq. 20, on this turn's program)."""
    return float(bool(checks["program_correct"]))


def tester_valid(problem, artefacts):
    """The Tester's valid part: a test case was declared and its input is one the problem admits: for the stdio
    format not blank where no golden input is (DECISIONS.md D6), for the function format a Python list of
    arguments."""
    case = artefacts.test_input
    if case is None or artefacts.test_output is None:
        return 0.0
    if problem["format"] == "function":
        try:
            return float(isinstance(ast.literal_eval(case.strip()), (list, tuple)))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return 0.0
    return float(
        bool(case.strip()) or any(not t["input"].strip() for t in problem["tests"])
    )


def tester_spec(checks):
    """The Tester's spec part (Eq. 22): the reference behaviour on its declared input is its declared output;
    an undecided check (no oracle, DECISIONS.md D6) earns nothing."""
    return float(checks["test_correct"] is True)


# ----------------------------------------------------------------------------- a role's rewards


def local_parts(role, problem, artefacts, checks, timeout):
    """role -> {part: reward in [0, 1]}, the parts of its local reward on one turn (App. D.4)."""
    if role == "reasoner":
        return {"format": reasoner_format(artefacts), "answer": reasoner_answer(checks)}
    if role == "tool_user":
        return {
            "run": tool_user_run(artefacts),
            "parse": tool_user_parse(artefacts),
            "answer": tool_user_answer(checks),
        }
    if role == "coder":
        return {
            "build": coder_build(artefacts),
            "run": coder_run(problem, artefacts, timeout),
            "pass": coder_pass(checks),
        }
    return {"valid": tester_valid(problem, artefacts), "spec": tester_spec(checks)}


def local_reward(role, problem, artefacts, checks, timeout):
    """R_i^local: the weighted sum of the role's parts with LOCAL_WEIGHTS (App. D.4)."""
    parts = local_parts(role, problem, artefacts, checks, timeout)
    return sum(LOCAL_WEIGHTS[role][k] * v for k, v in parts.items())


def team_reward(problem, checks, final):
    """R_team of a turn: Eq. 20 for code (checks: the turn's verifier checks), Eq. 15 for math (final: the answer
    the system would submit at that turn, Eq. 17)."""
    return (
        code_team_reward(checks)
        if problem["domain"] == "code"
        else math_team_reward(problem, final)
    )


def role_reward(role, problem, artefacts, checks, final, timeout, alpha=ALPHA):
    """Eq. 14: R_i = R_team + alpha * R_i^local, in [0, 1 + alpha]."""
    return team_reward(problem, checks, final) + alpha * local_reward(
        role, problem, artefacts, checks, timeout
    )
