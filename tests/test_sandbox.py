"""Behavioural tests of infra/jail.py, sandbox/cgroups.py and sandbox/cases.py: isolation (jail and the uid
fallback), cleanup, caps, error strings, the function driver, output comparison. Each isolation test is an attack a
generated program could make."""

import ctypes
import errno
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

import pytest

from attribution import attribute_code
from infra.answers import outputs_match
from sandbox import cases, cgroups, jail, seccomp, uids
from sandbox.cases import run_case, run_cases
from sandbox.jail import run_program
from sandbox.namespaces import shown_paths
from sandbox.outcomes import NOT_RUN, TIMED_OUT, RunResult

ROOT = os.geteuid() == 0
INTERPRETER, NATIVE = jail._setup()
JAIL = NATIVE is not None and NATIVE.kind == "bubblewrap"
# the jail without bubblewrap, as root: the same interpreter, shown read-only as namespaces.py shows it
NAMESPACES = jail.Jail(
    "namespaces",
    shown_paths(INTERPRETER),
)
needs_root = pytest.mark.skipif(
    not ROOT, reason="uid drop (process cap, uid-wide kill, file cleanup) is root-only"
)
needs_jail = pytest.mark.skipif(
    not JAIL, reason="bubblewrap is not installed or does not work here"
)
needs_namespaces = pytest.mark.skipif(
    not (ROOT and shutil.which("unshare")), reason="not root, or no unshare"
)
needs_cgroups = pytest.mark.skipif(
    not cgroups.cgroup_homes(), reason="no writable cgroup v1 hierarchy, or not root"
)
needs_filter = pytest.mark.skipif(
    not jail.SECCOMP_FILTER, reason="no syscall table for this machine"
)
ARCH = seccomp.ARCHES.get(os.uname().machine)
NR = {
    name: nrs[ARCH[0]]
    for name, nrs in seccomp.DENIED.items()
    if ARCH and nrs[ARCH[0]] is not None
}  # this machine's


@pytest.fixture(params=["native", "namespaces", "uid"])
def mode(request, monkeypatch):
    """Each isolation test runs with the level this machine gives ("native": bubblewrap's jail where it works) and,
    as root, once more in each level below it: the namespaces jail (no bubblewrap) and the uid fallback (neither)."""
    if request.param != "native":
        if (
            not ROOT
            or NATIVE is None
            or (
                request.param == "namespaces" and not (JAIL and shutil.which("unshare"))
            )
        ):
            pytest.skip(
                "the native level is already this fallback, or it is not to be had here"
            )
        monkeypatch.setattr(
            jail,
            "_setup",
            lambda: (
                INTERPRETER,
                NAMESPACES if request.param == "namespaces" else None,
            ),
        )
    return request.param


def _marked(src: str) -> tuple[str, str]:
    """(a unique process name, src prefixed with a line that gives its process that name). Children inherit it,
    so the test finds every process of the run on the host, inside a pid namespace or not."""
    # PR_SET_NAME (15): the name is seen from the host's /proc (the jail has none)
    tag = "sbx" + uuid.uuid4().hex[:12]
    return (
        tag,
        f"__import__('ctypes').CDLL(None).prctl(15, {tag.encode()!r})\n"
        + textwrap.dedent(src),
    )


def _alive_named(tag: str) -> list[int]:
    """Non-zombie processes named tag."""
    pids = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().strip() != tag:
                    continue
            with open(f"/proc/{d}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in "ZX":
                    pids.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _assert_all_dead(tag: str) -> None:
    # SIGKILL is sent, not awaited: a process may take a moment to die
    deadline = time.time() + 2
    while _alive_named(tag) and time.time() < deadline:
        time.sleep(0.01)
    assert _alive_named(tag) == []


def _workdirs() -> set[str]:
    return {e for e in os.listdir(tempfile.gettempdir()) if e.startswith("sandbox-")}


@needs_root
def test_without_bubblewrap_an_interpreter_the_sandbox_user_cannot_reach_is_not_chosen(
    tmp_path, monkeypatch
):
    """The uid level with sys.executable behind a 0700 directory (a venv whose python links into /root/.pyenv):
    another interpreter must be chosen, and programs must run, not all fail with PermissionError."""
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    (hidden / "python3").symlink_to(os.path.realpath("/usr/bin/python3"))
    (tmp_path / "python").symlink_to(hidden / "python3")
    real_which = shutil.which
    monkeypatch.setattr(
        shutil,
        "which",
        lambda name, *a, **k: None if name == "bwrap" else real_which(name, *a, **k),
    )
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    jail._setup.cache_clear()
    try:
        assert jail._setup()[0] != str(tmp_path / "python")
        assert run_program("print(int(input()) * 3)", "4\n", timeout=10) == RunResult(
            "12\n", None
        )
    finally:
        jail._setup.cache_clear()


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")
def test_the_jail_is_chosen_wherever_bubblewrap_works():
    """A working jail must win over the bare levels (CI installs bubblewrap so that the jail is what it tests)."""
    assert JAIL and jail.jail_line().startswith("jail (bubblewrap")


def test_stdout_and_stdin(mode):
    assert run_program("print(6 * 7)", timeout=3).stdout == "42\n"
    r = run_program(
        "import sys\nprint(sys.stdin.read().upper(), end='')", "ab\ncd\n", timeout=3
    )
    assert r.ok and r.error is None and r.stdout == "AB\nCD\n"


def test_crash_syntax_error_exit_code_signal(mode):
    assert run_program("print('partial', flush=True)\n1 / 0", timeout=3) == RunResult(
        "partial\n", "error: stderr: ZeroDivisionError: division by zero"
    )
    r = run_program("def f(:\n    pass", timeout=3)
    assert not r.ok and r.error.startswith("error: stderr: SyntaxError")
    assert (
        run_program("import sys\nsys.exit(3)", timeout=3).error == "error: exit code 3"
    )
    assert (
        run_program("import os\nos.kill(os.getpid(), 9)", timeout=3).error
        == "error: killed by signal SIGKILL"
    )
    assert (
        run_program("import os\nos.kill(os.getpid(), 11)", timeout=3).error
        == "error: killed by signal SIGSEGV"
    )
    r = run_program("raise ValueError('x' * 5000)", timeout=3)
    assert (
        r.error.startswith("error: stderr: ValueError: xxx")
        and len(r.error) <= 300
        and "\n" not in r.error
    )


def test_timeout_kills_and_cleans_up(mode):
    before = _workdirs()
    tag, src = _marked("print('started', flush=True)\nwhile True:\n    pass")
    t = time.time()
    r = run_program(src, timeout=1)
    assert time.time() - t < 3
    # output flushed before it is kept
    assert r == RunResult("started\n", "error: timed out after 1 s", TIMED_OUT)
    _assert_all_dead(tag)
    assert _workdirs() == before


def test_huge_allocation_is_an_error_not_a_hang(mode):
    t = time.time()
    r = run_program("x = bytearray(8 * 2**30)\nprint('allocated')", timeout=3)
    assert time.time() - t < 3
    assert not r.ok and "allocated" not in r.stdout and r.error.startswith("error: ")


def test_print_loop_is_bounded(mode):
    r = run_program(
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", timeout=3
    )
    assert not r.ok and 0 < len(r.stdout) <= 2**20


def test_children_are_killed_after_normal_exit(mode):
    tag, src = _marked("""
        import os, time
        for _ in range(50):
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
        print('forked')
    """)
    r = run_program(src, timeout=3)
    assert r.ok and r.stdout == "forked\n", r.error
    _assert_all_dead(tag)


def test_child_that_escapes_the_process_group_is_killed(mode):
    tag, src = _marked("""
        import os, time
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()  # new session and process group: killpg no longer reaches it
            os.write(w, b'x')
            time.sleep(60)
            os._exit(0)
        print(os.read(r, 1).decode())
    """)
    if mode == "native" and not JAIL and not ROOT:
        pytest.skip("process level: an escaped child is out of reach")
    r = run_program(src, timeout=3)
    assert r.ok and r.stdout == "x\n", r.error
    _assert_all_dead(tag)


@needs_root
def test_uid_kill_helper_runs_only_when_a_process_of_the_uid_is_left(monkeypatch):
    interpreter = jail._setup()[0]
    # the uid level, where the helper matters
    monkeypatch.setattr(jail, "_setup", lambda: (interpreter, None))
    assert uids.processes_of(os.getuid()) and not uids.processes_of(
        uids.UID_RANGE[1] + 1
    )
    helpers = []
    real_run = jail.subprocess.run
    monkeypatch.setattr(
        jail.subprocess,
        "run",
        lambda argv, **kw: helpers.append(argv) or real_run(argv, **kw),
    )
    # nothing left: no helper process
    assert run_program("print(2)", timeout=3).stdout == "2\n" and helpers == []
    tag, src = _marked(
        "import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid(); os.write(w, b'x'); "
        "time.sleep(60)\nos.read(r, 1)\nprint('ok')"
    )
    r = run_program(src, timeout=3)
    assert r.ok, r.error
    # the child that left the group is found, so the helper kills it
    assert len(helpers) == 1
    _assert_all_dead(tag)


@needs_root
def test_process_cap_bounds_forks(mode):
    tag, src = _marked("""
        import os, time
        n = 0
        try:
            for _ in range(200):
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                n += 1
        finally:
            print(n, flush=True)
    """)
    t = time.time()
    r = run_program(src, timeout=3, max_procs=64)
    assert time.time() - t < 3
    assert r.error.startswith("error: stderr: BlockingIOError")
    assert int(r.stdout) < 64
    _assert_all_dead(tag)


@needs_root
def test_fork_bomb_is_contained(mode):
    tag, src = _marked("""
        import os
        print('bomb', flush=True)
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """)
    t = time.time()
    r = run_program(src, timeout=1)
    assert time.time() - t < 3 and r.error == "error: timed out after 1 s"
    _assert_all_dead(tag)


@needs_root
def test_writes_outside_the_workdir_leave_nothing(mode):
    name = f"sandbox-test-{uuid.uuid4().hex}"
    paths = [
        f"/tmp/{name}",
        f"/dev/shm/{name}",
        f"/var/tmp/{name}/sub/f",
        f"/run/lock/{name}",
    ]
    r = run_program(
        f"""
import os
for p in {paths!r}:
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write("left behind")
    except OSError:
        pass
print("done")
""",
        timeout=3,
    )
    assert r.ok and r.stdout == "done\n", r.error
    assert not [p for p in paths + [f"/var/tmp/{name}"] if os.path.exists(p)]


def test_workdir_removed_and_files_stay_inside_it(mode):
    before = _workdirs()
    r = run_program(
        "import os\nopen('out.txt', 'w').write('hi')\nprint(os.listdir('.'))", timeout=3
    )
    assert r.ok and "out.txt" in r.stdout and _workdirs() == before


def test_environment_is_not_inherited(monkeypatch, mode):
    monkeypatch.setenv("SANDBOX_SENTINEL", "must-not-leak")
    r = run_program("import os\nprint(dict(os.environ))\nprint(os.getcwd())", timeout=3)
    env, cwd = r.stdout.splitlines()
    env = eval(env)
    assert "must-not-leak" not in r.stdout and "SANDBOX_SENTINEL" not in env
    assert (
        env["PATH"] == "/usr/bin:/bin"
        and env["HOME"] == env["TMPDIR"] == env.pop("PWD", cwd) == cwd
    )
    assert set(env) == {
        "PATH",
        "LANG",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "HOME",
        "TMPDIR",
    }


CHEAT = """
import json, os, sys
data = sys.stdin.read()
paths = [PATH]  # the attacker even knows where the problem file is
for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:  # every command line it can see (its parent's too)
    try:
        paths += [a for a in open(f"/proc/{pid}/cmdline").read().split("\\0") if a.endswith(".jsonl")]
    except OSError:
        pass
for path in paths:
    try:
        for line in open(path):
            for t in json.loads(line)["tests"]:
                if t["input"].strip() == data.strip():
                    print(t["output"])
                    sys.exit(0)
    except OSError:
        pass
print(0)
"""


def test_a_program_cannot_read_the_golden_tests(jailed):
    """The golden tests are in a world-readable file named on the command line of the process that runs the
    verifier; a program that finds them passes without solving anything unless the jail hides both."""
    d = tempfile.mkdtemp()
    os.chmod(d, 0o755)
    path = os.path.join(d, "problems.jsonl")
    problem = {
        "id": "sq",
        "domain": "code",
        "format": "stdio",
        "question": "print n squared",
        "tests": [{"input": str(n), "output": str(n * n)} for n in (3, 7, 12)],
    }
    with open(path, "w") as f:
        f.write(json.dumps(problem) + "\n")
    os.chmod(path, 0o644)
    cheat = CHEAT.replace("PATH", repr(path))
    script = (
        jailed + "import json, sys\nfrom attribution import attribute_code\n"
        "p = json.loads(open(sys.argv[1]).readline())\n"
        f"print(attribute_code(p, {cheat!r}, ('3', '9'), timeout=5).checks['program_correct'])"
    )
    r = subprocess.run(
        [sys.executable, "-c", script, path],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert r.stdout.strip() == "False", r.stderr
    assert run_program(cheat, "7", timeout=5).stdout == "0\n"


def test_ipc_objects_die_with_the_run(jailed):
    """SysV shared memory, message queues and semaphores, POSIX shared memory and message queues: a run may make
    them, and none is left for a later run (none in the host's IPC namespace, none in its /dev/shm)."""
    key, name = random.randint(1 << 20, 1 << 30), f"/sbx{uuid.uuid4().hex[:12]}"
    r = run_program(
        f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
print(libc.shmget({key}, 1 << 20, 0o1666) >= 0, libc.msgget({key}, 0o1666) >= 0,
      libc.semget({key}, 1, 0o1666) >= 0, libc.shm_open({name!r}.encode(), os.O_CREAT | os.O_RDWR, 0o666) >= 0,
      libc.mq_open({name!r}.encode(), os.O_CREAT | os.O_RDWR, 0o666, None) >= 0)
""",
        timeout=3,
    )
    assert r.stdout == "True True True True True\n", r.error  # it could make them ...
    # ... and none of them is left in the host's IPC namespace
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as f:
            assert not [
                ln for ln in f.read().splitlines()[1:] if int(ln.split()[0]) == key
            ]
    assert not os.path.exists("/dev/shm" + name)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int]
    assert (
        libc.mq_open(name.encode(), os.O_RDONLY) == -1
        and ctypes.get_errno() == errno.ENOENT
    )


def test_no_connection_to_the_hosts_localhost(jailed):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        r = run_program(
            f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("connected")
except OSError as e:
    print(type(e).__name__)
""",
            timeout=5,
        )
        server.settimeout(0.1)
        with pytest.raises(socket.timeout):
            server.accept()
    assert r.ok and r.stdout == "ConnectionRefusedError\n", r


@needs_cgroups
def test_memory_cap_covers_the_whole_run():
    """Per-process caps let four children of a 512 MiB run hold 4 x 300 MB; the run's cgroup does not."""
    tag, src = _marked("""
        import os, time
        r, w = os.pipe()
        for _ in range(4):
            if os.fork() == 0:
                block = b"x" * (300 << 20)  # written, so resident
                os.write(w, b"y")
                time.sleep(3)
                os._exit(0)
        os.close(w)
        time.sleep(2)
        print(len(os.read(r, 16)))
    """)
    r = run_program(src, timeout=6, memory_mb=512)
    assert r.ok and int(r.stdout) < 4, r
    _assert_all_dead(tag)


PID1 = """
import os, sys, time
from sandbox import jail, uids
interpreter, native = jail._setup()
if sys.argv[1] == "namespaces":
    jail._setup = lambda: (interpreter, jail.Jail("namespaces", native.shown))
elif sys.argv[1] != "native":
    jail._setup = lambda: (interpreter, None)
if sys.argv[1] == "process":
    uids.IS_ROOT = False  # no uid of its own: the group kill and reaping only
for src in ["print(1)", "import os, time\\nfor _ in range(3):\\n    if os.fork() == 0:\\n        time.sleep(60)",
            "import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    time.sleep(60)", "while True:\\n    pass"]:
    jail.run_program(src, timeout=1)
time.sleep(0.3)
zombies = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        zombies += open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        pass
print(os.getpid(), zombies)
"""


@needs_root
@pytest.mark.skipif(
    not shutil.which("unshare"), reason="util-linux's unshare is not installed"
)
@pytest.mark.parametrize("level", ["native", "namespaces", "uid", "process"])
def test_no_zombies_when_the_trainer_is_pid_1(level):
    """In a container started without --init the trainer is PID 1 and inherits every orphan: the jail's init
    (bubblewrap's monitor exits without waiting for it) and a program's children. Each run must reap its own,
    a normal exit, children left running, a setsid() escape and a timeout alike, or the pid table fills up."""
    if level in ("namespaces", "uid") and not JAIL:
        pytest.skip("the native level is already this fallback")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-c",
            PID1,
            level,
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # PID 1, no zombie
    assert r.stdout.split() == ["1", "0"], (r.stdout, r.stderr[-2000:])


@needs_jail
@needs_filter
def test_a_program_cannot_stop_or_write_into_bubblewrap():
    """bubblewrap's init (pid 1 in the jail) and its monitor outside run under the program's uid and report the
    program's exit: stopped, they never do, and a finished run is reported as a timeout."""
    t = time.time()
    r = run_program(
        f"""
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
print(libc.syscall({NR["ptrace"]}, 16, 1, 0, 0), ctypes.get_errno())  # PTRACE_ATTACH to pid 1
os.kill(1, signal.SIGSTOP)  # dropped by the kernel: a namespace's init gets only the signals it handles
try:
    open("/proc/1/mem", "r+b")
except OSError as e:
    print(e.errno)
r, w = os.pipe()
if os.fork() == 0:  # stops the group the program started in once the program has left it (it would stop itself)
    if os.read(r, 1) == b"1":
        os.killpg(0, signal.SIGSTOP)
    os._exit(0)
try:
    os.setpgid(0, 0)
    os.write(w, b"1")
except PermissionError:  # it leads a session, its own group with it
    os.write(w, b"0")
time.sleep(0.3)
""",
        timeout=3,
    )
    assert (
        r == RunResult(f"-1 {errno.ENOSYS}\n{errno.ENOENT}\n", None)
        and time.time() - t < 3
    )


@needs_root
def test_a_program_cannot_stop_the_kill_helper(monkeypatch):
    """In the uid fallback a process left behind stops every new process of its uid; the helper that kills what
    is left must run under that uid to reach it, yet be one it can neither stop nor trace, or the cleanup hangs
    (the run raised after the helper's 30 s timeout)."""
    interpreter = jail._setup()[0]
    monkeypatch.setattr(jail, "_setup", lambda: (interpreter, None))
    tag, src = _marked("""
        import os, signal
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            done = set(os.listdir("/proc"))  # itself and its parent among them
            os.write(w, b"x")
            while True:  # a new process may start as root and take the uid later: look again each time
                for pid in set(os.listdir("/proc")) - done:
                    try:
                        if os.stat(f"/proc/{pid}").st_uid == os.getuid():
                            done.add(pid)
                            os.kill(int(pid), signal.SIGSTOP)
                    except (OSError, ValueError):
                        pass
        print(os.read(r, 1).decode())
    """)
    t = time.time()
    r = run_program(src, timeout=5)
    assert r == RunResult("x\n", None) and time.time() - t < 5
    _assert_all_dead(tag)


def test_open_files_are_capped(mode):
    r = run_program(
        """
import os, resource
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = 0
try:
    while True:
        os.dup(0)
        held += 1
except OSError:
    print(hard, held)
""",
        timeout=10,
    )
    hard, held = map(int, r.stdout.split())
    assert hard <= jail.MAX_FILES and held < jail.MAX_FILES, r


@needs_filter
def test_keyrings_are_out_of_reach(mode):
    """Under container runtimes and systemd the trainer has a session keyring; a run inherits it and, possessing
    it whatever its uid, could read the trainer's keys and leave one behind for a later run."""
    libc = ctypes.CDLL(None, use_errno=True)
    # KEYCTL_JOIN_SESSION_KEYRING: a fresh one for this process
    assert libc.syscall(NR["keyctl"], 1, None) > 0
    # -3: the session keyring
    key = libc.syscall(NR["add_key"], b"user", b"trainer-token", b"hunter2", 7, -3)
    assert key > 0
    r = run_program(
        f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(16)
print(libc.syscall({NR["keyctl"]}, 11, {key}, buf, 16), ctypes.get_errno(), buf.value)  # KEYCTL_READ
print(libc.syscall({NR["add_key"]}, b"user", b"left-by-run", b"x", 1, -3), ctypes.get_errno())
""",
        timeout=5,
    )
    assert r.stdout == f"-1 {errno.ENOSYS} b''\n-1 {errno.ENOSYS}\n", r
    buf = ctypes.create_string_buffer(16)
    assert libc.syscall(NR["keyctl"], 11, key, buf, 16) == 7 and buf.value == b"hunter2"
    # KEYCTL_SEARCH: nothing left
    assert libc.syscall(NR["keyctl"], 10, -3, b"user", b"left-by-run", 0) == -1


@needs_filter
def test_runs_cannot_signal_each_other_through_file_locks(mode):
    """The read-only /usr is the same file for every run and for the trainer: a lock one of them holds on it is
    seen by the others, a channel between runs meant to be apart."""
    path = os.path.realpath(jail._setup()[0])
    with open(path, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        fcntl.lockf(f, fcntl.LOCK_SH)  # a POSIX read lock
        r = run_program(
            f"""
import errno, fcntl, struct
f = open({path!r}, "rb")
write_lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)  # struct flock: would a write lock conflict?
for lock in (lambda: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB), lambda: fcntl.fcntl(f, fcntl.F_GETLK, write_lock),
             lambda: fcntl.fcntl(f, fcntl.F_OFD_GETLK, write_lock)):
    try:
        print(lock() not in (None, write_lock) and "held elsewhere")
    except OSError as e:
        print(errno.errorcode[e.errno])
""",
            timeout=5,
        )
    assert r.stdout == "ENOSYS\nENOSYS\nENOSYS\n", r


@needs_filter
def test_calls_a_test_program_never_needs_return_enosys(mode):
    names = [
        "add_key",
        "request_key",
        "keyctl",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "pidfd_getfd",
        "kcmp",
        "flock",
        "inotify_init1",
        "fanotify_init",
        "io_uring_setup",
        "userfaultfd",
        "perf_event_open",
        "bpf",
        "fallocate",
        "memfd_create",
        "memfd_secret",
        "getrusage",
        "sysinfo",
        "mincore",
        "cachestat",
        "readahead",
        "fadvise64",
        "preadv2",
        "io_setup",
        "unshare",
        "setns",
        "clone3",
    ] + (["inotify_init"] if os.uname().machine == "x86_64" else [])
    assert sorted(names) == sorted(NR)  # every denied call is walked
    calls = {name: NR[name] for name in names}
    cmds = [
        fcntl.F_GETLK,
        fcntl.F_SETLK,
        fcntl.F_SETLKW,
        fcntl.F_OFD_GETLK,
        fcntl.F_OFD_SETLK,
        fcntl.F_OFD_SETLKW,
        fcntl.F_NOTIFY,
    ]
    assert seccomp.DENIED_ARGS["fcntl"][2] == tuple(cmds)
    r = run_program(
        f"""
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, nr in {calls!r}.items():
    ctypes.set_errno(0)
    libc.syscall(nr, -1, -1, -1, -1, -1)
    print(name, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
for cmd in {cmds!r}:
    ctypes.set_errno(0)
    libc.fcntl(0, cmd, 0)
    print("fcntl", cmd, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
for advice in {seccomp.DENIED_ARGS["madvise"][2]!r}:
    ctypes.set_errno(0)
    libc.madvise(None, 0, advice)
    print("madvise", advice, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
""",
        timeout=5,
    )
    lines = r.stdout.splitlines()
    assert len(lines) == len(calls) + len(cmds) + 4 and all(
        ln.endswith(" ENOSYS") for ln in lines
    ), r


I386_GETPID = """
import ctypes, mmap
code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
code.write(bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3]))  # mov eax, 20 (getpid in the i386 table); int 0x80; ret
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(code)))())
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64's i386 ABI")
@needs_filter
def test_a_call_through_the_i386_abi_kills_the_program(mode):
    """int 0x80 takes the i386 numbers (keyctl is 288 there): a filter that checked numbers alone would let every
    denied call through it."""
    if (
        subprocess.run(
            [sys.executable, "-c", I386_GETPID], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("this kernel has no i386 ABI")
    assert run_program(I386_GETPID, timeout=5) == RunResult(
        "", "error: killed by signal SIGSYS"
    )


@needs_root
def test_a_run_whose_cgroups_cannot_be_made_is_refused(mode, monkeypatch, tmp_path):
    """Where cgroups are the run's memory, process and CPU caps, a run without them would go ahead uncapped."""
    gone = {c: str(tmp_path / "gone") for c in ("memory", "pids", "cpu")}
    monkeypatch.setattr(cgroups, "cgroup_homes", lambda: gone)
    r = run_program("print('ran')", timeout=5)
    assert r.stdout == "" and r.error.startswith(
        "error: not run: its cgroups (memory, process, CPU caps)"
    ), r


def test_a_missing_or_broken_syscall_filter_is_never_silent(monkeypatch):
    assert seccomp.program("riscv64") == b"" and jail.SECCOMP_FILTER == seccomp.program(
        os.uname().machine
    )
    assert ("NO seccomp filter" in jail.jail_line()) is not bool(jail.SECCOMP_FILTER)
    monkeypatch.setattr(jail, "SECCOMP_FILTER", b"")
    assert "NO seccomp filter (no syscall table for" in jail.jail_line()
    # a filter the kernel refuses: the run fails
    monkeypatch.setattr(jail, "SECCOMP_FILTER", bytes(8))
    assert run_program("print('ran')", timeout=5) == RunResult(
        "",
        "error: not run: the sandbox did not start the program: seccomp filter not loaded: Invalid argument",
        NOT_RUN,
    )  # the trainer's failure, not the program's: never remembered as its result


def test_sigterm_kills_the_runs_and_leaves_nothing(tmp_path):
    """What `timeout` or a scheduler sends: the runs in progress die, no new one starts, nothing is left."""
    tag, src = _marked("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(60)
        open("/tmp/left-behind", "w").write("x")
        time.sleep(60)
    """)
    before = _workdirs()
    script = (
        f"from sandbox import cases, jail\njail.stop_on_sigterm()\n"
        f"cases.run_cases({{'format': 'stdio'}}, {src!r}, ['1'] * 8, timeout=60, workers=2)"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=root, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 20
    # two runs, each a program and its child
    while len(_alive_named(tag)) < 4 and time.time() < deadline:
        time.sleep(0.05)
    assert len(_alive_named(tag)) >= 4
    t = time.time()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM, proc.stderr.read()
    assert time.time() - t < 5  # the six runs not yet started never start
    _assert_all_dead(tag)
    assert _workdirs() == before


@needs_root
def test_concurrent_runs_never_share_a_uid(monkeypatch):
    """The uid is drawn from the OS, not from the global `random` a training seed fixes, and claimed machine-wide:
    a uid another process holds is skipped."""
    random.seed(7)
    with uids.fresh_uid() as first:
        pass
    random.seed(7)
    with uids.fresh_uid() as second:
        pass
    assert first != second
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time\ns = socket.socket(socket.AF_UNIX)\n"
            f"s.bind('\\0mas-opd-sandbox-uid-{first}')\nprint(1, flush=True)\ntime.sleep(30)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"1\n"
        draws = iter([first, first, second])
        monkeypatch.setattr(uids.UIDS, "randint", lambda a, b: next(draws))
        with uids.fresh_uid() as uid:
            assert uid == second
    finally:
        holder.kill()


def test_a_hanging_program_costs_one_timeout_not_one_per_test():
    prob = {
        "id": "p",
        "domain": "code",
        "question": "",
        "format": "stdio",
        "tests": [{"input": str(i), "output": str(i)} for i in range(12)],
    }
    t = time.time()
    att = attribute_code(prob, "import time\ntime.sleep(60)", None, timeout=1)
    # 12 tests, 4 at a time: three timeouts without the early stop
    assert time.time() - t < 2.5
    assert att.checks["program_correct"] is False and att.first_failing_test == 0
    results = run_cases(
        prob,
        "n = int(input())\nprint(n if n != 5 else -1)",
        [t["input"] for t in prob["tests"]],
        timeout=3,
        workers=2,
        stop=lambda i, r: r.stdout.strip() != str(i),
    )
    assert [r.stdout for r in results[:6]] == [
        "0\n",
        "1\n",
        "2\n",
        "3\n",
        "4\n",
        "-1\n",
    ]
    assert results[-1] is None


FUNC = {
    "id": "add",
    "domain": "code",
    "question": "",
    "format": "function",
    "entry_point": "add",
    "tests": [],
}


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
    assert (
        run_case(FUNC, "def sub(a, b):\n    return a - b", "[1, 2]", timeout=3).error
        == "error: stderr: the program does not define add"
    )
    for bad in ["{'a': 1}", "1 + ", "__import__('os')", ""]:
        assert (
            run_case(FUNC, prog, bad, timeout=3).error
            == "error: stderr: test input is not a Python list of arguments"
        )
    r = run_case(FUNC, "def add(a, b):\n    return a / b", "[1, 0]", timeout=3)
    assert r.error == "error: stderr: ZeroDivisionError: division by zero"


def test_run_case_stdio_and_run_cases_order():
    prob = {"id": "p", "domain": "code", "question": "", "format": "stdio", "tests": []}
    prog = "import time\nn = int(input())\ntime.sleep(n / 10)\nprint(n * n)"
    assert run_case(prob, prog, "7\n", timeout=3).stdout == "49\n"
    rs = run_cases(prob, prog, ["3", "0", "2", "x", "1"], timeout=3, workers=4)
    assert [r.stdout for r in rs] == ["9\n", "0\n", "4\n", "", "1\n"]
    assert rs[3].error.startswith("error: stderr: ValueError")
    with pytest.raises(ValueError, match="xml"):
        run_case({**prob, "format": "xml"}, prog, "1", timeout=3)


@pytest.mark.parametrize(
    "got, expected, same",
    [
        ("1 2\n3\n", "1 2\n3", True),
        (
            "\n\n1   2  \n3\n\n\n",
            "1 2\n3",
            True,
        ),  # blank lines at the ends, spacing, trailing spaces
        ("1 2 3", "1 2\n3", False),  # line structure matters
        ("1\n\n2", "1\n2", False),  # inner blank lines matter
        ("0.3333333", "0.333333333", True),
        ("0.33", "0.333", False),
        ("1000000.5", "1000000.0", True),  # relative tolerance for large floats
        ("3", "3.0", True),
        ("1000001", "1000000", False),  # two integers compare exactly
        (
            "1000.0",
            "1000",
            False,
        ),  # an expected integer is matched by an integer only ...
        ("999.9999999", "1000", False),
        (
            "1000000000999.0",
            "1000000001000",
            False,
        ),  # ... else float() passes a program off by 1000
        ("007", "7", True),
        ("+0", "-0", True),
        (
            "0" * 5000 + "7",
            "7",
            True,
        ),  # no int(): its 4300-digit limit would make these differ
        (
            "\u0663",
            "3",
            False,
        ),  # only ASCII digits are numbers: float() reads these as 3, 3.5
        ("\uff13.5", "3.5", False),
        ("1_0", "10", False),
        (
            "1" * 5000,
            "1" * 4999 + "2",
            False,
        ),  # over int()'s digit limit, and float() would give inf == inf
        ("1e999", "inf", False),  # non-finite values match only the identical token
        ("inf", "9" * 400, False),  # float() reads 400 nines as inf
        ("inf", "inf", True),
        ("YES", "yes", False),  # case-sensitive
        ("", "", True),
        ("", "0", False),
    ],
)
def test_outputs_match_stdio(got, expected, same):
    assert outputs_match("stdio", got, expected) is same


@pytest.mark.parametrize(
    "got, expected, same",
    [
        ("6\n", "6", True),
        (
            "6.0000000001",
            "6",
            False,
        ),  # an expected int: equal, exactly (Python's ==, as the asserts) ...
        ("6.0", "6", True),
        ("1000000000999.0", "1000000001000", False),
        ("6.0000000001", "6.0", True),  # ... an expected float: within the tolerance
        ("True", "1", False),  # bool is not a number
        ("1", "True", False),
        ("True", "True", True),
        ("(1, [2, 3])", "[1, (2, 3)]", True),  # list and tuple interchangeable
        ("[1, 2]", "[1, 2, 3]", False),
        ("{'a': 1.0, 'b': [2]}", "{'b': (2,), 'a': 1}", True),
        ("{'a': 1}", "{'a': 1, 'b': 2}", False),
        ("{1, 2}", "{2, 1}", True),
        ("{1, 2}", "[1, 2]", False),  # a list is compared as a list ...
        (
            "(5, 4, 4)",
            "{4, 5}",
            True,
        ),  # ... an expected set as a set (benchmarks asserting set(f(x)) == ...)
        ("[[1], [2]]", "{1, 2}", False),  # unhashable items: no TypeError
        ("'1'", "1", False),
        ("None", "None", True),
        ("10**20", "10**20", True),  # not a literal: stripped strings compared
        ("<obj at 0x1>", "<obj at 0x2>", False),
        ("12345678901234567890", "12345678901234567891", False),
        (
            "1" + "0" * 400,
            "0.5",
            False,
        ),  # an int beyond a float's range against a float: no OverflowError
        ("0.5", "9" * 400, False),
        ("1e400", "1e400", True),
    ],
)
def test_outputs_match_function(got, expected, same):
    assert outputs_match("function", got, expected) is same


M = sys.hash_info.modulus  # ints equal modulo M share one hash
# name: (fmt, got, expected, match). Outputs within MAX_STDOUT shaped against a super-linear step (leading blank
# lines, a backtracking number pattern, colliding hashes) or against ast's ~1 KiB per element: seconds to hours
# and hundreds of MiB per comparison without the caps.
HOSTILE = {
    "leading blank lines": ("stdio", "\n" * (jail.MAX_STDOUT - 1) + "x", "x", True),
    "leading whitespace lines": (
        "stdio",
        " \n" * (jail.MAX_STDOUT // 2 - 1) + "x",
        "x",
        True,
    ),
    "digits then a letter": (
        "stdio",
        "1" * (jail.MAX_STDOUT - 1) + "x",
        "1.5",
        False,
    ),  # a number pattern
    "over MAX_STDOUT": (
        "stdio",
        "1 " * (jail.MAX_STDOUT // 2 + 1),
        "1 " * (jail.MAX_STDOUT // 2 + 1),
        False,
    ),
    "list vs set, one hash": (
        "function",
        "[" + ", ".join(str(k * M) for k in range(40_000)) + "]",
        "{1}",
        False,
    ),
    "sets of tuples, one hash": (
        "function",
        "{" + ", ".join(f"({k * M},)" for k in range(35_000)) + "}",
        "{" + ", ".join(f"({k * M},)" for k in range(1, 35_001)) + "}",
        False,
    ),
    "dicts, one hash": (
        "function",
        "{" + ", ".join(f"{k * M}: 0" for k in range(35_000)) + "}",
        "{" + ", ".join(f"{k * M}: 1" for k in range(35_000)) + "}",
        False,
    ),
    "many nested lists": (
        "function",
        "[" + ", ".join(["[" * 50 + "]" * 50] * 10_000) + "]",
        "[]",
        False,
    ),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_outputs_match_cost_is_bounded(name, finishes):
    fmt, got, expected, same = HOSTILE[name]
    assert len(got) <= jail.MAX_STDOUT or name == "over MAX_STDOUT"
    assert finishes(outputs_match, fmt, got, expected) is same


def test_outputs_match_bad_format():
    with pytest.raises(ValueError, match="'xml'"):
        outputs_match("xml", "1", "1")


def test_run_case_reuses_the_result_of_a_program_on_the_same_input():
    # a kept program is re-verified every turn: the second run is the first one's result, not a new process
    prob = {"id": "p", "domain": "code", "question": "", "format": "stdio", "tests": []}
    prog = "import random\nprint(input(), random.random())"
    first = run_case(prob, prog, "1\n", timeout=3)
    assert first.ok and run_case(prob, prog, "1\n", timeout=3) == first
    assert run_case(prob, prog, "2\n", timeout=3).stdout.split()[0] == "2"
    # run_program itself always runs
    assert run_program(prog, "1\n", timeout=3).stdout != first.stdout


def test_a_run_that_timed_out_or_printed_a_lot_is_run_again(monkeypatch):
    # under load a program may time out once and finish the next time, so a timeout is never remembered; nor is a
    # long output, so that the memory stays bounded
    calls = []

    def fake(source, stdin="", *, timeout):
        calls.append(source)
        if source == "slow" and calls.count("slow") == 1:
            return RunResult("", "error: timed out after 1 s", TIMED_OUT)
        return RunResult(
            "x" * (cases.REMEMBER_CHARS + 1) if source == "long" else "ok\n", None
        )

    monkeypatch.setattr(cases, "run_program", fake)
    assert cases.run_once("slow", timeout=1).error.startswith("error: timed out")
    assert cases.run_once("slow", timeout=1).ok and cases.run_once("slow", timeout=1).ok
    cases.run_once("long", timeout=1), cases.run_once("long", timeout=1)
    # the finished short run was remembered, the others not
    assert calls == ["slow", "slow", "long", "long"]


@needs_filter
def test_disk_cannot_be_reserved_without_writing(mode):
    """RLIMIT_FSIZE is checked when a file's size changes: fallocate with KEEP_SIZE reserved gigabytes of the host's
    disk through the run's own stdout file (a file there) under a 64 MiB cap."""
    r = run_program(
        """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
for flags in (1, 0):  # FALLOC_FL_KEEP_SIZE, then a plain one
    ret = libc.fallocate(1, flags, ctypes.c_long(0), ctypes.c_long(4 << 30))
    print(ret, errno.errorcode.get(ctypes.get_errno(), "ok"))
try:
    os.posix_fallocate(1, 0, 4 << 30)  # glibc's emulation writes (bounded by RLIMIT_FSIZE) only on EOPNOTSUPP
except OSError as e:
    print("posix_fallocate", errno.errorcode[e.errno])
""",
        timeout=5,
    )
    assert r.stdout.endswith("-1 ENOSYS\n-1 ENOSYS\nposix_fallocate ENOSYS\n"), r


@pytest.mark.parametrize("fail", ["temp file", "read back", "workdir"])
def test_the_trainers_io_errors_are_the_runs_error_and_not_remembered(
    mode, monkeypatch, fail
):
    """A failure of the trainer's own files (a run's memory files, the workdir) raised OSError out of the
    verifier, and was remembered as the program's result after the trainer's resources were free again."""
    if (
        fail == "workdir"
        and mode != "uid"
        and not (mode == "native" and NATIVE is None)
    ):
        pytest.skip("the jails make no workdir on the host")
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    real_file, real_mkdtemp = jail._memory_file, tempfile.mkdtemp

    def broken_file(*a, **k):  # the run's files: its source, stdin, stdout, stderr
        if fail == "temp file":
            raise full
        made.append(real_file(*a, **k))
        return Unreadable(made[-1]) if len(made) % 4 == 3 else made[-1]

    class Unreadable:  # the stdout file: the run happens, reading its output back fails
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            if name == "read":
                raise full
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def recorded_cgroups(*a):
        dirs = cgroups.make_cgroups(*a)
        groups.extend(dirs)
        return dirs

    made, groups = [], []
    monkeypatch.setattr(jail, "_memory_file", broken_file)
    monkeypatch.setattr(jail, "make_cgroups", recorded_cgroups)
    if fail == "workdir":
        monkeypatch.setattr(
            tempfile, "mkdtemp", lambda *a, **k: (_ for _ in ()).throw(full)
        )
    prob = {"id": "p", "domain": "code", "question": "", "format": "stdio", "tests": []}
    prog = f"print(int(input()) + 1)  # {uuid.uuid4().hex}"
    tag, src = _marked(prog)
    before = _workdirs()
    r = run_case(prob, src, "1", timeout=5)
    assert (
        r.error.startswith("error: not run: ")
        and "No space left on device" in r.error
        and len(r.error) <= 300
    ), r
    assert (
        attribute_code(
            {**prob, "tests": [{"input": "1", "output": "2"}]}, src, None, timeout=5
        ).checks["program_correct"]
        is False
    )
    _assert_all_dead(tag)
    assert _workdirs() == before and not [d for d in groups if os.path.exists(d)]
    monkeypatch.setattr(jail, "_memory_file", real_file)
    monkeypatch.setattr(tempfile, "mkdtemp", real_mkdtemp)
    # run again, not the remembered failure
    assert run_case(prob, src, "1", timeout=5) == RunResult("2\n", None)


def test_a_run_refused_while_terminating_is_not_remembered(monkeypatch):
    prob = {"id": "p", "domain": "code", "question": "", "format": "stdio", "tests": []}
    prog = f"print(3)  # {uuid.uuid4().hex}"
    monkeypatch.setattr(jail._terminating, "is_set", lambda: True)
    assert (
        run_case(prob, prog, "", timeout=5).error
        == "error: not run: the process is terminating"
    )
    monkeypatch.undo()
    assert run_case(prob, prog, "", timeout=5) == RunResult("3\n", None)


def test_an_output_over_the_cap_is_an_error_not_a_prefix(mode):
    """A program that printed the right answer followed by more than MAX_STDOUT bytes was judged on the prefix."""
    over = run_program(
        f"import sys\nsys.stdout.write('x' * {jail.MAX_STDOUT + 1})", timeout=5
    )
    assert (
        over.error == f"error: output over the cap of {jail.MAX_STDOUT} bytes"
        and len(over.stdout) == jail.MAX_STDOUT
    ), over.error
    at = run_program(
        f"import sys\nsys.stdout.write('x' * {jail.MAX_STDOUT})", timeout=5
    )
    assert at.ok and len(at.stdout) == jail.MAX_STDOUT


@needs_filter
def test_a_program_cannot_probe_or_evict_the_page_cache_of_shared_files(mode):
    """/usr is the same files for every run: which of their pages are cached, set by one run (evict, prefetch) and
    read by a later one without reading them (mincore, cachestat, a read that must not wait, the pages mapped
    around a fault), carried 32 bits of 32 between runs, hidden inputs included."""
    path = os.path.realpath(jail._setup()[0])
    r = run_program(
        f"""
import ctypes, errno, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
def show(name, call):
    try:
        ctypes.set_errno(0)
        print(name, errno.errorcode[ctypes.get_errno()] if call() == -1 else "ok")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
fd = os.open({path!r}, os.O_RDONLY)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
p = libc.mmap(None, 1 << 16, 1, 2, fd, 0)  # PROT_READ, MAP_PRIVATE
vec = ctypes.create_string_buffer(16)
show("mincore", lambda: libc.mincore(ctypes.c_void_p(p), 1 << 16, vec))
for advice in (1, 3, 20, 21):  # MADV_RANDOM, MADV_WILLNEED, MADV_COLD, MADV_PAGEOUT
    show(f"madvise{{advice}}", lambda: libc.madvise(ctypes.c_void_p(p), 1 << 16, advice))
show("fadvise", lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))
show("readahead", lambda: libc.readahead(fd, ctypes.c_long(0), ctypes.c_size_t(1 << 16)))
show("preadv2", lambda: os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT))
show("cachestat", lambda: libc.syscall(451, fd, ctypes.create_string_buffer(16), ctypes.create_string_buffer(40), 0))
show("io_setup", lambda: libc.syscall({NR["io_setup"]}, 8, ctypes.byref(ctypes.c_ulong(0))))
show("madvise4", lambda: libc.madvise(ctypes.c_void_p(p), 1 << 16, 4))  # MADV_DONTNEED: the run's own mapping only
""",
        timeout=5,
    )
    names = [
        "mincore",
        "madvise1",
        "madvise3",
        "madvise20",
        "madvise21",
        "fadvise",
        "readahead",
        "preadv2",
        "cachestat",
        "io_setup",
    ]
    # glibc's answer to ENOSYS
    expected = [f"{n} ENOSYS" if n != "preadv2" else "preadv2 ENOTSUP" for n in names]
    # with a flag: it cannot fall back to preadv
    assert r.stdout.splitlines() == expected + ["madvise4 ok"], r


def test_programs_see_only_the_standard_library(mode):
    """Started with the interpreter's site directories on sys.path, a program imported the host's third-party
    packages (and their .pth files ran)."""
    found = subprocess.run(
        [
            INTERPRETER,
            "-I",
            "-c",
            "import os, site, sys\nfor d in site.getsitepackages():\n"
            "    for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:\n"
            "        if os.path.isfile(os.path.join(d, n, '__init__.py')) and n.isidentifier():\n"
            "            print(n)",
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    r = run_program(
        f"""
import importlib, sys
print([p for p in sys.path if "-packages" in p])
for name in {found[:3]!r}:
    try:
        importlib.import_module(name)
        print(name, "imported")
    except ImportError:
        pass
exit(0)
""",
        timeout=10,
    )
    assert r == RunResult("[]\n", None), r
    # exit and quit, which site defines
    assert run_program("quit(3)", timeout=5).error == "error: exit code 3"


@needs_cgroups
def test_cgroups_left_by_a_killed_trainer_are_reclaimed_at_the_next_start():
    homes = cgroups.cgroup_homes()
    with uids.fresh_uid() as live:
        with uids.fresh_uid() as dead:
            pass
        left = [
            os.path.join(home, f"mas-opd-sandbox-{uid}")
            for home in homes.values()
            for uid in (live, dead)
        ]
        for d in left:
            os.mkdir(d)
        try:
            cgroups.cgroup_homes.cache_clear()
            assert cgroups.cgroup_homes() == homes
            # the live run's stay
            assert [os.path.isdir(d) for d in left] == [True, False] * len(homes)
        finally:
            cgroups.cgroup_homes.cache_clear()
            cgroups.remove_cgroups([d for d in left if os.path.isdir(d)])


def test_memory_held_in_files_is_bounded_without_cgroups(mode, monkeypatch):
    """Without cgroups, RLIMIT_AS alone was the memory cap, and memory-backed files escape it: 600 MiB held under
    256 MiB. memfd_create is denied; the jails' /tmp and /dev/shm are size-limited; the uid level says it is not."""
    monkeypatch.setattr(jail, "cgroup_homes", lambda: {})
    monkeypatch.setattr(jail, "make_cgroups", lambda *a: [])
    r = run_program(
        """
import os
held = []
try:
    for i in range(5):
        fd = os.memfd_create(f"m{i}")
        os.write(fd, b"x" * (60 << 20))
        held.append(fd)
except OSError as e:
    print(e.errno, end=" ")
print(len(held))
""",
        timeout=10,
        memory_mb=256,
    )
    assert r.stdout == f"{errno.ENOSYS} 0\n", r
    if mode == "uid" or (mode == "native" and NATIVE is None):
        assert "NOT capped: memory held in files" in jail.jail_line()
        return
    assert "NOT capped: memory held in SysV shared memory" in jail.jail_line()
    r = run_program(
        """
import os
n = 0
try:
    for i in range(5):
        with open(f"/dev/shm/f{i}", "wb") as f:
            f.write(b"x" * (60 << 20))
        n += 1
except OSError as e:
    print(e.errno, end=" ")
print(n)
""",
        timeout=10,
        memory_mb=256,
    )
    assert r.stdout == f"{errno.ENOSPC} 1\n", r


@needs_root
@pytest.mark.parametrize("unshare", ["works", "denied"])
def test_the_uid_level_cleans_up_recursively_and_has_its_own_ipc_and_network(
    monkeypatch, unshare
):
    """Files of the run's uid inside a world-writable directory of another owner survived the cleanup; SysV IPC
    outlived the run and the host's 127.0.0.1 was reachable. Where unshare cannot make namespaces, the level says
    so."""
    monkeypatch.setattr(jail, "_setup", lambda: (INTERPRETER, None))
    if unshare == "denied":
        monkeypatch.setattr(jail, "_own_ipc_and_network", lambda: [])
    shared = tempfile.mkdtemp(prefix="shared-", dir="/tmp")
    os.chmod(shared, 0o1777)
    key = random.randint(1 << 20, 1 << 30)
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            r = run_program(
                f"""
import ctypes, os, socket
os.makedirs({shared!r} + "/sub/deeper")
open({shared!r} + "/sub/deeper/left", "w").write("x")
open({shared!r} + "/left", "w").write("x")
print(ctypes.CDLL(None).shmget({key}, 1 << 20, 0o1666) >= 0)
try:
    socket.create_connection(("127.0.0.1", {server.getsockname()[1]}), timeout=2)
    print("connected")
except OSError as e:
    print(type(e).__name__)
""",
                timeout=5,
            )
        assert os.listdir(shared) == [] and r.stdout.startswith("True\n"), r
        # unshare cannot make them here: the level says so
        if not jail._own_ipc_and_network():
            libc = ctypes.CDLL(None)
            # IPC_RMID: the segment the run left on the host
            libc.shmctl(libc.shmget(key, 0, 0), 0, None)
            assert (
                jail.jail_line().startswith("uid (")
                and "its network and IPC out of reach" in jail.jail_line()
            )
            return
        assert r.stdout.splitlines()[1] != "connected", r
        with open("/proc/sysvipc/shm") as f:
            assert not [
                ln for ln in f.read().splitlines()[1:] if int(ln.split()[0]) == key
            ]
        assert "own IPC and network namespaces" in jail.jail_line()
    finally:
        shutil.rmtree(shared)
