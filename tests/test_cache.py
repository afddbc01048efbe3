"""The disk cache: entry format and damage detection, fresh-process hits without NVRTC, races, read-only folders,
the size bound, and compile_cuda's use of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import Toolkit

from tilejit.compiler import cache as cache_mod
from tilejit.compiler.cache import CacheWarning, DiskCache, cache_key, cached_compile, default_cache, user_cache_dir
from tilejit.compiler.nvrtc import compile_cuda

SRC = 'extern "C" __global__ void fill(float* out, float v) { out[threadIdx.x] = v; }\n'

# Compiles SRC in a new process and reports whether it came from the cache and whether NVRTC got loaded.
CHILD = textwrap.dedent(
    """
    import sys, warnings
    warnings.simplefilter("always")
    from tilejit.compiler.nvrtc import compile_cuda
    src = sys.argv[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        progs = [compile_cuda(src.replace("fill", f"fill{i}"), target="sm_80") for i in range(int(sys.argv[2]))]
    heavy = [m for m in ("json", "hashlib", "_hashlib", "tilejit.bindings.nvrtc") if m in sys.modules]
    import json
    with open("/proc/self/maps") as f:
        maps = f.read()
    print(json.dumps({
        "heavy_imports": heavy,
        "from_cache": [p.from_cache for p in progs],
        "sizes": [len(p.code) for p in progs],
        "elf": [p.code[:4] == b"\\x7fELF" for p in progs],
        "nvrtc_loaded": "libnvrtc" in maps,
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
    }))
    """
)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEJIT_CACHE", raising=False)
    monkeypatch.delenv("TILEJIT_CACHE_MAX_BYTES", raising=False)


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.tjc")) if directory.is_dir() else []


def run_child(env_cache: Path, nvrtc: Path, count: int = 1, **extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(env_cache), "TILEJIT_NVRTC": str(nvrtc), **extra}
    env.pop("TILEJIT_CACHE", None)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, SRC, str(count)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )


def child_result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


# ---------------------------------------------------------------- DiskCache itself


def test_put_get_round_trip(tmp_path: Path) -> None:
    c = DiskCache(tmp_path / "c")
    key = cache_key("a", b"b")
    assert c.get(key) is None
    c.put(key, {"code": b"\x00\x01binary\xff", "ptx": bytearray(b"text"), "names": {"f<int>": "_Z1fIiEvv"}, "n": 3})
    got = c.get(key)
    assert got == {"code": b"\x00\x01binary\xff", "ptx": b"text", "names": {"f<int>": "_Z1fIiEvv"}, "n": 3}
    assert [p.name for p in entries(tmp_path / "c")] == [key + ".tjc"]
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".tilejit-tmp-")]


def test_keys_are_validated(tmp_path: Path) -> None:
    c = DiskCache(tmp_path)
    for bad in ["../etc/passwd", "ABCDEF0123456789", "short", ""]:
        with pytest.raises(ValueError, match="cache key must be 16-128 lowercase hex digits"):
            c.get(bad)


def test_entry_values_must_serialize(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="bytes or plain data"):
        DiskCache(tmp_path).put(cache_key("x"), {"obj": object()})


def test_cache_key_separates_parts() -> None:
    assert cache_key("ab", "c") != cache_key("a", "bc")
    assert cache_key("a") != cache_key(b"a")
    assert cache_key("a", "b") == cache_key("a", "b")
    assert len(cache_key()) == 64


def test_user_cache_dir_matches_platformdirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import platformdirs

    assert user_cache_dir() == platformdirs.user_cache_dir("tilejit", appauthor=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_cache_dir() == platformdirs.user_cache_dir("tilejit", appauthor=False)


def test_default_cache_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "one"))
    monkeypatch.setenv("TILEJIT_CACHE_MAX_BYTES", "2M")
    first = default_cache()
    assert first is default_cache()
    assert (first.directory, first.max_bytes) == (str(tmp_path / "one"), 2 << 20)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "two"))
    assert default_cache().directory == str(tmp_path / "two")
    monkeypatch.delenv("TILEJIT_CACHE_DIR")
    assert default_cache().directory == user_cache_dir()


@pytest.mark.parametrize("damage", ["truncate", "flip_payload", "flip_header", "empty", "other_key", "old_format"])
def test_damaged_entry_is_a_miss_and_removed(tmp_path: Path, damage: str) -> None:
    c = DiskCache(tmp_path)
    key, other = cache_key("k"), cache_key("other")
    c.put(key, {"code": b"x" * 1000, "meta": "m"})
    path = Path(c.path_of(key))
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[: len(blob) // 2]
    elif damage == "flip_payload":
        blob[-100] ^= 0x40
    elif damage == "flip_header":
        blob[20] ^= 0x01
    elif damage == "empty":
        blob = bytearray()
    elif damage == "other_key":
        c.put(other, {"code": b"y"})
        blob = bytearray(Path(c.path_of(other)).read_bytes())
    elif damage == "old_format":
        blob[8] = 99  # format version field
    path.write_bytes(bytes(blob))
    assert c.get(key) is None
    # removed when its header proves it is tilejit's; an empty file proves nothing and is left (put replaces it)
    assert path.exists() == (damage == "empty")
    c.put(key, {"code": b"x" * 1000, "meta": "m"})
    assert c.get(key) == {"code": b"x" * 1000, "meta": "m"}


def test_damaged_entry_replaced_while_read_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that finds a damaged entry must not remove the good one another writer renamed over it
    between the read and the removal."""
    c = DiskCache(tmp_path)
    key = cache_key("k")
    good = {"code": b"g" * 500, "meta": "good"}
    Path(c.path_of(key)).parent.mkdir(parents=True, exist_ok=True)
    Path(c.path_of(key)).write_bytes(b"damaged")
    decode = cache_mod._decode

    def decode_then_writer_replaces(blob: bytes, k: str) -> Any:
        result = decode(blob, k)
        DiskCache(tmp_path).put(key, good)  # the other writer's atomic rename lands here
        return result

    monkeypatch.setattr(cache_mod, "_decode", decode_then_writer_replaces)
    assert c.get(key) is None  # what this reader read was damaged: a miss
    monkeypatch.setattr(cache_mod, "_decode", decode)
    assert c.get(key) == good


def test_size_bound_evicts_least_recently_used(tmp_path: Path) -> None:
    payload = b"p" * 1000
    probe = DiskCache(tmp_path / "probe")
    probe.put(cache_key("probe"), {"code": payload})
    size = entries(tmp_path / "probe")[0].stat().st_size
    c = DiskCache(tmp_path / "c", max_bytes=int(size * 3.5))
    keys = {name: cache_key(name) for name in "abcd"}
    for name in "abc":
        c.put(keys[name], {"code": payload})
    for i, name in enumerate("abc"):
        os.utime(c.path_of(keys[name]), (1_000_000 + i, 1_000_000 + i))  # a oldest, c newest
    assert c.get(keys["a"]) is not None  # a hit makes a the most recently used
    c.put(keys["d"], {"code": payload})
    left = {name for name, key in keys.items() if os.path.exists(c.path_of(key))}
    assert left == {"a", "c", "d"}
    assert c.info()["bytes"] <= c.max_bytes


def test_size_bound_holds_across_many_puts_and_fresh_instances(tmp_path: Path) -> None:
    bound = 20_000
    for round_ in range(3):
        c = DiskCache(tmp_path, max_bytes=bound)  # a new process's view: no running estimate yet
        for i in range(20):
            c.put(cache_key(f"{round_}-{i}"), {"code": os.urandom(900)})
        assert c.info()["bytes"] <= bound
    assert 0 < c.info()["entries"] <= bound // 900


def test_entry_larger_than_the_bound_is_not_stored(tmp_path: Path) -> None:
    c = DiskCache(tmp_path, max_bytes=500)
    c.put(cache_key("big"), {"code": b"b" * 1000})
    assert c.get(cache_key("big")) is None
    assert entries(tmp_path) == []


def test_info_and_clear(tmp_path: Path) -> None:
    c = DiskCache(tmp_path / "c", max_bytes=12345)
    assert c.info() == {"dir": str(tmp_path / "c"), "entries": 0, "bytes": 0, "max_bytes": 12345}
    for i in range(3):
        c.put(cache_key(str(i)), {"code": b"z" * 100})
    stale = tmp_path / "c" / ".tilejit-tmp-1-2-3"  # left by a writer that died
    stale.write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    in_progress = tmp_path / "c" / ".tilejit-tmp-123-456-789"  # another process's write, still going on
    in_progress.write_bytes(b"partial")
    info = c.info()
    assert info["entries"] == 3
    assert info["bytes"] == sum(p.stat().st_size for p in entries(tmp_path / "c"))
    assert c.clear() == 3
    assert c.info()["entries"] == 0
    assert list((tmp_path / "c").iterdir()) == [in_progress]


def test_clear_keeps_a_concurrent_writers_temp_file(tmp_path: Path) -> None:
    """A clear while another process writes leaves that write able to finish (it renames its temp file)."""
    c = DiskCache(tmp_path, max_bytes=1 << 20)
    key = cache_key("k")
    real_replace = os.replace

    def replace_after_clear(src: str, dst: str) -> None:
        assert c.clear() == 0
        real_replace(src, dst)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", replace_after_clear)
        c.put(key, {"code": b"x"})
    assert c.get(key) == {"code": b"x"}
    c.put(cache_key("k2"), {"code": b"y"})  # caching stayed on
    assert c.get(cache_key("k2")) == {"code": b"y"}


def test_clear_reports_entries_it_cannot_remove(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = DiskCache(tmp_path, max_bytes=1 << 20)
    for i in range(3):
        c.put(cache_key(str(i)), {"code": b"z"})
    real_unlink = os.unlink
    stuck = str(c.path_of(cache_key("1")))

    def unlink(path: str) -> None:
        if str(path) == stuck:
            raise PermissionError(1, "Operation not permitted")
        real_unlink(path)

    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(OSError, match=r"removed 2 entries .* but 1 could not be removed"):
        c.clear()


def test_unwritable_reason(tmp_path: Path) -> None:
    assert DiskCache(tmp_path / "new" / "sub", max_bytes=100).unwritable_reason() is None
    assert DiskCache(tmp_path, max_bytes=100).unwritable_reason() is None
    assert list(tmp_path.iterdir()) == [], "the probe leaves nothing behind and creates no folder"
    assert "TILEJIT_CACHE_MAX_BYTES=0" in str(DiskCache(tmp_path, max_bytes=0).unwritable_reason())
    afile = tmp_path / "file"
    afile.write_text("x")
    assert "is not a folder" in str(DiskCache(afile, max_bytes=100).unwritable_reason())
    assert "is not a folder" in str(DiskCache(afile / "sub", max_bytes=100).unwritable_reason())


def test_unwritable_reason_reports_a_failed_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def read_only(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_CREAT:
            raise OSError(30, "Read-only file system")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", read_only)
    reason = DiskCache(tmp_path, max_bytes=100).unwritable_reason()
    assert reason == f"cannot write to {tmp_path} (Read-only file system)"


def test_stale_temp_files_are_swept(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    stale, fresh = tmp_path / ".tilejit-tmp-1-2-3", tmp_path / ".tilejit-tmp-4-5-6"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(stale, (1_000_000, 1_000_000))
    DiskCache(tmp_path).put(cache_key("k"), {"code": b"c"})
    assert not stale.exists()
    assert fresh.exists()  # may belong to a writer that is still running


def test_write_failure_degrades_with_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    monkeypatch.setattr(cache_mod, "_warned", False)

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    c = DiskCache(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monkeypatch.setattr(cache_mod.os, "write", full)
        for i in range(3):
            c.put(cache_key(str(i)), {"code": b"c"})
        DiskCache(tmp_path / "other").put(cache_key("x"), {"code": b"c"})
    monkeypatch.undo()
    cache_warnings = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(cache_warnings) == 1, [str(w.message) for w in caught]
    assert "No space left on device" in str(cache_warnings[0].message)
    assert str(tmp_path) in str(cache_warnings[0].message)
    assert entries(tmp_path) == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tilejit-tmp-")]


def _foreign_files(folder: Path) -> dict[str, bytes]:
    """Files another program keeps in a shared cache folder, some named like entries or temp files."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "report.tjc": b"someone's report",
        "0123456789abcdef0123456789abcdef.tjc": b"not an entry, though named like one" * 100,
        ".tmp-123-456-789": b"another program's temp file",
        ".tilejit-tmp-not-ours": b"not a name tilejit makes",
        "notes.txt": b"notes",
    }
    old = time.time() - 3600
    for name, data in files.items():
        (folder / name).write_bytes(data)
        os.utime(folder / name, (old, old))
    return files


def test_clear_removes_only_what_is_provably_ours(tmp_path: Path) -> None:
    """`cache clear` in a shared folder removed other programs' files (report.tjc, an hour-old .tmp-...)."""
    folder = tmp_path / "shared"
    foreign = _foreign_files(folder)
    (folder / ("ab" * 16 + ".tjc")).mkdir()  # a folder named like an entry
    c = DiskCache(folder, max_bytes=1 << 20)
    for i in range(3):
        c.put(cache_key(str(i)), {"code": b"z" * 100})
    assert c.info()["entries"] == 3
    assert c.clear() == 3
    left = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert left == foreign
    assert (folder / ("ab" * 16 + ".tjc")).is_dir()


def test_eviction_removes_only_what_is_provably_ours(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    foreign = _foreign_files(folder)
    big = folder / ("cd" * 16 + ".tjc")  # named like an entry, larger than the whole bound, not ours
    big.write_bytes(b"\0" * 50_000)
    os.utime(big, (1_000_000, 1_000_000))  # the least recently used of all
    bound = 20_000
    c = DiskCache(folder, max_bytes=bound)
    for i in range(40):
        c.put(cache_key(str(i)), {"code": os.urandom(900)})
    assert big.stat().st_size == 50_000
    assert {n: (folder / n).read_bytes() for n in foreign} == foreign
    ours = [p for p in entries(folder) if p != big and p.name not in foreign]
    assert ours and sum(p.stat().st_size for p in ours) <= bound
    assert c.get(cache_key("39")) is not None  # the newest entry survived: foreign bytes did not count


def test_a_fifo_in_place_of_an_entry_is_a_miss_not_a_hang(tmp_path: Path) -> None:
    """A FIFO named like an entry blocked get() forever (open() waits for a writer); now a miss, and put replaces it."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    code = textwrap.dedent(
        """
        import os, sys
        from tilejit.compiler.cache import DiskCache, cache_key
        c = DiskCache(sys.argv[1])
        key = cache_key("k")
        os.mkfifo(c.path_of(key))
        assert c.get(key) is None
        assert c.info()["entries"] == 0 and c.clear() == 0
        assert os.path.exists(c.path_of(key))
        c.put(key, {"code": b"x"})
        assert c.get(key) == {"code": b"x"}
        print("ok")
        """
    )
    try:
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("cache.get blocked on a FIFO")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_entries_larger_than_the_bound_are_not_read(tmp_path: Path) -> None:
    """An 8 GB sparse file in place of an entry was read whole (MemoryError); now its size is checked first."""
    import tracemalloc

    c = DiskCache(tmp_path, max_bytes=1 << 20)
    key = cache_key("k")
    with open(c.path_of(key), "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of nothing on disk
    tracemalloc.start()
    try:
        assert c.get(key) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"read {peak} bytes of an entry larger than the bound"
    assert os.path.getsize(c.path_of(key)) == 64 << 20  # not ours: left alone
    # a good entry written under a larger bound is a miss under a smaller one, and is not removed
    DiskCache(tmp_path / "big", max_bytes=1 << 20).put(key, {"code": b"y" * 5000})
    assert DiskCache(tmp_path / "big", max_bytes=1000).get(key) is None
    assert DiskCache(tmp_path / "big", max_bytes=1 << 20).get(key) == {"code": b"y" * 5000}


def test_symbolic_links_in_the_folder_are_not_followed(tmp_path: Path) -> None:
    folder, elsewhere = tmp_path / "c", tmp_path / "elsewhere"
    theirs = DiskCache(elsewhere)
    key = cache_key("k")
    theirs.put(key, {"code": b"theirs"})
    folder.mkdir()
    c = DiskCache(folder, max_bytes=1 << 20)
    os.symlink(theirs.path_of(key), c.path_of(key))
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        os.symlink(tmp_path / "fifo", c.path_of(cache_key("fifo")))
    before = os.stat(theirs.path_of(key)).st_mtime_ns
    assert c.get(key) is None
    assert c.get(cache_key("fifo")) is None
    assert c.info()["entries"] == 0
    assert c.clear() == 0
    assert os.path.islink(c.path_of(key))
    assert os.stat(theirs.path_of(key)).st_mtime_ns == before  # not touched through the link
    assert theirs.get(key) == {"code": b"theirs"}
    c.put(key, {"code": b"ours"})  # the link is replaced by an entry (the name is the entry's), its target is not
    assert not os.path.islink(c.path_of(key)) and c.get(key) == {"code": b"ours"}
    assert theirs.get(key) == {"code": b"theirs"}


def test_a_folder_in_place_of_an_entry_is_one_bad_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder named like an entry turned caching off for every kernel ("cannot write to <dir>") while
    `cache info` said "on"; now only that entry is skipped, with a warning naming it and why."""
    monkeypatch.setattr(cache_mod, "_warned", False)
    monkeypatch.setattr(cache_mod, "_warned_entries", set())
    c = DiskCache(tmp_path, max_bytes=1 << 20)
    bad = cache_key("bad")
    os.makedirs(c.path_of(bad))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            c.put(bad, {"code": b"b"})
        for i in range(3):
            c.put(cache_key(str(i)), {"code": b"c"})
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert messages == [f"tilejit disk cache: cannot store the entry {c.path_of(bad)} (a folder is in its place); "
                        "other entries are still cached"]
    assert c.get(bad) is None
    assert [c.get(cache_key(str(i))) for i in range(3)] == [{"code": b"c"}] * 3
    assert c.unwritable_reason() is None
    assert os.path.isdir(c.path_of(bad))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tilejit-tmp-")]


def test_any_str_makes_a_key_and_an_entry(tmp_path: Path) -> None:
    """A lone surrogate in source crashed the cache (UnicodeEncodeError in cache_key)."""
    keys = {cache_key(s) for s in ("\ud800", "\udc80", "\ud800\udc00", "\U00010000", "", "a")}
    assert len(keys) == 6
    assert cache_key("ab\ud800") == cache_key("ab\ud800")
    import hashlib  # valid text keeps the keys it had (UTF-8)

    data = "é".encode()
    assert cache_key("é") == hashlib.sha256(b"s" + len(data).to_bytes(8, "little") + data).hexdigest()
    c = DiskCache(tmp_path)
    c.put(cache_key("\udcff"), {"code": b"x", "src": "bad \udcff text"})
    assert c.get(cache_key("\udcff")) == {"code": b"x", "src": "bad \udcff text"}


# ---------------------------------------------------------------- compile_cuda through the cache


def test_compile_hits_the_cache_in_process(toolkit: Toolkit, tmp_path: Path) -> None:
    from tilejit.bindings.nvrtc import load_nvrtc

    lib = load_nvrtc(str(toolkit.nvrtc))
    first = compile_cuda(SRC, target="sm_80", name_expressions=["fill"], nvrtc=lib)
    second = compile_cuda(SRC, target="sm_80", name_expressions=["fill"], nvrtc=lib)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert second.code == first.code
    assert second.lowered_names == first.lowered_names == {"fill": "fill"}
    assert second.nvrtc_version == first.nvrtc_version == lib.version
    assert second.target == first.target
    assert len(entries(tmp_path / "cache")) == 1
    # Everything that changes the output changes the key.
    variants = [
        {"source": SRC.replace("v;", "v + 1.0f;")},
        {"target": "sm_90"},
        {"output": "ptx"},
        {"options": ["-DX=1"]},
        {"headers": {"unused.h": "// a"}},
        {"headers": {"unused.h": "// b"}},
        {"name": "other.cu"},
        {"name_expressions": []},
    ]
    for change in variants:
        kwargs: dict[str, object] = {"target": "sm_80", "name_expressions": ["fill"], "nvrtc": lib, **change}
        source = kwargs.pop("source", SRC)
        assert compile_cuda(source, **kwargs).from_cache is False, change  # type: ignore[arg-type]
    assert len(entries(tmp_path / "cache")) == 1 + len(variants)


def test_cache_off(toolkit: Toolkit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.bindings.nvrtc import load_nvrtc

    lib = load_nvrtc(str(toolkit.nvrtc))
    assert compile_cuda(SRC, target="sm_80", nvrtc=lib, cache=False).from_cache is False
    assert compile_cuda(SRC, target="sm_80", nvrtc=lib, cache=False).from_cache is False
    monkeypatch.setenv("TILEJIT_CACHE", "0")
    assert compile_cuda(SRC, target="sm_80", nvrtc=lib).from_cache is False
    assert compile_cuda(SRC, target="sm_80", nvrtc=lib).from_cache is False
    # -I reads headers from disk, which the key cannot see: not cached unless asked for.
    monkeypatch.delenv("TILEJIT_CACHE")
    assert compile_cuda(SRC, target="sm_80", nvrtc=lib, options=[f"-I{tmp_path}"]).from_cache is False
    assert compile_cuda(SRC, target="sm_80", nvrtc=lib, options=[f"-I{tmp_path}"]).from_cache is False
    assert entries(tmp_path / "cache") == []


def test_headers_from_the_current_folder_are_not_cached(
    toolkit: Toolkit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVRTC finds a quoted #include in the current folder; the key cannot see that file, so a change
    to it must not be served stale from the cache."""
    from tilejit.bindings.nvrtc import load_nvrtc

    lib = load_nvrtc(str(toolkit.nvrtc))
    monkeypatch.chdir(tmp_path)
    source = '#include "val.h"\nextern "C" __global__ void k(int* a) { a[0] = VAL; }\n'
    for value in (111, 222):
        (tmp_path / "val.h").write_text(f"#define VAL {value}\n")
        prog = compile_cuda(source, target="sm_80", output="ptx", nvrtc=lib)
        assert prog.from_cache is False
        assert f", {value};" in prog.ptx
    # ... also when an in-memory header includes it, or a macro names it
    for text in ('#include "val.h"\n', '#define H "val.h"\n#include H\n'):
        src = '#include "mem.h"\nextern "C" __global__ void k(int* a) { a[0] = VAL; }\n'
        compile_cuda(src, target="sm_80", output="ptx", nvrtc=lib, headers={"mem.h": text})
        assert compile_cuda(src, target="sm_80", output="ptx", nvrtc=lib, headers={"mem.h": text}).from_cache is False
    assert entries(tmp_path / "cache") == []
    # Quoted and angle includes the header map provides are cached; so is an explicit cache=True.
    src = '#include "a.h"\n#include <b.h>\nextern "C" __global__ void k(int* a) { a[0] = A + B; }\n'
    headers = {"a.h": "#define A 1\n", "b.h": "#define B 2\n"}
    compile_cuda(src, target="sm_80", nvrtc=lib, headers=headers)
    assert compile_cuda(src, target="sm_80", nvrtc=lib, headers=headers).from_cache is True
    compile_cuda(source, target="sm_80", nvrtc=lib, cache=True)
    assert compile_cuda(source, target="sm_80", nvrtc=lib, cache=True).from_cache is True


@pytest.mark.parametrize(
    "spelling", ['#\\\ninclude "val.h"', '#inc\\\nlude "val.h"', '%:include "val.h"', '#/**/include "val.h"',
                 '/* a\n */ # /* b\n */ include "val.h"'],
    ids=["splice_after_hash", "splice_in_word", "digraph", "comment_between", "comments_over_lines"],
)
def test_disk_headers_in_any_spelling_are_not_cached(
    toolkit: Toolkit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """These spellings slipped past the disk-header check: after the header changed, the stale result came
    from the cache."""
    from tilejit.bindings.nvrtc import load_nvrtc

    lib = load_nvrtc(str(toolkit.nvrtc))
    monkeypatch.chdir(tmp_path)
    source = spelling + '\nextern "C" __global__ void k(int* a) { a[0] = VAL; }\n'
    for value in (111, 222):
        (tmp_path / "val.h").write_text(f"#define VAL {value}\n")
        prog = compile_cuda(source, target="sm_80", output="ptx", nvrtc=lib)
        assert prog.from_cache is False
        assert f", {value};" in prog.ptx
    assert entries(tmp_path / "cache") == []


@pytest.mark.parametrize(
    "text", ['// #include "val.h"', '/*\n#include "val.h"\n*/', 'const char* s = "#include \\"val.h\\"";',
             'const char* s = R"(\n#include "val.h"\n)";'],
    ids=["line_comment", "block_comment", "string", "raw_string"],
)
def test_includes_that_are_no_directives_stay_cacheable(
    toolkit: Toolkit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    from tilejit.bindings.nvrtc import load_nvrtc

    lib = load_nvrtc(str(toolkit.nvrtc))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "val.h").write_text("#error not read\n")
    source = text + '\nextern "C" __global__ void k(int* a) { a[0] = 5; }\n'
    assert compile_cuda(source, target="sm_80", output="ptx", nvrtc=lib).from_cache is False
    assert compile_cuda(source, target="sm_80", output="ptx", nvrtc=lib).from_cache is True


def test_an_entry_with_wrong_field_types_is_a_miss(toolkit: Toolkit, tmp_path: Path) -> None:
    """An entry that passes its checksum but lacks what a hit needs (another version wrote it) is recompiled."""
    from tilejit.bindings.nvrtc import load_nvrtc

    lib = load_nvrtc(str(toolkit.nvrtc))
    good = compile_cuda(SRC, target="sm_80", nvrtc=lib, name_expressions=["fill"])
    (path,) = entries(tmp_path / "cache")
    key = path.name.removesuffix(".tjc")
    cache = DiskCache(tmp_path / "cache")
    for field, bad in [("nvrtc_version", 13), ("lowered_names", ["fill"]), ("log", None), ("code", "text")]:
        entry = cache.get(key)
        assert entry is not None
        cache.put(key, {**entry, field: bad})
        again = compile_cuda(SRC, target="sm_80", nvrtc=lib, name_expressions=["fill"])
        assert again.from_cache is False, field
        assert (again.code, again.lowered_names) == (good.code, good.lowered_names)


def test_truncated_compile_entry_is_recompiled(toolkit: Toolkit, tmp_path: Path) -> None:
    from tilejit.bindings.nvrtc import load_nvrtc

    lib = load_nvrtc(str(toolkit.nvrtc))
    good = compile_cuda(SRC, target="sm_80", nvrtc=lib)
    (path,) = entries(tmp_path / "cache")
    path.write_bytes(path.read_bytes()[:-7])
    again = compile_cuda(SRC, target="sm_80", nvrtc=lib)
    assert again.from_cache is False
    assert again.code == good.code
    (path,) = entries(tmp_path / "cache")
    third = compile_cuda(SRC, target="sm_80", nvrtc=lib)
    assert third.from_cache is True
    assert third.code == good.code


def test_fresh_process_hit_does_not_load_nvrtc(toolkit: Toolkit, tmp_path: Path) -> None:
    cold = child_result(run_child(tmp_path / "shared", toolkit.nvrtc))
    assert cold["from_cache"] == [False]
    assert cold["nvrtc_loaded"] is True
    warm = child_result(run_child(tmp_path / "shared", toolkit.nvrtc))
    assert warm["from_cache"] == [True]
    assert warm["sizes"] == cold["sizes"]
    assert warm["elf"] == [True]
    assert warm["nvrtc_loaded"] is False
    assert warm["heavy_imports"] == []  # a warm hit pays for neither json nor hashlib's OpenSSL, nor NVRTC's bindings


def test_fresh_process_hit_finds_nvrtc_without_its_bindings(
    toolkit: Toolkit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no explicit NVRTC, a hit still names NVRTC's file in the key (found by discovery), without
    loading NVRTC or importing its bindings module."""
    from tilejit.bindings.loader import NVRTC_LIBRARY, find_toolkit_file
    from tilejit.errors import LibraryNotFoundError

    monkeypatch.delenv("TILEJIT_NVRTC", raising=False)
    try:
        find_toolkit_file(NVRTC_LIBRARY)
    except LibraryNotFoundError:
        pytest.skip("no NVRTC to discover on this machine (only explicit toolkits)")
    cold = child_result(run_child(tmp_path / "shared", toolkit.nvrtc, TILEJIT_NVRTC=""))
    warm = child_result(run_child(tmp_path / "shared", toolkit.nvrtc, TILEJIT_NVRTC=""))
    assert (cold["from_cache"], cold["nvrtc_loaded"]) == ([False], True)
    assert (warm["from_cache"], warm["nvrtc_loaded"], warm["heavy_imports"]) == ([True], False, [])


def test_header_round_trips_plain_values(tmp_path: Path) -> None:
    c = DiskCache(tmp_path)
    key = cache_key("codec")
    meta = {"none": None, "t": True, "f": False, "zero": 0, "neg": -7, "big": 1 << 70, "pi": 3.25, "inf": float("inf"),
            "text": "ünïcode ☃", "empty": "", "list": [1, "a", [None, {"k": [2.5]}]], "tuple": (1, 2),
            "nested": {"a": {"b": {}}, "c": []}}
    c.put(key, {"code": b"\0" * 10, **meta})
    got = c.get(key)
    assert got == {"code": b"\0" * 10, **meta}
    assert type(got["t"]) is bool and type(got["zero"]) is int and type(got["pi"]) is float


def test_cache_key_is_sha256_of_the_length_prefixed_parts() -> None:
    import hashlib

    h = hashlib.sha256()
    for part, tag in (("ab", b"s"), (b"c\0", b"b")):
        data = part.encode() if isinstance(part, str) else part
        h.update(tag + len(data).to_bytes(8, "little") + data)
    assert cache_key("ab", b"c\0") == h.hexdigest()


def test_concurrent_processes_leave_one_good_entry(toolkit: Toolkit, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    procs = [run_child(shared, toolkit.nvrtc) for _ in range(4)]
    results = [child_result(p) for p in procs]
    assert all(r["elf"] == [True] for r in results)
    assert len({tuple(r["sizes"]) for r in results}) == 1  # type: ignore[arg-type]
    (entry,) = entries(shared)
    assert not [p for p in shared.iterdir() if p.name.startswith(".tilejit-tmp-")]
    key = entry.name.removesuffix(".tjc")
    got = DiskCache(shared).get(key)
    assert got is not None and got["code"][:4] == b"\x7fELF"
    assert child_result(run_child(shared, toolkit.nvrtc))["from_cache"] == [True]


@pytest.mark.parametrize("how", ["read_only_dir", "path_under_a_file"])
def test_unwritable_cache_works_with_exactly_one_warning(toolkit: Toolkit, tmp_path: Path, how: str) -> None:
    if how == "read_only_dir":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders; covered by path_under_a_file")
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
    else:
        (tmp_path / "file").write_text("not a folder")
        folder = tmp_path / "file" / "cache"
    try:
        result = child_result(run_child(folder, toolkit.nvrtc, count=3))
    finally:
        if how == "read_only_dir":
            folder.chmod(0o755)
    assert result["from_cache"] == [False, False, False]
    assert result["elf"] == [True, True, True]
    assert len(result["warnings"]) == 1, result["warnings"]  # type: ignore[arg-type]
    message = result["warnings"][0]  # type: ignore[index]
    assert message.startswith("CacheWarning: tilejit disk cache disabled for this process: cannot write to")
    assert str(folder) in message


def test_generated_code_comes_from_the_disk_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    src = "def make(a):\n    return a + 1\n"
    first = cached_compile(src, "<tilejit launcher t>")
    assert len(os.listdir(tmp_path / "cache")) == 1

    def no_compile(*args: object) -> object:
        raise AssertionError("compiled again instead of loading the cached code")

    monkeypatch.setattr(cache_mod, "compile", no_compile, raising=False)
    again = cached_compile(src, "<tilejit launcher t>")
    assert again == first and again is not first and again.co_filename == "<tilejit launcher t>"
    namespace: dict[str, object] = {}
    exec(again, namespace)
    assert callable(namespace["make"])
    # another file name (the kernel's name) is another entry
    monkeypatch.undo()
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    assert cached_compile(src, "<tilejit launcher u>").co_filename == "<tilejit launcher u>"
    assert len(os.listdir(tmp_path / "cache")) == 2
    # an entry that holds no code object is recompiled and replaced
    for name in os.listdir(tmp_path / "cache"):
        default_cache().put(name.removesuffix(".tjc"), {"code": b"not marshal data"})
    assert cached_compile(src, "<tilejit launcher t>") == first
    monkeypatch.setattr(cache_mod, "compile", no_compile, raising=False)
    assert cached_compile(src, "<tilejit launcher t>") == first  # the replaced entry holds code again


def test_generated_code_skips_the_cache_when_caching_is_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TILEJIT_CACHE", "0")
    cached_compile("x = 1\n", "<tilejit launcher t>")
    assert not (tmp_path / "cache").exists() or os.listdir(tmp_path / "cache") == []


def test_the_suite_never_caches_in_the_users_folder() -> None:
    """conftest points the whole run (and its subprocesses) at a temporary cache folder."""
    import tempfile

    directory = default_cache().directory
    assert directory != user_cache_dir()
    assert os.path.commonpath([os.path.realpath(directory), os.path.realpath(tempfile.gettempdir())]) == \
        os.path.realpath(tempfile.gettempdir())


# ------------------------------------------------------------------ the code that compiles tile kernels


def test_code_identity_follows_each_python_file_and_nothing_else(tmp_path: Path) -> None:
    """A kernel image made by other compiler code under the same version number is not used: the identity changes
    with any Python file's content or time under the folders, not with caches, other files or other folders."""
    from tilejit.api.loader import code_identity

    (tmp_path / "language" / "ir").mkdir(parents=True)
    (tmp_path / "backends").mkdir()
    lowering = tmp_path / "backends" / "lower.py"
    lowering.write_text("A = 1\n")
    (tmp_path / "language" / "ir" / "passes.py").write_text("B = 2\n")
    folders = ("language", "backends")
    first = code_identity(str(tmp_path), folders)
    assert len(first) == 16 and first == code_identity(str(tmp_path), folders)

    (tmp_path / "backends" / "__pycache__").mkdir()
    (tmp_path / "backends" / "__pycache__" / "lower.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "backends" / "notes.txt").write_text("x")
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "kernel.py").write_text("C = 3\n")
    assert code_identity(str(tmp_path), folders) == first

    lowering.write_text("A = 2\n")  # same size: its modification time tells
    os.utime(lowering, ns=(1, 1))
    changed = code_identity(str(tmp_path), folders)
    assert changed != first
    lowering.write_text("A = 22\n")
    os.utime(lowering, ns=(1, 1))
    assert code_identity(str(tmp_path), folders) not in (first, changed)
    assert code_identity(str(tmp_path), ("missing",)) == ""


def test_a_tile_kernels_cache_key_names_the_compiler_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package's own identity is part of every tile kernel's disk-cache key (and is computed from the installed
    folders: a 16-digit digest)."""
    from tilejit.api import loader
    from tilejit.api.compile import Artifact
    from tilejit.compiler.targets import Target
    from tilejit.language.ir.types import ArrayType, float32

    assert len(loader.compiler_identity()) == 16
    art = Artifact(None, "k", {"x": ArrayType(float32, 1)}, {}, Target(9, 0), None, {}, "cuda")
    key = loader._specialization_key(art, "fp")
    monkeypatch.setattr(loader, "compiler_identity", lambda: "another compiler")
    assert loader._specialization_key(art, "fp") != key
