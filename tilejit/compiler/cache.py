"""A disk cache of compiled programs shared by every tilejit process of a user.

Each entry is one file, written atomically (temp file in the same folder, then ``os.replace``)::

    b"TJCACHE\\0" | u32 format version | u32 header length | header | payload | sha256 of all before

The header (key, payload spans, the other values) is ``marshal`` data, not JSON: a warm hit in a
new process then imports neither ``json`` nor ``hashlib`` (whose OpenSSL backend alone costs ~3 ms
to load); sha256 comes from CPython's built-in module.

A truncated or corrupted file is detected, treated as a miss and removed. Concurrent writers of one
key each replace the file whole, leaving one good entry. A folder that cannot be written turns
caching off for the process with one warning; an entry that cannot be replaced (a folder in its
place) is warned about once and skipped. Size is bounded; least recently used entries (by mtime,
touched on every hit) are evicted first. Reading an entry loads no CUDA library.

The folder may be shared with other files: only regular files named ``<hex key>.tjc`` that start
with ``MAGIC``, and temp files named ``.tilejit-tmp-<pid>-<thread>-<ns>``, are ever removed. An
entry is opened without following a symbolic link and without blocking (a FIFO in its place), and
read only if it is a regular file no larger than the size bound.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import stat
import struct
import sys
import threading
import time
import warnings
from types import CodeType
from typing import Any

from tilejit import config
from tilejit.errors import CacheWarning
from tilejit.logs import logger_for

try:  # CPython's own sha256 (the same digests as hashlib's) without loading OpenSSL, unless hashlib is loaded
    if "hashlib" in sys.modules:  # numpy.random and torch import it: nothing to pay
        raise ImportError
    if sys.version_info >= (3, 12):
        from _sha2 import sha256
    else:
        from _sha256 import sha256
except ImportError:
    from hashlib import sha256

MAGIC = b"TJCACHE\0"
FORMAT_VERSION = 2
SUFFIX = ".tjc"
_HEAD = struct.Struct("<8sII")
_DIGEST = 32
_HEX = frozenset("0123456789abcdef")
_TMP_PREFIX = ".tilejit-tmp-"  # + "<pid>-<thread id>-<monotonic ns>", all decimal
_STALE_TMP_SECONDS = 600.0
_EVICT_TO = 0.9  # evict down to this fraction of max_bytes, so the next puts do not evict again at once

# Opening an entry neither follows a symbolic link nor waits for a FIFO's writer.
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_CLOEXEC", 0))

_warned = False
_warned_entries: set[str] = set()
_warn_lock = threading.Lock()


def cache_key(*parts: bytes | str) -> str:
    """A sha256 hex key over ``parts``; each part is length-prefixed, so ("ab", "c") and ("a", "bc") differ.

    Any str is accepted: a lone surrogate is encoded as UTF-8 would encode its code point (no valid text
    encodes so), so it neither fails nor collides with another string."""
    h = sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else bytes(part)
        h.update(b"s" if isinstance(part, str) else b"b")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def user_cache_dir() -> str:
    """The per-user cache folder: ``platformdirs.user_cache_dir("tilejit")``, computed without importing it on Linux."""
    if sys.platform.startswith("linux"):
        # Same rule as platformdirs' Unix backend; importing platformdirs costs ~15 ms.
        base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.expanduser("~/.cache")
        return os.path.join(base, "tilejit")
    import platformdirs

    return platformdirs.user_cache_dir("tilejit", appauthor=False)


class DiskCache:
    """Entries keyed by a hex string; each a dict of plain (marshal-able) values plus ``bytes`` (the payload).

    ``directory`` defaults to ``TILEJIT_CACHE_DIR``, else the user cache folder; ``max_bytes`` to
    ``TILEJIT_CACHE_MAX_BYTES``. The folder is created on the first write.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, max_bytes: int | None = None) -> None:
        if directory is None:
            directory = config.CACHE_DIR.get() or user_cache_dir()
        self.directory = os.fspath(directory)
        self.max_bytes = int(config.CACHE_MAX_BYTES.get() if max_bytes is None else max_bytes)
        if self.max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {self.max_bytes}")
        self._writable = True
        self._approx_bytes: int | None = None  # this process's running estimate of the folder's size
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DiskCache({self.directory!r}, max_bytes={self.max_bytes})"

    def path_of(self, key: str) -> str:
        """The file that holds ``key``'s entry."""
        if not isinstance(key, str) or not 16 <= len(key) <= 128 or not _HEX.issuperset(key):
            raise ValueError(f"cache key must be 16-128 lowercase hex digits (see cache_key()), got {key!r}")
        return os.path.join(self.directory, key + SUFFIX)

    def get(self, key: str, *, touch: bool = True) -> dict[str, Any] | None:
        """The entry stored under ``key``, or None on a miss; a damaged entry of ours is removed and is a miss.
        A hit marks the entry as recently used unless ``touch`` is false. Each lookup is logged at debug level
        with the key's first 16 digits.

        Anything but a regular file no larger than ``max_bytes`` (a folder, FIFO, symbolic link, a huge
        sparse file) is a miss, read not at all, and left where it is."""
        entry = self._get(key, touch)
        log = logger_for(__name__)
        if log is not None:
            log.debug("disk cache %s: %s in %s", "miss" if entry is None else "hit", key[:16], self.directory)
        return entry

    def _get(self, key: str, touch: bool) -> dict[str, Any] | None:
        """``get`` without the log record."""
        path = self.path_of(key)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
            fd = os.open(path, _READ_FLAGS)
        except OSError:
            return None
        try:
            st = os.fstat(fd)  # the file opened, which may have been replaced since the lstat
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_bytes:
                return None
            blob = _read(fd, st.st_size)
            entry = _decode(blob, key)
            if entry is None:
                if blob.startswith(MAGIC):  # ours, damaged; anything else is left alone
                    _remove_if_same(path, st)
                return None
            if touch:
                with contextlib.suppress(OSError, NotImplementedError):
                    # Mark as recently used for LRU eviction: the file read, not whatever the name holds now.
                    os.utime(fd if os.utime in os.supports_fd else path)
            return entry
        except OSError:
            return None
        finally:
            os.close(fd)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store ``entry`` under ``key``: ``bytes`` values go to the payload, the rest must be plain data."""
        path = self.path_of(key)
        blob = _encode(key, entry)
        if not self._writable or len(blob) > self.max_bytes:
            return
        tmp = os.path.join(self.directory, _tmp_name())
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
            try:
                view = memoryview(blob)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as exc:  # the folder cannot take files: no entry would be stored
            _remove(tmp)
            self._writable = False
            _warn_once(f"tilejit disk cache disabled for this process: cannot write to {self.directory} ({exc})")
            return
        try:
            os.replace(tmp, path)
        except OSError as exc:
            _remove(tmp)
            if isinstance(exc, PermissionError) and sys.platform == "win32" and os.path.isfile(path):
                return  # another process has the entry open; it holds the same bytes
            if os.path.lexists(path):  # something that cannot be replaced (a folder) holds this entry's name
                _warn_entry(path, exc)
            else:
                self._writable = False
                _warn_once(f"tilejit disk cache disabled for this process: cannot write to {self.directory} ({exc})")
            return
        log = logger_for(__name__)
        if log is not None:
            log.debug("disk cache stored %s (%d bytes) in %s", key[:16], len(blob), self.directory)
        with self._lock:
            if self._approx_bytes is None:
                self._approx_bytes = self._scan_and_evict()
            else:
                self._approx_bytes += len(blob)
                if self._approx_bytes > self.max_bytes:
                    self._approx_bytes = self._scan_and_evict()

    def clear(self) -> int:
        """Remove every entry (and temp files left by dead writers); returns how many entries were removed,
        or raises ``OSError`` naming how many could not be.

        Only files that are provably tilejit's are removed (see the module docstring); other files in the
        folder stay. A recent temp file may be another process's write in progress, so it is left for that
        process to rename (its entry then outlives the clear, as if written just after it)."""
        removed = 0
        stuck: list[OSError] = []
        now = time.time()
        for item in self._scan():
            if _is_entry_name(item.name):
                if not _is_ours(item.path):
                    continue
                try:
                    os.unlink(item.path)
                    removed += 1
                except FileNotFoundError:  # removed meanwhile by another process
                    pass
                except OSError as exc:
                    stuck.append(exc)
            elif _is_our_tmp(item.name) and _older_than(item, now, _STALE_TMP_SECONDS):
                _remove(item.path)
        with self._lock:
            self._approx_bytes = None
        if stuck:
            raise OSError(stuck[0].errno, f"removed {removed} entries from {self.directory}, but {len(stuck)} could "
                          f"not be removed ({stuck[0].strerror or stuck[0]})")
        return removed

    def unwritable_reason(self) -> str | None:
        """Why entries cannot be stored in the folder now (None if they can), found by creating and
        removing a file there, as a write would; the folder itself is not created."""
        if self.max_bytes == 0:
            return f"{config.CACHE_MAX_BYTES.name}=0 leaves no room for entries"
        folder = self.directory
        while not os.path.lexists(folder):
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        if not os.path.isdir(folder):
            return f"{folder} is not a folder"
        if folder != self.directory:  # the cache folder would be created here: can it be?
            return None if os.access(folder, os.W_OK | os.X_OK) else f"cannot create a folder in {folder}"
        probe = os.path.join(folder, _tmp_name())
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except OSError as exc:
            return f"cannot write to {folder} ({exc.strerror or exc})"
        _remove(probe)
        return None

    def info(self) -> dict[str, Any]:
        """``{"dir", "entries", "bytes", "max_bytes"}`` of the folder as it is now (tilejit's entries only)."""
        entries = 0
        total = 0
        for item in self._scan():
            if _is_entry_name(item.name) and _is_ours(item.path):
                try:
                    total += item.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
                entries += 1
        return {"dir": self.directory, "entries": entries, "bytes": total, "max_bytes": self.max_bytes}

    def entries(self) -> list[tuple[str, dict[str, Any]]]:
        """(key, entry) of every entry in the folder that reads back whole, as ``get`` reads it (a damaged one of
        ours is removed), without marking any as used."""
        found = []
        for item in self._scan():
            if _is_entry_name(item.name):
                key = item.name[: -len(SUFFIX)]
                entry = self.get(key, touch=False)
                if entry is not None:
                    found.append((key, entry))
        return found

    def _scan(self) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(self.directory) as it:
                return [e for e in it if e.is_file(follow_symlinks=False)]
        except OSError:
            return []

    def _scan_and_evict(self) -> int:
        """Sum entry sizes; if over the bound, remove least recently used entries. Returns the size left.

        Only files proven ours are removed; a file with an entry's name that is not ours leaves the sum."""
        now = time.time()
        files: list[tuple[float, int, str]] = []
        for item in self._scan():
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if _is_entry_name(item.name):
                files.append((st.st_mtime, st.st_size, item.path))
            elif _is_our_tmp(item.name) and now - st.st_mtime > _STALE_TMP_SECONDS:
                _remove(item.path)  # left by a process that died mid-write
        total = sum(size for _, size, _ in files)
        if total <= self.max_bytes:
            return total
        goal = int(self.max_bytes * _EVICT_TO)
        for _, size, path in sorted(files):
            if total <= goal:
                break
            if not _is_ours(path) or _remove(path):
                total -= size
        return total


def _encode(key: str, entry: dict[str, Any]) -> bytes:
    fields: dict[str, list[int]] = {}
    meta: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, value in entry.items():
        if not isinstance(name, str):
            raise TypeError(f"cache entry keys must be str, got {name!r}")
        if isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
            fields[name] = [offset, len(data)]
            chunks.append(data)
            offset += len(data)
        else:
            meta[name] = value
    try:
        header = marshal.dumps({"key": key, "fields": fields, "meta": meta}, 4)
    except ValueError as exc:
        raise TypeError(f"cache entry values must be bytes or plain data (None, bool, int, float, str, "
                        f"lists, tuples, dicts): {exc}") from None
    body = b"".join([_HEAD.pack(MAGIC, FORMAT_VERSION, len(header)), header, *chunks])
    return body + sha256(body).digest()


def _decode(blob: bytes, key: str) -> dict[str, Any] | None:
    if len(blob) < _HEAD.size + _DIGEST:
        return None
    magic, version, header_len = _HEAD.unpack_from(blob)
    if magic != MAGIC or version != FORMAT_VERSION or _HEAD.size + header_len > len(blob) - _DIGEST:
        return None
    body = memoryview(blob)[: len(blob) - _DIGEST]
    if sha256(body).digest() != blob[-_DIGEST:]:
        return None
    try:  # checksummed above; marshal rejects anything malformed all the same
        header = marshal.loads(body[_HEAD.size : _HEAD.size + header_len])
    except (ValueError, EOFError, TypeError):
        return None
    if not isinstance(header, dict) or header.get("key") != key:
        return None
    payload = body[_HEAD.size + header_len :]
    meta = header.get("meta")
    fields = header.get("fields")
    if not isinstance(meta, dict) or not isinstance(fields, dict):
        return None
    entry: dict[str, Any] = dict(meta)
    for name, span in fields.items():
        if not (isinstance(span, list | tuple) and len(span) == 2 and all(isinstance(v, int) for v in span)):
            return None
        start, length = span
        if start < 0 or length < 0 or start + length > len(payload):
            return None
        entry[name] = bytes(payload[start : start + length])
    return entry


def _read(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes of ``fd`` (fewer if the file is shorter)."""
    chunks: list[bytes] = []
    while size > 0:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _tmp_name() -> str:
    """A temp file name no other writer (process or thread) uses, and that ``_is_our_tmp`` recognizes."""
    return f"{_TMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"


def _is_our_tmp(name: str) -> bool:
    """Whether ``name`` is exactly a name ``_tmp_name`` makes (other files in the folder are never removed)."""
    if not name.startswith(_TMP_PREFIX):
        return False
    parts = name[len(_TMP_PREFIX) :].split("-")
    return len(parts) == 3 and all(p.isascii() and p.isdigit() for p in parts)


def _is_entry_name(name: str) -> bool:
    """Whether ``name`` is an entry's file name, ``<16-128 lowercase hex digits>.tjc``."""
    stem = name[: -len(SUFFIX)]
    return name.endswith(SUFFIX) and 16 <= len(stem) <= 128 and _HEX.issuperset(stem)


def _is_ours(path: str) -> bool:
    """Whether ``path`` is a regular file (not a link) that starts with ``MAGIC``, as every entry written does:
    the proof needed before removing it from a folder that may hold other files."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(MAGIC)) == MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


def _older_than(item: os.DirEntry[str], now: float, seconds: float) -> bool:
    try:
        return now - item.stat(follow_symlinks=False).st_mtime > seconds
    except OSError:
        return False


def _remove_if_same(path: str, read: os.stat_result) -> None:
    """Remove the damaged file at ``path`` unless another writer has replaced it since it was read (a
    good entry renamed over it stays)."""
    with contextlib.suppress(OSError):
        now = os.lstat(path)
        if (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns) == (
            read.st_ino, read.st_dev, read.st_size, read.st_mtime_ns
        ):
            os.unlink(path)


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def _warn_once(message: str) -> None:
    global _warned
    with _warn_lock:
        if _warned:
            return
        _warned = True
    warnings.warn(message, CacheWarning, stacklevel=4)


def _warn_entry(path: str, exc: OSError) -> None:
    """Warn, once per entry and process, that the entry at ``path`` cannot be stored; caching stays on."""
    with _warn_lock:
        if path in _warned_entries:
            return
        _warned_entries.add(path)
    what = "a folder is in its place" if os.path.isdir(path) else exc.strerror or str(exc)
    warnings.warn(f"tilejit disk cache: cannot store the entry {path} ({what}); other entries are still cached",
                  CacheWarning, stacklevel=4)


#: The folder, inside the cache's, of autotuning's chosen configs: apart from compiled entries, so that listing
#: them (``tilejit cache info``) reads a few small files, not every kernel image.
TUNED_FOLDER = "autotune"
_defaults: dict[tuple[str | None, int, str], DiskCache] = {}


def default_cache(folder: str = "") -> DiskCache:
    """The process-wide cache for the current ``TILEJIT_CACHE_DIR`` / ``TILEJIT_CACHE_MAX_BYTES``; with ``folder``
    (e.g. ``TUNED_FOLDER``), the cache of that sub-folder of its folder, bounded alike.

    Whether to use it at all is ``config.CACHE`` (``TILEJIT_CACHE=0`` turns caching off); callers check that.
    """
    key = (config.CACHE_DIR.get(), config.CACHE_MAX_BYTES.get(), folder)
    cache = _defaults.get(key)
    if cache is None:
        directory = os.path.join(key[0] or user_cache_dir(), folder) if folder else key[0]
        cache = _defaults.setdefault(key, DiskCache(directory, key[1]))
    return cache


def cached_compile(src: str, filename: str) -> CodeType:
    """``compile(src, filename, "exec")``, kept in the disk cache for this exact Python (when caching is
    on): tilejit's generated launch code costs about 1 ms to compile, 20 µs to load marshalled."""
    if not config.CACHE.get():
        return compile(src, filename, "exec")
    cache = default_cache()
    key = cache_key("tilejit.code.v1", sys.version, sys.implementation.cache_tag or "", filename, src)
    entry = cache.get(key)
    if entry is not None:
        try:
            code = marshal.loads(entry["code"])
        except (KeyError, TypeError, ValueError, EOFError):
            code = None
        if isinstance(code, CodeType):
            return code
    code = compile(src, filename, "exec")
    cache.put(key, {"code": marshal.dumps(code)})
    return code


__all__ = ["TUNED_FOLDER", "CacheWarning", "DiskCache", "cache_key", "cached_compile", "default_cache", "sha256",
           "user_cache_dir"]
