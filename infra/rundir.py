"""A run directory is data: it may come from elsewhere (a shared run, a download, an archive), and nothing a
command reads from it or writes to it may lie outside it. Every command that takes one (train.py's --out,
eval.py's --run, the report, the studies) first refuses a directory that holds anything but plain folders and
plain files.

Why a refusal and not files opened with O_NOFOLLOW: most of what is read and written there is opened by code that
is not ours (transformers' from_pretrained and save_pretrained, torch.save, shutil), which follows links; one walk
before the command touches the directory covers every opener, ours and theirs. A symbolic link would have a write
land where it points (a shell start-up file, a folder elsewhere) and a read take what it points at; a second name
of a file (a hard link) would have the logs, appended in place, change the file under its other name; a FIFO or a
device blocks the read that opens it. The check is made when the command starts: a directory that someone else
may write while it runs is out of reach of any check made before, so keep run directories writable by you alone.

One run at a time: a run holds an advisory lock on OUT/run.lock for its whole life (hold_run_dir). The kernel drops
it when the process ends, however it ends, so a killed run never blocks its own resume; a second command into a
directory that a running process holds is refused at once, naming that process, whether it starts a run, resumes or
overwrites one.
"""

import datetime
import fcntl
import os
import stat


def check_run_dir(path, name):
    """Refuse in one line (ValueError, naming the directory as `name`, e.g. "--out runs/a", and the entry) a run
    directory that is a link, or holds anything but folders and files of one name each, at any depth, or a folder
    that cannot be listed. A path that does not exist passes: a new run makes it."""

    def unreadable(e):
        raise ValueError(f"{name}: {e.filename} cannot be listed ({e.strerror})")

    if not os.path.lexists(path):
        return
    check_entry(path, name)  # before the walk, which would follow a link at the top
    if os.path.isdir(path):
        for folder, dirs, files in os.walk(path, onerror=unreadable):
            for entry in dirs + files:
                check_entry(os.path.join(folder, entry), name)


def check_entry(path, name):
    """One entry of check_run_dir's walk: a folder, or a file with no other name; else a one-line ValueError."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink < 2):
        return
    why = (
        "is a symbolic link"
        if stat.S_ISLNK(st.st_mode)
        else f"has {st.st_nlink} names (hard links)"
        if stat.S_ISREG(st.st_mode)
        else "is neither a file nor a folder"
    )
    raise ValueError(
        f"{name}: {path} {why}; a run directory may hold plain files and folders only, so that nothing read "
        "or written there lies outside it"
    )


# OUT/run.lock: locked by the running process, and saying which process that is
LOCK = "run.lock"
# the run directories this process holds, real path -> the locked file's descriptor: open until the process ends,
# so that a second run in the same process (a study's, a test's) finds its own lock and goes on
_held = {}


def hold_run_dir(path, name, command):
    """Lock the run directory `path` for this process's life (flock on PATH/run.lock, written with this process's
    id, the date and `command`), or raise a one-line ValueError naming the process that holds it (`name`: how the
    user gave the directory, e.g. "--out runs/a"). A path that does not exist yet is held once it is made: the
    caller calls this again then. Holding it twice in one process is holding it once."""
    real = os.path.realpath(path)
    if real in _held or not os.path.isdir(path):
        return
    lock = os.path.join(path, LOCK)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise ValueError(f"{name}: cannot open {lock} ({e.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
        os.close(fd)
        raise ValueError(
            f"{name} is in use by a running process ({holder or 'one that has not said which'}): one run per "
            "directory; wait for it to end, or give another --out"
        ) from None
    when = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    os.ftruncate(fd, 0)
    os.write(fd, f"process {os.getpid()}, since {when}: {command}\n".encode())
    _held[real] = fd
