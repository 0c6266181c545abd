"""Hostile programs against what runs share, each in bubblewrap's jail and again with bubblewrap hidden (the
namespaces jail, as root): nothing an earlier run left in the kernel reaches a later run, nothing a program
writes reaches the host's disk or turns its failure into the host's, and memory past the rlimits is refused
where no cgroup caps it."""

import ctypes
import mmap
import os

import pytest

from sandbox import jail
from sandbox.namespaces import shown_files
from sandbox.outcomes import RunResult
from tests.test_sandbox import needs_filter

# ----------------------------------------------------------------------------- earlier runs


def _largest_shown_file() -> str:
    """The largest file a jailed program can read: the most pages to leave a mark in."""
    files = shown_files(jail._setup()[1].shown)
    return max(filter(os.path.isfile, files), key=os.path.getsize)


# Writers: each leaves the secret on stdin (a string of 0s and 1s) where a later run might find it.
# Readers: each prints what it can see of that place, or why it cannot.
COUNTERS_WRITER = """
import os, sys
for i, bit in enumerate(sys.stdin.read()):
    for j in range(3000 * int(bit)):  # negative dentries and inodes, counted machine-wide
        try:
            os.stat(f"/usr/lib/.absent-{i}-{j}")
        except OSError:
            pass
"""
COUNTERS_READER = """
import ctypes, errno
for path in ("/proc/sys/fs/dentry-state", "/proc/sys/fs/inode-nr", "/proc/meminfo", "/proc/vmstat",
             "/proc/stat", "/proc/loadavg", "/sys/fs/cgroup/memory.stat"):
    try:
        print(path, open(path).read().split()[:4])
    except OSError as e:
        print(path, errno.errorcode[e.errno])
libc = ctypes.CDLL(None, use_errno=True)
info = (ctypes.c_ulong * 16)()
print("sysinfo", list(info[1:8]) if libc.sysinfo(info) == 0 else errno.errorcode[ctypes.get_errno()])
"""
CACHE_WRITER = """
import os, sys
fd = os.open(FILE, os.O_RDONLY)
for i, bit in enumerate(sys.stdin.read()):
    if bit == "1":
        os.pread(fd, 1, i * 256 * 1024)
"""
# pagemap after fault-around, the task's io counters, its major faults and block reads (getrusage, wait4)
CACHE_READER = """
import ctypes, errno, os, resource
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(FILE, os.O_RDONLY)
at = libc.mmap(None, os.fstat(fd).st_size, 1, 2, fd, 0)  # PROT_READ, MAP_PRIVATE
def show(name, call):
    try:
        print(name, call())
    except OSError as e:
        print(name, errno.errorcode[e.errno])
def pagemap():  # a fault maps the cached pages around it: their present bits, read without reading them
    with open("/proc/self/pagemap", "rb") as pm:
        bits = ""
        for i in range(16):
            ctypes.string_at(at + i * 256 * 1024 + 8 * 4096, 1)
            pm.seek((at + i * 256 * 1024) // 4096 * 8)
            bits += str(int.from_bytes(pm.read(8), "little") >> 63)
        return bits
show("pagemap", pagemap)
show("io", lambda: [ln for ln in open("/proc/self/io") if ln.startswith("read_bytes")])
show("stat", lambda: open("/proc/self/stat").read().split()[11])
show("getrusage", lambda: resource.getrusage(resource.RUSAGE_SELF).ru_majflt)
pid = os.fork()
if pid == 0:
    os._exit(0)
show("wait4", lambda: os.wait4(pid, 0)[2].ru_inblock)
"""


@needs_filter
@pytest.mark.parametrize("channel", ["kernel counters", "page cache"])
def test_nothing_of_an_earlier_run_reaches_a_later_one(jailed, channel):
    """A program run on hidden tests wrote their inputs into machine-wide counters (fs/dentry-state) or into which
    pages of shared files are cached, and a later run read them back: 10 of 10 inputs from the counter, 32 of 32
    bits from its own pagemap or io counters. Now the reader sees the same after either secret, and nothing."""
    file = repr(_largest_shown_file())
    writer, reader = {
        "kernel counters": (COUNTERS_WRITER, COUNTERS_READER),
        "page cache": (CACHE_WRITER, CACHE_READER),
    }[channel]
    seen = []
    for secret in ("0" * 16, "1" * 16):
        assert jail.run_program(writer.replace("FILE", file), secret, timeout=30).ok
        r = jail.run_program(reader.replace("FILE", file), timeout=30)
        assert r.ok, r
        seen.append(r.stdout)
    assert seen[0] == seen[1], seen
    assert all(
        line.endswith((" ENOENT", " ENOSYS")) for line in seen[0].splitlines()
    ), seen[0]


def _uncached_pages(path: str) -> int:
    """Pages of `path` not in the page cache, asked of the kernel from the trainer (mincore)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = jail._LIBC
    fd = os.open(path, os.O_RDONLY)
    try:
        at = ctypes.c_void_p(
            libc.mmap(None, size, jail.PROT_READ, 2, fd, 0)
        )  # MAP_PRIVATE
        vec = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
        assert libc.mincore(at, ctypes.c_size_t(size), vec) == 0, ctypes.get_errno()
        libc.munmap(at, ctypes.c_size_t(size))
    finally:
        os.close(fd)
    return sum(1 - (b & 1) for b in vec)


def test_a_program_sees_only_files_that_are_all_in_the_page_cache(jailed):
    """Every run read the same /usr, and a page a run read was cached for the next one to time (84 of 96 bits of a
    secret read back by timing reads). Now a program sees only its interpreter, the standard library and their
    libraries, all read into the cache when the sandbox starts: it cannot open another file of /usr, and no page
    it can read is left for it to add."""
    r = jail.run_program(
        "import os\nfor p in ('/usr/bin/env', '/usr/share', '/bin/sh', '/usr/lib/os-release'):\n"
        "    print(p, os.path.exists(p))",
        timeout=10,
    )
    assert r.ok and "True" not in r.stdout, r
    shown = jail._setup()[1].shown
    files = shown_files(shown)
    files = [f for f in files if os.path.isfile(f)]
    assert sum(map(os.path.getsize, files)) < 1 << 30  # not the whole of /usr
    # locked where the trainer may lock them (root here); else read at start, and the line says so
    locked = jail.warm_page_cache(shown)
    assert ("every page of them locked" in jail.jail_line()) == locked
    if locked:
        uncached = {f: n for f in files if (n := _uncached_pages(f))}
        assert not uncached, uncached


# ----------------------------------------------------------------------------- memory past the rlimits

# 600 MiB in ten secret memfds, mapped 4 MiB at a time (under RLIMIT_MEMLOCK), unmapped: no address space held
SECRET_MEMORY = """
import ctypes, errno, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
held = []
for i in range(10):
    fd = libc.syscall(447, 0)  # memfd_secret
    if fd < 0:
        raise SystemExit("memfd_secret " + errno.errorcode[ctypes.get_errno()])
    os.ftruncate(fd, 60 << 20)
    for j in range(15):
        with mmap.mmap(fd, 4 << 20, offset=j * (4 << 20)) as m:
            m.write(b"x" * (4 << 20))
    held.append(fd)
print("held", 60 * len(held), "MiB")
"""


@needs_filter
def test_memory_past_the_rlimits_is_refused_where_no_cgroup_caps_it(
    jailed, monkeypatch
):
    """Without cgroups RLIMIT_AS is the memory cap, and memfd_secret held 600 MiB under 256 MiB. Now the filter
    refuses it as it refuses memfd_create, and the start-up line names what no rlimit caps."""
    monkeypatch.setattr(jail, "make_cgroups", lambda *a: [])
    monkeypatch.setattr(jail, "cgroup_homes", lambda: [])
    r = jail.run_program(SECRET_MEMORY, timeout=20, memory_mb=256)
    assert r == RunResult("", "error: stderr: memfd_secret ENOSYS"), r
    line = jail.jail_line()
    assert "memfd" not in line and (
        "NOT capped: memory held in SysV shared memory and socket buffers" in line
    ), line
