"""Hostile programs and files through the project's own entry points (jail.run_program, cases.run_case,
attribution.attribute_code, the GRPO rewards, load_problems, train.py --resume), each in bubblewrap's jail and
again with bubblewrap hidden (the namespaces jail, as root): the kernel surface inside the jail, the jail's life
tied to the trainer's, verdicts a program cannot forge, the trainer's own failures never remembered as the
program's, checkpoints read as data, and golden tests the verifier could not judge refused at load."""

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
import torch

import train
from attribution import attribute_code
from baselines import rewards
from infra import data
from infra.data import ProblemError, load_problems
from rollout import RolloutConfig, math_env
from sandbox import cases, cgroups, jail
from sandbox.outcomes import NOT_RUN, RunResult
from tests.test_sandbox import (
    _alive_named,
    _assert_all_dead,
    _marked,
    needs_filter,
    needs_root,
)
from tests.test_train import FAST
from tests.test_workflows import APPLES

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STDIO = {"id": "p", "domain": "code", "question": "", "format": "stdio", "tests": []}


def _fresh(src: str) -> str:
    """src made a program no earlier run of this process has run: the cache of cases.run_once is per process."""
    return f"{src}\n# {uuid.uuid4().hex}\n"


# ----------------------------------------------------------------------------- the kernel surface

NAMESPACES = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def show(name, call):
    ctypes.set_errno(0)
    ret = call()
    if ret == 0:  # a clone's child: leave at once
        os._exit(0)
    print(name, "made" if ret > 0 else errno.errorcode[ctypes.get_errno()])
NEWUSER, NEWNET, NEWNS, NEWPID = 0x10000000, 0x40000000, 0x20000, 0x20000000
show("unshare user+net", lambda: libc.unshare(NEWUSER | NEWNET) or 1)
show("unshare mount", lambda: libc.unshare(NEWNS) or 1)
show("clone user", lambda: libc.syscall(CLONE, NEWUSER | 17, 0, 0, 0, 0))  # 17: SIGCHLD, a fork otherwise
show("clone pid", lambda: libc.syscall(CLONE, NEWPID | 17, 0, 0, 0, 0))
show("clone3 user", lambda: libc.syscall(CLONE3, ctypes.byref((ctypes.c_uint64 * 11)(NEWUSER, 0, 0, 0, 17)), 88))
fd = libc.syscall(434, os.getpid(), 0)  # pidfd_open: a pidfd names the process's namespaces to setns
show("setns", lambda: libc.setns(fd, NEWNET) or 1)
"""


@needs_filter
def test_no_new_namespace_inside_the_jail(jailed):
    """In the namespaces jail a program made a user namespace of its own and, in it, a network namespace it
    administers (bubblewrap's jail refused the user namespace, the kernel the rest): every way to a new namespace
    now returns ENOSYS in both jails, while a plain fork and threads still work."""
    nrs = {"x86_64": (56, 435), "aarch64": (220, 435)}[os.uname().machine]
    src = NAMESPACES.replace("CLONE3", str(nrs[1])).replace("CLONE", str(nrs[0]))
    r = jail.run_program(src, timeout=10)
    names = [
        "unshare user+net",
        "unshare mount",
        "clone user",
        "clone pid",
        "clone3 user",
        "setns",
    ]
    assert r.stdout.splitlines() == [f"{n} ENOSYS" for n in names], r
    r = jail.run_program(
        "import os, threading\nt = threading.Thread(target=print, args=('thread',))\nt.start()\n"
        "t.join()\nif os.fork() == 0:\n    os._exit(0)\nprint(os.wait()[1])",
        timeout=10,
    )
    assert r == RunResult("thread\n0\n", None)


SOCKETS = """
import errno, socket
for name in ("AF_UNIX", "AF_INET", "AF_INET6", "AF_VSOCK", "AF_NETLINK", "AF_PACKET", "AF_ALG", "AF_KEY", "AF_TIPC"):
    family = getattr(socket, name)
    kind_of = {"AF_VSOCK": socket.SOCK_STREAM, "AF_ALG": socket.SOCK_SEQPACKET}.get(name, socket.SOCK_DGRAM)
    for kind, make in (("socket", lambda: socket.socket(family, kind_of)),
                       ("socketpair", lambda: socket.socketpair(family, socket.SOCK_DGRAM))):
        try:
            for s in (lambda m: m if isinstance(m, tuple) else (m,))(make()):
                s.close()
            print(name, kind, "made")
        except OSError as e:
            print(name, kind, errno.errorcode.get(e.errno, e.errno))
"""


@needs_filter
def test_sockets_only_of_the_unix_and_ip_families(jailed):
    """AF_VSOCK's ports are the host's and its hypervisor's, AF_NETLINK talks to the kernel: a program made both
    in either jail. Only Unix and IP sockets can be made now; the rest fail as on a kernel built without them."""
    lines = jail.run_program(SOCKETS, timeout=10).stdout.splitlines()
    made = {ln.rsplit(" ", 1)[0] for ln in lines if ln.endswith(" made")}
    assert {
        "AF_UNIX socket",
        "AF_UNIX socketpair",
        "AF_INET socket",
        "AF_INET6 socket",
    } <= made, lines
    others = [
        ln for ln in lines if not ln.startswith(("AF_UNIX ", "AF_INET ", "AF_INET6 "))
    ]
    assert len(others) == 12 and all(ln.endswith(" EAFNOSUPPORT") for ln in others), (
        lines
    )


# ----------------------------------------------------------------------------- the trainer's death


def _descendants(pid: int) -> list[int]:
    """Every living process below pid (its children, theirs, ...), read from /proc."""
    parents = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            if state not in "ZX":
                parents[int(d)] = int(ppid)
        except (OSError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        children = [c for c, p in parents.items() if p in frontier]
        found += children
        frontier = children
    return found


def _living(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in "ZX":
                    alive.append(pid)
        except OSError:
            pass
    return alive


def test_no_process_of_a_run_outlives_a_sigkill_of_the_trainer(jailed):
    """A trainer killed with SIGKILL mid-run cannot clean up: in the namespaces jail the program, its child, the
    jail's init and unshare kept running. Every process the run started dies with the trainer now."""
    tag, src = _marked("""
        import os, time
        if os.fork() == 0:
            os.setsid()
        print("running", flush=True)
        time.sleep(120)
    """)
    script = (
        jailed
        + f"from sandbox import jail\nprint(jail.run_program({src!r}, timeout=120))"
    )
    trainer = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT_DIR, stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 30
        while len(_alive_named(tag)) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(_alive_named(tag)) == 2
        # the jail's processes (bwrap or setpriv/unshare and its init) too
        run = _descendants(trainer.pid)
        assert len(run) >= 3, run
    finally:
        trainer.kill()
        trainer.wait()
    deadline = time.time() + 5
    while _living(run) and time.time() < deadline:
        time.sleep(0.05)
    assert _living(run) == []
    _assert_all_dead(tag)


# ----------------------------------------------------------------------------- verdicts a program cannot forge


@pytest.mark.parametrize(
    "words",
    [
        "timed out after 5 s",
        "not run: the sandbox failed: [Errno 28] No space left",
        "output over the cap of 1048576 bytes",
    ],
)
def test_a_programs_own_words_never_read_as_the_sandboxs_conditions(jailed, words):
    """A program that exits with the sandbox's words on stderr read as the sandbox's timeout or "not run" line,
    and the cache took it for the sandbox's condition: its failure was not remembered (a random draw could win
    on a later try). Its words are marked as its own now, and its failure is remembered as its outcome."""
    prog = _fresh(f"import random, sys\nprint(random.random())\nsys.exit({words!r})")
    first = cases.run_case(STDIO, prog, "", timeout=5)
    assert first.error == f"error: stderr: {words}" and first.condition is None, first
    # remembered: the program's own failure
    assert cases.run_case(STDIO, prog, "", timeout=5) is first


def test_the_run_reward_reads_the_sandboxs_result_not_the_printed_words(jailed):
    """The GRPO baselines' Tool-User "run" reward read the printed-answer string: a program that crashed with
    "the program printed nothing" earned it, one that ran and printed an error-looking line did not."""
    cfg = RolloutConfig(math_timeout=5)

    def run_part(program):
        artefacts, _ = math_env(
            APPLES,
            {"reasoner": "#### 29", "tool_user": f"Code:\n```python\n{program}\n```"},
            cfg,
        )
        return rewards.tool_user_run(artefacts), artefacts.program_answer

    assert run_part("import sys\nsys.exit('the program printed nothing')") == (
        0.0,
        "error: stderr: the program printed nothing",
    )
    assert run_part("print('error: timed out after 20 s')") == (
        1.0,
        "error: timed out after 20 s",
    )
    # printing nothing is a run (D12)
    assert run_part("pass") == (1.0, "error: the program printed nothing")


# ----------------------------------------------------------------------------- the trainer's failures


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    """-> (the trainer's temp directory on a 1 MiB tmpfs, free(room): leave `room` bytes free there, None: all)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if (
        not jail.uids.IS_ROOT
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
            capture_output=True,
        ).returncode
    ):
        pytest.skip("no tmpfs can be mounted here (root only)")
    monkeypatch.setattr(tempfile, "tempdir", str(disk))
    # the trainer's own files, e.g. a checkpoint
    filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)

    def free(room):
        os.ftruncate(filler, 0)
        if room is not None:
            try:
                while True:
                    os.write(filler, b"x" * 4096)
            except OSError:
                os.ftruncate(filler, max(0, os.fstat(filler).st_size - room))

    yield disk, free
    os.close(filler)
    subprocess.run(["umount", "-l", str(disk)])


# fills every place it can write: its stdin, /tmp, /dev/shm, then stdout, until something stops it
FILLER = """
import os
try:
    while True:
        os.write(0, b"x" * (1 << 20))
except OSError as e:
    print("stdin", type(e).__name__)
for path in ("/tmp/fill", "/dev/shm/fill"):
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"x" * (1 << 20))
    except OSError as e:
        print(path, type(e).__name__)
while True:
    print("y" * 65536)
"""


def test_a_program_cannot_reach_the_hosts_disk_nor_make_its_failure_the_hosts(
    jailed, small_disk
):
    """Its stdin a read-write file on the trainer's temp disk, a program filled that disk and its run ended as
    "the host's temp disk is full": not run, neither judged nor remembered; a full disk also failed an honest
    program's print. Now a run's source and stdio are memory files, stdin sealed: nothing a program writes lands
    on the host's disk, a full disk fails no run, and a program that fills what it can is judged wrong."""
    disk, free = small_disk
    free(0)
    prog = _fresh("print(int(input()) + 1)\nprint('y' * 12000)")
    assert cases.run_case(STDIO, prog, "1", timeout=10) == RunResult(
        "2\n" + "y" * 12000 + "\n", None
    )
    free(None)
    room = os.statvfs(disk).f_bavail
    r = cases.run_case(STDIO, _fresh(FILLER), "1", timeout=20)
    assert r.condition is None and not r.ok, r
    assert r.stdout.startswith(
        "stdin PermissionError\n/tmp/fill OSError\n/dev/shm/fill OSError\n"
    ), r.stdout[:200]
    assert os.statvfs(disk).f_bavail == room
    again = _fresh(
        "import os\ntry:\n    os.write(0, b'9')\nexcept OSError:\n    pass\nprint(input())"
    )
    assert cases.run_case(STDIO, again, "1", timeout=10) == RunResult("1\n", None)


def _cgroups_of_one_process(make):
    def tight(*a):
        dirs = make(*a)
        for d in dirs:
            if os.path.exists(os.path.join(d, "pids.max")):
                with open(os.path.join(d, "pids.max"), "w") as f:
                    f.write("1")
        return dirs

    return tight


@needs_root
@pytest.mark.parametrize("limit", ["open files", "processes"])
def test_the_hosts_limits_failing_the_jail_are_not_run_and_not_remembered(
    jailed, monkeypatch, limit
):
    """The jail's own start (bubblewrap, unshare, setpriv, the interpreter) failed for the host's limits, before
    the program's first instruction: its stderr was read as the program's failure and remembered as its result."""
    if limit == "processes":
        if not cgroups.cgroup_homes():
            pytest.skip("no writable cgroup v1 hierarchy")
        monkeypatch.setattr(
            jail, "make_cgroups", _cgroups_of_one_process(cgroups.make_cgroups)
        )
    else:
        real = jail._jailed
        monkeypatch.setattr(
            jail, "_jailed", lambda *a: ["prlimit", "--nofile=3", "--"] + real(*a)
        )
    prog = _fresh("print(int(input()) * 2)")
    r = cases.run_case(STDIO, prog, "21", timeout=10)
    assert r.condition == NOT_RUN and r.error.startswith(
        "error: not run: the sandbox did not start the program: "
    )
    monkeypatch.undo()
    assert cases.run_case(STDIO, prog, "21", timeout=10) == RunResult("42\n", None)


# ----------------------------------------------------------------------------- checkpoints are data


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def test_a_checkpoint_state_that_would_run_code_is_refused(
    tmp_path, error_line, problems, truncated_model
):
    """--resume unpickled the run directory's state.pt with full pickle: a run directory from elsewhere ran its
    code in the trainer. Now it is refused in one line, exit code 2, and nothing of it runs."""
    ckpt, marker = tmp_path / "checkpoint", str(tmp_path / "ran")
    truncated_model(ckpt / "shared")
    torch.save(
        {
            "step": 0,
            "optims": [],
            "skipped": 0,
            "args": _RunsCode(marker),
            "rng": dict.fromkeys(("torch", "python", "sampler")),
        },
        ckpt / "state.pt",
    )
    with pytest.raises(SystemExit) as e:
        train.main(FAST + ["--problems", problems, "--out", str(tmp_path), "--resume"])
    assert e.value.code == 2 and not os.path.exists(marker)
    error_line(
        f"{ckpt / 'state.pt'}: refusing a checkpoint state that is not plain data"
    )


# ----------------------------------------------------------------------------- tests judged at load


def _file(tmp_path, *problems):
    path = tmp_path / f"{uuid.uuid4().hex}.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    return str(path)


def test_tests_the_verifier_cannot_judge_are_refused_at_load(
    jailed, tmp_path, monkeypatch
):
    """An expected output over the stdout cap, a function result over the literal cap (compared as text, so the
    reference's own result failed) and a test the reference itself fails were loaded, and judged every program
    wrong on them, the reference included."""
    big = {
        **STDIO,
        "id": "big",
        "tests": [{"input": "", "output": "7" * (jail.MAX_STDOUT + 1)}],
    }
    listed = {
        "id": "ones",
        "domain": "code",
        "question": "",
        "format": "function",
        "entry_point": "ones",
        "solution": "def ones(n):\n    return [1] * n",
        "tests": [
            {"input": "[3]", "output": "[1, 1, 1]"},
            {"input": "[20000]", "output": "[" + ",".join(["1"] * 20000) + "]"},
        ],
    }
    wrong = {
        **STDIO,
        "id": "double",
        "solution": _fresh("print(2 * int(input()))"),
        "tests": [
            {"input": "2", "output": "4"},
            {"input": "3", "output": "7"},
            {"input": "x", "output": "0"},
        ],
    }
    for problem, said in [
        (
            big,
            "tests[0]: its expected output of 1,048,577 bytes is over the verifier's cap",
        ),
        (
            listed,
            "tests[1]: its expected output of 40,001 characters is over the verifier's cap",
        ),
        (
            wrong,
            "tests[1]: its reference solution fails it (its output is not the expected one)",
        ),
    ]:
        path = _file(tmp_path, APPLES, problem)
        with pytest.raises(ProblemError) as e:
            load_problems(path)
        assert str(e.value).startswith(
            f"{path}:2: problem {problem['id']!r}, {said}"
        ) and "\n" not in str(e.value)
    # its reference crashes on tests[1]
    crash = {**wrong, "tests": wrong["tests"][:1] + wrong["tests"][2:]}
    with pytest.raises(
        ProblemError,
        match=r"problem 'double', tests\[1\]: its reference solution fails it "
        r"\(error: stderr: ValueError",
    ):
        load_problems(_file(tmp_path, crash))
    right = {**wrong, "tests": wrong["tests"][:1]}
    assert [p["id"] for p in load_problems(_file(tmp_path, right, APPLES))] == [
        "double",
        "apples",
    ]
    # a reference that times out leaves its test unjudged, not refused: under load it may finish next time
    monkeypatch.setattr(data, "CODE_TIMEOUT", 1.0)
    slow = {
        **STDIO,
        "id": "slow",
        "solution": _fresh("import time\ntime.sleep(60)"),
        "tests": [{"input": "", "output": "1"}],
    }
    assert [p["id"] for p in load_problems(_file(tmp_path, slow))] == ["slow"]


def test_a_file_judged_whole_is_not_judged_again_until_a_byte_of_it_changes(
    jailed, tmp_path, monkeypatch
):
    right = {
        **STDIO,
        "id": "double",
        "solution": _fresh("print(2 * int(input()))"),
        "tests": [{"input": "2", "output": "4"}],
    }
    path, runs, real = _file(tmp_path, right), [], data.run_case
    monkeypatch.setattr(
        data, "run_case", lambda *a, **k: runs.append(a[0]["id"]) or real(*a, **k)
    )
    load_problems(path)
    load_problems(path)  # remembered: no reference runs
    assert runs == ["double"]
    with open(path, "a") as f:
        f.write("\n")  # the same problems, another file: judged again
    load_problems(path)
    assert runs == ["double"] * 2
    # a file with a test left unjudged (its reference timed out) is judged again at every load
    monkeypatch.setattr(data, "CODE_TIMEOUT", 1.0)
    slow = _file(
        tmp_path,
        {
            **STDIO,
            "id": "slow",
            "solution": _fresh("import time\ntime.sleep(60)"),
            "tests": [{"input": "", "output": "1"}],
        },
    )
    load_problems(slow)
    load_problems(slow)
    assert runs == ["double"] * 2 + ["slow"] * 2


COUNTED = {
    "id": "doubles",
    "domain": "code",
    "format": "stdio",
    "question": "A count T, then T integers: print each doubled, one a line.",
    "tests": [{"input": "2\n1\n5\n", "output": "2\n10\n"}],
    "solution": "for _ in range(int(input())):\n    print(2 * int(input()))",
}


def test_a_test_that_any_silent_program_passes_is_degenerate(jailed):
    """A Tester's case whose input declares zero cases and whose expected output is empty: the reference prints
    nothing, so every program that prints nothing passes it, and it was judged a correct test."""
    assert (
        attribute_code(COUNTED, None, ("0\n", ""), timeout=5).checks["test_correct"]
        is False
    )
    assert (
        attribute_code(COUNTED, None, ("0\n", "\n  \n"), timeout=5).checks[
            "test_correct"
        ]
        is False
    )
    assert (
        attribute_code(COUNTED, None, ("1\n4\n", "8\n"), timeout=5).checks[
            "test_correct"
        ]
        is True
    )
    # where the problem's own
    silent = {**COUNTED, "tests": COUNTED["tests"] + [{"input": "0\n", "output": ""}]}
    assert (
        attribute_code(silent, None, ("0\n", ""), timeout=5).checks["test_correct"]
        is True
    )  # tests print none
