"""Whether a math answer equals the reference: numeric tolerance first, then symbolic equivalence with math-verify
(App. D.6.3, Eq. 16-18). The math workflow's judge, the twin of cases.py's output comparison for code; the
rollout's environment (the team's agreement) and the verifier (each role's answer against the reference) both ask it.
"""
import logging
import math
import multiprocessing
import re

import math_verify

from sandbox.cases import NUMBER

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
    if re.fullmatch(r"[-+]?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?", s):  # only well-grouped commas: "1,2" is no number
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
    source = s if words else "$" + s.replace("**", "^") + "$"  # "**": Python-printed powers
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
    if not a or not b or not a.strip() or not b.strip() or max(len(a), len(b)) > ANSWER_CHARS:
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
    send.close()  # the parent keeps only the read end, so a child that dies reads as EOF
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
        send.send(bool(gold and target and math_verify.verify(gold, target, timeout_seconds=None)))
    except Exception:  # any failure inside sympy/math-verify = not shown equivalent
        send.send(False)
