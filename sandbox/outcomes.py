"""What a sandboxed run reports (jail.py): its stdout, the one line the agents read when it failed (App. D.6.1:
crashes, syntax errors and timeouts become an "error: ..." string, never an exception), and the sandbox's own
condition as a field that nothing the program writes can set.

The line keeps two voices apart. The sandbox speaks for itself ("error: timed out after 30 s", "error: not run:
...", "error: output over the cap of ... bytes", "error: exit code 3", "error: killed by signal SIGKILL"); the
program speaks only after STDERR ("error: stderr: ZeroDivisionError: division by zero"), so that no line it
writes reads as the sandbox's. Readers that decide anything (the cache of cases.py, the verifier, the rewards)
read the fields, never the line.
"""

import signal
from dataclasses import dataclass, field

MAX_STDOUT = 1 << 20  # bytes of stdout returned to the caller
MAX_ERROR = 300  # chars of the error line
# every failed run's line starts with this; agents see it verbatim (App. D.6.1)
ERROR = "error: "
# then this, before the last line the program wrote to stderr: its words, never the sandbox's
STDERR = "stderr: "

# The sandbox's own conditions of a run (RunResult.condition). NOT_RUN: the trainer's reasons (its files and disk,
# its caps, the jail not made, a trainer terminating), which say nothing of the program; TIMED_OUT: under load a
# program may finish next time; OVER_CAP: more than MAX_STDOUT printed.
NOT_RUN, TIMED_OUT, OVER_CAP = "not run", "timed out", "output over the cap"


@dataclass(frozen=True)  # frozen: run_case hands the same result to every caller
class RunResult:
    # captured stdout (up to MAX_STDOUT bytes), also whatever was flushed before an error
    stdout: str
    # None: exited 0 within the timeout; else the one line the agents read, from ERROR on
    error: str | None
    # the sandbox's own (NOT_RUN, TIMED_OUT, OVER_CAP); None: the program's outcome
    condition: str | None = None
    ok: bool = field(init=False)  # exited 0 within the timeout: error is None

    def __post_init__(self):
        object.__setattr__(self, "ok", self.error is None)  # frozen


def is_error(outcome: str | None) -> bool:
    """Whether an outcome string as the agents read it (a program's output, printed answer or environment note)
    reports a failure: a crash, a timeout or a missing program. For readers of the text, as the agents are; what
    decides a verdict or a reward reads RunResult's fields."""
    return outcome is not None and outcome.startswith(ERROR)


def not_run(why: str) -> RunResult:
    """The result of a run the sandbox did not make, or cannot vouch for, for the trainer's reasons."""
    return RunResult("", f"{ERROR}{NOT_RUN}: {why}"[:MAX_ERROR], NOT_RUN)


def ended(returncode: int, jailed: bool) -> str:
    """How a process ended, in words. In the jail bwrap reports a signal as 128 + its number, as a shell does."""
    if jailed and 128 < returncode <= 128 + 64:
        returncode = 128 - returncode
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def last_line(stderr: str) -> str | None:
    """The last non-empty line of stderr (a traceback's exception), or None."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else None


def failed(stdout: str, stderr: str, how: str) -> RunResult:
    """A program's own failure: the last line it wrote to stderr, marked as its own, else how it ended."""
    line = last_line(stderr)
    return RunResult(stdout, (ERROR + (STDERR + line if line else how))[:MAX_ERROR])
