"""A uid of its own for each sandboxed run (jail.py), as root: drawn fresh and claimed machine-wide, every
process under it killed and every file it left in the world-writable directories removed when the run ends."""

import contextlib
import os
import random
import shutil
import socket
import stat
import subprocess

# no passwd entry needed for setuid; far above real users
UID_RANGE = (200_000, 899_999)
# where the uid fallback looks for leftovers
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
IS_ROOT = os.geteuid() == 0

# Started as root: kills every process of the run's uid (argv[1]) (atomic w.r.t. fork), incl. ones that left the
# group. It takes that uid as effective uid only, real and saved uid being a second fresh one (argv[2]): signals
# and ptrace need the target's real or saved uid, so no process of the run can stop or trace it, while it can
# signal every one of them and nothing else. Guarded: kill(-1) run as root would take down every process.
KILL_UID = """\
import os, sys
uid, guard = map(int, sys.argv[1:3])
if 0 not in (uid, guard):
    os.setresuid(guard, uid, guard)
    try:
        os.kill(-1, 9)
    except ProcessLookupError:
        pass
"""


# not the global `random`: train.py seeds that, and two runs would draw alike
UIDS = random.SystemRandom()
# the abstract unix socket whose binding claims a uid (fresh_uid)
CLAIM = "\0mas-opd-sandbox-uid-{}"


@contextlib.contextmanager
def fresh_uid():
    """As root, a uid that no other run holds, in this process or any other on the machine; None otherwise.
    The claim is an abstract unix socket named after the uid: binding it fails while another run holds it, and
    the kernel drops it when the run ends, also when its process dies, so no claim outlives its holder."""
    if not IS_ROOT:
        yield None
        return
    with socket.socket(socket.AF_UNIX) as claim:
        while True:
            uid = UIDS.randint(*UID_RANGE)
            try:
                claim.bind(CLAIM.format(uid))
                break
            except OSError:  # held by a concurrent run
                continue
        yield uid


def as_user(argv: list[str], uid: int | None) -> list[str]:
    """argv run under uid (gid = uid, no supplementary groups) when uid is given."""
    return (
        argv
        if uid is None
        else [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--",
            *argv,
        ]
    )


def processes_of(uid: int) -> list[tuple[int, int]]:
    """(pid, parent's pid) of every process under uid (real, effective, saved or fs uid), zombies included. Part of
    the cleanup after each stateless run (App. D.6.1). Only a process of that uid can create another one (the uid
    is this run's alone), so once none is left none can appear: the kill helper, a process start that costs more
    than a short program's run, is needed only when this finds one."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                status = {
                    k: v.split()
                    for k, v in (ln.split(":", 1) for ln in f)
                    if k in ("PPid", "Uid")
                }
        except OSError:  # gone meanwhile
            continue
        if str(uid) in status.get("Uid", []):
            found.append((int(pid), int(status["PPid"][0])))
    return found


def remove_files_of(uid: int) -> None:
    """Delete what uid left outside its dir: the entries it owns in the world-writable dirs and, recursively, in
    every world-writable directory of another owner inside them (it could write there too)."""
    todo = list(WORLD_WRITABLE)
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
                if st.st_uid != uid:
                    if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
                        todo.append(e.path)
                    continue
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
            except OSError:
                pass


def kill_all(uid: int, interpreter: str, env: dict) -> None:
    """SIGKILL every process of uid and reap those that are ours, parents first. A helper process sends kill(-1) as
    the uid (KILL_UID): it reaches processes that setsid()-ed away too. interpreter, env: what the helper runs with."""
    if not processes_of(uid):  # none of the uid left: none to kill
        return
    # subprocess instead of os.fork: forking a multi-threaded parent in Python code is not safe
    with fresh_uid() as guard:
        subprocess.run(
            [interpreter, "-I", "-S", "-c", KILL_UID, str(uid), str(guard)],
            env=env,
            cwd="/",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
    # those whose parent died are ours where we are PID 1: reap them, parents first (a dying parent hands its
    # children on before it can be reaped), until none of ours is left
    while mine := [pid for pid, ppid in processes_of(uid) if ppid == os.getpid()]:
        for pid in mine:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
