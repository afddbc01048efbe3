"""Generic library discovery (tilejit.bindings.loader) and the nvJitLink binding."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from conftest import Toolkit

from tilejit.bindings import loader, nvjitlink
from tilejit.bindings.loader import Candidate, find_and_load, find_file
from tilejit.errors import Attempt, CompileError, CUDAError, LibraryNotFoundError

LIBM = "libm.so.6"

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux loader behaviour")


@pytest.fixture
def libm_path() -> str:
    path = loader.library_path(ctypes.CDLL(LIBM))
    assert path is not None and os.path.isfile(path)
    return path


@linux_only
def test_every_failure_is_listed_in_order(tmp_path: Path, libm_path: str) -> None:
    (tmp_path / "empty").mkdir()
    bogus = tmp_path / "libbogus.so.1"
    bogus.write_bytes(b"\x00" * 64)
    cands = [
        Candidate.nothing("$TILEJIT_X", "not set"),
        Candidate.file(str(tmp_path / "missing.so"), "$TILEJIT_X"),
        Candidate.folder(str(tmp_path / "nofolder"), ["libx.so.1"], "pip wheel"),
        Candidate.folder(str(tmp_path / "empty"), ["libx.so.1", "libx.so.2"], "conda"),
        Candidate.file(str(bogus), "explicit"),
        Candidate.file(libm_path, "explicit"),
        Candidate.soname("libtilejit-absent.so.7"),
    ]
    with pytest.raises(LibraryNotFoundError) as info:
        find_and_load("X", cands, "install X", reject=lambda lib, path: "wrong version: 1.0")
    err = info.value
    assert err.library == "X" and err.hint == "install X"
    whys = [(a.where, a.why) for a in err.attempts]
    assert whys[0] == ("$TILEJIT_X", "not set")
    assert whys[1] == (f"{tmp_path / 'missing.so'} ($TILEJIT_X)", "file does not exist")
    assert whys[2] == (f"{tmp_path / 'nofolder'} (pip wheel)", "folder does not exist")
    assert whys[3] == (f"{tmp_path / 'empty'} (conda)", "none of libx.so.1, libx.so.2 there")
    assert whys[4][0] == f"{bogus} (explicit)" and whys[4][1].startswith("dlopen failed: ")
    assert "libbogus.so.1" in whys[4][1]  # the dlerror text
    assert whys[5] == (f"{libm_path} (explicit)", "wrong version: 1.0")
    assert whys[6][0] == "libtilejit-absent.so.7 (system loader)" and "dlopen failed" in whys[6][1]
    assert len(whys) == 7
    text = str(err)
    assert text.startswith("could not load X; tried:\n  - $TILEJIT_X: not set\n") and text.endswith("install X")


@linux_only
def test_first_acceptable_candidate_wins(tmp_path: Path, libm_path: str) -> None:
    folder = tmp_path / "lib"
    folder.mkdir()
    shutil.copy(libm_path, folder / "libm-copy.so.6")
    calls: list[str] = []
    lib, path = find_and_load(
        "libm",
        [
            Candidate.file(str(tmp_path / "nope.so"), "x"),
            Candidate.folder(str(folder), ["a.so", "libm-copy.so.6"], "d"),
        ],
        "hint",
        before_load=calls.append,
    )
    assert path == str(folder / "libm-copy.so.6") and calls == [path]
    assert lib.cos is not None


@linux_only
def test_soname_reports_resolved_file_and_duplicates_are_tried_once(libm_path: str) -> None:
    _, path = find_and_load("libm", [Candidate.soname(LIBM)], "hint")
    assert os.path.realpath(path) == os.path.realpath(libm_path)
    seen: list[str] = []

    def reject(lib: ctypes.CDLL, p: str) -> str | None:
        seen.append(p)
        return "no"

    with pytest.raises(LibraryNotFoundError):
        find_and_load("libm", [Candidate.file(libm_path, "a"), Candidate.file(libm_path, "b")], "hint", reject=reject)
    assert seen == [libm_path]


@linux_only
def test_loaded_libraries_and_already_loaded(libm_path: str) -> None:
    ctypes.CDLL(LIBM)
    paths = loader.loaded_libraries()
    assert any(os.path.basename(p).startswith("libm") for p in paths)
    found = loader.already_loaded(r"libm(\.so\.6|-[\d.]+\.so)")
    assert found and all(c.kind == "file" and c.origin == "already loaded in this process" for c in found)
    assert loader.already_loaded(r"libtilejit-never-loaded\.so") == []


@linux_only
def test_loaded_libraries_walks_the_loader_list_like_proc_maps(libm_path: str) -> None:
    ctypes.CDLL(LIBM)
    walked = {os.path.realpath(p) for p in loader.loaded_libraries()}
    mapped = {os.path.realpath(p) for p in loader._mapped_libraries("")}
    assert walked, "the dynamic loader's list gave nothing"
    assert walked <= mapped  # every object the loader lists is mapped
    assert os.path.realpath(libm_path) in walked
    assert loader.loaded_libraries("libtilejit-never-loaded") == []
    handle = ctypes.CDLL(LIBM)
    assert loader.library_path(handle) is not None
    assert os.path.realpath(loader.library_path(handle) or "") == os.path.realpath(libm_path)


def test_site_dirs_cover_sys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every existing folder once: a symlink to a folder already listed, a file and a missing path are skipped."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "file").write_text("")
    for entry in ("missing", "file", "link", "real"):
        monkeypatch.syspath_prepend(str(tmp_path / entry))
    dirs = list(loader.site_dirs())
    assert str(real) in dirs
    assert not {str(tmp_path / n) for n in ("link", "file", "missing")} & set(dirs)
    assert len({os.path.realpath(d) for d in dirs}) == len(dirs)


def test_pip_conda_cuda_home_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "nvidia" / "cu13" / "lib"
    wheel.mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    cands = loader.pip_wheel_dirs(["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"], ["libnvrtc.so.13"], "NVRTC")
    assert os.path.join(str(tmp_path), "nvidia", "cu13", "lib") in [c.path for c in cands if c.kind == "dir"]
    monkeypatch.setattr(loader, "site_dirs", lambda: [])
    [none] = loader.pip_wheel_dirs(["nvidia/cu13/lib"], ["x"], "NVRTC")
    assert none.kind == "none" and "nvidia/cu13/lib" in none.path

    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    assert loader.conda_dirs(["x"]) == [Candidate.nothing("$CONDA_PREFIX", "not set")]
    monkeypatch.setenv("CONDA_PREFIX", str(tmp_path))
    assert loader.conda_dirs(["x"])[0].path == os.path.join(str(tmp_path), "lib")

    (tmp_path / "targets" / "x86_64-linux" / "lib").mkdir(parents=True)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    home = loader.cuda_home_dirs(["x"])
    if not loader.IS_WINDOWS:
        assert [c.path for c in home[:3]] == [
            os.path.join(str(tmp_path), "lib64"),
            os.path.join(str(tmp_path), "lib"),
            os.path.join(str(tmp_path), "targets", "x86_64-linux", "lib"),
        ]
    assert home[-1] == Candidate.nothing("$CUDA_PATH", "not set")


@linux_only
def test_find_file_does_not_load(tmp_path: Path) -> None:
    fake = tmp_path / "libfake.so.1"
    fake.write_bytes(b"not loadable")
    path, attempts = find_file(
        [Candidate.nothing("$X", "not set"), Candidate.folder(str(tmp_path), ["libfake.so.1"], "d")]
    )
    assert path == str(fake) and attempts[0].where == "$X"
    path, attempts = find_file([Candidate.soname("libtilejit-absent.so.3")])
    assert path is None and attempts[0].why == "not in the loader cache"
    assert loader.ldconfig_path_of(LIBM) is not None


@linux_only
def test_preload_global_matches_exact_names(tmp_path: Path, libm_path: str) -> None:
    shutil.copy(libm_path, tmp_path / "libnvrtc-builtins.so.99.1")
    (tmp_path / "libnvrtc-builtins.alt.so.99.1").write_bytes(b"x")
    loaded = loader.preload_global(str(tmp_path), r"libnvrtc-builtins\.so\.\d+\.\d+")
    assert loaded == [str(tmp_path / "libnvrtc-builtins.so.99.1")]
    assert str(tmp_path / "libnvrtc-builtins.so.99.1") in loader.loaded_libraries()


# ----------------------------------------------------------------------------- damaged library files


def _truncated(src: str | Path, dest: Path, size: int) -> Path:
    with open(src, "rb") as f:
        dest.write_bytes(f.read(size))
    return dest


@linux_only
def test_library_file_problem_finds_damaged_files(tmp_path: Path, libm_path: str) -> None:
    """dlopen maps a truncated library as it is, and the process dies of SIGBUS: files are checked first."""
    size = os.path.getsize(libm_path)
    assert loader.library_file_problem(libm_path) is None
    for cut in (64, 1000, size // 2, size - 1):
        why = loader.library_file_problem(str(_truncated(libm_path, tmp_path / f"libm-{cut}.so", cut)))
        assert why is not None and why.startswith("damaged library (truncated?): "), (cut, why)
    table_end, first_end = _program_header_ends(libm_path)
    assert loader.library_file_problem(str(_truncated(libm_path, tmp_path / "libm-a.so", table_end - 1))) == (
        f"damaged library (truncated?): its program headers end at byte {table_end}, past the file's end "
        f"({table_end - 1} bytes)"
    )
    assert loader.library_file_problem(str(_truncated(libm_path, tmp_path / "libm-b.so", table_end))) == (
        f"damaged library (truncated?): program header 0 reaches byte {first_end}, past the file's end "
        f"({table_end} bytes)"
    )
    # What dlopen reads rather than maps, it refuses itself (with its own message): no check needed.
    data = bytearray(Path(libm_path).read_bytes())
    data[4] = 1  # ELFCLASS32
    (tmp_path / "lib32.so").write_bytes(data)
    (tmp_path / "script.so").write_text("GROUP ( /lib/libc.so.6 )\n")
    for name in ("lib32.so", "script.so", "libm-0.so", "libm-3.so", "libm-40.so"):
        if name.startswith("libm-"):
            _truncated(libm_path, tmp_path / name, int(name[5:-3]))
        assert loader.library_file_problem(str(tmp_path / name)) is None, name
        with pytest.raises(OSError):
            loader.dlopen(str(tmp_path / name))
    os.mkfifo(tmp_path / "fifo.so")
    assert loader.library_file_problem(str(tmp_path / "fifo.so")) == "not a regular file"  # and no hang


def _program_header_ends(path: str) -> tuple[int, int]:
    """Where an ELF64 file's program header table ends, and where its first entry's file span ends (read
    here with struct, independently of the loader)."""
    import struct

    data = Path(path).read_bytes()
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    _, _, offset, _, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff)
    return phoff + phentsize * phnum, int(offset + filesz)


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh Python (a crash there is a return code, not the end of this test run)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@linux_only
def test_a_damaged_candidate_is_an_attempt_and_discovery_goes_on(tmp_path: Path, libm_path: str) -> None:
    bad = _truncated(libm_path, tmp_path / "libm-cut.so.6", os.path.getsize(libm_path) // 2)
    folder = tmp_path / "ldpath"
    folder.mkdir()
    _truncated(libm_path, folder / "libtilejit-cut.so.1", 5000)
    r = _run(
        f"""
        from tilejit.bindings.loader import Candidate, find_and_load
        from tilejit.errors import LibraryNotFoundError
        lib, path = find_and_load("X", [Candidate.file({str(bad)!r}, "explicit"), Candidate.file({libm_path!r}, "x")],
                                  "hint")
        print("loaded", path)
        try:
            find_and_load("X", [Candidate.file({str(bad)!r}, "explicit"), Candidate.soname("libtilejit-cut.so.1")],
                          "hint")
        except LibraryNotFoundError as exc:
            print(exc)
        """,
        env={"LD_LIBRARY_PATH": str(folder)},
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"loaded {libm_path}"
    assert lines[2].startswith(f"  - {bad} (explicit): damaged library (truncated?): program header ")
    assert lines[3].startswith(f"  - libtilejit-cut.so.1 (system loader): {folder / 'libtilejit-cut.so.1'} (found "
                               "through LD_LIBRARY_PATH): damaged library (truncated?)")


@linux_only
def test_a_truncated_nvrtc_is_a_clean_error(toolkit: Toolkit, tmp_path: Path) -> None:
    """A truncated NVRTC made compiles (and doctor) die of SIGBUS."""
    for cut in (5000, 10_000_000):
        bad = _truncated(toolkit.nvrtc, tmp_path / toolkit.nvrtc.name, cut)
        r = _run(
            """
            import sys
            from tilejit.compiler.nvrtc import compile_cuda
            from tilejit.errors import LibraryNotFoundError
            try:
                compile_cuda('__global__ void k() {}', target="sm_80", cache=False)
            except LibraryNotFoundError as exc:
                sys.exit(str(exc))
            """,
            env={"TILEJIT_NVRTC": str(bad)},
        )
        assert r.returncode == 1, (cut, r.returncode, r.stderr)
        assert f"  - {bad} ($TILEJIT_NVRTC): damaged library (truncated?): program header " in r.stderr
        assert "Traceback" not in r.stderr


@linux_only
def test_a_truncated_nvrtc_builtins_is_a_clean_error(toolkit: Toolkit, tmp_path: Path) -> None:
    """NVRTC loads libnvrtc-builtins from its own folder: a truncated one crashed the load."""
    (builtins,) = toolkit.nvrtc.parent.glob("libnvrtc-builtins.so.*.*")
    (tmp_path / toolkit.nvrtc.name).symlink_to(toolkit.nvrtc)
    cut = _truncated(builtins, tmp_path / builtins.name, 3_000_000)
    r = _run(
        f"""
        import sys
        from tilejit.bindings.nvrtc import load_nvrtc
        from tilejit.errors import LibraryNotFoundError
        try:
            load_nvrtc({str(tmp_path / toolkit.nvrtc.name)!r})
        except LibraryNotFoundError as exc:
            sys.exit(str(exc))
        """
    )
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert f"a library it needs is damaged: {cut}: damaged library (truncated?)" in r.stderr


# ----------------------------------------------------------------------------- nvJitLink


def _nvjitlink_libs() -> list[Path]:
    """nvJitLink libraries in the test toolkits (pip-installed nvidia-nvjitlink*), if any."""
    from conftest import toolkits

    found: list[Path] = []
    for tk in toolkits():
        found += sorted(tk.root.glob("nvidia/*/lib/libnvJitLink.so.*"))
    extra = os.environ.get("TILEJIT_TEST_NVJITLINK")
    if extra:
        found += [Path(p) for p in extra.split(os.pathsep) if p]
    return found


def test_nvjitlink_rejects_other_libraries(libm_path: str) -> None:
    with pytest.raises(LibraryNotFoundError, match="not nvJitLink"):
        nvjitlink.load_nvjitlink(libm_path)
    with pytest.raises(LibraryNotFoundError, match="file does not exist"):
        nvjitlink.load_nvjitlink("/nonexistent/libnvJitLink.so.13")
    assert nvjitlink.error_name(4) == "NVJITLINK_ERROR_PTX_COMPILE"
    assert nvjitlink.error_name(77) == "NVJITLINK_ERROR_77"


def test_nvjitlink_explicit_path_is_exclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_NVJITLINK", "/nonexistent/libnvJitLink.so.13")
    with pytest.raises(LibraryNotFoundError) as info:
        nvjitlink.find_nvjitlink()
    text = str(info.value)
    assert "/nonexistent/libnvJitLink.so.13 ($TILEJIT_NVJITLINK): file does not exist" in text
    assert "nvidia/nvjitlink/lib" not in text


def test_nvjitlink_find_lists_places(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILEJIT_NVJITLINK", raising=False)
    monkeypatch.setattr(loader, "site_dirs", lambda: [])
    monkeypatch.setattr(loader, "already_loaded", lambda pattern, origin="", needle="": [])
    monkeypatch.setattr(loader, "ldconfig_path_of", lambda soname: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    with pytest.raises(LibraryNotFoundError) as info:
        nvjitlink.find_nvjitlink()
    text = str(info.value)
    places = [
        "$TILEJIT_NVJITLINK: not set",
        "nvidia/nvjitlink/lib",
        "$CONDA_PREFIX: not set",
        "$CUDA_HOME: not set",
        "libnvJitLink.so.12",
        "TILEJIT_NVJITLINK",
    ]
    for place in places:
        assert place in text, place


@pytest.mark.parametrize("lib", _nvjitlink_libs() or [None], ids=lambda p: p.name if p else "none")
def test_nvjitlink_links_ptx(lib: Path | None) -> None:
    if lib is None:
        pytest.skip("no nvJitLink wheel among the test toolkits (set TILEJIT_TEST_NVJITLINK)")
    j = nvjitlink.load_nvjitlink(str(lib))
    major = int(lib.name.rsplit(".so.", 1)[1].split(".")[0])
    assert j.version[0] == major
    assert j.symbols["nvJitLinkCreate"].startswith(f"__nvJitLinkCreate_{major}_")
    ptx = (
        f".version {'8.0' if major == 12 else '9.0'}\n.target sm_90\n.address_size 64\n"
        ".visible .entry k(.param .u64 p) { ret; }\n"
    ).encode()
    handle = ctypes.c_void_p()
    opts = (ctypes.c_char_p * 1)(b"-arch=sm_90")
    j.check(j.nvJitLinkCreate(ctypes.byref(handle), 1, opts), "nvJitLinkCreate")
    j.check(j.nvJitLinkAddData(handle, nvjitlink.NVJITLINK_INPUT_PTX, ptx, len(ptx), b"k.ptx"), "nvJitLinkAddData")
    j.check(j.nvJitLinkComplete(handle), "nvJitLinkComplete")
    size = ctypes.c_size_t()
    j.check(j.nvJitLinkGetLinkedCubinSize(handle, ctypes.byref(size)), "size")
    cubin = ctypes.create_string_buffer(size.value)
    j.check(j.nvJitLinkGetLinkedCubin(handle, cubin), "cubin")
    assert cubin.raw[:4] == b"\x7fELF"
    j.check(j.nvJitLinkDestroy(ctypes.byref(handle)), "nvJitLinkDestroy")
    # A broken input reports the library's error name and log.
    j.check(j.nvJitLinkCreate(ctypes.byref(handle), 1, opts), "nvJitLinkCreate")
    bad = b".version 8.0\n.target sm_90\n this is not ptx"
    status = j.nvJitLinkAddData(handle, nvjitlink.NVJITLINK_INPUT_PTX, bad, len(bad), b"bad.ptx")
    if status == 0:
        status = j.nvJitLinkComplete(handle)
    with pytest.raises(CompileError, match="nvJitLink: NVJITLINK_ERROR_"):
        j.check(status, "nvJitLink")
    j.nvJitLinkDestroy(ctypes.byref(handle))


def test_toolkit_identity_names_the_file_discovery_would_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache key names NVRTC by its file: path, size and modification time; another file, another name."""
    first, second = tmp_path / "a" / "libnvrtc.so.13", tmp_path / "b" / "libnvrtc.so.13"
    for path, size in ((first, 10), (second, 20)):
        path.parent.mkdir()
        path.write_bytes(b"\0" * size)
    monkeypatch.setattr(loader, "_loaded_files", {})  # as in a process that has not loaded NVRTC
    monkeypatch.setenv("TILEJIT_NVRTC", str(first))
    a = loader.toolkit_identity(loader.NVRTC_LIBRARY)
    assert a.startswith(f"{first.resolve()}|10|")
    monkeypatch.setenv("TILEJIT_NVRTC", str(second))
    b = loader.toolkit_identity(loader.NVRTC_LIBRARY)
    assert b.startswith(f"{second.resolve()}|20|") and b != a
    monkeypatch.setenv("TILEJIT_NVRTC", str(tmp_path / "missing.so"))
    with pytest.raises(LibraryNotFoundError, match=r"missing\.so"):
        loader.toolkit_identity(loader.NVRTC_LIBRARY)


def test_toolkit_identity_names_the_file_this_process_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a library is loaded, its file names it, whatever discovery would find now."""
    loaded, found = tmp_path / "loaded.so", tmp_path / "found.so"
    loaded.write_bytes(b"\0" * 7)
    found.write_bytes(b"\0" * 9)
    monkeypatch.setenv("TILEJIT_NVRTC", str(found))
    monkeypatch.setattr(loader, "_loaded_files", {})
    assert loader.toolkit_identity(loader.NVRTC_LIBRARY).startswith(f"{found.resolve()}|9|")
    loader.note_loaded(loader.NVRTC_LIBRARY, str(loaded))
    assert loader.toolkit_identity(loader.NVRTC_LIBRARY).startswith(f"{loaded.resolve()}|7|")


# ----------------------------------------------------------------------------- explicit settings


def test_bare_file_name_setting_names_the_file_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dlopen of a name without a slash searches the loader path, not the current folder that was checked:
    the setting names a file, so it is made absolute (found, loaded and named in a cache key alike)."""
    (tmp_path / "libnvrtc.so.12").write_bytes(b"\0" * 5)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(loader, "_loaded_files", {})
    monkeypatch.setenv("TILEJIT_NVRTC", "libnvrtc.so.12")
    [cand] = loader.toolkit_candidates(loader.NVRTC_LIBRARY)
    assert (cand.kind, cand.path) == ("file", str(tmp_path / "libnvrtc.so.12"))
    assert loader.find_toolkit_file(loader.NVRTC_LIBRARY) == str(tmp_path / "libnvrtc.so.12")
    assert loader.toolkit_identity(loader.NVRTC_LIBRARY).startswith(f"{tmp_path.resolve() / 'libnvrtc.so.12'}|5|")
    with pytest.raises(LibraryNotFoundError) as info:  # the file named, not a system NVRTC of that name
        find_and_load("NVRTC", [cand], "hint")
    assert str(tmp_path / "libnvrtc.so.12") in str(info.value) and "dlopen failed" in str(info.value)
    monkeypatch.setenv("TILEJIT_NVJITLINK", "libnvJitLink.so.13")  # not in this folder
    with pytest.raises(LibraryNotFoundError) as info:
        nvjitlink.load_nvjitlink("libnvJitLink.so.13")
    assert f"{tmp_path / 'libnvJitLink.so.13'} (explicit path): file does not exist" in str(info.value)
    with pytest.raises(LibraryNotFoundError) as info:
        nvjitlink.find_nvjitlink()
    assert f"{tmp_path / 'libnvJitLink.so.13'} ($TILEJIT_NVJITLINK): file does not exist" in str(info.value)


@pytest.mark.parametrize("kind", ["dir", "devnull"])
def test_setting_naming_a_folder_or_device_says_so(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path) if kind == "dir" else "/dev/null"
    if not os.path.exists(path):
        pytest.skip(f"no {path} here")
    why = "is a folder, not a file" if kind == "dir" else "not a regular file"
    monkeypatch.setenv("TILEJIT_NVJITLINK", path)
    for attempt in (nvjitlink.find_nvjitlink, nvjitlink.nvjitlink):  # found without loading, and loaded
        monkeypatch.setattr(nvjitlink, "_nvjitlink", None)
        with pytest.raises(LibraryNotFoundError) as info:
            attempt()
        text = str(info.value)
        assert f"  - {path} ($TILEJIT_NVJITLINK): {why}: $TILEJIT_NVJITLINK must name the library file itself" in text
        assert "does not exist" not in text
    with pytest.raises(LibraryNotFoundError, match=f"{why}: the path must name the library file itself"):
        nvjitlink.load_nvjitlink(path)


@pytest.mark.parametrize("value", ["", " \t "], ids=["empty", "blank"])
def test_empty_setting_is_listed_as_set_but_ignored(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_NVRTC", value)
    monkeypatch.setenv("CONDA_PREFIX", "")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    first = next(iter(loader.toolkit_candidates(loader.NVRTC_LIBRARY)))
    assert first == Candidate.nothing("$TILEJIT_NVRTC", "set but empty: ignored")
    assert loader.conda_dirs(["x"]) == [Candidate.nothing("$CONDA_PREFIX", "set but empty: ignored")]
    assert loader.cuda_home_dirs(["x"])[0] == Candidate.nothing("$CUDA_HOME", "not set")


# ----------------------------------------------------------------------------- errors across processes


def test_loader_errors_pickle_with_their_attributes() -> None:
    err = LibraryNotFoundError("NVRTC", [Attempt("/x/libnvrtc.so.12 ($TILEJIT_NVRTC)", "file does not exist")], "hint")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is LibraryNotFoundError and str(back) == str(err) and back.args == err.args
    assert (back.library, back.attempts, back.hint) == (err.library, err.attempts, err.hint)
    cuda = CUDAError("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "while allocating 1 GiB")
    cuda.add_note("a note")
    back_cuda = pickle.loads(pickle.dumps(cuda))
    assert type(back_cuda) is CUDAError and str(back_cuda) == str(cuda) and back_cuda.args == cuda.args
    assert (back_cuda.function, back_cuda.code, back_cuda.name) == ("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY")
    assert (back_cuda.message, back_cuda.detail) == ("out of memory", "while allocating 1 GiB")
    assert back_cuda.__notes__ == ["a note"]
    compile_error = pickle.loads(pickle.dumps(CompileError("nvJitLinkComplete: failed", "the log")))
    assert (str(compile_error), compile_error.log) == ("nvJitLinkComplete: failed", "the log")


def test_library_error_in_a_worker_process_reaches_the_caller() -> None:
    """Not BrokenProcessPool: the worker's exception is pickled back to the parent."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        future = pool.submit(nvjitlink.load_nvjitlink, "/nonexistent/libnvJitLink.so.13")
        with pytest.raises(LibraryNotFoundError) as info:
            future.result(timeout=120)
    assert info.value.library == "nvJitLink"
    assert info.value.attempts == [Attempt("/nonexistent/libnvJitLink.so.13 (explicit path)", "file does not exist")]


# ----------------------------------------------------------------------------- nvJitLink's version


def _stand_in_nvjitlink(major: int, minor: int, *, with_version: bool) -> str:
    """C source of a stand-in nvJitLink: every function tilejit binds, as plain and versioned exports
    (``__<name>_<major>_0`` and ``_<major>_<minor>``), and ``nvJitLinkVersion`` (12.3+) when asked."""
    lines = ["typedef unsigned int uint;"]
    for entry in nvjitlink.ENTRIES:
        if entry.name == "nvJitLinkVersion":
            continue
        for symbol in {entry.name, f"__{entry.name}_{major}_0", f"__{entry.name}_{major}_{minor}"}:
            lines.append(f"int {symbol}(void) {{ return 0; }}")
    if with_version:
        lines.append(f"int nvJitLinkVersion(uint* ma, uint* mi) {{ *ma = {major}; *mi = {minor}; return 0; }}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def nvjitlink_stubs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Stand-in nvJitLinks, each built under a neutral name (so it never looks like an nvJitLink already
    loaded to a later test) and copied under the CUDA 13 file name in a folder of its own."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in nvJitLink")
    out = tmp_path_factory.mktemp("nvjitlink_stub")
    built: dict[str, Path] = {}
    for label, major, minor, with_version in (("12.9", 12, 9, True), ("13.5", 13, 5, True), ("12.2", 12, 2, False)):
        source = out / f"jl_{label}.c"
        source.write_text(_stand_in_nvjitlink(major, minor, with_version=with_version))
        lib = out / f"libjl-stand-in-{label}.so"
        subprocess.run([cc, "-shared", "-fPIC", str(source), "-o", str(lib)], check=True, capture_output=True)
        built[label] = lib
    return built


def test_nvjitlink_file_name_major_must_match_its_version(nvjitlink_stubs: dict[str, Path]) -> None:
    as_13 = "/somewhere/libnvJitLink.so.13"
    lib = ctypes.CDLL(str(nvjitlink_stubs["12.9"]))
    assert nvjitlink._reject(lib, as_13) == "wrong version: file name says CUDA 13 but nvJitLinkVersion reports 12.9"
    assert nvjitlink._reject(lib, "/somewhere/libnvJitLink.so.12.9.86") is None
    assert nvjitlink._reject(lib, "/somewhere/libnvJitLink.so") is None  # no major in the name: nothing to check
    assert nvjitlink._reject(ctypes.CDLL(str(nvjitlink_stubs["13.5"])), as_13) is None
    old = ctypes.CDLL(str(nvjitlink_stubs["12.2"]))  # before 12.3: no nvJitLinkVersion, the exports name the major
    assert nvjitlink._reject(old, as_13) == (
        "wrong version: file name says CUDA 13 but the library exports __nvJitLinkCreate_12_*"
    )
    assert nvjitlink._reject(old, "/somewhere/libnvJitLink.so.12") is None


def _run_isolated(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter: a library named libnvJitLink.so.* loaded here would stay mapped
    and be found as "already loaded" by later tests."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@linux_only
def test_nvjitlink_wrong_major_is_rejected_and_the_loaded_file_is_noted(
    nvjitlink_stubs: dict[str, Path], tmp_path: Path
) -> None:
    for label in ("12.9", "13.5"):
        (tmp_path / label).mkdir()
        shutil.copy(nvjitlink_stubs[label], tmp_path / label / "libnvJitLink.so.13")
    wrong, right = tmp_path / "12.9" / "libnvJitLink.so.13", tmp_path / "13.5" / "libnvJitLink.so.13"
    code = f"""
        from tilejit.bindings import loader, nvjitlink
        from tilejit.errors import LibraryNotFoundError
        try:
            nvjitlink.load_nvjitlink({str(wrong)!r})
        except LibraryNotFoundError as e:
            print("REJECTED", e.attempts[0].where, "|", e.attempts[0].why)
        j = nvjitlink.nvjitlink()
        print("LOADED", j.path, j.version)
        print("NOTED", loader._loaded_files.get("nvJitLink"))
        print("IDENTITY", loader.toolkit_identity(loader.NVJITLINK_LIBRARY))
    """
    out = _run_isolated(code, {"TILEJIT_NVJITLINK": str(right)})
    assert out.returncode == 0, out.stderr
    assert (
        f"REJECTED {wrong} (explicit path) | wrong version: file name says CUDA 13 but nvJitLinkVersion reports 12.9"
        in out.stdout
    )
    assert f"LOADED {right} (13, 5)" in out.stdout
    assert f"NOTED {right}\n" in out.stdout
    assert f"IDENTITY {right.resolve()}|" in out.stdout
