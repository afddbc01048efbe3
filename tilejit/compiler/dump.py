"""``TILEJIT_DUMP_DIR``: a folder of files per compiled kernel, written whole or not at all.

A dump is written into a temporary sibling folder first and renamed into place, so a reader (or a process
dumping the same kernel at the same time) sees the old folder, no folder or the new one, never a part of one.
A dump that cannot be written is a :class:`~tilejit.errors.DumpWarning`: the kernel it describes compiled and
works, and a debugging aid must not stop it.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Mapping

TMP_MARK = ".tmp-"  # temporary folders: ".<name>.tmp-<pid>-<thread>-<ns>" (and ".old-" for a replaced one)


def _unique(root: str, name: str, mark: str) -> str:
    """A path in ``root`` for a hidden folder of ``name`` that no other writer uses."""
    return os.path.join(root, f".{name}{mark}{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}")


def _check_relative(rel: str) -> None:
    """A file name of a dump: a relative path inside the folder (``tilejit/types.cuh``), nothing above it."""
    parts = rel.replace("\\", "/").split("/")
    if not rel or os.path.isabs(rel) or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"a dump's file name must be a relative path inside its folder, got {rel!r}")


def write_folder(root: str, name: str, files: Mapping[str, bytes]) -> str | None:
    """Write ``files`` (relative path -> contents) as the folder ``root/name``, replacing one that is there whole;
    the folder's path, or None after a :class:`~tilejit.errors.DumpWarning` saying why it could not be written."""
    import shutil

    for rel in files:
        _check_relative(rel)
    dest = os.path.join(root, name)
    tmp = _unique(root, name, TMP_MARK)
    try:
        os.makedirs(root, exist_ok=True)
        os.mkdir(tmp)
        for rel, data in files.items():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        _move_into_place(tmp, dest, root, name)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        warn(f"cannot write {dest}: {exc.strerror or exc}; the kernel is not dumped")
        return None
    return dest


def _move_into_place(tmp: str, dest: str, root: str, name: str) -> None:
    """Rename the finished folder ``tmp`` to ``dest``, replacing a folder already there (moved aside, then removed).
    If another writer's folder of the same kernel takes ``dest`` after that, it stays, whole, and ``tmp`` is
    dropped: writers never wait on each other. A file or link of that name is an error."""
    import shutil

    moved_aside = False
    error: OSError | None = None
    for _ in range(64):
        try:
            os.rename(tmp, dest)
            return
        except OSError as exc:
            error = exc
        try:
            mode = os.lstat(dest).st_mode
        except FileNotFoundError:
            continue  # another writer moved it aside just now
        if not stat.S_ISDIR(mode):  # a file or a link: not a dump folder
            raise error
        if moved_aside:  # another writer's whole folder came after we moved the old one aside: it stays
            shutil.rmtree(tmp, ignore_errors=True)
            return
        old = _unique(root, name, ".old-")
        try:
            os.rename(dest, old)
        except FileNotFoundError:  # another writer moved it aside
            continue
        moved_aside = True
        shutil.rmtree(old, ignore_errors=True)
    raise error if error is not None else OSError(f"cannot rename {tmp} to {dest}")


def warn(message: str) -> None:
    """A :class:`~tilejit.errors.DumpWarning` about a dump: ``TILEJIT_DUMP_DIR: <message>``."""
    import warnings

    from tilejit.errors import DumpWarning

    warnings.warn(f"TILEJIT_DUMP_DIR: {message}", DumpWarning, stacklevel=3)


__all__ = ["TMP_MARK", "warn", "write_folder"]
