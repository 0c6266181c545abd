"""The sandbox's jail where bubblewrap is not installed, for a trainer running as root: util-linux's `unshare` (part
of every Debian or Ubuntu base system) gives the run its own mount, pid, IPC, network and UTS namespaces, and SETUP,
still root inside them, builds the run's file system from mounts before it drops to the run's fresh uid. The program
then sees what it sees in bubblewrap's jail (jail.py): its interpreter, the standard library and their shared
libraries read-only (shown_paths), a private /tmp and /dev/shm of JAIL_TMP_MB each, no /proc, a few device nodes,
no network but its own loopback, and none of the host's other files. Its IPC objects, files and processes vanish
with the namespaces, which end with the trainer. The seccomp filter (seccomp.py) keeps it from making namespaces
of its own, a user namespace above all.

The one difference from bubblewrap: no user namespace. The program runs under the fresh uid jail.py draws for
each run (as at the uid level), with no capabilities, so it can neither undo a mount nor leave the chroot.
"""

import functools
import os
import subprocess

# top directories that a merged /usr makes symlinks into it
TOPS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")

# SETUP runs as root and as PID 1 of the new pid namespace (unshare --fork). argv: the run's uid, the size of /tmp
# and /dev/shm in bytes, the fd holding the program's source (-1: none, the interpreter probe), the host paths to
# show read-only, "--", the command to run as the uid. It stays PID 1, a plain init: when the program's process
# ends, it exits with the program's status (a signal as 128 + its number, as bubblewrap reports one), and its exit
# ends the namespace and every process left in it. It is killed when unshare is (--kill-child), unshare when the
# trainer is (jail_argv), and the uid has no way to signal or trace it (another uid; no /proc).
SETUP = """\
import ctypes, fcntl, os, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
RDONLY, NOSUID, NODEV, REMOUNT, BIND, MOVE, REC, PRIVATE = 1, 2, 4, 32, 4096, 8192, 16384, 1 << 18
def mount(source, target, fstype, flags, data=None):
    args = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    if libc.mount(args[0], args[1], args[2], flags, args[3]):
        sys.exit(f"sandbox setup: mount {target}: {os.strerror(ctypes.get_errno())}")
uid, size, fd = map(int, sys.argv[1:4])
cut = sys.argv.index("--")
shown, command = sys.argv[4:cut], sys.argv[cut + 1:]
mount(None, "/", None, REC | PRIVATE)  # nothing mounted from here on reaches the host
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # the namespace's own loopback up, as in bubblewrap's
    flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0))[:18])[1]  # SIOCGIFFLAGS
    fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS with IFF_UP
new = "/tmp"  # the new root, a tmpfs over the namespace's own view of /tmp (the host's /tmp is untouched)
mount("tmpfs", new, "tmpfs", NOSUID | NODEV, "size=1m,mode=755")
def bind(path, flags):
    target = new + path
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(path, target, None, BIND | REC)
    mount(None, target, None, REMOUNT | BIND | flags)
for path in shown:  # the interpreter, its standard library and shared libraries (shown_paths)
    bind(path, RDONLY | NOSUID | NODEV)
for top in TOPS:  # merged-/usr symlinks
    if os.path.islink(top):
        os.symlink(os.readlink(top), new + top)
for node in ("null", "zero", "full", "random", "urandom"):
    bind("/dev/" + node, NOSUID)
for path in ("/tmp", "/dev/shm"):
    os.makedirs(new + path, exist_ok=True)
    mount("tmpfs", new + path, "tmpfs", NOSUID | NODEV, f"size={size},mode=1777")
if fd >= 0:  # the program goes in through an fd: it never exists on the host's file system
    with os.fdopen(fd, "rb") as source, open(new + "/tmp/main.py", "wb") as f:
        f.write(source.read())
    os.chown(new + "/tmp/main.py", uid, uid)
mount(None, new, None, REMOUNT | RDONLY | NOSUID | NODEV)
os.chdir(new)
mount(new, "/", None, MOVE)  # the new root over the old one, whose files are then out of every path
os.chroot(".")
os.chdir("/tmp")
os.environ.pop("PWD", None)  # the host's working directory, which a shell on the way in may have exported
pid = os.fork()
if pid == 0:
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root to a uid: every capability is gone with it
        os.execv(command[0], command)
    finally:
        os._exit(127)
status = os.waitpid(pid, 0)[1]
os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
""".replace(
    "TOPS", repr(TOPS)
)  # the script runs apart from this module: the tuple goes in as its text


def jail_argv(
    interpreter: str, uid: int, size: int, fd: int, shown: list[str], command: list[str]
) -> list[str]:
    """The argv that runs `command` as `uid` in the namespaces jail (App. D.6.1's isolated runs). interpreter: a
    Python that runs SETUP as root; size: bytes of /tmp and of /dev/shm; fd: an inherited fd holding the program's
    source (-1: none); shown: the host paths the program sees read-only (shown_paths)."""
    # setpriv's parent-death signal: unshare dies with the trainer (a SIGKILL of it too), its --kill-child takes
    # SETUP, and with it, PID 1, the whole namespace (bubblewrap's --die-with-parent)
    return [
        "setpriv",
        "--pdeathsig",
        "KILL",
        "--",
        "unshare",
        "--mount",
        "--pid",
        "--ipc",
        "--net",
        "--uts",
        "--fork",
        "--kill-child",
        "--",
        interpreter,
        "-I",
        "-S",
        "-c",
        SETUP,
        str(uid),
        str(size),
        str(fd),
        *shown,
        "--",
        *command,
    ]


# Run by the interpreter to be shown: its standard library, and every shared library that it or one of the
# standard library's extension modules loads, as the dynamic loader finds them (its trace mode, which runs nothing
# of the library), one path a line.
VIEW = """\
import glob, os, subprocess, sys, sysconfig
def loaded(argv, env=None):
    out = subprocess.run(argv, env=env, capture_output=True, text=True).stdout
    return [w for line in out.splitlines() for w in line.split() if w.startswith("/")]
found = loaded([sys.executable], {"LD_TRACE_LOADED_OBJECTS": "1"})
loader = [p for p in found if "ld-linux" in p or "/ld-" in p]
for ext in glob.glob(os.path.join(sysconfig.get_path("platstdlib"), "lib-dynload", "*.so")):
    found += loaded([*loader[:1], "--list", ext]) if loader else []
# the standard library without the third-party packages installed inside it (a pyenv's site-packages): its
# entries but that one, each shown on its own
site = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
for lib in {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}:
    inside = [os.path.join(lib, n) for n in os.listdir(lib)]
    found += [p for p in inside if p not in site] if site & set(inside) else [lib]
print(*set(found), sep="\\n")
"""


@functools.cache  # once per process and interpreter: it runs the loader on every extension
def shown_paths(interpreter: str) -> tuple[str, ...]:
    """What a program sees of the host, read-only: `interpreter` (also at its real path, as a program may name it),
    its standard library and the shared libraries these load, nothing else (no shell, no other tool, no
    documentation). Each path with its directories resolved (/lib/x86_64-linux-gnu/libc.so.6 under a merged /usr:
    /usr/lib/x86_64-linux-gnu/libc.so.6), since the jails remake the merged-/usr symlinks themselves (TOPS); a path
    inside a shown directory is left to it. Small enough that jail.warm_page_cache reads all of it: a run finds
    every page it can read cached, and adds none."""
    found = subprocess.run(
        [interpreter, "-I", "-S", "-c", VIEW], capture_output=True, text=True
    ).stdout.split("\n")
    paths = {
        os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        for p in [interpreter, os.path.realpath(interpreter), *found]
        if p and os.path.exists(p)
    }
    dirs = [p for p in paths if os.path.isdir(p)]
    return tuple(
        sorted(
            p for p in paths if not any(p.startswith(d + "/") for d in dirs if d != p)
        )
    )


def shown_files(paths) -> list[str]:
    """Every file under `paths` (files or directories, as shown_paths gives them)."""
    return [
        os.path.join(root, name)
        for top in paths
        for root, _, names in (
            os.walk(top) if os.path.isdir(top) else [("", [], [top])]
        )
        for name in names
    ]
