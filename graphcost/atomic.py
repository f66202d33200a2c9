"""Atomic file writing: nothing half-written is ever left under the final name, and one
writer per output folder (`one_writer`)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import psutil

from graphcost.errors import EnvironmentFault, UserError

#: a full disk or quota: `atomic_open` turns these into an EnvironmentFault naming the file
FULL = (errno.ENOSPC, errno.EDQUOT)


def is_full_disk(e: BaseException) -> bool:
    """Whether `e` is a write that failed because the disk or quota is full."""
    return isinstance(e, OSError) and e.errno in FULL


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb", **kwargs) -> Iterator[IO]:
    """Open a temporary file beside `path`; on success it replaces `path` in one rename.

    On any error the temporary file is removed and `path` is left as it was. The file
    gets the usual permissions (0666 less the umask), not mkstemp's private 0600. Its
    name, `.NAME.PID@HOST.RANDOM.part`, says which process writes it, so that what a
    killed writer (SIGKILL skips the clean-up) left can be found and removed
    (`remove_dead_writers_parts`).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_writer()}.",
                                   suffix=".part")
    except OSError as e:  # name the user's path, not the temporary file's
        if is_full_disk(e):
            raise EnvironmentFault(f"{path}: cannot write it: {e.strerror or e} (the disk "
                                   "or quota is full); nothing was written") from None
        raise UserError(f"{path}: cannot write here ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if is_full_disk(e):  # the machine's fault, not a bug
            left = "it is left as it was" if path.exists() else "nothing was written"
            raise EnvironmentFault(f"{path}: cannot write it: {e.strerror or e} (the disk "
                                   f"or quota is full); {left}") from None
        raise


def _writer() -> str:
    """This process as a temporary file's name records it: PID@HOST (the host's dots
    replaced, so that the name splits on dots)."""
    return f"{os.getpid()}@{socket.gethostname().replace('.', '_')}"


@contextmanager
def scratch_dir(path: str | Path) -> Iterator[Path]:
    """A temporary folder beside `path`, removed afterwards, named as `atomic_open`
    names its files: one that a killed writer left is removed by
    `remove_dead_writers_parts`."""
    path = Path(path)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.{_writer()}.",
                                     suffix=".part") as tmp:
        yield Path(tmp)


def remove_dead_writers_parts(folder: str | Path) -> list[Path]:
    """Remove the temporary files (and `scratch_dir` folders) of `atomic_open` in
    `folder` whose writer, a process of this host, is no longer alive; return them. A
    live writer's, another host's and anything not named by `atomic_open` are left
    alone."""
    removed = []
    host = _writer().split("@", 1)[1]
    for part in Path(folder).glob(".*.part"):
        pid, _, on = part.name.rsplit(".", 3)[1].partition("@")
        if on == host and pid.isdigit() and not psutil.pid_exists(int(pid)):
            if part.is_dir():
                shutil.rmtree(part, ignore_errors=True)
            else:
                part.unlink(missing_ok=True)
            removed.append(part)
    return removed


def write_text(text: str, path: str | Path) -> Path:
    """Write `text` atomically (a log rewritten whole, never appended to in place)."""
    with atomic_open(path, "w") as f:
        f.write(text)
    return Path(path)


def write_json(obj: Any, path: str | Path) -> Path:
    """Write `obj` as indented JSON, atomically (numpy scalars written as floats)."""
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=1, default=float)
    return Path(path)


#: the lock file that `one_writer` holds in an output folder
LOCK = ".lock"


@contextmanager
def one_writer(folder: str | Path, what: str) -> Iterator[Path]:
    """Hold output folder `folder` (created if need be) while the block runs, so that no
    two runs write into it at once (graphs timed twice, files overwritten, log lines
    doubled): an exclusive lock on `folder/.lock`, which names its holder (PID@HOST).
    While another process holds it, a UserError names the folder and the holder; `what`
    names the writer ("training run"). The kernel releases the lock when its holder
    ends, however it ends, so that a killed run (kill -9) never blocks the next one."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            raise UserError(f"{folder}: another {what} (pid {holder}) is writing into this "
                            "folder; wait for it to end, or choose another output folder"
                            ) from None
        lock.truncate(0)
        lock.write(f"{os.getpid()}@{socket.gethostname()}\n")
        lock.flush()
        yield folder  # the lock is released when the file closes, also on errors


def check_writable(path: str | Path, folder: bool = False) -> Path:
    """Refuse an output path that cannot be written, before the long work that would
    write it: it (a file, or with `folder` a folder) must be creatable or replaceable.
    Tries a temporary file in the nearest existing folder, which also catches read-only
    and pseudo file systems (/proc) that permission bits alone do not show."""
    path = Path(path)
    if path.exists() and path.is_dir() != folder:
        what = "a folder" if path.is_dir() else "a file"
        raise UserError(f"{path}: is {what}; expected {'a folder' if folder else 'a file'} "
                        "to write")
    parent = path if folder and path.exists() else path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{path}: cannot be created: {parent} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as e:
        raise UserError(f"{path}: cannot write in {parent} ({e.strerror or e})") from None
    return path
