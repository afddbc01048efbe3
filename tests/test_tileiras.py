"""The CUDA Tile IR toolchain: finding tileiras and the libnvvm/ptxas it uses, refusing mixed versions with the
wrong piece named, and running tileiras/tileirdisasm (the real ones from ``.ci-cache/tileir`` where present)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import tileir_root

from tilejit.bindings import loader
from tilejit.bindings import tileiras as tb
from tilejit.compiler import tileiras as tc
from tilejit.errors import CompileError, DriverVersionError, LibraryNotFoundError, TargetError

ROOT = Path(__file__).resolve().parent.parent
CUTILE = ROOT / ".ci-cache" / "cutile"

# An empty module (no functions) of bytecode version 13.5, as cuda-tile 1.7's writer makes it; tileiras 13.5
# compiles it to a CUBIN for every target.
EMPTY_13_5 = bytes.fromhex(
    "7f54696c654952000d050000820108cb00840808cbcbcbcb00cbcbcbcbcbcbcb831108cbcbcbcbcb00cbcbcb00cbcbcb01cbcbcb"
    "0000000000850e0402cbcbcb00000000010000000003810404cbcbcb00cbcbcb00"
)

_FAKE_HEAD = """#!/bin/sh
case "$1" in
  --version) echo "Cuda compilation tools, release {major}.{minor}, V{major}.{minor}.1"; exit 0;;
  --list-versions) printf '13.1\\n13.2\\n13.3\\n{major}.{minor}\\n'; exit 0;;
  --help) printf '  --gpu-name=<value>\\n    =sm_80 - SM 80\\n    =sm_90 - SM 90\\n    =sm_100 - SM 100\\n'; exit 0;;
esac
"""


def _program(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _fake_tool(path: Path, version: str, body: str = "exit 0\n") -> Path:
    """A shell stand-in for tileiras or ptxas that reports CUDA ``version`` and then runs ``body``."""
    major, minor = version.split(".")
    return _program(path, _FAKE_HEAD.format(major=major, minor=minor) + body)


def _fake_libnvvm(path: Path, version: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF padding Cuda compilation tools, release " + f"{version}, V{version}.9\x00".encode())
    return path


def _fake_toolchain(root: Path, tileiras: str = "13.5", nvvm: str | None = "13.5", ptxas: str | None = "13.5",
                    body: str = "exit 0\n") -> Path:
    """A pip-layout folder (``bin/``, ``lib/``) of stand-ins reporting the given versions; returns tileiras."""
    exe = _fake_tool(root / "bin" / "tileiras", tileiras, body)
    if nvvm is not None:
        _fake_libnvvm(root / "lib" / "libnvvm.so.4", nvvm)
    if ptxas is not None:
        _fake_tool(root / "bin" / "ptxas", ptxas)
    return exe


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No setting, no CUDA_HOME/CUDA_PATH, no pip folders, and a PATH of one empty folder (returned)."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    for var in ("TILEJIT_TILEIRAS", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(loader, "site_dirs", lambda: iter(()))
    monkeypatch.setattr(tb, "_found", {})  # discovery's cache does not key on the site folders
    return empty


def _copy_real(toolchain: tb.Toolchain, dest: Path) -> Path:
    """A pip-layout copy of the real pieces (hard links where the file system allows); returns its tileiras."""
    (dest / "bin").mkdir(parents=True)
    (dest / "lib").mkdir()
    for src, sub in ((toolchain.tileiras, "bin"), (toolchain.ptxas, "bin"), (toolchain.libnvvm, "lib")):
        target = dest / sub / os.path.basename(src)
        try:
            os.link(src, target)
        except OSError:
            shutil.copy2(src, target)
    return dest / "bin" / "tileiras"


# ----------------------------------------------------------------------------- discovery


def test_explicit_setting_finds_the_real_toolchain(tileir_toolchain: tb.Toolchain, clean_env: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tileir_root() / "nvidia" / "cu13" / "bin" / "tileiras"
    for value in (exe, exe.parent):  # the program, or its bin folder
        monkeypatch.setenv("TILEJIT_TILEIRAS", str(value))
        found = tb.find_toolchain()
        assert found.tileiras == os.path.realpath(exe)
        assert found.origin == "$TILEJIT_TILEIRAS"
        assert found.libnvvm == os.path.realpath(tileir_root() / "nvidia" / "cu13" / "lib" / "libnvvm.so.4")
        assert found.ptxas == os.path.realpath(exe.parent / "ptxas")
        assert found.tileirdisasm == os.path.realpath(exe.parent / "tileirdisasm")
        release = found.release
        assert tb.major_minor(found.ptxas_version) == release
        assert found.libnvvm_version is not None and tb.major_minor(found.libnvvm_version) == release
        assert release in found.bytecode_versions and (13, 1) in found.bytecode_versions
        assert {"sm_80", "sm_90", "sm_100"} <= set(found.targets)
        assert tb.unavailable() is None


def test_pip_folder_is_found_on_sys_path(tileir_toolchain: tb.Toolchain, clean_env: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tileir_root())
    monkeypatch.setattr(loader, "site_dirs", lambda: iter([root]))
    found = tb.find_toolchain()
    assert found.origin == "pip wheel nvidia-cuda-tileiras"
    assert found.tileiras == os.path.realpath(os.path.join(root, "nvidia", "cu13", "bin", "tileiras"))


def test_path_is_searched_and_pieces_found_beside_the_real_program(
    tileir_toolchain: tb.Toolchain, clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link on PATH: tileiras finds libnvvm and ptxas relative to its real location, and so does discovery."""
    linked = tmp_path / "links"
    linked.mkdir()
    (linked / "tileiras").symlink_to(tileir_toolchain.tileiras)
    monkeypatch.setenv("PATH", f"{clean_env}{os.pathsep}{linked}")
    found = tb.find_toolchain()
    assert found.origin == "PATH"
    assert found.tileiras == tileir_toolchain.tileiras
    assert found.libnvvm == tileir_toolchain.libnvvm


def test_cuda_home_bin_is_searched(clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_toolchain(tmp_path / "cuda")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    found = tb.find_toolchain()
    assert (found.tileiras, found.origin) == (str(exe), "$CUDA_HOME")
    assert found.libnvvm_version == "13.5.9" and found.ptxas_version == "13.5.1"
    assert found.bytecode_versions == ((13, 1), (13, 2), (13, 3), (13, 5))
    assert found.targets == ("sm_80", "sm_90", "sm_100")


def test_missing_tileiras_lists_every_place_tried(clean_env: Path) -> None:
    with pytest.raises(LibraryNotFoundError) as info:
        tb.find_toolchain()
    text = str(info.value)
    assert text.splitlines()[0] == "could not load tileiras (the CUDA Tile IR assembler); tried:"
    assert [a.where for a in info.value.attempts] == [
        "$TILEJIT_TILEIRAS", "pip wheels (nvidia/cu13/bin under site-packages and sys.path)", "$CUDA_HOME",
        "$CUDA_PATH", "PATH",
    ]
    assert "  - $CUDA_HOME: not set" in text and "  - PATH: no tileiras in any of its folders" in text
    assert 'pip install "tilejit[tileir]"' in text
    assert tb.unavailable() == text


def test_explicit_setting_is_the_only_place(clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_toolchain(tmp_path / "cuda")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))  # would be found, but the setting wins
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(tmp_path / "nowhere" / "tileiras"))
    with pytest.raises(LibraryNotFoundError) as info:
        tb.find_toolchain()
    assert [(a.where, a.why) for a in info.value.attempts] == [
        (f"{tmp_path / 'nowhere' / 'tileiras'} ($TILEJIT_TILEIRAS)", "file does not exist")
    ]


@pytest.mark.parametrize(("nvvm", "ptxas", "piece", "found"), [
    ("13.4", "13.5", "libnvvm", "13.4"),
    ("13.5", "13.0", "ptxas", "13.0"),
])
def test_mixed_versions_name_the_wrong_piece(clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             nvvm: str, ptxas: str, piece: str, found: str) -> None:
    exe = _fake_toolchain(tmp_path / "tc", nvvm=nvvm, ptxas=ptxas)
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(exe))
    with pytest.raises(LibraryNotFoundError) as info:
        tb.find_toolchain()
    path = tmp_path / "tc" / ("lib/libnvvm.so.4" if piece == "libnvvm" else "bin/ptxas")
    assert [(a.where, a.why) for a in info.value.attempts] == [
        (str(path), f"tileiras 13.5 needs {piece} 13.5; found {found} at {path}")
    ]
    assert "all pieces must be of one CUDA minor version" in str(info.value)


def test_a_system_ptxas_of_another_version_on_path_is_named(clean_env: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No ptxas beside tileiras: tileiras runs the first on PATH, so that one's version is checked."""
    exe = _fake_toolchain(tmp_path / "tc", ptxas=None)
    system = _fake_tool(tmp_path / "usr" / "bin" / "ptxas", "13.0")
    monkeypatch.setenv("PATH", f"{clean_env}{os.pathsep}{system.parent}")
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(exe))
    with pytest.raises(LibraryNotFoundError, match=r"tileiras 13\.5 needs ptxas 13\.5; found 13\.0 at .*usr/bin/ptxas"):
        tb.find_toolchain()


def test_missing_libnvvm_lists_where_tileiras_looks(clean_env: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_toolchain(tmp_path / "tc", nvvm=None)
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(exe))
    with pytest.raises(LibraryNotFoundError) as info:
        tb.find_toolchain()
    assert info.value.library == f"libnvvm for tileiras at {exe}"
    assert [a.where for a in info.value.attempts] == [
        str(tmp_path / "tc" / "nvvm" / "lib64" / "libnvvm.so"), str(tmp_path / "tc" / "lib" / "libnvvm.so.4")
    ]


def test_missing_ptxas_is_named(clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_toolchain(tmp_path / "tc", ptxas=None)
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(exe))
    with pytest.raises(LibraryNotFoundError) as info:
        tb.find_toolchain()
    assert info.value.library == f"ptxas for tileiras at {exe}"
    assert [(a.where, a.why) for a in info.value.attempts] == [
        (str(tmp_path / "tc" / "bin" / "ptxas"), "file does not exist"), ("PATH", "no ptxas in any of its folders")
    ]
    assert "nvidia-cuda-nvcc" in str(info.value)


def test_real_pieces_with_a_swapped_ptxas_are_refused(tileir_toolchain: tb.Toolchain, clean_env: Path,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _copy_real(tileir_toolchain, tmp_path / "tc")
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(exe))
    assert tb.find_toolchain().tileiras == str(exe)  # the copy alone is consistent
    monkeypatch.setattr(tb, "_found", {})
    (tmp_path / "tc" / "bin" / "ptxas").unlink()
    ptxas = _fake_tool(tmp_path / "tc" / "bin" / "ptxas", "13.4")
    want = "{}.{}".format(*tileir_toolchain.release)
    with pytest.raises(LibraryNotFoundError, match=f"tileiras {want} needs ptxas {want}; found 13.4 at {ptxas}"):
        tb.find_toolchain()


def _other_release_ptxas(release: tuple[int, int]) -> str:
    """A real ptxas of another CUDA minor version on this machine (a system toolkit's), or skip."""
    for path in [shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas", *sorted(map(str, Path("/usr/local").glob(
            "cuda-*/bin/ptxas")))]:
        if path and os.path.isfile(path):
            try:
                version = tb.program_version(path, "ptxas")
            except LibraryNotFoundError:
                continue
            if tb.major_minor(version) != release:
                return path
    pytest.skip("no ptxas of another CUDA version on this machine")


def test_a_real_ptxas_of_another_version_is_named_and_would_fail(
    tileir_toolchain: tb.Toolchain, clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measured failure: tileiras with a ptxas of another minor version exits 5 with only 'failed to compile
    Tile IR program' (even for an empty module); discovery names that ptxas instead."""
    other = _other_release_ptxas(tileir_toolchain.release)
    exe = _copy_real(tileir_toolchain, tmp_path / "tc")
    (tmp_path / "tc" / "bin" / "ptxas").unlink()
    (tmp_path / "tc" / "bin" / "ptxas").symlink_to(other)
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(exe))
    with pytest.raises(LibraryNotFoundError, match=r"needs ptxas \d+\.\d+; found \d+\.\d+ at "):
        tb.find_toolchain()
    (tmp_path / "m.tileirbc").write_bytes(EMPTY_13_5)
    args = [str(exe), "--gpu-name", "sm_90", "-o", str(tmp_path / "m.cubin"), str(tmp_path / "m.tileirbc")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert (done.returncode, done.stderr.strip()) == (5, "error: failed to compile Tile IR program")


def test_target_rule_by_release() -> None:
    listed = ("sm_80", "sm_89", "sm_90", "sm_100", "sm_120")
    assert tb.supported_targets((13, 1), listed) == ("sm_100", "sm_120")
    assert tb.supported_targets((13, 2), listed) == ("sm_80", "sm_89", "sm_100", "sm_120")
    assert tb.supported_targets((13, 3), listed) == listed
    old = tb.Toolchain("t", None, "p", "n", "13.2.1", "13.2.1", "13.2.1", ((13, 1), (13, 2)),
                       tb.supported_targets((13, 2), listed), "test")
    with pytest.raises(TargetError, match=r"tileiras 13\.2\.1 cannot compile for sm_90: Tile IR supports sm_90 "
                                          r"from CUDA 13\.3"):
        old.check_target("sm_90")
    with pytest.raises(TargetError, match=r"Tile IR does not support sm_75 \(it needs sm_80 or newer\)"):
        old.check_target("sm_75")
    with pytest.raises(TargetError, match=r"target 'hopper' is not of the form sm_XY"):
        old.check_target("hopper")


# ----------------------------------------------------------------------------- running


def test_empty_module_compiles_to_a_cubin(tileir_toolchain: tb.Toolchain) -> None:
    for target in ("sm_90", "sm_100"):
        cubin = tc.run_tileiras(EMPTY_13_5, target, toolchain=tileir_toolchain)
        assert cubin[:4] == b"\x7fELF"


@pytest.fixture(scope="module")
def kernel_bytecode(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """Bytecode of a small kernel (y = x + 1 over 16-element tiles), made by cuda-tile (test-only) in a
    separate process, on the CPU."""
    if not (CUTILE / "cuda" / "tile" / "__init__.py").is_file():
        pytest.skip(f"cuda-tile is not installed in {CUTILE} (.ci/run installs it)")
    out = tmp_path_factory.mktemp("cutile") / "add_one.tileirbc"
    script = f"""
import cuda.tile as ct
from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, export_kernel

@ct.kernel
def add_one(x, y):
    t = ct.load(x, index=(ct.bid(0),), shape=(16,))
    ct.store(y, index=(ct.bid(0),), tile=t + 1.0)

array = ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                        may_alias_internally=False)
sig = KernelSignature([array, array], CallingConvention.cutile_python_v1())
export_kernel(add_one, [sig], {str(out)!r}, gpu_code=None, output_format="tileir_bytecode", bytecode_version="13.4")
"""
    maker = out.parent / "make_add_one.py"  # a file: cuda-tile reads the kernel's source
    maker.write_text(script)
    env = dict(os.environ, PYTHONPATH=str(CUTILE), CUDA_TILE_CACHE_DIR=str(out.parent),
               XDG_CACHE_HOME=str(out.parent))
    done = subprocess.run([sys.executable, str(maker)], capture_output=True, text=True, env=env, timeout=300,
                          cwd=out.parent)
    if done.returncode != 0:
        pytest.skip(f"cuda-tile could not make bytecode on this machine:\n{done.stderr[-2000:]}")
    return out.read_bytes()


def test_kernel_bytecode_compiles_and_disassembles(tileir_toolchain: tb.Toolchain, kernel_bytecode: bytes) -> None:
    assert tc.bytecode_version(kernel_bytecode) == (13, 4)
    for target in ("sm_90", "sm_100"):
        cubin = tc.run_tileiras(kernel_bytecode, target, toolchain=tileir_toolchain, lineinfo=True)
        assert cubin[:4] == b"\x7fELF"
        assert b"add_one" in cubin
    text = tc.disassemble(kernel_bytecode, toolchain=tileir_toolchain)
    assert text.startswith("entry @add_one")
    assert "load_view_tko" in text and "addf" in text
    entry = text.split("(", 1)[0].removeprefix("entry @")
    assert b".text." + entry.encode() + b"\x00" in cubin  # the kernel's symbol, as a driver looks it up


@pytest.mark.gpu
@pytest.mark.own_backend(reason="loads a tileiras CUBIN itself")
def test_kernel_cubin_loads_on_this_gpu(tileir_toolchain: tb.Toolchain, kernel_bytecode: bytes) -> None:
    """The CUBIN tileiras makes for this device's target loads under this driver (r580+ needed), and its entry
    (named as tileirdisasm prints it) is a function of the module."""
    from tilejit.runtime.device import get_device, initialized_driver
    from tilejit.runtime.module import Module

    tc.check_driver(initialized_driver().version)
    dev = get_device()
    if dev.arch not in tileir_toolchain.targets:
        pytest.skip(f"tileiras {tileir_toolchain.tileiras_version} does not compile for {dev.arch}")
    entry = tc.disassemble(kernel_bytecode, toolchain=tileir_toolchain).split("(", 1)[0].removeprefix("entry @")
    cubin = tc.run_tileiras(kernel_bytecode, dev.arch, toolchain=tileir_toolchain)
    with Module.load(cubin, device=dev) as module:
        assert module.kind == "cubin"
        assert module.get_function(entry).max_threads > 0


def test_bad_bytecode_is_refused_before_running(tileir_toolchain: tb.Toolchain) -> None:
    with pytest.raises(ValueError, match=r"bytecode is not Tile IR bytecode: it must start with"):
        tc.run_tileiras(b"\x7fELF not bytecode", "sm_90", toolchain=tileir_toolchain)
    with pytest.raises(TypeError, match="bytecode must be bytes, got str"):
        tc.run_tileiras("text", "sm_90", toolchain=tileir_toolchain)  # type: ignore[arg-type]
    future = EMPTY_13_5[:8] + bytes([13, 99]) + EMPTY_13_5[10:]
    with pytest.raises(CompileError, match=r"the bytecode is version 13\.99, which tileiras .* does not read"):
        tc.run_tileiras(future, "sm_90", toolchain=tileir_toolchain)
    with pytest.raises(TargetError, match="sm_75"):
        tc.run_tileiras(EMPTY_13_5, "sm_75", toolchain=tileir_toolchain)


def test_tileiras_errors_carry_its_stderr(tileir_toolchain: tb.Toolchain) -> None:
    with pytest.raises(CompileError) as info:
        tc.run_tileiras(EMPTY_13_5[:40], "sm_90", toolchain=tileir_toolchain)
    assert "failed for sm_90 with exit code 3" in str(info.value)
    assert "section length 17 exceeds remaining data size 6" in info.value.log


def test_exit_code_5_is_explained_with_the_versions_found(tileir_toolchain: tb.Toolchain, tmp_path: Path) -> None:
    """A ptxas that fails (as one of another version does) leaves tileiras with only 'failed to compile Tile IR
    program' and exit code 5; the error lists the pieces."""
    exe = _copy_real(tileir_toolchain, tmp_path / "tc")
    (tmp_path / "tc" / "bin" / "ptxas").unlink()
    ptxas = _fake_tool(tmp_path / "tc" / "bin" / "ptxas", "{}.{}".format(*tileir_toolchain.release), "exit 1\n")
    broken = tileir_toolchain.replace(tileiras=str(exe), ptxas=str(ptxas), tileirdisasm=None)
    with pytest.raises(CompileError) as info:
        tc.run_tileiras(EMPTY_13_5, "sm_90", toolchain=broken)
    text = str(info.value)
    assert text.startswith("tileiras failed for sm_90 with exit code 5 and only 'failed to compile Tile IR program'")
    assert f"  ptxas {tileir_toolchain.ptxas_version} at {ptxas}" in text
    assert f"  libnvvm {tileir_toolchain.libnvvm_version} at {tileir_toolchain.libnvvm}" in text
    with pytest.raises(CompileError, match=r"no tileirdisasm beside tileiras"):
        tc.disassemble(EMPTY_13_5, toolchain=broken)


def _fake_record(exe: Path) -> tb.Toolchain:
    return tb.Toolchain(str(exe), None, str(exe.parent / "ptxas"), str(exe.parent / "libnvvm.so.4"), "13.5.1",
                        "13.5.1", "13.5.1", ((13, 5),), ("sm_90", "sm_100"), "test")


def test_tileiras_runs_with_its_bin_first_on_path_and_no_cuda_home(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_tool(tmp_path / "bin" / "tileiras", "13.5",
                     'echo "PATH=$PATH CUDA_HOME=${CUDA_HOME-unset} CUDA_PATH=${CUDA_PATH-unset}" >&2; exit 2\n')
    monkeypatch.setenv("CUDA_HOME", "/opt/other-cuda")
    monkeypatch.setenv("CUDA_PATH", "/opt/other-cuda")
    with pytest.raises(CompileError) as info:
        tc.run_tileiras(EMPTY_13_5, "sm_90", toolchain=_fake_record(exe))
    assert info.value.log.startswith(f"PATH={tmp_path / 'bin'}{os.pathsep}")
    assert "CUDA_HOME=unset CUDA_PATH=unset" in info.value.log


def test_located_error_points_at_the_user_source(tmp_path: Path) -> None:
    src = tmp_path / "kernel.py"
    src.write_text("def k(x):\n    t = load(x)\n    return t\n")
    exe = _fake_tool(tmp_path / "bin" / "tileiras", "13.5",
                     f"echo 'loc(\"{src}\":2:9): error: tile shape must be a power of two' >&2; exit 1\n")
    with pytest.raises(CompileError) as info:
        tc.run_tileiras(EMPTY_13_5, "sm_90", toolchain=_fake_record(exe))
    lines = str(info.value).splitlines()
    assert lines[:3] == [f"{src}:2:9: error: tile shape must be a power of two", "        t = load(x)",
                         "            ^"]


def test_timeout_stops_tileiras(tmp_path: Path) -> None:
    exe = _fake_tool(tmp_path / "bin" / "tileiras", "13.5", "exec sleep 60\n")
    with pytest.raises(CompileError, match=r"tileiras did not finish compiling for sm_90 within 0\.5 s"):
        tc.run_tileiras(EMPTY_13_5, "sm_90", toolchain=_fake_record(exe), timeout=0.5)


def test_driver_check_for_tile_ir_cubins() -> None:
    tc.check_driver(13000)
    tc.check_driver(13050)
    with pytest.raises(DriverVersionError) as info:
        tc.check_driver(12080)
    assert str(info.value) == (
        "Tile IR kernels are built for CUDA 13.0 (13000, driver r580) or newer; the driver supports CUDA 12.8 "
        "(12080): update the NVIDIA driver to r580 or newer, or use the CUDA C++ backend"
    )


# ----------------------------------------------------------------------------- packaging


def test_import_tilejit_loads_no_tile_ir_toolchain_code() -> None:
    code = ("import sys, tilejit; bad = [m for m in sys.modules if m.endswith('.tileiras')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_tileir_extra_pins_one_minor_version() -> None:
    tomllib: Any = pytest.importorskip("tomllib")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["tileir"]
    names = {req.split("==")[0]: req.split("==")[1] for req in extra}
    assert set(names) == {"nvidia-cuda-tileiras", "nvidia-nvvm", "nvidia-cuda-nvcc", "nvidia-nvjitlink"}
    assert len(set(names.values())) == 1 and next(iter(names.values())).endswith(".*")


def test_exit_5_of_a_working_toolchain_blames_the_kernel_not_the_pieces(tileir_toolchain: tb.Toolchain) -> None:
    """tileiras says only 'failed to compile Tile IR program' both when a piece of its toolchain fails and when it
    fails on a kernel (13.5 did on reshapes splitting a small scan's axis): a toolchain that compiles the empty module
    gets the message about the kernel; one that does not, the message about its pieces."""
    assert tc.run_tileiras(tc.EMPTY_MODULE, "sm_90", toolchain=tileir_toolchain)[:4] == b"\x7fELF"
    text = tc.explain_failure(5, "error: failed to compile Tile IR program\n", tileir_toolchain, "sm_90")
    assert "failed on this kernel for sm_90" in text and "while it compiles an empty module" in text
    assert "backend='cuda'" in text and "The pieces found" not in text



def test_a_tileiras_crash_is_called_a_tileiras_bug(tileir_toolchain: tb.Toolchain) -> None:
    """tileiras 13.5 also aborted (SIGABRT, no message) on some kernels: the error names the signal and the way
    out, not an empty 'exit code -6:'."""
    text = tc.explain_failure(-6, "", tileir_toolchain, "sm_80")
    assert "crashed (SIGABRT) on this kernel for sm_80" in text and "tileiras bug" in text
    assert "backend='cuda'" in text and "exit code" not in text
    assert "crashed (SIGSEGV)" in (t := tc.explain_failure(-11, "boom\n", tileir_toolchain, "sm_90")) and "boom" in t
