"""Benchmark converters on hand-written records in each source's own schema (no network, no shared data files)."""

import base64
import gzip
import json
import os
import pickle
import subprocess
import sys
import zlib
from collections import Counter

import pytest

from attribution import attribute_code
from infra.data import ProblemError, check_problem, load_problems
from tools import converters, loaders
from tools.loaders import load_dataset_as_problems


def _jsonl(path, records):
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)
    if str(path).endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return str(path)


def _convert(conv, rec, pid="p"):
    return conv(rec, "f.jsonl:1", pid, Counter())


# ----------------------------------------------------------------------------- math


def test_gsm8k_answer_follows_hashes_without_commas():
    rec = {
        "question": "How many?",
        "answer": "12 * 100 = <<12*100=1200>>1200\n#### 1,200",
    }
    assert _convert(converters.from_gsm8k, rec) == {
        "id": "p",
        "domain": "math",
        "question": "How many?",
        "answer": "1200",
    }


@pytest.mark.parametrize(
    "rec, answer",
    [
        (
            {"problem": "MATH?", "answer": "\\frac{1}{2}", "type": "Algebra"},
            "\\frac{1}{2}",
        ),  # MATH, MATH-500
        (
            {"id": 60, "problem": "AIME?", "answer": "204", "question": "AIME?"},
            "204",
        ),  # AIME 24 (Qwen)
        ({"id": 0, "problem": "AMC?", "answer": 27.0}, "27"),  # AMC 23: float
        ({"problem": "x?", "answer": 0.5}, "0.5"),
        ({"question": "Q?", "answer": 70}, "70"),  # AIME 25 hub ints
        ({"ID": "2024-I-1", "Problem": "P?", "Answer": 204}, "204"),  # Maxwell-Jia
    ],
)
def test_math_layouts(rec, answer):
    p = _convert(converters.from_math, rec)
    assert (
        p["answer"] == answer and p["question"].endswith("?") and p["domain"] == "math"
    )


def test_olympiadbench_takes_the_one_string_and_flags_multi_answer():
    stats = Counter()
    one = converters.from_olympiadbench(
        {
            "id": 1606,
            "question": "Q",
            "final_answer": ["2"],
            "is_multiple_answer": False,
        },
        "f:1",
        "ob-1606",
        stats,
    )
    multi = converters.from_olympiadbench(
        {"question": "Q", "final_answer": ["$69$,$84$"], "is_multiple_answer": True},
        "f:2",
        "ob-2",
        stats,
    )
    assert one == {"id": "ob-1606", "domain": "math", "question": "Q", "answer": "2"}
    assert multi["answer"] == "$69$,$84$" and multi["multi_answer"] is True
    assert stats["multi-answer problems kept (flagged)"] == 1


def test_local_math_files_ids_and_skips(tmp_path):
    f = _jsonl(
        tmp_path / "amc23.jsonl",
        [
            {"id": 3, "problem": "a?", "answer": 1.0},
            {"problem": "b?", "answer": 2.0},
            {"problem": "c?", "answer": None},
            {"problem": "d?", "answer": float("nan")},
        ],
    )
    stats = Counter()
    ps = load_dataset_as_problems(f, stats=stats)
    # numeric id, else line
    assert [(p["id"], p["answer"]) for p in ps] == [("amc23-3", "1"), ("amc23-2", "2")]
    # null, and NaN (how pandas exports a gap)
    assert stats == {"records skipped: no reference answer": 2}
    (tmp_path / "math_train.json").write_text(
        json.dumps([{"problem": "p", "answer": "3"}])
    )  # one JSON list
    assert (
        load_dataset_as_problems(str(tmp_path / "math_train.json"))[0]["id"]
        == "math_train-1"
    )
    g = _jsonl(
        tmp_path / "gsm8k_test.jsonl", [{"question": "q", "answer": "so\n#### 18"}]
    )
    assert load_dataset_as_problems(g) == [
        {"id": "gsm8k_test-1", "domain": "math", "question": "q", "answer": "18"}
    ]


# ----------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize(
    "second, message",
    [
        ("{not json", "invalid JSON"),
        ({"question": "q", "answer": "no hashes"}, "has no '#### <number>'"),
        ({"question": "q"}, "missing field 'answer'"),
        ({"question": 5, "answer": "#### 1"}, "field 'question' has the wrong type"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_malformed_record_names_file_and_line(tmp_path, second, message):
    f = _jsonl(
        tmp_path / "gsm8k.jsonl", [{"question": "q", "answer": "#### 1"}, second]
    )
    with pytest.raises(ProblemError, match=message) as e:
        load_dataset_as_problems(f)
    assert str(e.value).startswith(f"{f}:2: ")


def test_malformed_sources(tmp_path):
    (tmp_path / "m.json").write_text(
        json.dumps([{"problem": "p", "answer": "1"}, {"problem": "p"}])
    )
    with pytest.raises(ProblemError, match=r"m.json: record 2: missing field 'answer'"):
        load_dataset_as_problems(str(tmp_path / "m.json"))
    with pytest.raises(ProblemError, match="unknown record layout"):
        load_dataset_as_problems(_jsonl(tmp_path / "x.jsonl", [{"foo": 1}]))
    with pytest.raises(ProblemError, match="final_answer"):
        load_dataset_as_problems(
            _jsonl(tmp_path / "ob.jsonl", [{"question": "q", "final_answer": []}])
        )
    with pytest.raises(ProblemError, match="cannot read"):
        load_dataset_as_problems(str(tmp_path / "absent.jsonl"))
    with pytest.raises(ProblemError, match="hub sources only"):
        load_dataset_as_problems(
            _jsonl(tmp_path / "a.jsonl", [{"problem": "p", "answer": "1"}]),
            split="test",
        )
    bad_plus = {**HUMANEVAL, "base_input": [[1, 2]], "plus_input": [3]}
    with pytest.raises(
        ProblemError,
        match=r"hep.jsonl:1: field 'plus_input' must be a list of argument lists",
    ):
        load_dataset_as_problems(_jsonl(tmp_path / "hep.jsonl", [bad_plus]))
    with pytest.raises(ProblemError, match="duplicate id 'a'"):
        load_dataset_as_problems(
            _jsonl(
                tmp_path / "d.jsonl", [{"id": "a", "problem": "p", "answer": "1"}] * 2
            )
        )


def test_hub_source_without_datasets_package_says_how(monkeypatch):
    # `import datasets` raises ImportError
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ProblemError, match=r"pip install datasets; needs network"):
        load_dataset_as_problems("deepmind/code_contests", limit=1)


# ----------------------------------------------------------------------------- function format (reference runs)

ADD_PROMPT = 'def add(a, b):\n    """Return a + b.\n    >>> add(1, 2)\n    3\n    """\n'
HUMANEVAL = {
    "task_id": "HumanEval/0",
    "prompt": ADD_PROMPT,
    "entry_point": "add",
    "canonical_solution": "    return a + b\n",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    "    assert abs(candidate(0.5, 1) - 1.5) < 1e-6\n"
    "    for x in range(3):\n        assert candidate(x, x) == 2 * x\n",
}


def test_humaneval_extracts_literal_calls_and_runs_the_reference(tmp_path):
    stats = Counter()
    ps = load_dataset_as_problems(
        _jsonl(tmp_path / "humaneval.jsonl.gz", [HUMANEVAL]), stats=stats
    )
    assert ps == [
        {
            "id": "HumanEval/0",
            "domain": "code",
            "format": "function",
            "entry_point": "add",
            "question": ADD_PROMPT,
            "solution": ADD_PROMPT + "    return a + b\n",
            "tests": [
                {"input": "[1, 2]", "output": "3"},
                {"input": "[0.5, 1]", "output": "1.5"},
            ],
        }
    ]
    # candidate(x, x) inside the loop
    assert stats == {"test calls with non-literal arguments": 1}


def test_evalplus_skips_bad_inputs_crashes_non_literal_outputs_and_caps(tmp_path):
    rec = {
        **HUMANEVAL,
        "canonical_solution": "    if a == 0:\n        raise ValueError\n"
        "    return range(a) if a < 0 else a / b\n",
        "base_input": [[1, 2], [1, 2]],
        "plus_input": [[2, 4], [float("inf"), 1], [0, 1], [-1, 1], [3, 1], [4, 1]],
        "atol": 0,
    }
    stats = Counter()
    ps = load_dataset_as_problems(
        _jsonl(tmp_path / "humanevalplus.jsonl", [rec]), max_tests=5, stats=stats
    )
    assert ps[0]["tests"] == [
        {"input": "[1, 2]", "output": "0.5"},
        {"input": "[2, 4]", "output": "0.5"},
        {"input": "[3, 1]", "output": "3.0"},
    ]  # the duplicate [1, 2] is kept once
    assert stats == {
        "inputs not a Python literal": 1,  # inf has no literal
        "inputs beyond max_tests": 1,  # [4, 1]: 6 distinct literal inputs, cap 5
        "inputs where the reference failed": 1,  # a == 0 raises
        "outputs not a Python literal": 1,
    }  # a < 0 returns a range object


def test_results_over_the_literal_cap_are_left_out_not_refused_at_load(tmp_path):
    """load_problems refuses a function result over the literal cap (compared as text, the reference's own result
    would fail): the converter leaves such a test out, counted, and a problem left without tests with it."""
    rec = {
        **HUMANEVAL,
        "canonical_solution": "    return [1] * a * b\n",
        "base_input": [[1, 2], [200, 100]],
        "plus_input": [],
    }
    stats = Counter()
    ps = load_dataset_as_problems(
        _jsonl(
            tmp_path / "humanevalplus.jsonl",
            [rec, {**rec, "task_id": "HumanEval/1", "base_input": [[100, 200]]}],
        ),
        stats=stats,
    )
    assert [(p["id"], p["tests"]) for p in ps] == [
        ("HumanEval/0", [{"input": "[1, 2]", "output": "[1, 1]"}])
    ]
    assert stats == {
        "tests with an expected output over the verifier's caps": 2,
        "problems without tests": 1,
    }
    path = tmp_path / "out.jsonl"
    path.write_text(json.dumps(ps[0]) + "\n")
    assert load_problems(str(path)) == ps


def test_evalplus_gives_inputs_the_tuples_of_the_benchmark_asserts(tmp_path):
    rec = {
        "task_id": "Mbpp/2",
        "prompt": '"""\nShared elements.\nassert f((3, 4), [(1, 2)]) == 1\n"""\n',
        "entry_point": "f",
        "canonical_solution": "def f(t, ps):\n    return [type(t).__name__, type(ps[0]).__name__]\n",
        "base_input": [[[3, 4], [[1, 2]]]],
        "plus_input": {},  # JSON lost the tuples; MBPP+ 793 has {}
        "assertion": "\nassert f((3, 4), [(1, 2)]) == 1\n",
        "atol": 0,
    }
    ps = load_dataset_as_problems(_jsonl(tmp_path / "mbppplus.jsonl", [rec]))
    assert ps[0]["tests"] == [
        {"input": "[(3, 4), [(1, 2)]]", "output": "['tuple', 'tuple']"}
    ]
    assert (
        ps[0]["solution"] == rec["canonical_solution"]
        and ps[0]["question"] == rec["prompt"]
    )
    assert converters._like([[1, [2, [3]]], 4], [(1, (2, (3,))), 4]) == [
        (1, (2, (3,))),
        4,
    ]  # nested tuples all the way


def test_results_the_benchmark_compares_as_sets_are_stored_and_checked_as_sets(
    tmp_path,
):
    rec = {
        "task_id": 2,
        "text": "Shared elements of two tuples.",
        "code": "def similar(a, b):\n    return tuple(sorted(set(a) & set(b)))\n",
        "test_list": [
            "assert set(similar((3, 4, 5), (5, 4))) == set((4, 5))",
            "assert set(similar((1,), (2,))) == set(())",
        ],
        "test_setup_code": "",
    }
    stats = Counter()
    p = load_dataset_as_problems(_jsonl(tmp_path / "mbpp.jsonl", [rec]), stats=stats)[0]
    assert (
        p["tests"]
        == [
            {"input": "[(3, 4, 5), (5, 4)]", "output": "{4, 5}"},
            {"input": "[(1,), (2,)]", "output": "set()"},
        ]
        and not stats
    )  # literal_eval reads set()
    # the benchmark's own assert passes a program that returns the elements in another order, and so does ours
    reordered = "def similar(a, b):\n    return sorted(set(a) & set(b), reverse=True)\n"
    assert attribute_code(p, reordered, None).checks["program_correct"]
    plain = load_dataset_as_problems(
        _jsonl(
            tmp_path / "plain.jsonl",
            [{**rec, "test_list": ["assert similar((3, 4, 5), (5, 4)) == (4, 5)"]}],
        )
    )[0]
    assert plain["tests"][0]["output"] == "(4, 5)"  # an ordered assert stays ordered


def test_mbpp_entry_point_from_first_assert_and_setup_code_skipped(tmp_path):
    recs = [
        {
            "task_id": 11,
            "text": "Write a function to double n.",
            "code": "K = 2\r\ndef double(n):\r\n\treturn K * n",
            "test_list": [
                "assert double(2) == 4",
                "assert double(-1) == -2",
                "assert double(n) == 0",
            ],
            "test_setup_code": "",
            "challenge_test_list": [],
        },
        {
            "task_id": 12,
            "text": "Tree.",
            "code": "def h(t): return 0",
            "test_list": ["assert h(root) == 0"],
            "test_setup_code": "root = Node(1)",
            "challenge_test_list": [],
        },
    ]
    stats = Counter()
    ps = load_dataset_as_problems(_jsonl(tmp_path / "mbpp.jsonl", recs), stats=stats)
    assert ps == [
        {
            "id": "mbpp-11",
            "domain": "code",
            "format": "function",
            "entry_point": "double",
            "question": '"""\nWrite a function to double n.\nassert double(2) == 4\n"""\n',
            "solution": recs[0]["code"],
            "tests": [
                {"input": "[2]", "output": "4"},
                {"input": "[-1]", "output": "-2"},
            ],
        }
    ]
    assert stats == {
        "test calls with non-literal arguments": 1,
        "records skipped: tests need test_setup_code (objects built before the asserts)": 1,
    }


def test_reference_tests_counts_non_literal_return_values():
    p = {
        "id": "s",
        "domain": "code",
        "format": "function",
        "entry_point": "f",
        "question": "q",
        "tests": [],
        "solution": "def f(x):\n    return {x} if x else frozenset()\n",
    }
    stats = Counter()
    kept = loaders.reference_tests([(p, [[1], [0]], False)], stats)
    assert kept[0]["tests"] == [{"input": "[1]", "output": "{1}"}]
    # 'frozenset()' is a call, not a literal ('set()' is one)
    assert stats == {"outputs not a Python literal": 1}


# ----------------------------------------------------------------------------- LeetCode, stdio sources

LEETCODE = {
    "task_id": "weekly-contest-1-add",
    "prompt": '"""\nReturn a + b.\n"""\nclass Solution:\n'
    "    def addTwo(self, a: int, b: List[int]) -> int:\n        ",
    "test": '\nmy_solution = Solution()\n\ntest_input = { "b": [2], "a": 1 }\n'
    'assert my_solution.addTwo(**test_input) == 3\n\ntest_input = { "a": 5, "b": [0] }\n'
    "assert my_solution.addTwo(**test_input) == 5\n\n"
    "assert _f2(my_solution.addTwo(_f1([1]))) == [1]\n",
}


def test_leetcode_literal_asserts_become_golden_tests_without_a_reference():
    stats = Counter()
    p = converters.from_leetcode(LEETCODE, "lc.jsonl:1", "weekly-contest-1-add", stats)
    assert p["entry_point"] == "addTwo" and p["solution"] is None
    assert p["question"] == (
        '"""\nReturn a + b.\n"""\n'
        "from typing import *\n\ndef addTwo(a: int, b: List[int]) -> int:\n"
    )
    assert p["tests"] == [
        {"input": "[1, [2]]", "output": "3"},
        {"input": "[5, [0]]", "output": "5"},
    ]
    assert stats == {"test calls with non-literal arguments": 1}
    check_problem(p)


def test_code_contests_tests_in_order_and_first_python3_solution():
    rec = {
        "name": "1A. Sum",
        "description": "Print a+b.",
        "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
        "private_tests": {"input": ["2 2\n"], "output": ["4\n"]},
        "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]},
        "solutions": {
            "language": [2, 1, 3, 3],
            "solution": ["cpp", "py2", "print(sum(map(int, input().split())))", "x"],
        },
    }
    p = converters.from_code_contests(
        rec, "cc:1", converters.record_id(rec, "code_contests", 1), Counter()
    )
    assert p == {
        "id": "1A. Sum",
        "domain": "code",
        "format": "stdio",
        "question": "Print a+b.",
        "tests": [
            {"input": "1 2\n", "output": "3\n"},
            {"input": "2 2\n", "output": "4\n"},
            {"input": "0 0\n", "output": "0\n"},
        ],
        "solution": "print(sum(map(int, input().split())))",
    }
    with pytest.raises(converters.Skip):
        no_tests = {
            **rec,
            "public_tests": None,
            "private_tests": None,
            "generated_tests": None,
        }
        converters.from_code_contests(no_tests, "cc:2", "x", Counter())
    with pytest.raises(ProblemError, match="cc:3: field 'public_tests'"):
        converters.from_code_contests(
            {**rec, "public_tests": {"input": "1 2"}}, "cc:3", "x", Counter()
        )


def test_apps_stdio_kept_call_based_skipped():
    rec = {
        "problem_id": 7,
        "question": "Echo.",
        "input_output": json.dumps(
            {"inputs": ["a\n", ["b", "c"]], "outputs": ["a\n", ["b", "c"]]}
        ),
        "solutions": json.dumps(["print(input())"]),
        "starter_code": "",
        "difficulty": "introductory",
    }
    p = converters.from_apps(
        rec, "apps:1", converters.record_id(rec, "apps", 1), Counter()
    )
    assert p == {
        "id": "apps-7",
        "domain": "code",
        "format": "stdio",
        "question": "Echo.",
        "solution": "print(input())",
        "tests": [
            {"input": "a\n", "output": "a\n"},
            {"input": "b\nc\n", "output": "b\nc\n"},
        ],
    }
    with pytest.raises(converters.Skip, match="call-based"):
        converters.from_apps(
            {
                **rec,
                "input_output": json.dumps(
                    {"fn_name": "f", "inputs": [[1]], "outputs": [[1]]}
                ),
            },
            "apps:2",
            "x",
            Counter(),
        )
    with pytest.raises(
        ProblemError, match="apps:3: field 'input_output' is not valid JSON"
    ):
        converters.from_apps({**rec, "input_output": "{oops"}, "apps:3", "x", Counter())


def _lcb_compress(cases):
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def test_livecodebench_stdin_with_compressed_private_tests():
    rec = {
        "question_id": "abc301_a",
        "question_content": "Read n, print 2n.",
        "platform": "atcoder",
        "starter_code": "",
        "public_test_cases": json.dumps(
            [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
        ),
        "private_test_cases": _lcb_compress(
            [{"input": "5\n", "output": "10\n", "testtype": "stdin"}]
        ),
        "metadata": "{}",
    }
    p = converters.from_livecodebench(
        rec, "lcb:1", converters.record_id(rec, "livecodebench", 1), Counter()
    )
    assert p == {
        "id": "abc301_a",
        "domain": "code",
        "format": "stdio",
        "question": "Read n, print 2n.",
        "solution": None,
        "tests": [
            {"input": "1\n", "output": "2\n"},
            {"input": "5\n", "output": "10\n"},
        ],
    }
    # anything but a str is refused
    evil = base64.b64encode(zlib.compress(pickle.dumps(Counter()))).decode()
    with pytest.raises(ProblemError, match="lcb:2: test cases"):
        converters.from_livecodebench(
            {**rec, "private_test_cases": evil}, "lcb:2", "x", Counter()
        )


def test_livecodebench_functional_becomes_a_function_problem():
    rec = {
        "question_id": "3000",
        "question_content": "Sum nums, then add k.",
        "platform": "leetcode",
        "starter_code": "class Solution:\n    def addK(self, nums: List[int], k: int) -> int:\n        ",
        "public_test_cases": json.dumps(
            [{"input": "[1, 2]\n3", "output": "6", "testtype": "functional"}]
        ),
        "private_test_cases": json.dumps(
            [{"input": "[]\n0", "output": "0", "testtype": "functional"}]
        ),
        "metadata": json.dumps({"func_name": "addK"}),
    }
    p = converters.from_livecodebench(rec, "lcb:1", "3000", Counter())
    assert (
        p["format"] == "function"
        and p["entry_point"] == "addK"
        and p["solution"] is None
    )
    assert p["question"].endswith(
        "\n\nfrom typing import *\n\ndef addK(nums: List[int], k: int) -> int:\n"
    )
    assert p["tests"] == [
        {"input": "[[1, 2], 3]", "output": "6"},
        {"input": "[[], 0]", "output": "0"},
    ]
    check_problem(p)


def test_detect_converter_by_fields():
    cases = [
        ({"question": "q", "answer": "x #### 1"}, converters.from_gsm8k),
        ({"problem": "p", "answer": "1"}, converters.from_math),
        ({"question": "q", "final_answer": ["1"]}, converters.from_olympiadbench),
        (HUMANEVAL, converters.from_humaneval),
        ({**HUMANEVAL, "base_input": []}, converters.from_evalplus),
        ({"text": "t", "test_list": []}, converters.from_mbpp),
        (LEETCODE, converters.from_leetcode),
        ({"public_tests": {}}, converters.from_code_contests),
        ({"input_output": ""}, converters.from_apps),
        ({"question_content": ""}, converters.from_livecodebench),
    ]
    for rec, conv in cases:
        assert loaders.detect_converter(rec, "f:1") is conv


# ----------------------------------------------------------------------------- command line


def test_cli_writes_a_loadable_problem_file(tmp_path):
    q = "q\u2028é"  # a line separator inside a question must not split the written line
    src, out = (
        _jsonl(tmp_path / "gsm8k.jsonl", [{"question": q, "answer": "#### 1,000"}]),
        tmp_path / "p.jsonl",
    )
    r = subprocess.run(
        [sys.executable, "-m", "tools.loaders", src, "--out", str(out), "--limit", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "wrote 1 problems" in r.stderr
    assert load_problems(str(out)) == [
        {"id": "gsm8k-1", "domain": "math", "question": q, "answer": "1000"}
    ]


def test_cli_bad_input_one_line_exit_2_nothing_written(tmp_path):
    src = _jsonl(
        tmp_path / "gsm8k.jsonl",
        [{"question": "q", "answer": "#### 1"}, {"question": "q"}],
    )
    out = tmp_path / "p.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "tools.loaders", src, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: {src}:2: missing field 'answer'"]
    assert not out.exists() and not (tmp_path / "p.jsonl.tmp").exists()


def test_cli_corrupt_gz_one_line_exit_2_nothing_written(tmp_path, error_line):
    good = gzip.compress(b'{"question": "q", "answer": "#### 1"}\n' * 200)
    src, out = tmp_path / "gsm8k.jsonl.gz", tmp_path / "p.jsonl"
    # deflate data broken mid-stream; cut short
    for damaged in (good[:20] + b"\xff" * 30 + good[50:], good[:-20]):
        src.write_bytes(damaged)
        with pytest.raises(SystemExit) as e:
            loaders.main([str(src), "--out", str(out)])
        assert e.value.code == 2
        error_line(f"{src}: cannot read (")
        assert os.listdir(tmp_path) == ["gsm8k.jsonl.gz"]


def test_cli_unusable_out_fails_before_converting(tmp_path, error_line, monkeypatch):
    src = _jsonl(tmp_path / "gsm8k.jsonl", [{"question": "q", "answer": "#### 1"}])
    monkeypatch.setattr(
        loaders,
        "load_dataset_as_problems",
        lambda *a, **k: pytest.fail("converted before --out"),
    )
    # a directory; a file in a directory that is not there
    for bad in (tmp_path, tmp_path / "missing" / "p.jsonl"):
        with pytest.raises(SystemExit) as e:
            loaders.main([src, "--out", str(bad)])
        assert e.value.code == 2
        error_line(f"--out {bad}: ")
    assert os.listdir(tmp_path) == ["gsm8k.jsonl"]


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--limit", "-1"),
        ("--limit", "0"),
        ("--max-tests", "-1"),
        ("--max-tests", "0"),
        ("--workers", "0"),
        ("--timeout", "0"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
    ],
)
def test_cli_bad_numbers_are_refused_at_parse_time(tmp_path, flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        loaders.main(["gsm8k.jsonl", "--out", str(tmp_path / "p.jsonl"), flag, value])
    assert e.value.code == 2 and f"error: argument {flag}: " in capsys.readouterr().err
