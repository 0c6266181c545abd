"""Run untrusted Python programs (Coder programs, Tester cases) isolated, and compare their outputs.

Each run is stateless (paper App. D.6.1): the program is written into a fresh temp dir, started as its own
process in its own session/process group, test input on stdin, stdout captured, wall-clock timeout, then
everything it started is killed and its files are removed. Crashes, syntax errors and timeouts never raise;
they become a one-line "error: ..." string.

Isolation levels:
- as root (our runs and CI): the child runs under a fresh random uid with rlimits (memory, processes, file
  size, no core), so cleanup can kill every process of that uid and delete every file it left in /tmp & co.
- not root (a laptop): same rlimits minus the process cap, and cleanup is a process-group kill only, so a
  program that escapes with setsid() or writes outside its dir is not undone. Process-level isolation only.
"""
import ast
import functools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

MAX_STDOUT = 1 << 20       # bytes of stdout returned to the caller
MAX_FILE_MB = 64           # RLIMIT_FSIZE: bounds every file the program writes, its stdout file included
MAX_ERROR = 300            # chars of the error line
UID_RANGE = (200_000, 899_999)  # no passwd entry needed for setuid; far above real users
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
IS_ROOT = os.geteuid() == 0

# Runs in the child before the program: an unprivileged process may lower its own limits, and doing it here
# instead of in Popen(preexec_fn=...) keeps Popen thread-safe (run_cases spawns from several threads).
# argv: AS bytes, NPROC (-1: leave), FSIZE bytes. Hard limits too, so the program cannot raise them again.
_BOOT = """\
import os, resource, sys
def cap(r, v):
    hard = resource.getrlimit(r)[1]
    v = v if hard == resource.RLIM_INFINITY else min(v, hard)
    resource.setrlimit(r, (v, v))
mem, nproc, fsize = map(int, sys.argv[1:4])
cap(resource.RLIMIT_AS, mem)
cap(resource.RLIMIT_FSIZE, fsize)
cap(resource.RLIMIT_CORE, 0)
if nproc >= 0:
    cap(resource.RLIMIT_NPROC, nproc)
os.execv(sys.executable, [sys.executable, "-I", "main.py"])
"""
# Kills every process of the calling uid except itself (atomic w.r.t. fork), incl. ones that left the group.
# Guarded by the expected uid: kill(-1) run as root would take down every process on the machine.
_KILL_UID = """\
import os, sys
if os.getuid() == int(sys.argv[1]) != 0:
    try:
        os.kill(-1, 9)
    except ProcessLookupError:
        pass
"""

_uids_in_use, _uids_lock = set(), threading.Lock()

ERROR = "error: "  # every failed run's outcome starts with this; agents see it verbatim (App. D.6.1)


def is_error(outcome: str | None) -> bool:
    """Whether an outcome string (a program's output, printed answer or environment note) reports a failure: a
    crash, a timeout or a missing program, which App. D.6.1 turns into an error string instead of an exception."""
    return outcome is not None and outcome.startswith(ERROR)


@dataclass
class RunResult:
    stdout: str          # captured stdout (up to MAX_STDOUT bytes), also whatever was flushed before an error
    error: str | None    # None: exited 0 within the timeout; else one line starting with ERROR

    @property
    def ok(self) -> bool:
        return self.error is None


def _env(home: str) -> dict:
    """Environment built from scratch: nothing of the parent's leaks (keys, tokens, CUDA settings)."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
            "HOME": home, "TMPDIR": home}


def _drop(uid: int | None) -> dict:
    """Popen kwargs that switch the child to uid (gid = uid, no supplementary groups); done in C after fork."""
    return {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}


def _take_uid() -> int | None:
    """A fresh uid for one run, unique among this process's concurrent runs; None when not root."""
    if not IS_ROOT:
        return None
    with _uids_lock:
        while (uid := random.randint(*UID_RANGE)) in _uids_in_use:
            pass
        _uids_in_use.add(uid)
    return uid


def _release_uid(uid: int | None) -> None:
    with _uids_lock:
        _uids_in_use.discard(uid)


@functools.cache
def _interpreter() -> str:
    """First Python that starts under the uid drop (/root is 0700, so a pyenv sys.executable may not)."""
    uid = _take_uid()
    try:
        for exe in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
            if not exe:
                continue
            try:
                r = subprocess.run([exe, "-I", "-c", "pass"], env=_env("/"), cwd="/", capture_output=True,
                                   timeout=30, **_drop(uid))
            except (OSError, subprocess.TimeoutExpired):
                continue
            if r.returncode == 0:
                return exe
    finally:
        _release_uid(uid)
    raise RuntimeError("sandbox: no Python interpreter runs as an unprivileged user "
                       f"(tried {sys.executable}, /usr/bin/python3, python3 on PATH)")


def _signal_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # pgid == pid (start_new_session); reserved while the group lives
    except ProcessLookupError:
        pass


def _uid_alive(uid: int) -> bool:
    """Does any process run under uid (real, effective, saved or fs uid)? Part of the cleanup after each
    stateless run (App. D.6.1). Only a process of that uid can create another one (the uid is this run's alone),
    so once none is left none can appear: the kill helper, a process start that costs more than a short
    program's run, is needed only when this finds one."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                uids = next((ln.split()[1:] for ln in f if ln.startswith("Uid:")), [])
        except OSError:  # gone meanwhile
            continue
        if str(uid) in uids:
            return True
    return False


def _kill_everything(proc: subprocess.Popen, uid: int | None) -> None:
    """SIGKILL the program's process group and, with a uid drop, every process of that uid; reap the main one."""
    _signal_group(proc.pid)
    # uid None (not root): no uid of its own, the group kill is all we can do; none of the uid left: none to kill
    if uid is not None and _uid_alive(uid):
        # a helper process under the same uid sends kill(-1): reaches processes that setsid()-ed away too.
        # subprocess instead of os.fork: forking a multi-threaded parent in Python code is not safe.
        subprocess.run([_interpreter(), "-I", "-S", "-c", _KILL_UID, str(uid)], env=_env("/"), cwd="/",
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, **_drop(uid))
    proc.wait()


def _remove_files_of(uid: int) -> None:
    """Delete top-level entries of world-writable dirs owned by uid (what the program left outside its dir)."""
    for root in WORLD_WRITABLE:
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for e in entries:
            try:
                if e.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
            except OSError:
                pass


def _error_line(returncode: int, stderr: str) -> str:
    """One line for a failed run: last non-empty stderr line (traceback's exception), else signal/exit code."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    if lines:
        return (ERROR + lines[-1])[:MAX_ERROR]
    if returncode < 0:
        try:
            return f"{ERROR}killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"{ERROR}killed by signal {-returncode}"
    return f"{ERROR}exit code {returncode}"


def run_program(source: str, stdin: str = "", *, timeout: float = 30.0, memory_mb: int = 1024,
                max_procs: int = 64) -> RunResult:
    """Run Python `source` as main.py in a fresh temp dir with `stdin` as input; return its stdout or error.

    timeout: wall-clock seconds for the main process; memory_mb: RLIMIT_AS per process; max_procs: RLIMIT_NPROC
    (processes + threads of the run's uid; root only, since for other users it would count all their processes).
    """
    uid = _take_uid()
    workdir = tempfile.mkdtemp(prefix="sandbox-")
    try:
        # errors="replace": a lone surrogate in generated text becomes a program error, not an exception here
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8", errors="replace") as f:
            f.write(source)
        if uid is not None:
            os.chown(workdir, uid, uid)
        # stdin/stdout/stderr are anonymous files, not pipes: RLIMIT_FSIZE bounds what a print loop can
        # produce, nothing can block on a full pipe, and a background child holding stdout open cannot keep
        # us waiting: we wait for the main process only, then kill the rest.
        with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
            fin.write(stdin.encode("utf-8", "replace"))
            fin.seek(0)
            nproc = max_procs if uid is not None else -1
            argv = [_interpreter(), "-I", "-S", "-c", _BOOT, str(memory_mb << 20), str(nproc), str(MAX_FILE_MB << 20)]
            proc = subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=ferr, cwd=workdir, env=_env(workdir),
                                    start_new_session=True, **_drop(uid))
            # A blocking wait plus a timer that kills the group: Popen.wait(timeout) polls with sleeps of up to
            # 50 ms, which was most of the cost of a short run.
            expired = threading.Event()
            timer = threading.Timer(timeout, lambda: (expired.set(), _signal_group(proc.pid)))
            timer.start()
            try:
                proc.wait()
            finally:
                timer.cancel()
                _kill_everything(proc, uid)
            timed_out = expired.is_set()
            fout.seek(0)
            stdout = fout.read(MAX_STDOUT).decode("utf-8", "replace")
            ferr.seek(max(0, ferr.seek(0, os.SEEK_END) - 8192))  # the tail holds the exception line
            stderr = ferr.read().decode("utf-8", "replace")
        if timed_out:
            return RunResult(stdout, f"{ERROR}timed out after {timeout:g} s")
        return RunResult(stdout, None if proc.returncode == 0 else _error_line(proc.returncode, stderr))
    finally:
        if uid is not None:
            _remove_files_of(uid)
        shutil.rmtree(workdir, ignore_errors=True)
        _release_uid(uid)


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


def run_case(problem: dict, program: str, test_input: str, *, timeout: float = 30.0) -> RunResult:
    """Run `program` on one test input of a code problem (format "stdio" or "function", see the schema)."""
    if problem["format"] == "stdio":
        return run_program(program, stdin=test_input, timeout=timeout)
    if problem["format"] == "function":
        driver = f"SOURCE = {program!r}\nNAME = {problem['entry_point']!r}\n" + _DRIVER
        return run_program(driver, stdin=test_input, timeout=timeout)
    raise ValueError(f"unknown problem format {problem['format']!r}")


def run_cases(problem: dict, program: str, inputs: list[str], *, timeout: float = 30.0,
              workers: int = 4) -> list[RunResult]:
    """run_case on each input, `workers` at a time (each is a separate process); results in input order."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda x: run_case(problem, program, x, timeout=timeout), inputs))


# Output comparison (the paper leaves it open). Choices: case-sensitive; whitespace between tokens, trailing
# spaces and leading/trailing blank lines are ignored; numbers match within 1e-6 absolute or relative, except
# that two integers must be equal exactly (a relative tolerance would let 1000001 pass for 1000000).
TOL = 1e-6
_INT = re.compile(r"[+-]?[0-9]+")


def _numbers_match(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= TOL or abs(a - b) / max(1.0, abs(b)) <= TOL


def _tokens_match(a: str, b: str) -> bool:
    if a == b:
        return True
    if _INT.fullmatch(a) and _INT.fullmatch(b):
        try:
            return int(a) == int(b)  # "007" == "7"
        except ValueError:  # over int()'s 4300-digit limit: the strings differ, so do the numbers
            return False
    if "_" in a + b:  # float() accepts "1_0.5"; program output should not
        return False
    try:
        return _numbers_match(float(a), float(b))
    except ValueError:
        return False


def _lines(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def _values_match(a, b) -> bool:
    """Literal values equal up to number tolerance; True is not 1; list and tuple are interchangeable."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return _numbers_match(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_values_match(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_match(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b  # sets by equality; str, bytes, None, complex exactly


def outputs_match(fmt: str, got: str, expected: str) -> bool:
    """Does a program's output `got` count as `expected`? fmt "stdio": token-wise per line; "function": literals."""
    if fmt == "stdio":
        g, e = _lines(got), _lines(expected)
        return len(g) == len(e) and all(
            len(gt := x.split()) == len(et := y.split()) and all(map(_tokens_match, gt, et)) for x, y in zip(g, e))
    if fmt == "function":
        try:
            return _values_match(ast.literal_eval(got.strip()), ast.literal_eval(expected.strip()))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return got.strip() == expected.strip()  # not a literal (e.g. a custom object's repr)
    raise ValueError(f"unknown output format {fmt!r}")
