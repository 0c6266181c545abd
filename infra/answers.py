"""The two judges of what an agent produced, which the environments (agreement) and the verifier (each role's
output against the reference) both ask: whether a program's output counts as the expected one (outputs_match,
DECISIONS.md D4), and whether a math answer equals the reference, numeric tolerance first, then symbolic
equivalence with math-verify (answers_equivalent, App. D.6.3, Eq. 16-18). Neither runs a program: the jail is
sandbox/'s.
"""

import ast
import logging
import math
import multiprocessing
import re

import math_verify

from sandbox.outcomes import MAX_STDOUT

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
# one reading per digit run: linear
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _numbers_match(a: int | float, b: int | float) -> bool:
    try:
        return a == b or abs(a - b) <= TOL or abs(a - b) / max(1.0, abs(b)) <= TOL
    # an int beyond a float's range against a float: no tolerance bridges that gap
    except OverflowError:
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
    # float() reads a 400-digit number as inf: non-finite values match only the same token
    x, y = (float(a), float(b))
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
        return (
            set(map(_hash_key, a))
            == set(map(_hash_key, b))  # so each b[k] is a's key k, bools apart
            and all(_values_match(a[k], b[k]) for k in a)
        )
    # sets by equality; str, bytes, None, complex exactly
    return type(a) is type(b) and a == b


def outputs_match(fmt: str, got: str, expected: str) -> bool:
    """Does a program's output `got` count as `expected`? fmt "stdio": token-wise per line; "function": literals.
    Either longer than MAX_STDOUT: False (see the comparison rules above)."""
    if fmt not in ("stdio", "function"):
        raise ValueError(f"unknown output format {fmt!r}")
    if max(len(got), len(expected)) > MAX_STDOUT:
        return False
    # strip(): blank lines at the ends, in one linear pass
    g, e = (got.strip(), expected.strip())
    if fmt == "stdio":
        g, e = g.splitlines(), e.splitlines()
        return len(g) == len(e) and all(
            len(gt := x.split()) == len(et := y.split())
            and all(map(_tokens_match, gt, et))
            for x, y in zip(g, e)
        )
    if g == e or max(len(g), len(e)) > LITERAL_CHARS:
        return g == e
    try:
        return _values_match(ast.literal_eval(g), ast.literal_eval(e))
    # not a literal, e.g. an object's repr
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


# We disable math-verify's signal-based timeouts on purpose (see answers_equivalent); silence its warning
# about that, which it would print on every call.
logging.getLogger("math_verify").setLevel(logging.ERROR)

SYMBOLIC_TIMEOUT = 5.0  # seconds allowed for one symbolic equivalence check
ANSWER_CHARS = 1000  # longer answers are not compared (see answers_equivalent)


def _clean(text: str) -> str:
    """Drop decoration that does not change the value: a trailing full stop, enclosing $...$ or
    \\boxed{...}, and a trailing percent sign."""
    s = text.strip().rstrip(".").strip()
    if len(s) > 1 and s.startswith("$") and s.endswith("$"):
        s = s.strip("$").strip()
    if boxed := re.fullmatch(r"\\boxed\{(.*)\}", s):
        s = boxed.group(1).strip()
    # Percent: "50%" counts as 50, not 0.5. Reference answers to "what percent" questions are written
    # as the bare number while agents often add the sign; dividing by 100 would split the two.
    return re.sub(r"\\?%$", "", s).strip()


def _number(text: str) -> float | None:
    """A plain number, thousands-comma number ("1,000"), a/b or \\frac{a}{b} in ASCII digits; else None."""
    s = _clean(text)
    # only well-grouped commas: "1,2" is no number
    if re.fullmatch(r"[-+]?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?", s):
        s = s.replace(",", "")
    if frac := re.fullmatch(r"([-+]?)\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", s):
        s = f"{frac.group(1)}{frac.group(2)}/{frac.group(3)}"
    parts = [p.strip() for p in s.split("/")]
    if len(parts) > 2 or not all(NUMBER.fullmatch(p) for p in parts):
        return None
    value = float(parts[0])
    if len(parts) == 2:
        if float(parts[1]) == 0:
            return None
        value /= float(parts[1])
    return value if math.isfinite(value) else None


# Words math-verify reads as functions; any other run of 3+ letters marks the answer as prose.
_FUNCTION_WORDS = {"sqrt", "sin", "cos", "tan", "log", "exp"}


def _parse(text: str) -> list:
    """math-verify parse of an answer; [] when unparseable. Bare math is wrapped in $...$ so it is read
    as one expression (raw "2*sqrt(3)" would be read as 2, "3, 5" as 5). Prose is passed raw: math-verify
    then extracts the answer from the text, while wrapped it would read every word as a product of
    symbols (so "garbage" would equal itself). Signal-based timeouts are off (see answers_equivalent)."""
    s = _clean(text)
    words = set(re.findall(r"(?<!\\)\b[A-Za-z]{3,}", s)) - _FUNCTION_WORDS
    # "**": Python-printed powers
    source = s if words else "$" + s.replace("**", "^") + "$"
    return math_verify.parse(source, parsing_timeout=None)


# math-verify builds its parsers lazily; build them once here so every forked check (answers_equivalent)
# inherits them and starts in ~15 ms instead of ~300 ms.
math_verify.verify(_parse("x^2"), _parse("y"), timeout_seconds=None)


def answers_equivalent(a: str | None, b: str | None, eps: float = 1e-6) -> bool:
    """a (candidate) equals b (reference): numeric tolerance first, then symbolic [App. D.6.3].
    NUMEQ(a, b) = |a - b| <= eps or |a - b| / max(1, |b|) <= eps  [Eq. 16].
    A missing or unparseable answer is never equivalent [Eq. 18], nor is one over ANSWER_CHARS: a program's
    printed answer may be a megabyte, and sympy would work on it up to SYMBOLIC_TIMEOUT and ~400 MiB (benchmark
    answers are far shorter; 1000 characters of LaTeX already take sympy ~1-3 s)."""
    if (
        not a
        or not b
        or not a.strip()
        or not b.strip()
        or max(len(a), len(b)) > ANSWER_CHARS
    ):
        return False
    x, y = _number(a), _number(b)
    if x is not None and y is not None:  # both plain numbers: NUMEQ decides alone
        return abs(x - y) <= eps or abs(x - y) / max(1.0, abs(y)) <= eps
    # sympy can run for ever on some inputs (5 vs 10^{10^{10^{10}}}), and math-verify's own timeouts are
    # signal-based, which fail outside the main thread. So the symbolic check runs in a forked child that
    # is killed after SYMBOLIC_TIMEOUT s; no reply in time counts as not equivalent.
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_symbolic_equal, args=(a, b, send), daemon=True)
    child.start()
    # the parent keeps only the read end, so a child that dies reads as EOF
    send.close()
    try:
        return receive.poll(SYMBOLIC_TIMEOUT) and receive.recv()
    except EOFError:  # the child died without answering
        return False
    finally:
        child.kill()
        child.join()
        receive.close()


def _symbolic_equal(a: str, b: str, send) -> None:
    """Child side of answers_equivalent: sends True iff math-verify shows a equivalent to b."""
    try:
        gold, target = _parse(b), _parse(a)
        send.send(
            bool(
                gold
                and target
                and math_verify.verify(gold, target, timeout_seconds=None)
            )
        )
    except Exception:  # any failure inside sympy/math-verify = not shown equivalent
        send.send(False)
