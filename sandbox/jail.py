"""Run untrusted Python programs (Coder programs, Tester cases) isolated. cases.py runs them on a problem's test
cases and compares their outputs.

Each run is stateless (paper App. D.6.1): the program starts fresh, test input on stdin, stdout captured, a
wall-clock timeout, then everything it started is killed and everything it wrote is gone. Crashes, syntax
errors and timeouts never raise; they become a RunResult (outcomes.py) with a one-line "error: ..." string, and
the sandbox's own conditions (not run, timed out, output over the cap) in a field the program cannot set.
`jail_line()` says which of these isolation levels is active (train.py and eval.py print it at start):

- jail (bubblewrap installed, e.g. Debian's `bubblewrap` package): the program runs in its own user, mount, pid,
  IPC, network and UTS namespaces. It sees, read-only, its interpreter, the standard library and their shared
  libraries (namespaces.shown_paths; every page of them locked in the page cache: warm_page_cache), a private /tmp and
  /dev/shm of JAIL_TMP_MB each, no /proc, no network but its own loopback, and none of the host's other files:
  not the problem file, not the golden tests, not its parent, not the tools of /usr. Its IPC objects and files
  vanish with the namespaces, and it dies with its parent (--die-with-parent), also when the parent is killed.
- namespaces (root without bubblewrap, util-linux's unshare): the same namespaces but the user namespace, and the
  same view of the host, built by namespaces.py from mounts; the program runs under a fresh uid. The jail's
  promises, dying with the trainer included.
- uid (root where neither works): the program runs in a fresh temp dir under a fresh uid, in its own IPC and
  network namespaces where unshare can make them; cleanup kills every process of that uid and deletes what it left
  in /tmp & co. It can read world-readable files and fill the host's disk 64 MiB a file (without those namespaces
  also reach the host's loopback and leave IPC objects behind): not the jail's promises (check_isolation).
- process (not root, no bubblewrap): process-group kill only. Not a security boundary.

Caps in every level: per-process rlimits (address space, file size, CPU seconds, open files, no core; processes
per uid as root), and a seccomp filter (seccomp.py: keyrings, ptrace, file locks, space reserved on disk, memfds,
page-cache probes, usage counters, new namespaces, io_uring & co. return ENOSYS; sockets only of the Unix and IP
families). The program sees only the standard library (python -I -S). As root, where cgroup v1 hierarchies are writable
(cgroups.py), the whole run also shares one memory, process-count and CPU cap; a run whose cgroups cannot be made
is refused, never run uncapped. Every process of a run that becomes the trainer's child (as PID 1, e.g. in a
container started without --init, it inherits orphans) is reaped: at the process level, those left in the run's
group. What fails for the trainer's reasons is NOT_RUN, never an exception and never the program's verdict: an
I/O error of its own files around a run, its fd or process limits, a jail or cap that could not be made before
the program's first instruction (_BOOT's word on a pipe says whether that was reached). A run's source and stdio
are memory files of the trainer (stdin sealed), so nothing a program writes reaches the host's disk there, and
a full disk is never the reason a program failed.
"""

import contextlib
import ctypes
import fcntl
import functools
import itertools
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

from sandbox import seccomp, uids
from sandbox.cgroups import ATTACH, cgroup_homes, make_cgroups, remove_cgroups
from sandbox.namespaces import TOPS, jail_argv, shown_files, shown_paths
from sandbox.outcomes import (
    ERROR,
    MAX_STDOUT,
    OVER_CAP,
    TIMED_OUT,
    RunResult,
    ended,
    failed,
    last_line,
    not_run,
)

# RLIMIT_FSIZE: bounds every file the program writes, its stdout file included
MAX_FILE_MB = 64
JAIL_TMP_MB = 64  # size of the jail's private /tmp and of its /dev/shm
# RLIMIT_NOFILE per process: without it a run could hold the host's limit (> 1M)
MAX_FILES = 256
# a memory file's content fixed: no write, no size change, no seal removed
SEALED = (
    fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
)
# b"": no syscall table here, and jail_line() says so
SECCOMP_FILTER = seccomp.program(os.uname().machine)
# _BOOT's word on the status fd: the program's first instruction is next
STARTED = b"STARTED"

# Runs in the child before the program: an unprivileged process may lower its own limits, and doing it here
# instead of in Popen(preexec_fn=...) keeps Popen thread-safe (run_cases spawns from several threads).
# argv: AS bytes, NPROC (-1: leave), FSIZE bytes, CPU seconds, open files, the seccomp filter in hex ("": none),
# the status fd. Hard limits too, so the program cannot raise them. The filter goes in here rather than through
# bubblewrap's --seccomp so that the uid and process levels get it as well; a filter that does not load fails the
# run, as not run. The status fd (a pipe to the trainer) gets STARTED just before the program's exec, or why it was
# not started: the one word on a run's outcome that the program cannot write (its stderr is its own).
_BOOT = """\
import ctypes, os, resource, sys
def cap(r, v):
    hard = resource.getrlimit(r)[1]
    v = v if hard == resource.RLIM_INFINITY else min(v, hard)
    resource.setrlimit(r, (v, v))
mem, nproc, fsize, cpu, files = map(int, sys.argv[1:6])
cap(resource.RLIMIT_AS, mem)
cap(resource.RLIMIT_FSIZE, fsize)
cap(resource.RLIMIT_CPU, cpu)
cap(resource.RLIMIT_NOFILE, files)
cap(resource.RLIMIT_CORE, 0)
if nproc >= 0:
    cap(resource.RLIMIT_NPROC, nproc)
if os.getpgid(0) != os.getpid():  # the jail, where bwrap leads the run's group: keep bwrap out of our killpg(0)
    os.setsid()
status = int(sys.argv[7])
if sys.argv[6]:
    class Prog(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    bpf = bytes.fromhex(sys.argv[6])
    libc = ctypes.CDLL(None, use_errno=True)
    # PR_SET_NO_NEW_PRIVS (required unprivileged), then PR_SET_SECCOMP with SECCOMP_MODE_FILTER
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(Prog(len(bpf) // 8, bpf)), 0, 0):
        os.write(status, b"seccomp filter not loaded: " + os.strerror(ctypes.get_errno()).encode())
        sys.exit(1)
os.write(status, STARTED)
os.close(status)  # the program never holds it: what the trainer reads there was written before its first instruction
# -S: no site directories, only the standard library; exit() and quit(), which site would define, as sys.exit
os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", "__builtins__.exit = __builtins__.quit = "
         "__import__('sys').exit; __import__('sys').argv[0] = __file__ = 'main.py'; "
         "exec(compile(open(__file__, 'rb').read(), __file__, 'exec'))"])
""".replace(
    "STARTED", repr(STARTED)
)  # the script runs apart from this module: the word goes in as its text


def _env(home: str) -> dict:
    """Environment built from scratch: nothing of the parent's leaks (keys, tokens, CUDA settings)."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "HOME": home,
        "TMPDIR": home,
    }


# ----------------------------------------------------------------------------- the jail


@dataclass(frozen=True)
class Jail:
    kind: str  # "bubblewrap", or "namespaces" (namespaces.py: unshare, as root)
    shown: tuple  # the host paths the program sees read-only (namespaces.shown_paths)


def _bwrap(shown) -> list[str]:
    """bwrap options (up to the command) for a jail that sees `shown` read-only.
    No --new-session: a run already starts in a session of its own without a terminal (start_new_session), and
    bwrap's would take the namespace's init out of the run's process group, out of reach of its kill and reaping.
    The program leaves that group instead (_BOOT), so that it cannot stop bwrap with killpg(0, SIGSTOP)."""
    argv = [
        "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--uid",
        "65534",
        "--gid",
        "65534",
    ]
    for path in shown:
        argv += ["--ro-bind", path, path]
    for top in TOPS:  # merged-/usr symlinks
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
    size = str(JAIL_TMP_MB << 20)
    # No /proc, in either jail. Its system-wide files are counters all runs share (fs/dentry-state, meminfo,
    # vmstat): one run moved them and a later one read the hidden inputs back. A task's own files tell which pages
    # of the shared files are cached without timing them (pagemap after fault-around, io's bytes read from disk,
    # stat's major faults). A test program needs none of it.
    return argv + [
        "--dev",
        "/dev",
        "--size",
        size,
        "--tmpfs",
        "/tmp",
        "--size",
        size,
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
    ]


def _jailed(
    jail: Jail, interpreter: str, uid: int | None, fd: int | None, command: list[str]
) -> list[str]:
    """The argv that runs `command` in `jail` under `uid`, with the program's source from the inherited `fd` as
    /tmp/main.py (None: no program, the interpreter probe)."""
    # root until its mounts are made: it drops to the uid itself
    if jail.kind == "namespaces":
        return jail_argv(
            interpreter,
            uid,
            JAIL_TMP_MB << 20,
            -1 if fd is None else fd,
            list(jail.shown),
            command,
        )
    source = [] if fd is None else ["--file", str(fd), "/tmp/main.py"]
    return uids.as_user(_bwrap(jail.shown) + source + ["--", *command], uid)


# The probe makes the same re-exec as _BOOT. Where setpriv still holds root's capabilities for its own exec (as in
# some containers), an interpreter behind a 0700 directory (a pyenv under /root) starts, and only its re-exec as the
# sandbox user fails: probing the first exec alone chose an interpreter with which every program failed.
_PROBE = (
    "import os, sys; os.execv(sys.executable, [sys.executable, '-I', '-c', 'pass'])"
)


# libc's mmap and mlock, for the view's pages (warm_page_cache)
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_LIBC.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PROT_READ, MAP_SHARED, MAP_FAILED = 1, 1, ctypes.c_void_p(-1).value


@functools.cache  # once per process and view: its pages then stay where they are
def warm_page_cache(paths: tuple) -> bool:
    """Read every file under `paths` (files or directories) into the page cache and lock its pages there (mlock,
    the mappings held for the life of the process) where this process may (root's CAP_IPC_LOCK, or a large
    enough RLIMIT_MEMLOCK); -> whether every page is locked. The jail shows a program only these
    (namespaces.shown_paths), all of them cached: a run that reads a page adds nothing to the cache, and a later
    run that times its reads learns nothing of what earlier runs read, hidden inputs included. A page that is
    not locked may be evicted by the host (a VM's kernel did, within seconds), and a run that reads it in again
    leaves a bit for a later one: jail_line() says so."""
    locked = True
    for path in shown_files(paths):
        with contextlib.suppress(OSError), open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size and locked:
                # locking faults every page in; the mapping outlives the file (one that
                # fails to lock stays mapped, unlocked, its pages as any others)
                at = _LIBC.mmap(None, size, PROT_READ, MAP_SHARED, f.fileno(), 0)
                locked = at != MAP_FAILED and _LIBC.mlock(at, size) == 0
            while size and not locked and f.read(1 << 20):
                pass
    return locked


@functools.cache
def _setup() -> tuple[str, Jail | None]:
    """(interpreter, jail or None): bubblewrap's jail where it works here, else as root the namespaces jail where
    unshare works, and in it (or without one) the first Python that starts as the sandbox user (/root is 0700, so
    a pyenv sys.executable may not)."""
    candidates = [
        exe
        for exe in (sys.executable, "/usr/bin/python3", shutil.which("python3"))
        if exe
    ]
    kinds = ["bubblewrap"] * bool(shutil.which("bwrap"))
    kinds += ["namespaces"] * bool(uids.IS_ROOT and shutil.which("unshare"))
    # a generator: an interpreter's view is found only when its turn comes
    jails = (
        (exe, Jail(kind, shown_paths(exe))) for kind in kinds for exe in candidates
    )
    with uids.fresh_uid() as uid:
        # every jailed try before any bare one
        for exe, jail in itertools.chain(jails, [(exe, None) for exe in candidates]):
            probe = [exe, "-I", "-S", "-c", _PROBE]
            argv = (
                _jailed(jail, exe, uid, None, probe)
                if jail
                else uids.as_user(probe, uid)
            )
            try:
                probe = subprocess.Popen(
                    argv,
                    env=_env("/tmp"),
                    cwd="/",
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                probe.wait(timeout=30)
            _end_group(probe)  # what is left of it, the jail's init included
            if probe.returncode == 0:
                if jail:
                    warm_page_cache(jail.shown)
                return exe, jail
    raise RuntimeError(
        "sandbox: no Python interpreter runs as an unprivileged user "
        f"(tried {', '.join(candidates)})"
    )


def jail_line() -> str:
    """One line: the isolation level and caps in force for the isolated, stateless runs of App. D.6.1 on this
    machine."""
    interpreter, jail = _setup()
    # what either jail shows, the same in both
    kept = (
        "locked"
        if jail and warm_page_cache(jail.shown)
        else "read (NOT locked: a page the host evicts can carry a bit to a later run)"
    )
    view = (
        "read-only only the interpreter, its standard library and their shared libraries, every page of them "
        f"{kept} in the page cache; no /proc; private /tmp of {JAIL_TMP_MB} MiB"
    )
    if jail and jail.kind == "bubblewrap":
        level = (
            f"jail (bubblewrap: own user, mount, pid, IPC, network namespaces; {view})"
        )
    elif jail:
        level = (
            "jail (namespaces, no bubblewrap: unshare as root, own mount, pid, IPC, network namespaces; "
            f"{view})"
        )
    elif uids.IS_ROOT:
        own = ", own IPC and network namespaces" if _own_ipc_and_network() else ""
        level = (
            f"uid (no bubblewrap, no namespaces jail: a fresh uid per run{own}, its processes and files removed "
            f"afterwards; NOT kept: the host's files hidden, its disk use bounded (only {MAX_FILE_MB} MiB a file)"
            f"{'' if own else ', its network and IPC out of reach'}, the kernel's counters and the page cache "
            "of earlier runs out of sight)"
        )
    else:
        level = "process (no bubblewrap, not root: process-group kill only, not a security boundary)"
    # memfds are refused by the filter; what else a run can hold past RLIMIT_AS, without cgroups
    caps = (
        "cgroup caps per run (memory, processes, CPU) + rlimits"
        if cgroup_homes()
        else (
            "rlimits per process; NOT capped: memory held in "
            + ("" if jail else "files (/dev/shm, tmpfs), ")
            + f"SysV shared memory and socket buffers (~28 MiB a process, {MAX_FILES} files each)"
        )
    )
    caps += (
        "; seccomp filter"
        if SECCOMP_FILTER
        else f"; NO seccomp filter (no syscall table for {os.uname().machine})"
    )
    return f"{level}; {caps}; {'a fresh uid per run; ' if uids.IS_ROOT and jail else ''}Python {interpreter}"


@functools.cache
def _own_ipc_and_network() -> list[str]:
    """At the uid level as root: the unshare prefix that gives a run its own IPC and network namespaces where they
    can be made even though the namespaces jail cannot (its mounts denied, as by a container's AppArmor); else []."""
    argv = ["unshare", "--ipc", "--net", "--"]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        if (
            uids.IS_ROOT
            and subprocess.run(
                argv + ["true"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=30,
            ).returncode
            == 0
        ):
            return argv
    return []


def check_isolation(unisolated_ok: bool) -> str | None:
    """Refuse, with one line (ValueError), to run students' programs (App. D.6.1) where the sandbox has no jail, unless
    `unisolated_ok` (--unisolated-programs) gives the jail's promises up: then the line that says so (None in a
    jail). Both workflows run model-written programs (Coder and Tester; Tool-User), and without a jail one can read
    the problem file, golden tests and reference answers included, and be judged right by the verifier that PAC's
    verdicts rest on (DECISIONS.md D11)."""
    if _setup()[1] is not None:
        return None
    if unisolated_ok:
        return "sandbox: NO jail here, and the students' programs run all the same (--unisolated-programs)"
    raise ValueError(
        "the sandbox has no jail here (no bubblewrap, and not root with util-linux's unshare), so a "
        "student's program could read the golden tests: install bubblewrap (apt-get install "
        "bubblewrap), or give that up with --unisolated-programs"
    )


# ----------------------------------------------------------------------------- killing and cleaning up

# Popen of every run in progress, for the SIGTERM handler
_live, _live_lock = (set(), threading.Lock())
_terminating = threading.Event()


def _signal_group(pid: int) -> None:
    try:
        # pgid == pid (start_new_session); reserved while the group lives
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def end_runs() -> None:
    """Kill every run in progress and start no new one: what a process that is told to stop does first."""
    _terminating.set()
    with _live_lock:
        for proc in _live:
            _signal_group(proc.pid)


def _on_sigterm(signum, frame):
    """SIGTERM (what `timeout`, schedulers and `kill` send): end_runs, then exit through SystemExit so that every
    run's cleanup (and every caller's `finally`) still happens."""
    end_runs()
    raise SystemExit(128 + signum)


def stop_on_sigterm() -> None:
    """Install the SIGTERM handler above (from the main thread of a command line program), so that a terminated
    run still ends every sandboxed execution as App. D.6.1's stateless runs require."""
    signal.signal(signal.SIGTERM, _on_sigterm)


def _end_group(proc: subprocess.Popen) -> None:
    """SIGKILL a run's process group (in the jail: bwrap, whose death takes the whole pid namespace along) and
    reap its main process and every other member that became our child. Only PID 1 (a container started without
    --init) or a subreaper is handed orphans, but such a trainer gets one per run at least (bubblewrap's monitor
    exits without waiting for the namespace's init): never reaped, they fill the pid table."""
    _signal_group(proc.pid)
    proc.wait()
    with contextlib.suppress(ChildProcessError):  # no child of ours (left) in the group
        while True:
            os.waitid(os.P_PGID, proc.pid, os.WEXITED)


@contextlib.contextmanager
def _status_pipe():
    """(read end, write end) of a run's status pipe (_BOOT), both closed afterwards; reads do not block."""
    said, status = os.pipe()
    os.set_blocking(said, False)
    try:
        yield said, status
    finally:
        os.close(said)
        os.close(status)


def _kill_everything(proc: subprocess.Popen, uid: int | None) -> None:
    """End the run's process group and, with a uid of its own, every process of that uid; reap what is ours."""
    _end_group(proc)
    # None (not root): no uid of its own, the group kill is all we can do
    if uid is not None:
        uids.kill_all(uid, _setup()[0], _env("/"))


def _memory_file(name: str, data: bytes | None = None):
    """A file in memory (memfd, CLOEXEC) for a run's source or stdio, open for reading and writing; with `data`,
    that content sealed against every change. Memory, not the host's temp disk: a run's stdio used to be files
    there, and a program that filled the disk (through its own read-write stdin) had its failure read as the
    host's full disk. RLIMIT_FSIZE bounds what a program writes into one (MAX_FILE_MB)."""
    f = os.fdopen(os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING), "r+b")
    if data is not None:
        f.write(data)
        f.flush()
        f.seek(0)
        fcntl.fcntl(f.fileno(), fcntl.F_ADD_SEALS, SEALED)
    return f


# ----------------------------------------------------------------------------- one run


def run_program(
    source: str,
    stdin: str = "",
    *,
    timeout: float,
    memory_mb: int = 1024,
    max_procs: int = 64,
) -> RunResult:
    """Run Python `source` as main.py in a fresh directory with `stdin` as input; return its stdout or error.

    timeout: wall-clock seconds for the main process (also each process's CPU seconds); memory_mb: address space
    per process, and the whole run's memory under cgroups; max_procs: processes + threads of the run (root only:
    per uid, and per cgroup where available).
    """
    if _terminating.is_set():
        return not_run("the process is terminating")
    try:
        return _run(source, stdin, timeout, memory_mb, max_procs)
    # the trainer's own resources around the run: temp files, workdir, fds, processes
    except OSError as e:
        return not_run(f"the sandbox failed: {e}")


def _run(
    source: str, stdin: str, timeout: float, memory_mb: int, max_procs: int
) -> RunResult:
    interpreter, jail = _setup()
    # a lone surrogate in generated text becomes a program error
    code = source.encode("utf-8", "replace")
    with (
        uids.fresh_uid() as uid,
        _memory_file("main.py", code) as fsrc,
        _memory_file("stdin", stdin.encode("utf-8", "replace")) as fin,
        _memory_file("stdout") as fout,
        _memory_file("stderr") as ferr,
        _status_pipe() as (said, status),
    ):
        try:
            cgroups = make_cgroups(uid, memory_mb, max_procs) if uid is not None else []
        # caps expected here and not to be had: refused, never run uncapped
        except OSError as e:
            return not_run(
                f"its cgroups (memory, process, CPU caps) cannot be made: {e}"
            )
        workdir = None
        try:
            # in the try: the cgroups go if it fails
            workdir = None if jail else tempfile.mkdtemp(prefix="sandbox-")
            # per uid: only a uid of the run's own may be capped
            nproc = max_procs if uid is not None else -1
            boot = [
                interpreter,
                "-I",
                "-S",
                "-c",
                _BOOT,
                str(memory_mb << 20),
                str(nproc),
                str(MAX_FILE_MB << 20),
                str(math.ceil(timeout) + 1),
                str(MAX_FILES),
                SECCOMP_FILTER.hex(),
                str(status),
            ]
            # the program goes in through an fd: it never exists on the host's file system
            if jail:
                argv = _jailed(jail, interpreter, uid, fsrc.fileno(), boot)
            else:
                with open(os.path.join(workdir, "main.py"), "wb") as f:
                    f.write(code)
                if uid is not None:
                    os.chown(workdir, uid, uid)
                argv = _own_ipc_and_network() + uids.as_user(boot, uid)
            if cgroups:
                argv = [
                    "/bin/sh",
                    "-c",
                    ATTACH,
                    "sh",
                    *[os.path.join(d, "cgroup.procs") for d in cgroups],
                    "--",
                    *argv,
                ]
            # stdin/stdout/stderr are memory files, not pipes: RLIMIT_FSIZE bounds what a print loop can
            # produce, nothing can block on a full pipe, and a background child holding stdout open cannot keep
            # us waiting: we wait for the main process only, then kill the rest. stdin is sealed: read only.
            proc = subprocess.Popen(
                argv,
                stdin=fin,
                stdout=fout,
                stderr=ferr,
                cwd=workdir or "/",
                env=_env(workdir or "/tmp"),
                start_new_session=True,
                pass_fds=(status, fsrc.fileno()) if jail else (status,),
            )
            with _live_lock:
                _live.add(proc)
            # A blocking wait plus a timer that kills the group: Popen.wait(timeout) polls with sleeps of up to
            # 50 ms, which was most of the cost of a short run.
            expired = threading.Event()
            timer = threading.Timer(
                timeout, lambda: (expired.set(), _signal_group(proc.pid))
            )
            timer.start()
            try:
                proc.wait()
            finally:
                timer.cancel()
                _kill_everything(proc, uid)
                with _live_lock:
                    _live.discard(proc)
            boot_said = b""
            # nothing there: the run never reached _BOOT's word
            with contextlib.suppress(BlockingIOError):
                boot_said = os.read(said, 256)
            fout.seek(0)
            out = fout.read(MAX_STDOUT + 1)
            stdout = out[:MAX_STDOUT].decode("utf-8", "replace")
            # the tail holds the exception line
            ferr.seek(max(0, ferr.seek(0, os.SEEK_END) - 8192))
            stderr = ferr.read().decode("utf-8", "replace")
        finally:
            remove_cgroups(cgroups)
            if workdir:
                if uid is not None:
                    uids.remove_files_of(uid)
                shutil.rmtree(workdir, ignore_errors=True)
    # the jail, caps or interpreter failed before the program's first step
    if not boot_said.startswith(STARTED):
        why = (
            boot_said.decode("utf-8", "replace")
            or last_line(stderr)
            or (
                f"not started within {timeout:g} s"
                if expired.is_set()
                else ended(proc.returncode, bool(jail))
            )
        )
        return not_run(f"the sandbox did not start the program: {why}")
    if expired.is_set():
        return RunResult(stdout, f"{ERROR}timed out after {timeout:g} s", TIMED_OUT)
    if proc.returncode != 0:
        return failed(stdout, stderr, ended(proc.returncode, bool(jail)))
    # not judged on its first MAX_STDOUT bytes: a right answer could lead a wrong one
    if len(out) > MAX_STDOUT:
        return RunResult(
            stdout, f"{ERROR}output over the cap of {MAX_STDOUT} bytes", OVER_CAP
        )
    return RunResult(stdout, None)
