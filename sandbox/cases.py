"""A code problem's test cases: run a program on them in the sandbox (format "stdio": the input on stdin; format
"function": the input is the argument list of the entry point), and judge whether its output counts as the expected
one (App. D.6.1, DECISIONS.md D4)."""
import ast
import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from sandbox.outcomes import RunResult
from sandbox.jail import MAX_STDOUT, run_program

# Function-format driver. Program output is sent to stderr (fd 1 too, so even os.write(1, ...) and child
# processes cannot pollute the result); only repr(result) goes to the real stdout. The program is loaded as
# module "solution", not "__main__", so an `if __name__ == "__main__":` block does not run and read stdin.
_DRIVER = """\
import ast, os, sys, types
try:
    args = ast.literal_eval(sys.stdin.read().strip())
except Exception:
    args = None
if not isinstance(args, (list, tuple)):
    sys.exit("test input is not a Python list of arguments")
out = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
mod = sys.modules["solution"] = types.ModuleType("solution")
exec(compile(SOURCE, "solution.py", "exec"), mod.__dict__)
if not callable(getattr(mod, NAME, None)):
    sys.exit(f"the program does not define {NAME}")
result = getattr(mod, NAME)(*args)
out.write(repr(result) + "\\n")
out.flush()
"""


# A program run twice on the same input in one process runs once: the second call gets the first result. The
# verifier judges a program as a function of its input, and a kept program meets the same inputs every turn, so
# a second run could only differ by chance (a random draw) and would cost a process. Remembered: only the program's
# own outcomes, read from RunResult.condition (never from the error line, which the program's stderr is part of).
# Not: the sandbox's conditions, a run that timed out (under load it may finish next time) or was not run for the
# trainer's reasons (a full disk, caps or jail not made, a trainer terminating), nor a long output (the memory
# stays bounded; an output over the cap is long).
_REMEMBERED, REMEMBER_RUNS, REMEMBER_CHARS = {}, 4096, 16384
_remembered_lock = threading.Lock()


def run_once(program: str, stdin: str = "", *, timeout: float) -> RunResult:
    """run_program, remembered per (program, stdin, timeout) within this process (see above)."""
    key = (program, stdin, timeout)
    with _remembered_lock:
        if key in _REMEMBERED:
            return _REMEMBERED[key]
    result = run_program(program, stdin, timeout=timeout)
    if result.condition is None and len(result.stdout) <= REMEMBER_CHARS:
        with _remembered_lock:
            if len(_REMEMBERED) >= REMEMBER_RUNS:
                del _REMEMBERED[next(iter(_REMEMBERED))]  # the oldest first
            _REMEMBERED[key] = result
    return result


def run_case(problem: dict, program: str, test_input: str, *, timeout: float) -> RunResult:
    """Run `program` on one test input of a code problem (format "stdio" or "function", see the schema), once
    per process (run_once)."""
    if problem["format"] == "stdio":
        return run_once(program, stdin=test_input, timeout=timeout)
    if problem["format"] == "function":
        driver = f"SOURCE = {program!r}\nNAME = {problem['entry_point']!r}\n" + _DRIVER
        return run_once(driver, stdin=test_input, timeout=timeout)
    raise ValueError(f"unknown problem format {problem['format']!r}")


def run_cases(problem: dict, program: str, inputs: list[str], *, timeout: float, workers: int = 4,
              stop=None) -> list[RunResult | None]:
    """run_case on each input, `workers` at a time (each is a separate process); results in input order. The
    verifier's golden-test check (App. F.6) runs through here.
    stop(i, result) -> bool: once it holds for a finished case, cases not yet started are skipped (None), so
    a program that hangs costs one timeout, not one per test. Cases start in input order, so every case before
    the one that stopped it has a result."""
    stopped = threading.Event()

    def one(i):
        if stopped.is_set():
            return None
        result = run_case(problem, program, inputs[i], timeout=timeout)
        if stop is not None and stop(i, result):
            stopped.set()
        return result

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, range(len(inputs))))


# Output comparison (the paper leaves it open, DECISIONS.md D4). Choices: case-sensitive; whitespace between tokens,
# trailing spaces and leading/trailing blank lines are ignored. Numbers are ASCII digits only (int() and float()
# would also read "٣" or "３" as 3). An expected integer is matched only by an integer of equal value ("007" for "7"):
# a relative tolerance would let 1000001 pass for 1000000, and a printed float(...) off by 1000 for 10**12. Other
# numbers match within TOL, absolute or relative; inf and nan match only themselves. Function results: an expected
# int matches an int or float equal to it (Python's ==, as in the benchmarks' asserts: 6.0 for 6, not 6.0000000001);
# True is not 1, at any depth (in sets and dict keys too, where Python's hashing would equate them).
# Cost: this runs in the trainer, outside any timeout, on output the program chose; so each step is linear in
# the output, and the output is capped. Longer than MAX_STDOUT (more than a run returns, which also bounds the
# line count): a mismatch (~0.6 s, ~35 MiB at most below it). A function result over LITERAL_CHARS is compared
# as text, not parsed: ast.literal_eval costs ~1 KiB per element, and builds sets and dicts by hash, where n
# ints equal modulo sys.hash_info.modulus share one hash and cost n**2 (at the cap: ~0.2 s, ~20 MiB at most).
TOL = 1e-6
LITERAL_CHARS = 1 << 15
_INT = re.compile(r"[+-]?[0-9]+")
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # one reading per digit run: linear


def _numbers_match(a: int | float, b: int | float) -> bool:
    try:
        return a == b or abs(a - b) <= TOL or abs(a - b) / max(1.0, abs(b)) <= TOL
    except OverflowError:  # an int beyond a float's range against a float: no tolerance bridges that gap
        return False


def _int_text(token: str) -> str:
    """Canonical text of an integer token ("+007" -> "7", "-0" -> "0"): equal integers have equal texts, with no
    int() conversion (quadratic in the digits, and refused over 4300 digits)."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if token[0] == "-" and digits != "0" else digits


def _tokens_match(a: str, b: str) -> bool:
    """Printed token a counts as the expected token b."""
    if a == b:
        return True
    if _INT.fullmatch(b):
        return _INT.fullmatch(a) is not None and _int_text(a) == _int_text(b)
    if not (NUMBER.fullmatch(a) and NUMBER.fullmatch(b)):
        return False
    x, y = float(a), float(b)  # float() reads a 400-digit number as inf: non-finite values match only the same token
    return math.isfinite(x) and math.isfinite(y) and _numbers_match(x, y)


def _hash_key(v):
    """v as an element of a set or a dict key, with each bool inside it tagged (bool, v): equal keys are equal
    values of Python's == on which True is not 1. The tag cannot occur in a literal, and the rest keeps its
    hash, so the cost stays that of the set literal_eval built (linear in v's size, plus its hash collisions)."""
    if isinstance(v, bool):
        return bool, v
    if isinstance(v, tuple):  # the only hashable container a literal has
        return tuple(map(_hash_key, v))
    return v


def _values_match(a, b) -> bool:
    """Literal value a equals the expected b up to number tolerance; True is not 1, at any depth; list and tuple
    are interchangeable; an expected set matches any list, tuple or set of its elements (a benchmark that asserts
    `set(f(x)) == ...` stores its outputs as sets)."""
    if isinstance(b, set) and isinstance(a, (list, tuple, set)):
        try:
            return set(map(_hash_key, a)) == set(map(_hash_key, b))
        except TypeError:  # unhashable items: no set of them can equal b
            return False
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(b, int):
        return isinstance(a, (int, float)) and a == b
    if isinstance(a, (int, float)) and isinstance(b, float):
        return _numbers_match(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_values_match(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return (set(map(_hash_key, a)) == set(map(_hash_key, b))  # so each b[k] is a's key k, bools apart
                and all(_values_match(a[k], b[k]) for k in a))
    return type(a) is type(b) and a == b  # sets by equality; str, bytes, None, complex exactly


def outputs_match(fmt: str, got: str, expected: str) -> bool:
    """Does a program's output `got` count as `expected`? fmt "stdio": token-wise per line; "function": literals.
    Either longer than MAX_STDOUT: False (see the comparison rules above)."""
    if fmt not in ("stdio", "function"):
        raise ValueError(f"unknown output format {fmt!r}")
    if max(len(got), len(expected)) > MAX_STDOUT:
        return False
    g, e = got.strip(), expected.strip()  # strip(): blank lines at the ends, in one linear pass
    if fmt == "stdio":
        g, e = g.splitlines(), e.splitlines()
        return len(g) == len(e) and all(
            len(gt := x.split()) == len(et := y.split()) and all(map(_tokens_match, gt, et)) for x, y in zip(g, e))
    if g == e or max(len(g), len(e)) > LITERAL_CHARS:
        return g == e
    try:
        return _values_match(ast.literal_eval(g), ast.literal_eval(e))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # not a literal, e.g. an object's repr
        return False
