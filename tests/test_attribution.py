"""PAC verifier: outcomes in both domains, the three-line c^t, no reference leakage, answer equivalence."""

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import attribution
from attribution import HEADER, ROLE_CHECK, Attribution, attribute_code, attribute_math
from eval import decisions
from infra import answers
from infra.answers import answers_equivalent, outputs_match
from infra.metrics import revision_counts
from prompts import ROLES, CodeArtefacts, MathArtefacts
from rollout import Episode, Turn
from teacher import verdicts_before

T = 5.0  # sandbox timeout for tests

SUM = {  # stdio with a reference solution
    "id": "sum",
    "domain": "code",
    "format": "stdio",
    "question": "Print the sum of two integers.",
    "tests": [
        {"input": "2 3\n", "output": "5\n"},
        {"input": "10 -4\n", "output": "6\n"},
    ],
    "solution": "a, b = map(int, input().split())\nprint(a + b)\n",
}
SUM_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
SUM_BAD = "a, b = map(int, input().split())\nprint(a - b)\n"

TOTAL = {  # function format with a reference solution
    "id": "total",
    "domain": "code",
    "format": "function",
    "entry_point": "total",
    "question": "Return the sum of a list.",
    "tests": [
        {"input": "[[1, 2, 3]]", "output": "6"},
        {"input": "[[]]", "output": "0"},
    ],
    "solution": "def total(xs):\n    return sum(xs)\n",
}
SQUARE = {  # stdio without a reference solution
    "id": "square",
    "domain": "code",
    "format": "stdio",
    "question": "Print n squared.",
    "tests": [{"input": "3\n", "output": "9\n"}, {"input": "4\n", "output": "16\n"}],
    "solution": None,
}
SQUARE_OK = "n = int(input())\nprint(n * n)\n"
SQUARE_BAD = "n = int(input())\nprint(n + n)\n"


def math_problem(answer):
    return {"id": "m", "domain": "math", "question": "?", "answer": answer}


def lines_of(att: Attribution) -> list[str]:
    """Checks the three-line format of c^t and returns its lines."""
    lines = att.description.split("\n")
    assert len(lines) == 3
    assert lines[0] == HEADER == "Verification result for the previous turn:"
    assert lines[1].startswith("- ") and lines[2].startswith("- ")
    return lines


# ----------------------------------------------------------------------------- code outcomes


@pytest.mark.parametrize(
    "problem, program, case, outcome, checks",
    [
        (SUM, SUM_BAD, ("1 1\n", "2\n"), "PROGRAM_INCONSISTENT", (False, True)),
        (SUM, SUM_OK, ("1 1\n", "3\n"), "TEST_INCONSISTENT", (True, False)),
        (SUM, SUM_BAD, ("1 1\n", "3\n"), "BOTH_INCONSISTENT", (False, False)),
        (SUM, SUM_OK, ("1 1\n", "2\n"), "BOTH_CONSISTENT", (True, True)),
        (
            TOTAL,
            "def total(xs):\n    return max(xs)\n",
            ("[[4, 5]]", "9"),
            "PROGRAM_INCONSISTENT",
            (False, True),
        ),
        (
            TOTAL,
            "def total(xs):\n    return sum(xs)\n",
            ("[[4, 5]]", "10"),
            "TEST_INCONSISTENT",
            (True, False),
        ),
        # no reference solution: (a) golden test on the same input decides the declared output
        (SQUARE, SQUARE_OK, ("3", "10\n"), "TEST_INCONSISTENT", (True, False)),
        (SQUARE, SQUARE_BAD, ("4\n", "16\n"), "PROGRAM_INCONSISTENT", (False, True)),
    ],
)
def test_code_outcomes(problem, program, case, outcome, checks):
    att = attribute_code(problem, program, case, timeout=T)
    assert att.outcome == outcome
    assert att.checks == {"program_correct": checks[0], "test_correct": checks[1]}
    assert repr(case[0]) in lines_of(att)[1] and repr(case[1]) in lines_of(att)[1]


def test_code_without_oracle_is_undetermined():
    # (b) no solution, no golden test on that input: the test cannot be checked
    att = attribute_code(SQUARE, SQUARE_BAD, ("7\n", "49\n"), timeout=T)
    assert att.checks == {"program_correct": False, "test_correct": None}
    assert att.outcome == "PROGRAM_INCONSISTENT"
    assert "could not be checked" in lines_of(att)[2]
    assert "'14\\n'" in lines_of(att)[1]  # what the program printed on 7
    assert att.first_failing_test == 0


def test_observation_reports_program_output():
    att = attribute_code(SUM, SUM_BAD, ("5 2\n", "7\n"), timeout=T)
    assert lines_of(att)[1] == (
        "- On the test input '5 2\\n' the program printed '3\\n', while the "
        "declared expected output was '7\\n'."
    )
    # an output the environment already observed is used as given
    att = attribute_code(
        SUM, SUM_BAD, ("5 2\n", "7\n"), program_output="3\n", timeout=T
    )
    assert "printed '3\\n'" in lines_of(att)[1]


def test_missing_program_and_test_case():
    att = attribute_code(SUM, None, ("1 1\n", "2\n"), timeout=T)
    assert att.checks == {"program_correct": False, "test_correct": True}
    assert "no program was produced" in lines_of(att)[1]
    att = attribute_code(SUM, SUM_OK, None, timeout=T)
    assert att.checks == {"program_correct": True, "test_correct": False}
    assert att.outcome == "TEST_INCONSISTENT"
    assert "no test case was declared" in lines_of(att)[1]
    att = attribute_code(SUM, None, None, timeout=T)
    assert att.outcome == "BOTH_INCONSISTENT"
    lines_of(att)


@pytest.mark.parametrize(
    "program", ["raise ValueError('boom')\n", "def broken(:\n    pass\n"]
)
def test_crashing_program(program):
    att = attribute_code(SUM, program, ("1 1\n", "2\n"), timeout=T)
    assert att.outcome == "PROGRAM_INCONSISTENT"
    assert att.first_failing_test == 0
    assert "printed 'error: " in lines_of(att)[1]


def test_reference_crash_means_test_not_correct():
    att = attribute_code(SUM, SUM_OK, ("not numbers\n", "0\n"), timeout=T)
    assert att.checks["test_correct"] is False


def test_long_and_multiline_values_stay_on_one_line():
    att = attribute_code(
        SUM,
        SUM_OK,
        ("1 1\n" + "x" * 1000, "2\n3\n4\n"),
        program_output="2\n",
        timeout=T,
    )
    line = lines_of(att)[1]
    assert "more characters" in line and len(line) < 800


def test_code_description_never_leaks_reference():
    problem = {  # reference values chosen to differ from the agent values they must not be confused with
        "id": "seven",
        "domain": "code",
        "format": "stdio",
        "question": "Print 7n.",
        "tests": [
            {"input": "1111\n", "output": "7777\n"},
            {"input": "2222\n", "output": "15554\n"},
        ],
        "solution": "print(7 * int(input()))\n",
    }
    # "35": reference output on input 5
    reference_values = ["1111", "7777", "2222", "15554", "35"]
    printed = {
        None: "",
        "print(7 * int(input()) + 1)\n": "36",
        "print(1 / 0)\n": "",
        "print(7 * int(input()))\n": "35",
    }  # program -> what it prints on input 5
    outcomes = set()
    for program, output in printed.items():
        for case in [("5\n", "34\n"), ("5\n", "35\n"), ("5\n", "36\n"), None]:
            att = attribute_code(problem, program, case, timeout=T)
            outcomes.add(att.outcome)
            agent_values = " ".join([output, *(case or ())])
            for value in reference_values:
                # a value an agent also produced may be restated
                if value not in agent_values:
                    assert value not in att.description, (value, att.description)
    assert outcomes == {
        "PROGRAM_INCONSISTENT",
        "TEST_INCONSISTENT",
        "BOTH_INCONSISTENT",
        "BOTH_CONSISTENT",
    }


# ----------------------------------------------------------------------------- hostile cases: only a right oracle

# right on every golden test, else 50
SQUARE_ECHO = "n = int(input())\nprint(n * n if n in (3, 4) else 50)\n"


@pytest.mark.parametrize(
    "program, case",
    [
        (
            SQUARE_ECHO,
            ("7\n", "50\n"),
        ),  # repeats the Tester's wrong output: once certified the test correct
        (
            SQUARE_OK,
            ("7\n", "50\n"),
        ),  # a program right on the golden tests may still be wrong off them ...
        (SQUARE_OK, ("7\n", "49\n")),  # ... so it certifies neither way
    ],
)
def test_program_passing_golden_tests_is_no_oracle(program, case):
    att = attribute_code(SQUARE, program, case, timeout=T)
    assert att.checks == {"program_correct": True, "test_correct": None}
    assert att.outcome == "UNDECIDED"
    assert (
        "could not be checked" in lines_of(att)[2] and "agrees" not in lines_of(att)[2]
    )
    turns = [Turn(t, {}, CodeArtefacts(program, *case, "", {}), False) for t in (0, 1)]
    team = [
        attribution.attribute_turn(SQUARE, turn.artefacts, timeout=T) for turn in turns
    ]  # a^t per agent
    assert (
        team[0].agents == {"coder": True, "tester": None}
        and team[0].outcome == att.outcome
    )
    assert revision_counts(decisions([Episode(SQUARE, turns)], [team])).keys() == {
        "coder"
    }  # the undecided Tester check is
    # not counted


DOUBLE = {  # stdio with a reference solution that prints nothing, without failing, on an empty input
    "id": "double",
    "domain": "code",
    "format": "stdio",
    "question": "Print each integer doubled, one per line.",
    "tests": [
        {"input": "1 2\n", "output": "2\n4\n"},
        {"input": "5\n", "output": "10\n"},
    ],
    "solution": "import sys\nfor t in sys.stdin.read().split():\n    print(2 * int(t))\n",
}
COUNT = {  # stdio without a reference solution; its empty input and output are part of the format
    "id": "count",
    "domain": "code",
    "format": "stdio",
    "question": "Print how many lines the input has.",
    "tests": [{"input": "a\nb\n", "output": "2\n"}, {"input": "", "output": "0\n"}],
    "solution": None,
}
# prints 0 on an empty input
SUM_LENIENT = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"


@pytest.mark.parametrize(
    "problem, program, case, test_correct",
    [
        (
            DOUBLE,
            DOUBLE["solution"],
            ("", ""),
            False,
        ),  # the reference agrees with nothing on nothing
        (DOUBLE, DOUBLE["solution"], (" \n\t", "\n \n"), False),  # whitespace only
        (
            dict(SUM, solution=SUM_LENIENT),
            SUM_LENIENT,
            ("", "0\n"),
            False,
        ),  # a lenient reference takes it
        (
            SQUARE,
            "import sys\nfor t in sys.stdin: print(int(t) ** 2)\n",
            ("", ""),
            False,
        ),  # no reference, no golden
        (
            TOTAL,
            "def total(xs):\n    return sum(xs)\n",
            (" ", ""),
            False,
        ),  # function format: not an argument list
        (
            COUNT,
            "import sys\nprint(len(sys.stdin.readlines()))\n",
            ("\n", "0\n"),
            True,
        ),  # empty is in COUNT's format
    ],
)
def test_degenerate_test_case_is_not_a_correct_test(
    problem, program, case, test_correct
):
    att = attribute_code(problem, program, case, timeout=T)
    assert att.checks == {"program_correct": True, "test_correct": test_correct}


@pytest.mark.parametrize(
    "reference, declared",
    [
        ("{1, 2}", "{True, 2}"),
        ("[1]", "[True]"),
        ("(1, 0)", "(1, False)"),
        ("{1: 'a'}", "{True: 'a'}"),
        ("{'a': 1}", "{'a': True}"),
        ("{(1, 2)}", "{(True, 2)}"),
        ("[{0, 5}]", "[{False, 5}]"),
        ("{(0,): 1}", "{(False,): 1}"),
        ("[1, 2]", "{True, 2}"),
    ],
)
def test_booleans_never_equal_numbers_inside_values(reference, declared):
    for got, expected in [(reference, declared), (declared, reference)]:
        assert outputs_match("function", got, expected) is False, (got, expected)
        assert outputs_match("function", got, got) is True
    problem = {
        **TOTAL,
        "id": "const",
        "entry_point": "f",
        "tests": [{"input": "[]", "output": reference}],
        "solution": f"def f():\n    return {reference}\n",
    }
    att = attribute_code(problem, problem["solution"], ("[]", declared), timeout=T)
    assert att.checks == {"program_correct": True, "test_correct": False}


@pytest.mark.parametrize(
    "got, expected",
    [  # the rest of the rules, inside containers too
        ("{1.0, 2}", "{1, 2}"),
        ("{1: 'a'}", "{1.0: 'a'}"),
        ("{(1.0, True)}", "{(1, True)}"),
        ("[True, 1.0]", "[True, 1]"),
        ("(2, 1, 2)", "{1, 2}"),
        ("{False: (0.0,)}", "{False: [0]}"),
    ],
)
def test_numbers_still_match_inside_values(got, expected):
    assert outputs_match("function", got, expected) is True


# ----------------------------------------------------------------------------- math outcomes


@pytest.mark.parametrize(
    "answer, derived, printed, outcome",
    [
        ("601", "48", "601", "DERIVATION_INCONSISTENT"),
        ("601", "601", "36", "COMPUTATION_INCONSISTENT"),
        ("601", "48", "36", "BOTH_INCONSISTENT"),
        ("601", "$601$", "601.0", "BOTH_CONSISTENT"),
        ("3/4", "\\frac{3}{4}", "0.75", "BOTH_CONSISTENT"),
        ("\\frac{3}{4}", "\\boxed{\\frac{2}{3}}", "0.75", "DERIVATION_INCONSISTENT"),
        ("1,000", "1000", "1,001", "COMPUTATION_INCONSISTENT"),
        ("2\\sqrt{3}", "\\sqrt{12}", "2*sqrt(3)", "BOTH_CONSISTENT"),
    ],
)
def test_math_outcomes(answer, derived, printed, outcome):
    att = attribute_math(math_problem(answer), derived, printed, True)
    assert att.outcome == outcome
    assert set(att.checks) == {"derivation_correct", "program_correct"}
    assert (
        lines_of(att)[1]
        == f"- The derivation reported {derived!r} and the program printed {printed!r}."
    )


def test_math_missing_and_crashed():
    att = attribute_math(math_problem("601"), None, "601", True)
    assert att.outcome == "DERIVATION_INCONSISTENT"
    assert "no answer after '####'" in lines_of(att)[1]
    # a run that failed never counts as an answer, even when its line contains the reference number
    att = attribute_math(math_problem("20"), "20", "error: timed out after 20 s", False)
    assert att.outcome == "COMPUTATION_INCONSISTENT"
    assert "printed 'error: timed out after 20 s'" in lines_of(att)[1]
    att = attribute_math(math_problem("601"), None, None, False)
    assert att.outcome == "BOTH_INCONSISTENT"
    assert "no printed result" in lines_of(att)[1]


def test_math_description_never_leaks_reference():
    reference = "\\frac{7}{9}"
    for derived in ["0.7777777", "7/9", "0.5", None]:
        for printed in [
            "0.777777777",
            "0.25",
            "error: ZeroDivisionError: division by zero",
            None,
        ]:
            ran = printed is not None and not printed.startswith("error")
            att = attribute_math(math_problem(reference), derived, printed, ran)
            assert "frac" not in att.description and "7}{9" not in att.description


# ----------------------------------------------------------------------------- equivalence


def test_each_role_is_judged_by_a_check_of_its_own_artefact():
    """ROLE_CHECK names, for every role, one of its domain's two checks, and the two roles of a domain differ."""
    checks = {
        "code": set(attribute_code(SUM, SUM_BAD, ("5 2\n", "7\n"), timeout=T).checks),
        "math": set(attribute_math({"answer": "29"}, "29", "30", True).checks),
    }
    for domain, roles in ROLES.items():
        assert {ROLE_CHECK[r] for r in roles} == checks[domain], domain
    assert (
        ROLE_CHECK["tester"] == "test_correct"
        and ROLE_CHECK["reasoner"] == "derivation_correct"
    )


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("1.0000001", "1", True),
        ("1.001", "1", False),
        ("1000000.5", "1000000", True),
        ("0.5", "\\frac{1}{2}", True),
        ("1,000", "1000", True),
        ("1,00", "100", False),
        ("\\boxed{3/4}", "0.75", True),
        ("-\\frac{1}{2}", "-0.5", True),
        ("42.", "42", True),
        ("50\\%", "50", True),
        ("$2\\sqrt{3}$", "\\sqrt{12}", True),
        ("x^2 + 1", "1 + x**2", True),
        ("The answer is 601", "601", True),
        ("\u0663", "3", False),
        ("\uff12\uff19", "29", False),
        ("\u0661/\u0662", "0.5", False),  # ASCII digits only
        ("garbage", "garbage", False),
        ("no idea", "no idea", False),
        ("???", "5", False),
        (None, "1", False),
        ("1", None, False),
        ("", "", False),
        ("  ", "0", False),
    ],
)
def test_answers_equivalent(a, b, expected):
    assert answers_equivalent(a, b) is expected


def test_answers_equivalent_bounds_its_cost(finishes):
    # a printed answer may be a megabyte; digits then a letter cost a backtracking number pattern quadratic time
    assert finishes(answers_equivalent, "1" * 100_000 + "x", "29") is False
    # over ANSWER_CHARS: not compared, even with itself (sympy: up to SYMBOLIC_TIMEOUT)
    long = "9" * 1001
    assert answers_equivalent(long, long) is False


def test_answers_equivalent_in_worker_thread():
    # math-verify's signal-based timeouts would fail off the main thread; ours are disabled
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(
                answers_equivalent,
                ["\\sqrt{12}", "0.5", "x^2"],
                ["2\\sqrt{3}", "1/2", "y"],
            )
        )
    assert results == [True, True, False]


def test_answers_equivalent_gives_up_on_runaway_sympy(monkeypatch):
    monkeypatch.setattr(answers, "SYMBOLIC_TIMEOUT", 1.0)
    start = time.monotonic()
    with ThreadPoolExecutor(1) as pool:  # also from a worker thread
        assert (
            pool.submit(answers_equivalent, "10^{10^{10^{10}}}", "5").result() is False
        )
    assert time.monotonic() - start < 10


# ----------------------------------------------------------------------------- c^{<t}


def test_verdicts_before():
    atts = [attribute_math(math_problem("5"), str(k), "5", True) for k in range(3)]
    assert verdicts_before(atts, 0) == []
    assert verdicts_before(atts, 2) == [atts[0].description, atts[1].description]
    assert verdicts_before(atts, 3)[-1] == atts[2].description
    for t in (-1, 4):
        with pytest.raises(ValueError):
            verdicts_before(atts, t)


def test_attribute_episodes_keeps_each_episodes_turns_in_order():
    math_p = {
        "id": "m",
        "domain": "math",
        "question": "What is 2 plus 2?",
        "answer": "4",
    }
    code_turn = CodeArtefacts(SUM_BAD, "2 3\n", "5\n", "-1\n", {})
    eps = [
        Episode(
            math_p,
            [
                Turn(t, {}, MathArtefacts("", d, None, "4", {}, True), False)
                for t, d in enumerate(["5", "4"])
            ],
        ),
        Episode(math_p, []),
        Episode(
            SUM,
            [
                Turn(0, {}, code_turn, False),
                Turn(
                    1,
                    {},
                    dataclasses.replace(
                        code_turn, program=SUM_OK, program_output="5\n"
                    ),
                    True,
                ),
            ],
        ),
    ]
    got = attribution.attribute_episodes(eps, timeout=T, workers=3)
    # one list per episode, in order, also for one without turns
    assert len(got) == 3 and got[1] == []
    assert [a.outcome for a in got[0]] == ["DERIVATION_INCONSISTENT", "BOTH_CONSISTENT"]
    assert [a.checks["program_correct"] for a in got[2]] == [False, True]
