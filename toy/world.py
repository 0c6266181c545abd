"""The toy world: problems and role-blind simulated agents, small enough for MAS-OPD to run end to end on a laptop
CPU (`python -m toy`); the toy students are built from its episodes in toy/build.py.

What the toy world is. Synthetic problems for models of ~0.2M parameters, run through the *same* workflows,
prompts, schema, sandbox, verifier, teacher contexts and loss as the real path; only the tokenizer, the model sizes
and the teacher (toy/expert.py, written by hand) differ. Code: "The input is one integer x. Print x times 17." and
"... Print 4 minus x." (stdin/stdout, golden tests, a reference solution). Math: "What is 5 times 6?". A third of
each domain is held out ('valid' for choosing settings, 'test' for the figures we report).

Who can do what. Copying an expression out of the question is within a tiny model's reach, arithmetic is not: the
Coder and the Tool-User can write a right program for any problem (they copy its expression), while the Tester and
the Reasoner, who must work out a value, can only guess one, or take over the value their teammate's program
printed. So after a conflict the right move depends on the role, and that is what the students must learn.

The base students ("pretraining", SFT on simulated episodes in student-visible prompts) are role-blind:
  - after a conflict each revises half the time whatever its own correctness; a revision defers to the teammate
    (the Tester and the Reasoner take over what the program printed; half the time the Tool-User prints the
    derivation's answer and the Coder hard-codes the Tester's expected output, else they start afresh);
  - half the time they do the whole job: both of the domain's artefacts, in the workflow's order (the program
    before its test, the derivation before its program), so each seat also writes its teammate's kind of work;
  - copying slips now and then (a neighbouring digit).
Nothing here gives the students a verdict, a reference value or a role condition: the simulator only shapes the
starting checkpoint.
"""

import random
import re
from dataclasses import dataclass

from attribution import attribute_math, render_code
from config import MAX_TURNS
from infra.answers import answers_equivalent, outputs_match
from prompts import (
    NO_CODE_BLOCK,
    ROLES,
    CodeArtefacts,
    MathArtefacts,
    extract_answer,
    extract_program,
    extract_test_case,
    printed_answer,
)
from sandbox.outcomes import ERROR, RunResult, is_error
from teacher import KAPPA

# ---------------------------------------------------------------------------------------------- problems

OPS = {"+": "plus", "-": "minus", "*": "times"}
SPLITS = ("train", "valid", "test")


def calc(a, op, b):
    return a + b if op == "+" else a - b if op == "-" else a * b


def expr(spec):
    """The Python expression of a question's spec (question_spec): a number, or x, on either side."""
    a, op, b = spec
    return f"{'x' if a is None else a} {op} {'x' if b is None else b}"


def value_of(spec, x=None):
    """What the question asks for: the math answer, or the code expression's value on input x."""
    a, op, b = spec
    return calc(x if a is None else a, op, x if b is None else b)


def toy_problems(split):
    """'train', 'valid' or 'test': disjoint and deterministic, in the project's problem schema (infra/data.py). A third
    of each domain is held out and split in two: 'valid' for choosing settings, 'test' for the figures we report."""
    specs = [
        s for op in OPS for k in range(1, 20) for s in ((None, op, k), (k, op, None))
    ]
    code = [
        {
            "id": f"code:{expr(s).replace(' ', '')}",
            "domain": "code",
            "format": "stdio",
            "question": f"The input is one integer x. Print {expr(s).replace(s[1], OPS[s[1]])}.",
            "tests": [
                {"input": f"{x}\n", "output": f"{value_of(s, x)}\n"} for x in (2, 5, 9)
            ],
            "solution": f"x = int(input())\nprint({expr(s)})\n",
        }
        for s in specs
    ]
    math_ = [
        {
            "id": f"math:{a}{op}{b}",
            "domain": "math",
            "question": f"What is {a} {OPS[op]} {b}?",
            "answer": str(calc(a, op, b)),
        }
        for op in OPS
        for a in range(1, 7)
        for b in range(1, 7)
    ]
    if split not in SPLITS:
        raise ValueError(f"toy_problems: split must be one of {SPLITS}, got {split!r}")
    out, rng = [], random.Random(1234)
    for ps in (code, math_):
        held = rng.sample(range(len(ps)), len(ps) // 3)
        part = {
            "train": set(range(len(ps))) - set(held),
            "valid": set(held[::2]),
            "test": set(held[1::2]),
        }[split]
        out += [p for i, p in enumerate(ps) if i in part]
    return out


def question_spec(question):
    """(a, op, b) of a toy question; in a code question the side that is x is None (x comes from stdin)."""
    m = re.search(r"(?:What is|Print) (\d+|x) (plus|minus|times) (\d+|x)", question)
    a, b = (None if g == "x" else int(g) for g in (m.group(1), m.group(3)))
    return a, {w: o for o, w in OPS.items()}[m.group(2)], b


# ------------------------------------------------------------------------------------- simulated agents


@dataclass
class Behaviour:
    # chance that a copied expression slips (one constant off by a neighbouring digit)
    err: float
    revise: float  # after a conflict: chance to revise, whatever its own correctness
    # chance that a revision of a role that copies takes the teammate's value over, rather than
    defer: float
    # start afresh (a role that must compute always takes it over: afresh it could only guess)
    # chance to also write the teammate's kind of artefact (in the workflow's order)
    whole_job: float


ROLE_BLIND = Behaviour(err=0.15, revise=0.5, defer=0.5, whole_job=0.5)
GUESS = range(0, 41)  # what a role that must compute a value writes for it: a guess
NOUN = {
    "coder": "program",
    "tester": "test case",
    "reasoner": "answer",
    "tool_user": "program",
}
# whose artefact comes first in a whole-job response
FIRST = {"code": "coder", "math": "reasoner"}
# the roles that must work out a value (the others copy the question)
COMPUTING = ("tester", "reasoner")


def program(text):
    return f"Code:\n```python\n{text}\n```"


def test_case(x, y):
    return f"Test Input:\n```\n{x}\n```\nTest Output:\n```\n{y}\n```"


def derivation(spec, value):
    return f"Reasoning Steps: {expr(spec)} = {value}\n#### {value}"


def _slip(spec, rng):
    """The spec with one constant miscopied as a neighbouring number (never 0)."""
    a, op, b = spec
    near = lambda k: rng.choice([m for m in (k - 2, k - 1, k + 1, k + 2) if m > 0])
    return (a, op, near(b)) if b is not None else (near(a), op, b)


def fresh(role, problem, b, rng):
    """A first-turn artefact of `role` as agents of behaviour b write it: copied (with slips) or guessed."""
    spec = question_spec(problem["question"])
    copied = _slip(spec, rng) if rng.random() < b.err else spec
    if role == "coder":
        return program(f"x = int(input())\nprint({expr(copied)})")
    if role == "tool_user":
        return program(f"print({expr(copied)})")
    if role == "tester":
        return test_case(rng.randint(0, 5), rng.choice(GUESS))
    return derivation(spec, rng.choice(GUESS))


def deferring(role, last):
    """A role-blind revision: take the teammate's value over, from `last`, the previous turn's artefacts
    (prompts.CodeArtefacts or MathArtefacts); None if there is nothing to take."""
    if (
        role == "tester"
        and last.program_output
        and not is_error(last.program_output)
        and last.test_input is not None
    ):
        return test_case(last.test_input.strip(), last.program_output.strip())
    if role == "reasoner" and not is_error(last.program_answer):
        return (
            f"Reasoning Steps: I adopt the printed result.\n#### {last.program_answer}"
        )
    if role == "tool_user" and last.derivation_answer:
        return program(f"print({last.derivation_answer})")
    if role == "coder" and last.test_output:
        return program(f"x = int(input())\nprint({last.test_output.strip()})")
    return None


def whole_job(role, domain, own, mate):
    """A response that holds both artefacts of the domain, in the workflow's order."""
    return own + "\n" + mate if FIRST[domain] == role else mate + "\n" + own


def respond(role, problem, turns, b, rng):
    """One response of `role` at turn len(turns) under behaviour b -> (response text, its own artefact's text)."""
    own = fresh(role, problem, b, rng)
    if turns:
        revise = rng.random() < b.revise
        if not revise:
            own = turns[-1].own[role]
        elif role in COMPUTING or rng.random() < b.defer:
            own = deferring(role, turns[-1].artefacts) or own
    text = own
    if rng.random() < b.whole_job:
        text = whole_job(
            role, problem["domain"], own, fresh(KAPPA[role], problem, b, rng)
        )
    if turns:
        text = f"I {'revise' if revise else 'keep'} my {NOUN[role]}.\n" + text
    return text, own


def _run(source, stdin=""):
    """Output of a simulator-written program (trusted templates, so no sandbox: the real env is not involved
    in making training data)."""
    out, lines = [], iter(stdin.splitlines())
    try:
        exec(
            source,
            {
                "input": lambda: next(lines),
                "print": lambda *a: out.append(" ".join(map(str, a))),
            },
        )
    except Exception as e:
        return f"{ERROR}{type(e).__name__}: {e}"
    return "".join(o + "\n" for o in out)


def step_env(problem, texts):
    """The environment of rollout.code_env / math_env and the verifier's checks, on simulator programs without a
    sandbox. Returns (CodeArtefacts or MathArtefacts, agree, {role: was its artefact right})."""
    if problem["domain"] == "code":
        (prog, by_coder), (case, by_tester) = (
            extract_program(texts["coder"]),
            extract_test_case(texts["tester"]),
        )
        out = _run(prog, case[0]) if prog and case else None
        artefacts = CodeArtefacts(
            prog,
            case and case[0],
            case and case[1],
            NO_CODE_BLOCK if prog is None else out,
            {"coder": by_coder, "tester": by_tester},
        )
        agree = (
            out is not None
            and not is_error(out)
            and outputs_match("stdio", out, case[1])
        )
        passes = prog is not None and all(
            outputs_match("stdio", _run(prog, t["input"]), t["output"])
            for t in problem["tests"]
        )
        test_ok = case is not None and outputs_match(
            "stdio", _run(problem["solution"], case[0]), case[1]
        )
        return artefacts, agree, {"coder": passes, "tester": test_ok}
    (prog, by_tool_user), (answer, by_reasoner) = (
        extract_program(texts["tool_user"]),
        extract_answer(texts["reasoner"]),
    )
    out = _run(prog) if prog else None
    # the toy's own programs: its _run's text says how they ended
    ran = out is not None and not is_error(out)
    printed = printed_answer(RunResult(out, None)) if prog else NO_CODE_BLOCK
    artefacts = MathArtefacts(
        texts["reasoner"],
        answer,
        prog,
        printed,
        {"reasoner": by_reasoner, "tool_user": by_tool_user},
        ran,
    )
    agree = ran and answers_equivalent(answer, printed)
    return (
        artefacts,
        agree,
        {
            "reasoner": answers_equivalent(answer, problem["answer"]),
            "tool_user": ran and answers_equivalent(printed, problem["answer"]),
        },
    )


def verdict(problem, artefacts, checks):
    """c^t for a simulated turn, rendered by attribution.py exactly as for a real one."""
    if problem["domain"] == "math":
        return attribute_math(
            problem,
            artefacts.derivation_answer,
            artefacts.program_answer,
            artefacts.program_ran,
        ).description
    case = (
        None
        if artefacts.test_input is None
        else (artefacts.test_input, artefacts.test_output)
    )
    return render_code(
        artefacts.program is not None,
        case,
        artefacts.program_output,
        checks["coder"],
        checks["tester"],
    ).description


@dataclass
class SimTurn:  # what prompts.build_context reads of a turn (artefacts), plus the simulator's own records
    artefacts: CodeArtefacts | MathArtefacts
    responses: dict  # role -> response text
    own: dict  # role -> the text of its own artefact in that response
    checks: dict  # role -> was its artefact right
    verdict: str


def simulate(problem, b, rng, max_turns=MAX_TURNS):
    """One episode of the workflow in which both agents follow behaviour b."""
    turns = []
    for _ in range(max_turns):
        said = {r: respond(r, problem, turns, b, rng) for r in ROLES[problem["domain"]]}
        texts = {r: text for r, (text, _) in said.items()}
        artefacts, agree, checks = step_env(problem, texts)
        turns.append(
            SimTurn(
                artefacts,
                texts,
                {r: own for r, (_, own) in said.items()},
                checks,
                verdict(problem, artefacts, checks),
            )
        )
        if agree:
            break
    return turns
