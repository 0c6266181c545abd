"""The cgroup v1 caps of one sandboxed run (jail.py): everything the run starts shares one memory, process-count
and CPU cap. Only as root, and only where the v1 hierarchies of all three controllers are mounted and writable (as
on this project's machines). Under cgroup v2 a process cannot give its own children limited cgroups (the
no-internal-process rule), so there the per-process rlimits of jail.py are the caps."""

import contextlib
import functools
import os
import re
import socket
import time

from sandbox import uids

CPUS = 1  # CPU share of one run (cpu.cfs_quota_us / cpu.cfs_period_us)
NAME = "mas-opd-sandbox-{}"  # a run's cgroup in each hierarchy, after its uid

# Run as root before the uid drop: moves the shell into the run's cgroups ($1 .. up to "--"), then execs the rest,
# so that the program and everything it starts are inside the caps from their first instruction.
ATTACH = (
    'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
)


@functools.cache
def cgroup_homes() -> dict[str, str]:
    """controller -> this process's own cgroup directory in that controller's v1 hierarchy, for memory, pids and
    cpu, when all three are mounted and writable (and we are root); else {}. The first call in a process reclaims
    the cgroups that runs of a killed trainer left there (reclaim)."""
    if os.geteuid() != 0:
        return {}
    mounts = {}  # controller -> (mount point, the cgroup path that is the mount's root)
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            root, point = left.split()[3:5]
            fstype, _, opts = right.split()[:3]
            if fstype == "cgroup":
                for c in set(opts.split(",")) & {"memory", "pids", "cpu"}:
                    mounts[c] = (point, root)
    homes = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            for c in set(names.split(",")) & mounts.keys():
                point, root = mounts[c]
                if path.startswith(root):
                    homes[c] = os.path.join(point, path[len(root) :].lstrip("/"))
    ok = len(homes) == 3 and all(os.access(d, os.W_OK) for d in homes.values())
    if ok:
        reclaim(homes)
    return homes if ok else {}


def reclaim(homes: dict[str, str]) -> None:
    """Remove the runs' cgroups under `homes` that no live run holds (their uid's claim can be bound: uids.CLAIM)
    and that hold no process (rmdir refuses those): what runs left when their trainer was killed (SIGKILL)."""
    for home in homes.values():
        with contextlib.suppress(OSError):
            for name in os.listdir(home):
                if m := re.fullmatch(NAME.format(r"([1-9][0-9]*)"), name):
                    with (
                        socket.socket(socket.AF_UNIX) as claim,
                        contextlib.suppress(OSError),
                    ):
                        # held while we remove it: no run can take the uid
                        claim.bind(uids.CLAIM.format(m[1]))
                        os.rmdir(os.path.join(home, name))


def make_cgroups(uid: int, memory_mb: int, max_procs: int) -> list[str]:
    """Create the run's cgroups with their caps; their directories ([] when cgroups are unavailable here). OSError
    when they are available and cannot be made: the caller refuses the run rather than run it uncapped."""
    homes = cgroup_homes()
    caps = {
        "memory": [
            ("memory.limit_in_bytes", memory_mb << 20),
            ("memory.memsw.limit_in_bytes", memory_mb << 20),
        ],
        "pids": [("pids.max", max_procs)],
        "cpu": [("cpu.cfs_period_us", 100_000), ("cpu.cfs_quota_us", CPUS * 100_000)],
    }
    made = []
    try:
        for c, home in homes.items():
            d = os.path.join(home, NAME.format(uid))
            # left by a run of this uid that was killed before it cleaned up
            with contextlib.suppress(OSError):
                os.rmdir(d)
            os.mkdir(d)
            made.append(d)
            for name, value in caps[c]:
                # memsw exists only with swap accounting
                with contextlib.suppress(FileNotFoundError):
                    with open(os.path.join(d, name), "w") as f:
                        f.write(str(value))
    except OSError:
        remove_cgroups(made)
        raise
    return made


def remove_cgroups(dirs: list[str]) -> None:
    """rmdir each cgroup once its processes are gone (a killed process may take a moment to leave it)."""
    for d in dirs:
        for _ in range(100):
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:  # EBUSY: still populated
                time.sleep(0.01)
