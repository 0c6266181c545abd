"""Benchmark converters: one pure function per source, record -> problem in infra/data.py's schema, so each is testable
on a hand-written record of that source. tools/loaders.py reads the files and hub datasets, picks the converter and
computes the golden outputs of function problems.
"""

import ast
import base64
import io
import json
import math
import pickle
import zlib
from collections import Counter

from infra.data import ProblemError

# One converter per source: from_x(rec, where, pid, stats) -> problem. `where` names the record in errors
# ("FILE:LINE"), `pid` is its id (record_id), `stats` (a Counter) counts what was dropped and why. A malformed
# record raises ProblemError; a well-formed one that cannot become a problem (no reference answer, no literal
# test) raises Skip and is counted. HumanEval(+)/MBPP(+) converters return (problem without tests, argument
# lists, as_set): their golden outputs come from running the reference solution (tools/loaders.py's
# reference_tests); as_set says that the benchmark's asserts compare the result as a set
# (`assert set(f(x)) == set(...)`).


class Skip(Exception):
    """A well-formed record that yields no problem; the message is the reason counted in stats."""


def _get(rec, where, *names, typ=str):
    """The first of `names` present and not null in the record, which must be a `typ`; else ProblemError."""
    if not isinstance(rec, dict):
        raise ProblemError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    for k in names:
        if rec.get(k) is not None:
            if not isinstance(rec[k], typ):
                raise ProblemError(
                    f"{where}: field {k!r} has the wrong type ({type(rec[k]).__name__})"
                )
            return rec[k]
    raise ProblemError(f"{where}: missing field {' or '.join(map(repr, names))}")


def _json_field(rec, where, name):
    """A field holding JSON text (APPS), decoded; an empty string is None, a decoded value is kept."""
    if not isinstance(rec.get(name), str):
        return rec.get(name)
    try:
        return json.loads(rec[name]) if rec[name].strip() else None
    except json.JSONDecodeError as e:
        raise ProblemError(
            f"{where}: field {name!r} is not valid JSON ({e.msg})"
        ) from None


def is_literal(text):
    try:
        ast.literal_eval(text)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def record_id(rec, stem, n):
    """The source's own id when it is a string; a numeric id, or none, becomes '{stem}-{id or line}'."""
    for k in (
        "task_id",
        "question_id",
        "unique_id",
        "problem_id",
        "id",
        "ID",
        "problem_idx",
        "name",
    ):
        if isinstance(rec, dict) and rec.get(k) is not None:
            return rec[k] if isinstance(rec[k], str) else f"{stem}-{rec[k]}"
    return f"{stem}-{n}"


def _answer(value, where):
    """Reference answer as a string: AMC's 27.0 -> '27', 0.5 -> '0.5', ' 7 ' -> '7'; null, '' or NaN (a gap in a
    pandas export) -> Skip."""
    if (
        value is None
        or isinstance(value, str)
        and not value.strip()
        or isinstance(value, float)
        and math.isnan(value)
    ):
        raise Skip("no reference answer")  # 4 records of MATH train
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ProblemError(
            f"{where}: the answer must be a string or a number, got {value!r:.40}"
        )
    return (
        (str(int(value)) if value.is_integer() else repr(value))
        if isinstance(value, float)
        else str(value).strip()
    )


def from_gsm8k(rec, where, pid, stats):
    """GSM8K {question, answer: '... #### 1,234'}: the reference answer is what follows ####, commas removed."""
    answer = _get(rec, where, "answer")
    if "####" not in answer:
        raise ProblemError(f"{where}: GSM8K answer has no '#### <number>' line")
    return {
        "id": pid,
        "domain": "math",
        "question": _get(rec, where, "question"),
        "answer": _answer(answer.rsplit("####", 1)[1].replace(",", ""), where),
    }


def from_math(rec, where, pid, stats):
    """MATH, MATH-500, AIME 24/25, AMC 23, Polaris (files or hub): {problem | question, answer}."""
    if "answer" not in rec and "Answer" not in rec:
        raise ProblemError(f"{where}: missing field 'answer'")
    return {
        "id": pid,
        "domain": "math",
        "question": _get(rec, where, "problem", "question", "Problem"),
        "answer": _answer(rec.get("answer", rec.get("Answer")), where),
    }


def from_olympiadbench(rec, where, pid, stats):
    """OlympiadBench (Qwen2.5-Math layout; Hothan/OlympiadBench): {question, final_answer: [str]}. The list holds
    one string even when is_multiple_answer ('$69$,$84$'), so that string is the answer (several entries, not
    seen, are joined with ', ', the same convention). Multi-answer problems are kept, flagged "multi_answer",
    since math-verify compares such tuples whole; filter on the flag where an exact verdict matters."""
    final = _get(rec, where, "final_answer", typ=list)
    if not final or not all(isinstance(a, str) for a in final):
        raise ProblemError(
            f"{where}: field 'final_answer' must be a non-empty list of strings"
        )
    p = {
        "id": pid,
        "domain": "math",
        "question": _get(rec, where, "question"),
        "answer": _answer(", ".join(final), where),
    }
    if rec.get("is_multiple_answer") or len(final) > 1:
        p["multi_answer"] = True
        stats["multi-answer problems kept (flagged)"] += 1
    return p


def _calls_in_asserts(code, name, stats):
    """(argument lists, as_set): the argument lists of the calls `name(...)` with only literal arguments inside
    the asserts of `code` (`assert candidate([1, 2], 3) == ...`, `assert math.isclose(f(2), 4.0)`), and whether
    an assert compares such a call's result as a set (`set(f(x)) == ...`). The expected side is ignored (outputs
    come from the reference); a call with a non-literal argument (a loop variable, a Node object) is counted and
    left out."""
    try:
        asserts = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Assert)]
    except SyntaxError:
        return [], False
    as_set = any(
        isinstance(c, ast.Call)
        and getattr(c.func, "id", None) == "set"
        and c.args
        and isinstance(c.args[0], ast.Call)
        and getattr(c.args[0].func, "id", None) == name
        for a in asserts
        for c in ast.walk(a.test)
    )
    found = []
    for call in (c for a in asserts for c in ast.walk(a.test)):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == name:
            try:
                if call.keywords:
                    raise ValueError("keyword arguments")
                found.append([ast.literal_eval(a) for a in call.args])
            except (ValueError, TypeError, SyntaxError, RecursionError):
                stats["test calls with non-literal arguments"] += 1
    return found, as_set


def _function(pid, entry, question, solution, tests=None):
    return {
        "id": pid,
        "domain": "code",
        "format": "function",
        "entry_point": entry,
        "question": question,
        "tests": tests or [],
        "solution": solution,
    }


def from_humaneval(rec, where, pid, stats):
    """HumanEval: question = prompt (signature + docstring), solution = prompt + canonical_solution; the inputs
    are the literal `candidate(...)` calls of `test` (inputs built in loops or at random are left out)."""
    prompt = _get(rec, where, "prompt")
    p = _function(
        pid,
        _get(rec, where, "entry_point"),
        prompt,
        prompt + _get(rec, where, "canonical_solution"),
    )
    return (p, *_calls_in_asserts(_get(rec, where, "test"), "candidate", stats))


def from_mbpp(rec, where, pid, stats):
    """MBPP {text, code, test_list, test_setup_code}: the entry point is the function of `code` that the first
    test calls. The question is the text plus that first assert, as MBPP+ writes its prompts: this is how the
    agent learns the function's name and arguments (that example is also golden test 0, as HumanEval's
    docstring examples are). challenge_test_list is not used, as in the MBPP paper's evaluation."""
    text, code, tests = (
        _get(rec, where, "text"),
        _get(rec, where, "code"),
        _get(rec, where, "test_list", typ=list),
    )
    if not tests or not all(isinstance(t, str) for t in tests):
        raise ProblemError(
            f"{where}: field 'test_list' must be a non-empty list of assert strings"
        )
    if rec.get("test_setup_code"):
        raise Skip("tests need test_setup_code (objects built before the asserts)")
    try:
        defs = {n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)}
        entry = next(
            c.func.id
            for c in ast.walk(ast.parse(tests[0]))
            if getattr(c, "func", None) and getattr(c.func, "id", None) in defs
        )
    except (SyntaxError, StopIteration):
        raise Skip("first test calls no function of the reference") from None
    return (
        _function(pid, entry, f'"""\n{text.strip()}\n{tests[0].strip()}\n"""\n', code),
        *_calls_in_asserts("\n".join(tests), entry, stats),
    )


def _has_list(t):
    if isinstance(t, dict):
        t = tuple(t.values())
    return isinstance(t, list) or isinstance(t, tuple) and any(map(_has_list, t))


def _deep_tuple(v):
    return tuple(map(_deep_tuple, v)) if isinstance(v, list) else v


def _like(value, template):
    """`value` given the tuples of `template`. EvalPlus stores inputs as JSON, which has no tuples, so a tuple
    argument arrives as a list; the benchmark's own first literal assert shows where the tuples are. Our rule,
    in place of EvalPlus's table of task ids: a tuple template of nested tuples and no list turns every nested
    list into a tuple; otherwise element i follows template element i (the last one past its end) and dict
    values follow the first value. On the real MBPP+ file this matches that table on 49 of the 50 tasks it lists
    with list inputs (278 differs below depth 2, where the table stops; the result does not depend on it)."""
    if (
        isinstance(value, list)
        and isinstance(template, tuple)
        and not _has_list(template)
        and any(isinstance(t, tuple) for t in template)
    ):
        return _deep_tuple(value)
    if isinstance(value, list) and isinstance(template, (list, tuple)) and template:
        items = [
            _like(v, template[min(i, len(template) - 1)]) for i, v in enumerate(value)
        ]
        return tuple(items) if isinstance(template, tuple) else items
    if isinstance(value, dict) and isinstance(template, dict) and template:
        return {k: _like(v, next(iter(template.values()))) for k, v in value.items()}
    return value


def from_evalplus(rec, where, pid, stats):
    """HumanEval+ / MBPP+: inputs are base_input then plus_input (lists of argument lists). HumanEval+: solution
    = prompt + canonical_solution, asserts in `test` call `candidate`; MBPP+: solution = canonical_solution,
    asserts in `assertion` call the entry point. question = prompt. `atol` is not kept (outputs_match: 1e-6)."""
    prompt, entry, canonical = (
        _get(rec, where, k) for k in ("prompt", "entry_point", "canonical_solution")
    )
    inputs = []
    for k in ("base_input", "plus_input"):
        v = rec.get(k) or []  # MBPP+ 793 has plus_input {}
        if not isinstance(v, list) or not all(isinstance(a, list) for a in v):
            raise ProblemError(f"{where}: field {k!r} must be a list of argument lists")
        inputs += v
    humaneval = "assertion" not in rec
    calls, as_set = _calls_in_asserts(
        rec.get("test" if humaneval else "assertion") or "",
        "candidate" if humaneval else entry,
        Counter(),
    )
    return (
        _function(pid, entry, prompt, prompt + canonical if humaneval else canonical),
        [_like(a, calls[0]) for a in inputs] if calls else inputs,
        as_set,
    )


def _function_stub(starter):
    """LeetCode's `class Solution:\n    def f(self, a: int) -> int:` as `def f(a: int) -> int:`: the sandbox calls
    a top-level function. Returns (name, parameter names, stub text after `from typing import *`)."""
    if "class Solution" not in starter:
        raise Skip("no class Solution stub")
    try:
        tree = ast.parse(
            starter[starter.index("class Solution") :].rstrip() + "\n        pass\n"
        )
        fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    except (SyntaxError, StopIteration):
        raise Skip("starter code has no parsable method") from None
    fn.args.args = [a for a in fn.args.args if a.arg != "self"]
    head = f"def {fn.name}({ast.unparse(fn.args)})" + (
        f" -> {ast.unparse(fn.returns)}" if fn.returns else ""
    )
    return fn.name, [a.arg for a in fn.args.args], f"from typing import *\n\n{head}:\n"


def from_leetcode(rec, where, pid, stats):
    """LeetCode contests (DeepSeek-Coder) {prompt: docstring + class Solution stub, test}: no reference solution,
    but every test is `test_input = {literal}` then `assert my_solution.f(**test_input) == literal`, so these
    literals are the golden tests as written (keywords in signature order). The stub becomes a top-level
    function. Tests that build objects (linked lists: `_f1(...)`) are counted and left out."""
    prompt = _get(rec, where, "prompt")
    name, params, stub = _function_stub(prompt)
    try:
        body = ast.parse(_get(rec, where, "test")).body
    except SyntaxError:
        raise ProblemError(f"{where}: field 'test' is not valid Python") from None
    tests, kwargs = [], None
    for st in body:
        if (
            isinstance(st, ast.Assign)
            and getattr(st.targets[0], "id", None) == "test_input"
        ):
            try:
                kwargs = ast.literal_eval(st.value)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                kwargs = None
        elif isinstance(st, ast.Assert):
            t = st.test
            try:
                if not (
                    isinstance(t, ast.Compare)
                    and isinstance(t.ops[0], ast.Eq)
                    and isinstance(kwargs, dict)
                    and getattr(getattr(t.left, "func", None), "attr", None) == name
                    and sorted(kwargs) == sorted(params)
                ):
                    raise ValueError(
                        "not `assert my_solution.f(**test_input) == literal`"
                    )
                expected = repr(ast.literal_eval(t.comparators[0]))
                tests.append(
                    {"input": repr([kwargs[a] for a in params]), "output": expected}
                )
            except (ValueError, SyntaxError):
                stats["test calls with non-literal arguments"] += 1
    if not tests:
        raise Skip("no literal test case")
    return _function(
        pid, name, prompt[: prompt.index("class Solution")] + stub, None, tests
    )


def _stdio(pid, question, tests, solution):
    if not tests:
        raise Skip("no tests")
    return {
        "id": pid,
        "domain": "code",
        "format": "stdio",
        "question": question,
        "tests": tests,
        "solution": solution,
    }


def from_code_contests(rec, where, pid, stats):
    """CodeContests: golden tests = public + private + generated, in that order (max_tests keeps the first):
    generated tests are mutated inputs labelled by correct solutions, which AlphaCode also used for checking.
    Reference = the first Python 3 solution (language 3), else none."""
    tests = []
    for k in ("public_tests", "private_tests", "generated_tests"):
        t = rec.get(k) or {"input": [], "output": []}
        if not (
            isinstance(t, dict)
            and isinstance(t.get("input"), list)
            and isinstance(t.get("output"), list)
        ):
            raise ProblemError(
                f"{where}: field {k!r} must be {{'input': [...], 'output': [...]}}"
            )
        tests += [{"input": i, "output": o} for i, o in zip(t["input"], t["output"])]
    sols = rec.get("solutions") or {}
    python3 = [
        s
        for lang, s in zip(sols.get("language", []), sols.get("solution", []))
        if lang == 3
    ]
    return _stdio(
        pid, _get(rec, where, "description"), tests, python3[0] if python3 else None
    )


def from_apps(rec, where, pid, stats):
    """APPS {question, input_output: JSON {inputs, outputs, fn_name?}, solutions: JSON list}. Call-based problems
    (fn_name) are skipped: their outputs are stored sometimes wrapped in a list, which the APPS harness guesses
    at test time, and the LeetCode ones need `class Solution`; the paper uses APPS as stdio."""
    spec, sols = (
        _json_field(rec, where, "input_output") or {},
        _json_field(rec, where, "solutions"),
    )
    if not isinstance(spec, dict):
        raise ProblemError(f"{where}: field 'input_output' must hold a JSON object")
    if spec.get("fn_name"):
        raise Skip("APPS call-based problem (fn_name)")
    # some tests are lists of lines
    lines = lambda x: x if isinstance(x, str) else "\n".join(map(str, x)) + "\n"
    tests = [
        {"input": lines(i), "output": lines(o)}
        for i, o in zip(spec.get("inputs", []), spec.get("outputs", []))
    ]
    return _stdio(pid, _get(rec, where, "question"), tests, sols[0] if sols else None)


class _StringsOnly(pickle.Unpickler):
    def find_class(
        self, module, name
    ):  # LiveCodeBench pickles a str; refuse anything that would import code
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")


def _lcb_cases(text, where):
    """LiveCodeBench test cases: JSON text, or (private ones) base64(zlib(pickle(JSON text)))."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return json.loads(
            _StringsOnly(io.BytesIO(zlib.decompress(base64.b64decode(text)))).load()
        )
    except Exception as e:
        raise ProblemError(
            f"{where}: test cases are neither JSON nor LiveCodeBench's compressed form ({e})"
        ) from None


def from_livecodebench(rec, where, pid, stats):
    """LiveCodeBench (code_generation_lite): public + private tests, no reference. "stdin" problems (AtCoder,
    Codeforces) are stdio; "functional" ones (LeetCode) are function problems: each input line is the JSON of
    one argument and the output JSON, both rewritten as Python literals; the stub is appended to the question."""
    cases = _lcb_cases(_get(rec, where, "public_test_cases"), where)
    cases += _lcb_cases(rec.get("private_test_cases") or "[]", where)
    question, tests = _get(rec, where, "question_content"), []
    try:
        if not cases or cases[0]["testtype"] != "functional":
            return _stdio(
                pid,
                question,
                [{"input": c["input"], "output": c["output"]} for c in cases],
                None,
            )
        name, _, stub = _function_stub(_get(rec, where, "starter_code"))
        meta = rec.get("metadata") or "{}"
        name = (json.loads(meta) if isinstance(meta, str) else meta).get(
            "func_name"
        ) or name
        for c in cases:
            args = repr([json.loads(x) for x in c["input"].split("\n") if x.strip()])
            out = repr(json.loads(c["output"]))
            if is_literal(args) and is_literal(out):
                tests.append({"input": args, "output": out})
            else:
                stats["tests not Python literals (inf, nan)"] += 1
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise ProblemError(
            f"{where}: malformed test case or metadata ({type(e).__name__}: {e})"
        ) from None
    return _function(pid, name, question.rstrip() + "\n\n" + stub, None, tests)
