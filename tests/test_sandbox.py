"""Behavioural tests of sandbox.py: isolation, cleanup, error strings, function driver, output comparison."""
import os
import time
import uuid

import pytest

from sandbox import RunResult, outputs_match, run_case, run_cases, run_program

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="uid drop (process cap, uid-wide kill, file cleanup) is root-only")


def _alive(pid: int) -> bool:
    """Process exists and is not a zombie (a zombie is dead, only waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _live_pids_of_uid(uid: int) -> list[int]:
    """Non-zombie processes whose real uid is `uid`."""
    pids = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/status") as f:
                status = dict(ln.split(":", 1) for ln in f if ":" in ln)
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            continue
        if int(status["Uid"].split()[0]) == uid and not status["State"].strip().startswith(("Z", "X")):
            pids.append(int(d))
    return pids


def _assert_all_dead(uid: int, pids: list[int]) -> None:
    """pids and (as root) every process of the run's fresh uid are gone, also what escaped the group."""
    def survivors():
        return [p for p in pids if _alive(p)] + (_live_pids_of_uid(uid) if ROOT else [])
    deadline = time.time() + 2  # SIGKILL is sent, not awaited: a process may take a moment to die
    while survivors() and time.time() < deadline:
        time.sleep(0.01)
    assert survivors() == [] and (uid != 0 or not ROOT)


def test_stdout_and_stdin():
    assert run_program("print(6 * 7)", timeout=3).stdout == "42\n"
    r = run_program("import sys\nprint(sys.stdin.read().upper(), end='')", "ab\ncd\n", timeout=3)
    assert r.ok and r.error is None and r.stdout == "AB\nCD\n"


def test_crash_syntax_error_exit_code_signal():
    assert run_program("print('partial', flush=True)\n1 / 0", timeout=3) == \
        RunResult("partial\n", "error: ZeroDivisionError: division by zero")
    r = run_program("def f(:\n    pass", timeout=3)
    assert not r.ok and r.error.startswith("error: SyntaxError")
    assert run_program("import sys\nsys.exit(3)", timeout=3).error == "error: exit code 3"
    assert run_program("import os\nos.kill(os.getpid(), 9)", timeout=3).error == "error: killed by signal SIGKILL"
    r = run_program("raise ValueError('x' * 5000)", timeout=3)
    assert r.error.startswith("error: ValueError: xxx") and len(r.error) <= 300 and "\n" not in r.error


def test_timeout_kills_and_cleans_up():
    src = "import os\nprint(os.getuid(), os.getpid(), os.getcwd(), flush=True)\nwhile True:\n    pass"
    t = time.time()
    r = run_program(src, timeout=1)
    assert time.time() - t < 3
    assert r.error == "error: timed out after 1 s"
    uid, pid, cwd = r.stdout.split()  # output flushed before the timeout is kept
    _assert_all_dead(int(uid), [int(pid)])
    assert not os.path.exists(cwd)


def test_huge_allocation_is_an_error_not_a_hang():
    t = time.time()
    r = run_program("x = bytearray(8 * 2**30)\nprint('allocated')", timeout=3)
    assert time.time() - t < 3
    assert not r.ok and "allocated" not in r.stdout and r.error.startswith("error: ")


def test_print_loop_is_bounded():
    r = run_program("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", timeout=3)
    assert not r.ok and 0 < len(r.stdout) <= 2**20


def test_children_are_killed_after_normal_exit():
    src = """
import os, time
pids = []
for _ in range(50):
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    pids.append(pid)
print(os.getuid(), *pids)
"""
    r = run_program(src, timeout=3)
    assert r.ok, r.error
    uid, *pids = map(int, r.stdout.split())
    assert len(pids) == 50
    _assert_all_dead(uid, pids)


@needs_root
def test_child_that_escapes_the_process_group_is_killed():
    src = """
import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()  # new session and process group: killpg no longer reaches it
    os.write(w, str(os.getpid()).encode())
    time.sleep(60)
    os._exit(0)
print(os.getuid(), os.read(r, 100).decode())
"""
    r = run_program(src, timeout=3)
    assert r.ok, r.error
    uid, pid = map(int, r.stdout.split())
    _assert_all_dead(uid, [pid])


@needs_root
def test_uid_kill_helper_runs_only_when_a_process_of_the_uid_is_left(monkeypatch):
    import sandbox
    assert sandbox._uid_alive(os.getuid()) and not sandbox._uid_alive(sandbox.UID_RANGE[1] + 1)
    helpers = []
    real_run = sandbox.subprocess.run
    monkeypatch.setattr(sandbox.subprocess, "run", lambda argv, **kw: helpers.append(argv) or real_run(argv, **kw))
    assert run_program("print(2)").stdout == "2\n" and helpers == []  # nothing left: no helper process
    src = ("import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid(); os.write(w, b'x'); time.sleep(60)\n"
           "os.read(r, 1)\nprint(os.getuid())")
    r = run_program(src, timeout=3)
    assert r.ok, r.error
    assert len(helpers) == 1  # the child that left the group is found, so the helper kills it
    _assert_all_dead(int(r.stdout), [])


@needs_root
def test_process_cap_bounds_forks():
    src = """
import os, time
pids = []
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        pids.append(pid)
finally:
    print(os.getuid(), *pids, flush=True)
"""
    t = time.time()
    r = run_program(src, timeout=3, max_procs=64)
    assert time.time() - t < 3
    assert r.error.startswith("error: BlockingIOError")
    uid, *pids = map(int, r.stdout.split())
    assert len(pids) < 64
    _assert_all_dead(uid, pids)


@needs_root
def test_fork_bomb_is_contained():
    src = """
import os
print(os.getuid(), flush=True)
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
    t = time.time()
    r = run_program(src, timeout=1)
    assert time.time() - t < 3 and r.error == "error: timed out after 1 s"
    _assert_all_dead(int(r.stdout.split()[0]), [])


@needs_root
def test_writes_outside_the_workdir_leave_nothing():
    name = f"sandbox-test-{uuid.uuid4().hex}"
    src = f"""
import os
paths = ["/tmp/{name}", os.path.join(os.path.dirname(os.getcwd()), "{name}-parent"), "/dev/shm/{name}"]
os.makedirs("/var/tmp/{name}/sub")
paths.append("/var/tmp/{name}/sub/f")
for p in paths:
    with open(p, "w") as f:
        f.write("left behind")
print(*paths)
"""
    r = run_program(src, timeout=3)
    assert r.ok, r.error
    paths = r.stdout.split()
    assert len(paths) == 4 and not [p for p in paths + [f"/var/tmp/{name}"] if os.path.exists(p)]


def test_workdir_removed_and_files_stay_inside_it():
    r = run_program("import os\nopen('out.txt', 'w').write('hi')\nprint(os.getcwd(), os.listdir('.'))", timeout=3)
    cwd = r.stdout.split()[0]
    assert r.ok and "out.txt" in r.stdout and not os.path.exists(cwd)


def test_environment_is_not_inherited(monkeypatch):
    monkeypatch.setenv("SANDBOX_SENTINEL", "must-not-leak")
    r = run_program("import os\nprint(dict(os.environ))\nprint(os.getcwd())", timeout=3)
    env, cwd = r.stdout.splitlines()
    env = eval(env)
    assert "must-not-leak" not in r.stdout and "SANDBOX_SENTINEL" not in env
    assert env["PATH"] == "/usr/bin:/bin" and env["HOME"] == env["TMPDIR"] == cwd
    assert set(env) == {"PATH", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "OPENBLAS_NUM_THREADS",
                        "OMP_NUM_THREADS", "HOME", "TMPDIR"}


FUNC = {"id": "add", "domain": "code", "question": "", "format": "function", "entry_point": "add", "tests": []}


def test_run_case_function_format():
    prog = """
import os, sys
print("noise at import")
def add(a, b):
    print("noise in call")
    os.write(1, b"raw noise\\n")
    return [a + b, (a, b)]
if __name__ == "__main__":
    print("main block must not run"); sys.stdin.read()
"""
    r = run_case(FUNC, prog, "[1, 2]", timeout=3)
    assert r.ok and r.stdout == "[3, (1, 2)]\n"
    assert run_case(FUNC, prog, "(1, 2)", timeout=3).stdout == "[3, (1, 2)]\n"
    assert run_case(FUNC, "def sub(a, b):\n    return a - b", "[1, 2]", timeout=3).error == \
        "error: the program does not define add"
    for bad in ["{'a': 1}", "1 + ", "__import__('os')", ""]:
        assert run_case(FUNC, prog, bad, timeout=3).error == "error: test input is not a Python list of arguments"
    r = run_case(FUNC, "def add(a, b):\n    return a / b", "[1, 0]", timeout=3)
    assert r.error == "error: ZeroDivisionError: division by zero"


def test_run_case_stdio_and_run_cases_order():
    prob = {"id": "p", "domain": "code", "question": "", "format": "stdio", "tests": []}
    prog = "import time\nn = int(input())\ntime.sleep(n / 10)\nprint(n * n)"
    assert run_case(prob, prog, "7\n", timeout=3).stdout == "49\n"
    rs = run_cases(prob, prog, ["3", "0", "2", "x", "1"], timeout=3, workers=4)
    assert [r.stdout for r in rs] == ["9\n", "0\n", "4\n", "", "1\n"]
    assert rs[3].error.startswith("error: ValueError")
    with pytest.raises(ValueError, match="xml"):
        run_case({**prob, "format": "xml"}, prog, "1", timeout=3)


@pytest.mark.parametrize("got, expected, same", [
    ("1 2\n3\n", "1 2\n3", True),
    ("\n\n1   2  \n3\n\n\n", "1 2\n3", True),  # blank lines at the ends, spacing, trailing spaces
    ("1 2 3", "1 2\n3", False),              # line structure matters
    ("1\n\n2", "1\n2", False),               # inner blank lines matter
    ("0.3333333", "0.333333333", True),
    ("0.33", "0.333", False),
    ("1000000.5", "1000000.0", True),        # relative tolerance for large floats
    ("3", "3.0", True),
    ("1000001", "1000000", False),           # two integers compare exactly
    ("007", "7", True),
    ("1_0", "10", False),
    ("1" * 5000, "1" * 4999 + "2", False),   # over int()'s digit limit, and float() would give inf == inf
    ("1e999", "inf", True),
    ("YES", "yes", False),                   # case-sensitive
    ("", "", True),
    ("", "0", False),
])
def test_outputs_match_stdio(got, expected, same):
    assert outputs_match("stdio", got, expected) is same


@pytest.mark.parametrize("got, expected, same", [
    ("6\n", "6", True),
    ("6.0000000001", "6", True),
    ("True", "1", False),                    # bool is not a number
    ("1", "True", False),
    ("True", "True", True),
    ("(1, [2, 3])", "[1, (2, 3)]", True),    # list and tuple interchangeable
    ("[1, 2]", "[1, 2, 3]", False),
    ("{'a': 1.0, 'b': [2]}", "{'b': (2,), 'a': 1}", True),
    ("{'a': 1}", "{'a': 1, 'b': 2}", False),
    ("{1, 2}", "{2, 1}", True),
    ("{1, 2}", "[1, 2]", False),
    ("'1'", "1", False),
    ("None", "None", True),
    ("10**20", "10**20", True),              # not a literal: stripped strings compared
    ("<obj at 0x1>", "<obj at 0x2>", False),
    ("12345678901234567890", "12345678901234567891", False),
])
def test_outputs_match_function(got, expected, same):
    assert outputs_match("function", got, expected) is same


def test_outputs_match_bad_format():
    with pytest.raises(ValueError, match="'xml'"):
        outputs_match("xml", "1", "1")
