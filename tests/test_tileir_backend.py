"""The Tile IR backend (``tilejit.backends.tileir_backend``): the writer's bytecode through tileiras to a CUBIN
with its launch facts, the selection policy (auto uses it where the toolchain is; the fallback:
tests/test_backend_auto.py), the artifact's Tile IR stages, the disk cache and the command line; on a GPU,
launches against numpy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Toolkit

import tilejit as tj
from tilejit.api import loader
from tilejit.backends import base
from tilejit.backends.base import choose_backend, get_backend
from tilejit.backends.tileir_backend import (
    TileIRBackend,
    elf_sections,
    param_offsets,
    required_threads,
    tileiras_target,
)
from tilejit.compiler import tileiras as tileiras_runner
from tilejit.compiler.targets import parse_target
from tilejit.errors import TargetError, TileCompileError, TileIRUnsupportedError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from vector_add import vector_add  # noqa: E402

SIG = (tj.float32[:], tj.float32[:], tj.float32[:])
TILE = {"TILE": 1024}


@tj.kernel
def _scaled(x, out, s, h, b):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(128,))
    tj.store(out, index=(i,), tile=t * s + h + b)


@tj.kernel
def _bf16_add(h, idx, v):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.atomic_add(h, tj.load(idx, index=(i,), shape=(128,)), tj.load(v, index=(i,), shape=(128,)))


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with TILEJIT_BACKEND and TILEJIT_TILEIRAS unset and its own Tile IR backend (no
    toolchain discovery remembered from another test)."""
    monkeypatch.delenv("TILEJIT_BACKEND", raising=False)
    monkeypatch.delenv("TILEJIT_TILEIRAS", raising=False)
    saved = dict(base._LOADED)
    base._LOADED["tileir"] = TileIRBackend()
    yield
    base._LOADED.clear()
    base._LOADED.update(saved)


@pytest.fixture
def tileiras(tileir_toolchain: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The test toolchain, found by discovery through TILEJIT_TILEIRAS."""
    monkeypatch.setenv("TILEJIT_TILEIRAS", tileir_toolchain.tileiras)
    return tileir_toolchain


@pytest.fixture
def no_tileiras(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No Tile IR toolchain: TILEJIT_TILEIRAS names an empty folder."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(empty))
    return empty


# ------------------------------------------------------------------ compiles


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_vector_add_compiles_to_a_cubin_with_its_launch_facts(tileiras: Any, arch: str) -> None:
    art = tj.compile(vector_add, SIG, constants=TILE, target=arch, backend="tileir")
    assert art.backend == "tileir"
    image = art.image()
    assert image.image[:4] == b"\x7fELF" and image.kind == "cubin" and image.symbol == "vector_add"
    sections = elf_sections(image.image)
    assert ".text.vector_add" in sections and ".nv.info.vector_add" in sections
    assert b"vector_add\0" in sections[".strtab"]
    threads = required_threads(image.image, "vector_add")
    assert image.num_threads == threads[0] and threads[1:] == (1, 1)
    assert 32 <= image.num_threads <= 1024 and image.num_threads % 32 == 0
    assert image.shared_bytes == 0
    # 3 arrays of (pointer, shape, stride): nine 8-byte parameters back to back
    assert param_offsets(image.image, "vector_add") == [(8 * i, 8) for i in range(9)]
    assert art.cubin() == image.image
    assert image.cache_identity == get_backend("tileir").cache_identity()
    assert f"tileiras {tileiras.tileiras_version}" in image.cache_identity


def test_the_image_params_are_the_cuda_backends(tileiras: Any, toolkit: Toolkit,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_NVRTC", str(toolkit.nvrtc))
    sig = (tj.float32[:], tj.float32[:], tj.float32, tj.float16, tj.int8)
    tile = tj.compile(_scaled, sig, target="sm_90", backend="tileir").image()
    cuda = tj.compile(_scaled, sig, target="sm_90", backend="cuda").cuda_kernel()
    assert tile.params == cuda.params == (("x", ("array", "float32", 1)), ("out", ("array", "float32", 1)),
                                          ("s", ("scalar", "float32")), ("h", ("scalar", "float16")),
                                          ("b", ("scalar", "int8")))
    # the scalars after the arrays at their natural alignment, as tilejit's launcher packs them
    assert param_offsets(tile.image, "_scaled")[-3:] == [(48, 4), (52, 2), (54, 1)]


def test_sm_90a_compiles_as_sm_90_and_launches_try_the_plain_target(tileiras: Any) -> None:
    backend = get_backend("tileir")
    assert backend.launch_targets(parse_target("sm_90a")) == (parse_target("sm_90"),)
    assert backend.launch_targets(parse_target("sm_100f")) == (parse_target("sm_100"),)
    assert backend.launch_targets(parse_target("sm_80")) == (parse_target("sm_80"),)
    assert tileiras_target(parse_target("sm_90a")) == "sm_90"
    assert backend.available(parse_target("sm_90a")) is None
    assert "needs sm_80 or newer" in str(backend.available(parse_target("sm_75")))


def test_ptx_and_num_threads_are_refused(tileiras: Any) -> None:
    art = tj.compile(vector_add, SIG, constants=TILE, target="sm_90", backend="tileir")
    with pytest.raises(ValueError, match=r"^kind='ptx': the Tile IR backend makes CUBINs only"):
        art.ptx()
    k = tj.kernel(vector_add.func, num_threads=256)
    with pytest.raises(ValueError, match=r"num_threads=256: the Tile IR backend cannot choose the block size"):
        tj.compile(k, SIG, constants=TILE, target="sm_90", backend="tileir").image()


def test_auto_uses_tile_ir_with_the_toolchain_present(tileiras: Any) -> None:
    assert get_backend("tileir").available(parse_target("sm_90")) is None
    assert tj.compile(vector_add, SIG, constants=TILE, target="sm_90").backend == "tileir"
    why = "auto picks it: a Tile IR toolchain is found and sm_100 supports it"
    assert choose_backend("auto", parse_target("sm_100")) == (get_backend("tileir"), why)


def test_explicit_tileir_without_a_toolchain_names_what_is_missing(no_tileiras: Path) -> None:
    with pytest.raises(TargetError) as err:
        tj.compile(vector_add, SIG, constants=TILE, target="sm_90", backend="tileir")
    text = str(err.value)
    assert text.startswith("backend='tileir': tileir backend not available here: could not load tileiras (the "
                           "CUDA Tile IR assembler)")
    assert f"{no_tileiras / 'tileiras'} ($TILEJIT_TILEIRAS): file does not exist" in text
    assert "use backend='cuda'" in text


def test_an_op_the_writer_lacks_is_a_located_error(tileiras: Any) -> None:
    """A bfloat16 atomic_add for sm_80 (Tile IR has it from sm_90 on; tileiras would fail)."""
    art = tj.compile(_bf16_add, (tj.bfloat16[:], tj.int32[:], tj.bfloat16[:]), target="sm_80", backend="tileir")
    with pytest.raises(TileCompileError) as err:
        art.image()
    assert isinstance(err.value, TileIRUnsupportedError)  # auto would compile it with CUDA C++
    text = str(err.value)
    assert text.startswith(f"{__file__}:{_bf16_add.func.__code__.co_firstlineno + 3}:")
    assert ("cannot express 'atomic' (atomic_add on bfloat16 for sm_80; Tile IR has it from sm_90 on)" in text
            and 'backend="cuda"' in text)
    assert "tj.atomic_add(" in text and "^" in text


# ------------------------------------------------------------------ Tile IR stages without a toolchain


def test_the_artifact_gives_tile_ir_with_no_toolchain(no_tileiras: Path) -> None:
    art = tj.compile(vector_add, SIG, constants=TILE, target="sm_90")  # auto: CUDA C++
    assert art.backend == "cuda"
    newest = art.tileir_bytecode()
    assert newest[:8] == tileiras_runner.BYTECODE_MAGIC and tileiras_runner.bytecode_version(newest) == (13, 5)
    assert tileiras_runner.bytecode_version(art.tileir_bytecode("13.1")) == (13, 1)
    assert art.tileir_bytecode() is newest  # kept on the artifact
    text = art.tileir_text()
    assert text.startswith("cuda_tile.module @vector_add {") and "entry @vector_add(" in text
    with pytest.raises(ValueError, match=r"^version: Tile IR bytecode version '12.0' is not one of 13.1"):
        art.tileir_bytecode("12.0")


def test_the_elf_reader_refuses_what_is_not_a_cubin() -> None:
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF file"):
        elf_sections(b"\x7fTileIR\x00")
    with pytest.raises(ValueError, match="a damaged ELF file"):
        elf_sections(b"\x7fELF\x02\x01" + b"\xff" * 58)


# ------------------------------------------------------------------ disk cache


def test_the_cache_key_differs_by_backend_and_a_warm_hit_runs_no_tileiras(
        tileiras: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TILEJIT_CACHE", "1")
    fingerprint = "the kernel's source fingerprint"

    def artifact(backend: str) -> Any:
        return tj.compile(vector_add, SIG, constants=TILE, target="sm_90", backend=backend)

    assert loader._specialization_key(artifact("tileir"), fingerprint) != loader._specialization_key(
        artifact("cuda"), fingerprint)
    runs: list[str] = []
    real = tileiras_runner.run_tileiras

    def counted(bytecode: bytes, target: str, **kw: Any) -> bytes:
        runs.append(target)
        return real(bytecode, target, **kw)

    monkeypatch.setattr(tileiras_runner, "run_tileiras", counted)
    cold = loader._entry(artifact("tileir"), fingerprint, False)
    assert runs == ["sm_90"] and cold["image"][:4] == b"\x7fELF" and cold["num_threads"] > 0

    def refuse(bytecode: bytes, target: str, **kw: Any) -> bytes:
        raise AssertionError("a warm hit ran tileiras")

    monkeypatch.setattr(tileiras_runner, "run_tileiras", refuse)
    warm = loader._entry(artifact("tileir"), fingerprint, False)
    assert warm["image"] == cold["image"] and warm["num_threads"] == cold["num_threads"]
    assert warm["params"] == [["x", "array", "float32", 1], ["y", "array", "float32", 1],
                              ["out", "array", "float32", 1]]


def test_a_warm_key_with_backend_tileir_imports_neither_the_writer_nor_the_runner(tileiras: Any,
                                                                                   tmp_path: Path) -> None:
    """Choosing the Tile IR backend and naming its cache entry, as a warm launch does, find the toolchain but
    import no bytecode writer (its ``dataclasses``), no tileiras runner and no front end."""
    code = textwrap.dedent("""
        import sys
        from tilejit.api.compile import Artifact
        from tilejit.api.loader import _specialization_key
        from tilejit.backends.base import choose_backend
        from tilejit.compiler.targets import Target
        from tilejit.language.ir.types import ArrayType, float32
        backend, _ = choose_backend(None, Target(9, 0))
        target = backend.launch_targets(Target(9, 0))[0]
        art = Artifact(None, "k", {"x": ArrayType(float32, 1)}, {}, target, None, {}, backend.name)
        key = _specialization_key(art, "fp")
        heavy = ["tilejit.backends.tileir", "tilejit.backends.tileir.module", "tilejit.compiler.tileiras",
                 "tilejit.language.frontend.translate", "dataclasses", "json"]
        print(backend.name, target.sm, len(key), [m for m in heavy if m in sys.modules])
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    env.update({"TILEJIT_CACHE_DIR": str(tmp_path), "TILEJIT_BACKEND": "tileir", "TILEJIT_TILEIRAS": tileiras.tileiras})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["tileir", "sm_90", "64", "[]"]


def test_a_launch_on_a_driver_older_than_r580_is_refused_before_loading(tileiras: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.errors import DriverVersionError
    from tilejit.runtime import device, module

    class OldDriver:
        version = 12080

    def load(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the CUBIN was loaded")

    monkeypatch.setenv("TILEJIT_CACHE", "0")
    monkeypatch.setattr(device, "initialized_driver", lambda: OldDriver())
    monkeypatch.setattr(module.Module, "load", load)
    art = tj.compile(vector_add, SIG, constants=TILE, target="sm_90", backend="tileir")
    with pytest.raises(DriverVersionError, match=r"driver r580\) or newer; the driver supports CUDA 12.8"):
        loader.load_artifact(art, "fp")


# ------------------------------------------------------------------ command line


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    full.update({"PYTHONIOENCODING": "utf-8", **env})
    return subprocess.run([sys.executable, "-m", "tilejit", *args], env=full, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def _compile_args(tmp_path: Path, emit: str) -> tuple[str, ...]:
    return ("compile", str(ROOT / "examples" / "vector_add.py"), "--kernel", "vector_add", "--signature",
            "float32[:],float32[:],float32[:]", "-C", "TILE=1024", "--arch", "sm_90", "--emit", emit,
            "-o", str(tmp_path / "out"))


def test_cli_emits_tile_ir_text_bytecode_and_a_tileiras_cubin(tileiras: Any, tmp_path: Path) -> None:
    env = {"TILEJIT_TILEIRAS": tileiras.tileiras, "TILEJIT_CACHE_DIR": str(tmp_path / "cache")}
    r = _cli(*_compile_args(tmp_path, "tileir,tileirbc,cubin"), "--backend", "tileir", env=env)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["vector_add.vector_add.sm_90.cubin",
                                                     "vector_add.vector_add.sm_90.tileir",
                                                     "vector_add.vector_add.sm_90.tileirbc"]
    assert (out / "vector_add.vector_add.sm_90.tileir").read_text().startswith("cuda_tile.module @vector_add {")
    bytecode = (out / "vector_add.vector_add.sm_90.tileirbc").read_bytes()
    assert "entry @vector_add(" in tileiras_runner.disassemble(bytecode, toolchain=tileiras)
    cubin = (out / "vector_add.vector_add.sm_90.cubin").read_bytes()
    assert b"___NV_TILE_LAUNCH_META_DATA___" in elf_sections(cubin)[".strtab"]  # tileiras's CUBIN, not NVRTC's
    assert required_threads(cubin, "vector_add")[1:] == (1, 1)


def test_cli_tile_ir_emits_need_no_toolchain_and_cuda_emits_need_the_cuda_backend(tileiras: Any,
                                                                                   tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _cli(*_compile_args(tmp_path, "tileir,tileirbc"), env={"TILEJIT_TILEIRAS": str(empty)})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "vector_add.vector_add.sm_90.tileirbc").read_bytes()[:8] == b"\x7fTileIR\x00"
    env = {"TILEJIT_TILEIRAS": tileiras.tileiras}
    for emit in ("ptx", "cuda,cubin"):
        r = _cli(*_compile_args(tmp_path, emit), "--backend", "tileir", env=env)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        wrong = emit.split(",")[0]
        assert f"--emit {wrong}: vector_add compiles with the tileir backend, which makes CUBINs only" in r.stderr
        assert "pass --backend cuda" in r.stderr


# ------------------------------------------------------------------ on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1000, 1024, 4097, 100_003])
@pytest.mark.own_backend(reason="launches with backend='tileir' itself")
def test_vector_add_launches_with_the_tile_ir_backend(n: int, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """backend='tileir' launches tileiras's CUBIN with its own block size; sizes off the tile, poisoned
    outputs with a guard past the end (no stray writes), against numpy."""
    import numpy as np
    from conftest import _tileir_toolchain

    found = _tileir_toolchain()
    if isinstance(found, str):
        pytest.skip(found)
    monkeypatch.setenv("TILEJIT_TILEIRAS", found.tileiras)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    k = tj.kernel(vector_add.func, backend="tileir")
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    guard = 2048
    full = tj.asarray(np.full(n + guard, np.nan, np.float32))
    k[tj.cdiv(n, 1024)](tj.asarray(x), tj.asarray(y), full[:n], TILE=1024)
    got = full.numpy()
    assert np.array_equal(got[:n], x + y)
    assert np.isnan(got[n:]).all()
    (compiled,) = k._specs.values()
    assert compiled.artifact is not None and compiled.artifact.backend == "tileir"
    assert compiled.artifact.target.sm == tileiras_target(compiled.artifact.target)  # no a/f suffix
