"""A program run on a code problem's test inputs in the jail (format "stdio": the input on stdin; format
"function": the input is the argument list of the entry point), App. D.6.1. Whether its output counts as the
expected one is infra/answers.py's (outputs_match)."""

import threading
from concurrent.futures import ThreadPoolExecutor

from sandbox.jail import run_program
from sandbox.outcomes import RunResult

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


def run_case(
    problem: dict, program: str, test_input: str, *, timeout: float
) -> RunResult:
    """Run `program` on one test input of a code problem (format "stdio" or "function", see the schema), once
    per process (run_once)."""
    if problem["format"] == "stdio":
        return run_once(program, stdin=test_input, timeout=timeout)
    if problem["format"] == "function":
        driver = f"SOURCE = {program!r}\nNAME = {problem['entry_point']!r}\n" + _DRIVER
        return run_once(driver, stdin=test_input, timeout=timeout)
    raise ValueError(f"unknown problem format {problem['format']!r}")


def run_cases(
    problem: dict,
    program: str,
    inputs: list[str],
    *,
    timeout: float,
    workers: int = 4,
    stop=None,
) -> list[RunResult | None]:
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
