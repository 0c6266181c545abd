"""A seccomp filter for the sandbox's program runs, assembled here as classic BPF (no library): the system calls a
test program never needs return ENOSYS, as on a kernel built without them, and the rest run as usual.

What is denied and why (jail.py installs the filter before the program's first instruction, at every level):
- keyrings (add_key, request_key, keyctl): a run inherits the session keyring of whoever started the trainer
  (container runtimes and systemd services give it one) and possesses it whatever its uid, so it could read or
  destroy the trainer's keys and leave a key for a later run. A fresh session keyring per run would still leave
  the per-uid keyrings and keys readable by id across runs; with the calls denied no key is reachable at all.
- other processes' memory (ptrace, process_vm_readv/writev, pidfd_getfd, kcmp): in the jail the pid namespace's
  init (bubblewrap) runs under the program's own uid, and a program that stopped it made a finished run a timeout.
- locks and access notifications (flock; fcntl's lock and F_NOTIFY commands; inotify, fanotify): the read-only
  /usr is the same inode in every run, so a lock on it, or a watch for who opens it, is a channel between runs.
- space on disk without writing (fallocate): RLIMIT_FSIZE is checked only where a file's size changes, and
  FALLOC_FL_KEEP_SIZE reserved gigabytes of the host's disk through the run's own stdout file. posix_fallocate gets
  ENOSYS too (glibc emulates it by writing only on EOPNOTSUPP, and such writes are under RLIMIT_FSIZE).
- memory without an address space (memfd_create, memfd_secret): without cgroups RLIMIT_AS is the memory cap, and a
  memfd's pages count against no one's address space once unmapped (600 MiB held under 256 MiB through
  memfd_secret, mapped 4 MiB at a time under RLIMIT_MEMLOCK).
- counters of the machine and of the program's own reads (getrusage, sysinfo, the rusage of wait4 and waitid): a
  major fault or a block read from disk tells an uncached page of a shared file from a cached one without timing,
  and the machine's free and buffered memory moves with what earlier runs read. glibc's waitpid and waitid pass no
  rusage, so only a call that asks for it fails.
- the page cache of shared files, probed or evicted without reading it (mincore, cachestat, readahead, fadvise64;
  madvise's MADV_RANDOM, MADV_WILLNEED, MADV_COLD and MADV_PAGEOUT; reads that must not wait: preadv2, AIO): which
  pages of /usr are cached is shared by every run, a channel that carried a hidden input to a later run. MADV_RANDOM
  because it turns the pages mapped around a fault (visible in /proc/self/pagemap) into a probe that reads nothing.
- new namespaces (unshare, setns, clone with a CLONE_NEW* flag, clone3): as root the namespaces jail has no user
  namespace, and in a nested one a program held every capability over a network, mount and pid namespace of its
  own (bubblewrap's --disable-userns closes the same door in its jail). clone3 passes its flags in memory, where a
  filter cannot read them, so it is denied whole, and glibc falls back to clone on ENOSYS.
- socket families but Unix, IPv4 and IPv6 (socket, socketpair): the rest reach the kernel or the host, not a
  peer of the program's own; AF_VSOCK's ports are shared with the host and its hypervisor, AF_NETLINK reads and
  sets the kernel's tables. They fail with EAFNOSUPPORT, a kernel's answer for a family it was built without.
- io_uring, userfaultfd, perf_event_open, bpf: kernel surface a test program does not use.

ENOSYS rather than EPERM: code that probes for these calls expects ENOSYS where they are missing and falls back;
no real call returns it here, so the tests can tell the filter from the kernel's own refusals.
"""

import errno
import struct
import sys

# (x86_64, aarch64) numbers; None where the architecture lacks the call (aarch64 has only inotify_init1)
DENIED = {
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438),
    "kcmp": (312, 272),
    "flock": (73, 32),
    "inotify_init": (253, None),
    "inotify_init1": (294, 26),
    "fanotify_init": (300, 262),
    "io_uring_setup": (425, 425),
    "userfaultfd": (323, 282),
    "perf_event_open": (298, 241),
    "bpf": (321, 280),
    "fallocate": (285, 47),
    "memfd_create": (319, 279),
    "memfd_secret": (447, 447),
    "getrusage": (98, 165),
    "sysinfo": (99, 179),
    "mincore": (27, 232),
    "cachestat": (451, 451),
    "readahead": (187, 213),
    "fadvise64": (221, 223),
    "preadv2": (327, 286),
    "io_setup": (206, 0),  # cachestat: Linux 6.5 on (ENOSYS before, filter or not)
    "unshare": (272, 97),
    "setns": (308, 268),
    "clone3": (435, 435),
}
# calls denied for some values of one argument: name -> ((x86_64, aarch64) numbers, argument index, values)
# fcntl: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_NOTIFY (64-bit kernels have no *LK64)
# madvise: MADV_RANDOM, MADV_WILLNEED, MADV_COLD, MADV_PAGEOUT
DENIED_ARGS = {
    "fcntl": ((72, 25), 1, (5, 6, 7, 36, 37, 38, 1026)),
    "madvise": ((28, 233), 2, (1, 3, 20, 21)),
}
# calls denied when a pointer argument is not NULL: name -> ((x86_64, aarch64) numbers, argument index).
# wait4's and waitid's rusage of the child: glibc's waitpid and waitid pass NULL
DENIED_POINTERS = {"wait4": ((61, 260), 3), "waitid": ((247, 95), 4)}
# clone with any of these bits in its flags (argument 0): CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID,
# NEWNET (CLONE_NEWTIME is 0x80, which clone reads as part of the exit signal: unshare and clone3 only)
CLONE = (56, 220)
NEW_NAMESPACES = 0x7E020000
# socket and socketpair: the families (argument 0) a program may use; the others get EAFNOSUPPORT
FAMILIES = {"socket": (41, 198), "socketpair": (53, 199)}
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
# os.uname().machine -> (column, AUDIT_ARCH_*)
ARCHES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}
# x86_64's x32 ABI numbers its calls from here: another table, so it is refused whole
X32_BIT = 0x40000000

# classic BPF opcodes (linux/bpf_common.h) and seccomp return values (linux/seccomp.h)
LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
ALLOW, ERRNO, KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000


def program(machine: str) -> bytes:
    """The filter for `machine` (os.uname().machine) that keeps App. D.6.1's runs stateless and apart, as an array
    of struct sock_filter; b"" where there is no table for it. A call made through another ABI (x86_64's int 0x80
    or x32, whose numbers differ and would slip past the table) kills the process."""
    if machine not in ARCHES:
        return b""
    col, audit_arch = ARCHES[machine]
    # struct seccomp_data: args[i] at 16 + 8 i, its low 32 bits here
    low = 0 if sys.byteorder == "little" else 4
    code = [
        (LD_ABS, 0, 0, 4),
        (JEQ, 0, "kill", audit_arch),
        (LD_ABS, 0, 0, 0),
        (JGE, "kill", 0, X32_BIT),
    ]
    code += [
        (JEQ, "deny", 0, nrs[col]) for nrs in DENIED.values() if nrs[col] is not None
    ]
    arg0 = (LD_ABS, 0, 0, 16 + low)
    # another call skips its block; the block's end allows
    for nrs, arg, values in DENIED_ARGS.values():
        code += [
            (JEQ, 0, len(values) + 2, nrs[col]),
            (LD_ABS, 0, 0, 16 + 8 * arg + low),
        ]
        code += [(JEQ, "deny", 0, v) for v in values] + [(RET, 0, 0, ALLOW)]
    for nrs, arg in DENIED_POINTERS.values():
        at_arg = 16 + 8 * arg
        code += [
            (JEQ, 0, 4, nrs[col]),
            (LD_ABS, 0, 0, at_arg),
            (JEQ, 0, "deny", 0),
            (LD_ABS, 0, 0, at_arg + 4),
            (JEQ, "allow", "deny", 0),
        ]
    code += [
        (JEQ, 0, 3, CLONE[col]),
        arg0,
        (JSET, "deny", 0, NEW_NAMESPACES),
        (RET, 0, 0, ALLOW),
    ]
    for nrs in FAMILIES.values():
        code += [(JEQ, 0, 5, nrs[col]), arg0] + [
            (JEQ, "allow", 0, af) for af in (AF_UNIX, AF_INET, AF_INET6)
        ]
        code += [(RET, 0, 0, ERRNO | errno.EAFNOSUPPORT)]
    at = {"allow": len(code), "deny": len(code) + 1, "kill": len(code) + 2}
    code += [
        (RET, 0, 0, ALLOW),
        (RET, 0, 0, ERRNO | errno.ENOSYS),
        (RET, 0, 0, KILL_PROCESS),
    ]
    return b"".join(
        struct.pack(
            "=HBBI",
            op,
            *(at[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)),
            k,
        )
        for i, (op, jt, jf, k) in enumerate(code)
    )
