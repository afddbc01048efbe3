"""``backend="auto"`` (issue 17): Tile IR where a consistent toolchain compiles for the target, else CUDA C++; a
kernel the Tile IR backend refuses (what Tile IR cannot express, a tileiras failure) compiles with CUDA C++ under
auto, in ``tj.compile`` and on the launch path, and is an error under ``backend="tileir"``; the disk cache keeps
the two backends' entries apart; the toolchain probe's answers are memoized on disk; ``cuda`` asks nothing of
Tile IR; doctor and the command line say and do the same."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import toolkits

import tilejit as tj
from tilejit.api import loader
from tilejit.api.compile import Artifact, specialize
from tilejit.backends import base
from tilejit.backends.base import choose_backend, get_backend, wants_launch_facts
from tilejit.backends.tileir_backend import TileIRBackend, probe_memo_key
from tilejit.bindings import tileiras as bindings
from tilejit.compiler.cache import MAGIC, DiskCache, default_cache
from tilejit.compiler.targets import parse_target
from tilejit.errors import (
    CompileError,
    DriverVersionError,
    TargetError,
    TileCompileError,
    TileirasError,
    TileIRUnsupportedError,
)

ROOT = Path(__file__).resolve().parent.parent
F32 = tj.float32
SIG = (F32[:], F32[:], F32[:])
LOOP_SIG = (F32[:], F32[:], tj.int32)
TILE = {"TILE": 128}


@tj.kernel
def _add(x, y, out, TILE: tj.Constant[int]):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) + tj.load(y, index=(i,), shape=(TILE,)))


@tj.kernel
def _return_in_loop(x, out, n, TILE: tj.Constant[int]):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    for k in range(n):
        if k == 3:
            return  # Tile IR's return may not leave a loop body
        t = t + 1.0
        tj.store(out, index=(i,), tile=t)


@tj.kernel
def _misspelled(x, y, out, TILE: tj.Constant[int]):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.lod(x, index=(i,), shape=(TILE,)))


def _line_of(text: str) -> int:
    """The line of this file that holds ``text``."""
    return next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if text in line)


@pytest.fixture(autouse=True)
def _auto(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test leaves the backend to auto (conftest pins CPU tests to cuda), caches in a folder of its own, and
    has its own Tile IR backend (no toolchain remembered from another test)."""
    monkeypatch.delenv("TILEJIT_BACKEND", raising=False)
    monkeypatch.delenv("TILEJIT_CACHE", raising=False)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(base._LOADED, "tileir", TileIRBackend())


@pytest.fixture
def tileiras(tileir_toolchain: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The test toolchain, found by discovery through TILEJIT_TILEIRAS."""
    monkeypatch.setenv("TILEJIT_TILEIRAS", tileir_toolchain.tileiras)
    return tileir_toolchain


@pytest.fixture
def nvrtc(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The newest test NVRTC (it compiles for sm_90a), for the CUDA C++ a fallback makes."""
    found = toolkits()
    if not found:
        pytest.skip("no CUDA toolkits in TILEJIT_TEST_CUDA_ROOTS or .ci-cache/")
    monkeypatch.setenv("TILEJIT_NVRTC", str(found[0].nvrtc))
    return found[0].nvrtc


@pytest.fixture
def wrapped_toolchain(tileir_toolchain: Any, tmp_path: Path) -> Callable[[str], Path]:
    """``make(script)``: a toolchain folder whose ``bin/tileiras`` is a shell script of the test toolchain's
    tileiras (``$REAL``) and ``$LOG``, beside links to the test toolchain's ptxas and libnvvm; the script's path."""

    def make(script: str) -> Path:
        root = tmp_path / "toolchain"
        (root / "bin").mkdir(parents=True)
        (root / "lib").mkdir()
        (root / "bin" / "ptxas").symlink_to(tileir_toolchain.ptxas)
        (root / "lib" / "libnvvm.so.4").symlink_to(tileir_toolchain.libnvvm)
        exe = root / "bin" / "tileiras"
        body = script.replace("$REAL", tileir_toolchain.tileiras).replace("$LOG", str(tmp_path / "runs.log"))
        exe.write_text("#!/bin/sh\n" + textwrap.dedent(body))
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
        return exe

    return make


def _info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tilejit" and r.levelno == logging.INFO]


# ------------------------------------------------------------------ the rule


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a", "sm_100"])
def test_auto_picks_tile_ir_where_a_toolchain_compiles_for_the_target(tileiras: Any, arch: str) -> None:
    target = parse_target(arch)
    backend, why = choose_backend("auto", target)
    assert backend is get_backend("tileir") and choose_backend(None, target)[0] is backend
    assert why == f"auto picks it: a Tile IR toolchain is found and {target.sm} supports it"
    assert wants_launch_facts(None) and wants_launch_facts("auto")
    # tileiras chooses a Tile IR kernel's block size itself: a kernel that sets one stays CUDA C++
    assert choose_backend(None, target, num_threads=256) == (
        get_backend("cuda"), "auto picks it: the kernel sets num_threads=256, and tileiras chooses a Tile IR "
                             "kernel's block size itself")
    assert not wants_launch_facts(None, num_threads=256)
    assert tj.compile(tj.kernel(_add.func, num_threads=256), SIG, constants=TILE, target=arch).backend == "cuda"
    assert tj.backend_for(target=arch) == tj.backend_for("auto", arch) == "tileir"
    assert tj.backend_for("cuda", arch) == "cuda" and tj.backend_for(target=arch, num_threads=256) == "cuda"


@pytest.mark.parametrize("arch", ["sm_70", "sm_75"])
def test_auto_picks_cuda_for_a_target_tile_ir_lacks_and_says_why(tileiras: Any, arch: str) -> None:
    backend, why = choose_backend(None, parse_target(arch))
    assert backend is get_backend("cuda")
    assert why.startswith(f"auto picks it since Tile IR cannot be used: Tile IR does not support {arch} (it needs "
                          f"sm_80 or newer); tileiras {tileiras.tileiras_version} compiles for sm_80, ")
    assert tj.compile(_add, SIG, constants=TILE, target=arch).backend == "cuda"
    assert tj.backend_for("auto", arch) == "cuda"
    with pytest.raises(TargetError, match=rf"^backend='tileir': tileir backend not available here: Tile IR does not "
                                          rf"support {arch}"):
        tj.backend_for("tileir", arch)


def test_auto_picks_cuda_without_a_toolchain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "tileiras"
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(missing))
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    backend, why = choose_backend(None, parse_target("sm_90"))
    assert backend is get_backend("cuda")
    assert why.startswith("auto picks it since Tile IR cannot be used: could not load tileiras (the CUDA Tile IR "
                          f"assembler); tried:\n  - {missing} ($TILEJIT_TILEIRAS): file does not exist")
    assert not wants_launch_facts(None) and not tj.kernel(_add.func)._keys_facts()
    assert tj.compile(_add, SIG, constants=TILE, target="sm_90").backend == "cuda"
    with pytest.raises(TargetError, match=r"^backend='tileir': tileir backend not available here: could not load"):
        choose_backend("tileir", parse_target("sm_90"))


def test_explicit_backends_are_unchanged(tileiras: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sm90 = parse_target("sm_90")
    assert choose_backend("cuda", sm90) == (get_backend("cuda"), "asked for by backend='cuda'")
    assert choose_backend("tileir", sm90) == (get_backend("tileir"), "asked for by backend='tileir'")
    with pytest.raises(TargetError, match=r"^backend='tileir': tileir backend not available here: Tile IR does not "
                                          r"support sm_75"):
        choose_backend("tileir", parse_target("sm_75"))
    assert not wants_launch_facts("cuda") and wants_launch_facts("tileir")
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    assert choose_backend(None, sm90) == (get_backend("cuda"), "asked for by TILEJIT_BACKEND=cuda")
    assert not wants_launch_facts(None)
    assert tj.compile(_add, SIG, constants=TILE, target="sm_90").backend == "cuda"
    assert tj.compile(_add, SIG, constants=TILE, target="sm_90", backend="auto").backend == "tileir"


# ------------------------------------------------------------------ the fallback in tj.compile


def test_compile_falls_back_to_cuda_for_a_kernel_tile_ir_refuses(tileiras: Any, nvrtc: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tilejit")
    art = tj.compile(_return_in_loop, LOOP_SIG, constants=TILE, target="sm_90")
    assert (art.backend, art.auto) == ("tileir", True)  # auto's pick, until the image is made
    image = art.image()
    assert image.backend == art.backend == "cuda" and image.kind == "cubin"
    assert b"___NV_TILE_LAUNCH_META_DATA___" not in image.image  # NVRTC's CUBIN, not tileiras's
    assert art.cubin() == image.image and "__global__" in art.cuda_source()
    line = _line_of("return  # Tile IR's return")
    assert _info_lines(caplog) == [
        f"kernel _return_in_loop: backend auto compiles it with CUDA C++, since the Tile IR backend cannot: "
        f"{__file__}:{line}:13: error: the Tile IR backend cannot express 'return' (inside a loop: Tile IR cannot "
        'return from a loop body) yet; compile this kernel with backend="cuda"']
    named = tj.compile(_return_in_loop, LOOP_SIG, constants=TILE, target="sm_90", backend="tileir")
    with pytest.raises(TileIRUnsupportedError) as err:
        named.image()
    assert isinstance(err.value, TileCompileError) and (err.value.filename, err.value.line) == (__file__, line)
    assert named.backend == "tileir" and len(_info_lines(caplog)) == 1


def test_an_error_in_the_kernel_is_raised_under_auto(tileiras: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The front end's errors come before any backend: never a reason to fall back."""
    caplog.set_level(logging.INFO, logger="tilejit")
    art = tj.compile(_misspelled, SIG, constants=TILE, target="sm_90")
    with pytest.raises(TileCompileError) as err:
        art.image()
    assert not isinstance(err.value, TileIRUnsupportedError) and err.value.line == _line_of("tj.lod(")
    assert art.backend == "tileir" and _info_lines(caplog) == []


def test_an_auto_artifact_gives_the_cuda_stages_whichever_backend_it_uses(tileiras: Any, nvrtc: Path) -> None:
    art = tj.compile(_add, SIG, constants=TILE, target="sm_90")
    assert "__global__" in art.cuda_source() and art.cuda_kernel().num_threads > 0
    assert ".entry " in art.ptx()
    assert art.backend == "tileir" and b"___NV_TILE_LAUNCH_META_DATA___" in art.cubin()  # the image is Tile IR's
    named = tj.compile(_add, SIG, constants=TILE, target="sm_90", backend="tileir")
    with pytest.raises(ValueError, match=r"^kind='ptx': the Tile IR backend makes CUBINs only"):
        named.ptx()


_FAILING = """
case "$1" in --version|--list-versions|--help) exec "$REAL" "$@";; esac
echo "error: a simulated tileiras failure" >&2
exit 5
"""


def test_a_tileiras_failure_falls_back_under_auto_and_raises_under_tileir(
        wrapped_toolchain: Callable[[str], Path], nvrtc: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(wrapped_toolchain(_FAILING)))
    caplog.set_level(logging.INFO, logger="tilejit")
    art = tj.compile(_add, SIG, constants=TILE, target="sm_90")
    assert art.backend == "tileir"
    assert art.image().backend == art.backend == "cuda"
    (info,) = _info_lines(caplog)
    assert info.startswith("kernel _add: backend auto compiles it with CUDA C++, since the Tile IR backend cannot: "
                           "tileiras ")
    assert info.endswith(" failed for sm_90 with exit code 5: error: a simulated tileiras failure")
    with pytest.raises(TileirasError, match="failed for sm_90 with exit code 5:\nerror: a simulated") as err:
        tj.compile(_add, SIG, constants=TILE, target="sm_90", backend="tileir").image()
    assert isinstance(err.value, CompileError) and "a simulated tileiras failure" in err.value.log


# ------------------------------------------------------------------ the fallback on the launch path, and the cache


class _Device:
    arch = "sm_90"


def _record_loads(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, str]], list[Artifact]]:
    """The loader made to hand back cache entries instead of loading them, recording each artifact it is given:
    (its (target, backend) pairs, the artifacts), filled as builds go."""
    tried: list[tuple[str, str]] = []
    artifacts: list[Artifact] = []

    def load(artifact: Artifact, fingerprint: str, device: Any = None) -> dict[str, Any]:
        tried.append((artifact.target.sm, artifact.backend))
        artifacts.append(artifact)
        return loader._entry(artifact, fingerprint, False)

    monkeypatch.setattr(loader, "load_artifact", load)
    return tried, artifacts


def test_a_launch_falls_back_to_the_cuda_targets_and_a_warm_process_skips_tile_ir(
        tileiras: Any, nvrtc: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The fallback compiles for the CUDA backend's targets (sm_90a first on Hopper) under the CUDA key; the Tile IR
    key holds only the refusal, which a later process under auto takes at once (no front end, no tileiras)."""
    caplog.set_level(logging.INFO, logger="tilejit")
    tried, artifacts = _record_loads(monkeypatch)
    types = specialize(_return_in_loop, LOOP_SIG)
    entry = tj.kernel(_return_in_loop.func)._build(types, {}, (128,), _Device())
    assert tried == [("sm_90", "tileir"), ("sm_90a", "cuda")]
    assert entry["kind"] == "cubin" and b"___NV_TILE_LAUNCH_META_DATA___" not in entry["image"]
    keys = _keys_of(artifacts)
    plain = tj.kernel(_return_in_loop.func, backend="cuda")._artifact(types, {}, TILE, parse_target("sm_90a"), "cuda")
    assert keys[0] != keys[1] and keys[1] == _keys_of([plain])[0]  # the fallback's is the plain CUDA key
    stored = [default_cache().get(k) for k in keys]
    assert stored[0] is not None and "image" not in stored[0] and stored[0]["error"] == "TileIRUnsupportedError"
    assert "cannot express 'return' (inside a loop" in stored[0]["refused"]
    assert stored[1] is not None and stored[1]["image"] == entry["image"]

    def no_front_end(self: Artifact) -> Any:
        raise AssertionError("a warm launch ran the front end")

    tried.clear()
    with monkeypatch.context() as warm:
        warm.setattr(Artifact, "ir", no_front_end)
        again = tj.kernel(_return_in_loop.func)._build(types, {}, (128,), _Device())
    assert tried == [("sm_90", "tileir"), ("sm_90a", "cuda")] and again["image"] == entry["image"]
    assert len(_info_lines(caplog)) == 2 and all("kernel _return_in_loop: " in m for m in _info_lines(caplog))
    # asked for by name: compiled again, to raise the error at its line
    with pytest.raises(TileIRUnsupportedError) as err:
        tj.kernel(_return_in_loop.func, backend="tileir")._build(types, {}, (128,), _Device())
    assert err.value.line == _line_of("return  # Tile IR's return")


def test_a_launch_on_a_driver_too_old_for_tile_ir_uses_cuda(tileiras: Any, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """tileiras's CUBINs need an r580 driver: under auto an older one gets the CUDA backend's image, checked before
    anything is compiled; backend='tileir' is refused, as before."""
    from tilejit.runtime import device as device_state

    class OldDriver:
        version = 12080

    def no_front_end(self: Artifact) -> Any:
        raise AssertionError("compiled for a driver that cannot load it")

    caplog.set_level(logging.INFO, logger="tilejit")
    monkeypatch.setattr(device_state, "initialized_driver", lambda: OldDriver())
    monkeypatch.setattr(Artifact, "ir", no_front_end)
    real = loader.load_artifact
    tried: list[tuple[str, str]] = []

    def load(artifact: Artifact, fingerprint: str, device: Any = None) -> Any:
        tried.append((artifact.target.sm, artifact.backend))
        return real(artifact, fingerprint, device) if artifact.backend == "tileir" else "the CUDA image"

    monkeypatch.setattr(loader, "load_artifact", load)
    types = specialize(_add, SIG)
    assert tj.kernel(_add.func)._build(types, {}, (128,), _Device()) == "the CUDA image"
    assert tried == [("sm_90", "tileir"), ("sm_90a", "cuda")]
    (info,) = _info_lines(caplog)
    assert info.startswith("kernel _add: backend auto compiles it with CUDA C++, since the Tile IR backend cannot: "
                           "Tile IR kernels are built for CUDA 13.0") and "the driver supports CUDA 12.8" in info
    with pytest.raises(DriverVersionError):
        tj.kernel(_add.func, backend="tileir")._build(types, {}, (128,), _Device())


_KILLED = """
case "$1" in --version|--list-versions|--help) exec "$REAL" "$@";; esac
kill -9 $$
"""


def test_a_tileiras_killed_on_the_launch_path_falls_back_and_is_tried_again_later(
        wrapped_toolchain: Callable[[str], Path], nvrtc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tileiras killed (as the out-of-memory killer does) is a failure that may not recur: the launch falls back
    to CUDA C++, but no refusal is remembered, so the next build runs tileiras again."""
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(wrapped_toolchain(_KILLED)))
    tried, artifacts = _record_loads(monkeypatch)
    types = specialize(_add, SIG)
    with pytest.raises(TileirasError) as err:
        tj.compile(_add, SIG, constants=TILE, target="sm_90", backend="tileir").image()
    assert not err.value.lasting and "SIGKILL" in str(err.value)
    tj.kernel(_add.func)._build(types, {}, (128,), _Device())
    assert tried == [("sm_90", "tileir"), ("sm_90a", "cuda")]
    assert default_cache().get(_keys_of(artifacts[:1])[0]) is None  # no refusal kept under the Tile IR key
    tried.clear()
    tj.kernel(_add.func)._build(types, {}, (128,), _Device())
    assert tried == [("sm_90", "tileir"), ("sm_90a", "cuda")]


def _keys_of(artifacts: list[Artifact]) -> list[str]:
    from tilejit.api.kernel import _source_fingerprint

    return [loader._specialization_key(a, _source_fingerprint(a.kernel_func)) for a in artifacts]


# ------------------------------------------------------------------ the toolchain probe's memo

_LOGGING = """
echo "$@" >> "$LOG"
exec "$REAL" "$@"
"""

_FIND = ("from tilejit.backends.tileir_backend import find_toolchain\n"
         "tc = find_toolchain()\n"
         "print(tc if isinstance(tc, str) else (tc.tileiras_version, tc.targets, tc.bytecode_versions))\n")


def _run(code: str, env: dict[str, str]) -> str:
    """``code`` run by a new Python process with ``env`` over this one's environment (no TILEJIT_ setting of it)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    done = subprocess.run([sys.executable, "-c", code], env={**full, **env}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _runs(tmp_path: Path) -> int:
    """How many times the logging tileiras ran."""
    log = tmp_path / "runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_new_process_finds_the_toolchain_without_running_it(wrapped_toolchain: Callable[[str], Path],
                                                               tileir_toolchain: Any, tmp_path: Path) -> None:
    exe = wrapped_toolchain(_LOGGING)
    cache_dir = tmp_path / "memo-cache"
    env = {"TILEJIT_TILEIRAS": str(exe), "TILEJIT_CACHE_DIR": str(cache_dir)}
    first = _run(_FIND, env)
    assert tileir_toolchain.tileiras_version in first and _runs(tmp_path) == 3  # --version, --list-versions, --help
    assert _run(_FIND, env) == first and _runs(tmp_path) == 3
    memo = DiskCache(cache_dir).path_of(probe_memo_key(bindings.locate(str(exe))) or "")
    assert Path(memo).read_bytes().startswith(MAGIC)

    # a changed tool (here: its mtime) is asked again
    st = exe.stat()
    os.utime(exe, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert _run(_FIND, env) == first and _runs(tmp_path) == 6
    assert _run(_FIND, env) == first and _runs(tmp_path) == 6

    # a damaged, foreign or malformed memo is asked again and replaced, never an error
    key = probe_memo_key(bindings.locate(str(exe))) or ""
    memo = DiskCache(cache_dir).path_of(key)
    for bad in (MAGIC + b"damaged", b"not tilejit's"):
        Path(memo).write_bytes(bad)
        runs = _runs(tmp_path)
        assert _run(_FIND, env) == first and _runs(tmp_path) == runs + 3
        assert Path(memo).read_bytes().startswith(MAGIC)
    DiskCache(cache_dir).put(key, {"tileiras_version": "13.5.37", "targets": 5})
    runs = _runs(tmp_path)
    assert _run(_FIND, env) == first and _runs(tmp_path) == runs + 3
    assert tuple(DiskCache(cache_dir).get(key)["targets"]) == tileir_toolchain.targets  # type: ignore[index]


def test_with_caching_off_the_probe_runs_in_every_process(wrapped_toolchain: Callable[[str], Path],
                                                            tmp_path: Path) -> None:
    exe = wrapped_toolchain(_LOGGING)
    env = {"TILEJIT_TILEIRAS": str(exe), "TILEJIT_CACHE_DIR": str(tmp_path / "off"), "TILEJIT_CACHE": "0"}
    first = _run(_FIND, env)
    assert _run(_FIND, env) == first and _runs(tmp_path) == 6
    assert not (tmp_path / "off").exists()


def test_cuda_asks_nothing_of_tile_ir(wrapped_toolchain: Callable[[str], Path], tmp_path: Path) -> None:
    """With TILEJIT_BACKEND=cuda or backend="cuda", a launch's choice, launch facts and cache key import no Tile IR
    module and run no tileiras (here one that is found, and logs its runs)."""
    code = textwrap.dedent("""
        import sys
        import tilejit as tj
        from tilejit.api.compile import Artifact
        from tilejit.api.loader import _specialization_key
        from tilejit.backends.base import choose_backend, wants_launch_facts
        from tilejit.compiler.targets import Target
        from tilejit.language.ir.types import ArrayType, float32

        def k(x, TILE: tj.Constant[int]):
            tj.store(x, index=(0,), tile=tj.load(x, index=(0,), shape=(TILE,)))

        backend = sys.argv[1] if len(sys.argv) > 1 else None
        chosen, _ = choose_backend(backend, Target(9, 0))
        facts = wants_launch_facts(backend) or tj.kernel(k, backend=backend)._keys_facts()
        art = Artifact(None, "k", {"x": ArrayType(float32, 1)}, {}, Target(9, 0), None, {}, chosen.name)
        _specialization_key(art, "fp")
        print(chosen.name, facts, sorted(m for m in sys.modules if "tileir" in m))
    """)
    env = {"TILEJIT_TILEIRAS": str(wrapped_toolchain(_LOGGING)), "TILEJIT_CACHE_DIR": str(tmp_path / "c")}
    assert _run(code, {**env, "TILEJIT_BACKEND": "cuda"}).split() == ["cuda", "False", "[]"]
    assert _run(code.replace("sys.argv[1] if len(sys.argv) > 1 else None", "'cuda'"), env).split() == [
        "cuda", "False", "[]"]
    assert _runs(tmp_path) == 0
    out = _run(code, env).split(maxsplit=2)  # auto: Tile IR
    assert out[:2] == ["tileir", "True"] and "tilejit.backends.tileir_backend" in out[2]


# ------------------------------------------------------------------ doctor and the command line


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    full.update({"PYTHONIOENCODING": "utf-8", **env})
    return subprocess.run([sys.executable, "-m", "tilejit", *args], env=full, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def _used(doctor_out: str) -> list[str]:
    """Doctor's Backends section, from its "used" line on."""
    lines = doctor_out.split("\nBackends\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("  used")):]


def test_doctor_names_the_backend_auto_picks_and_why(tileiras: Any, nvrtc: Path, tmp_path: Path) -> None:
    env = {"TILEJIT_NVRTC": str(nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path / "c"), "TILEJIT_TILEIRAS": tileiras.tileiras}
    used = _used(_cli("doctor", env={**env, "TILEJIT_ARCH": "sm_90"}).stdout)
    if "TILEJIT_ARCH" not in used[0]:
        pytest.skip("a GPU here: doctor chooses for its target, not TILEJIT_ARCH's")
    assert used[0] == ("  used for sm_90 (TILEJIT_ARCH): tileir (auto picks it: a Tile IR toolchain is found and "
                       "sm_90 supports it)")
    assert used[1] == ("  fallback: auto compiles a kernel with CUDA C++ where the Tile IR backend refuses it (what "
                       "Tile IR cannot express, such as a return inside a loop; tileiras failing on it), saying so in "
                       "an INFO line of the tilejit logger; TILEJIT_BACKEND=cuda uses CUDA C++ for every kernel")
    used = _used(_cli("doctor", env={**env, "TILEJIT_ARCH": "sm_75"}).stdout)
    assert used == ["  used for sm_75 (TILEJIT_ARCH): cuda (auto picks it since Tile IR cannot be used: Tile IR does "
                    f"not support sm_75 (it needs sm_80 or newer); tileiras {tileiras.tileiras_version} compiles for "
                    f"{', '.join(tileiras.targets)})"]
    used = _used(_cli("doctor", env={**env, "TILEJIT_ARCH": "sm_90", "TILEJIT_BACKEND": "cuda"}).stdout)
    assert used == ["  used for sm_90 (TILEJIT_ARCH): cuda (asked for by TILEJIT_BACKEND=cuda)"]


def test_doctor_says_launches_use_cuda_where_the_driver_is_too_old_for_tile_ir(tileiras: Any) -> None:
    from tilejit.cli.main import _backend_lines

    lines = _backend_lines([80, 90], ["sm_90"], 12080)
    assert lines[2].startswith("used for sm_90 (this GPU's target): tileir (auto picks it")
    assert lines[3].startswith("launches: CUDA C++ (auto falls back): Tile IR kernels are built for CUDA 13.0 (13000, "
                               "driver r580) or newer; the driver supports CUDA 12.8 (12080)")
    assert not any(line.startswith("launches") for line in _backend_lines([80, 90], ["sm_90"], 13000))


_KERNELS = """
import tilejit as tj


@tj.kernel
def add(x, y, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) + tj.load(y, index=(i,), shape=(TILE,)))


@tj.kernel
def return_in_loop(x, out, n, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    for k in range(n):
        if k == 3:
            return
        t = t + 1.0
        tj.store(out, index=(i,), tile=t)
"""


def test_cli_compile_under_auto(tileiras: Any, nvrtc: Path, tmp_path: Path) -> None:
    """auto: tileiras's CUBIN where Tile IR compiles the kernel, NVRTC's where it refuses it; CUDA C++ or PTX asked
    for: the CUDA backend for every output, as before a toolchain was installed."""
    (tmp_path / "kernels.py").write_text(_KERNELS)
    env = {"TILEJIT_NVRTC": str(nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path / "c"), "TILEJIT_TILEIRAS": tileiras.tileiras}
    out = tmp_path / "out"

    def compile_(kernel: str, signature: str, emit: str) -> dict[str, bytes]:
        r = _cli("compile", str(tmp_path / "kernels.py"), "--kernel", kernel, "--signature", signature, "-C",
                 "TILE=128", "--arch", "sm_90", "--emit", emit, "-o", str(out), env=env)
        assert r.returncode == 0, r.stderr
        return {p.suffix: p.read_bytes() for p in out.glob(f"kernels.{kernel}.sm_90.*")}

    made = compile_("add", "float32[:],float32[:],float32[:]", "cubin")
    assert b"___NV_TILE_LAUNCH_META_DATA___" in made[".cubin"]
    made = compile_("add", "float32[:],float32[:],float32[:]", "ptx,cubin")
    assert made[".ptx"].startswith(b"//") and b"___NV_TILE_LAUNCH_META_DATA___" not in made[".cubin"]
    made = compile_("return_in_loop", "float32[:],float32[:],int32", "cubin")
    assert made[".cubin"][:4] == b"\x7fELF" and b"___NV_TILE_LAUNCH_META_DATA___" not in made[".cubin"]


# ------------------------------------------------------------------ on a GPU


def _launched(kernel: Any) -> list[str]:
    """The backends of ``kernel``'s loaded specializations."""
    return sorted({c.artifact.backend for c in kernel._specs.values() if c.artifact is not None})


@pytest.mark.gpu
@pytest.mark.own_backend
def test_auto_launches_tile_ir_and_falls_back_to_cuda_on_a_gpu(tileiras: Any,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """With the toolchain found, a kernel under auto runs as Tile IR and one Tile IR refuses runs as CUDA C++,
    both computing the right values (outputs poisoned)."""
    import numpy as np

    from tilejit.runtime.device import get_device

    if get_backend("tileir").available(parse_target(get_device().arch)) is not None:
        pytest.skip("tileiras does not compile for this GPU")
    caplog.set_level(logging.INFO, logger="tilejit")
    rng = np.random.default_rng()
    n = 1000
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    add_k = tj.kernel(_add.func)
    out = tj.asarray(np.full(n, np.nan, np.float32))
    add_k[tj.cdiv(n, 128)](tj.asarray(x), tj.asarray(y), out, TILE=128)
    np.testing.assert_array_equal(out.numpy(), x + y)
    assert _launched(add_k) == ["tileir"]
    loop_k = tj.kernel(_return_in_loop.func)
    out = tj.asarray(np.full(n, np.nan, np.float32))
    loop_k[tj.cdiv(n, 128)](tj.asarray(x), out, 5, TILE=128)
    want = ((x + np.float32(1)) + np.float32(1)) + np.float32(1)  # stored after k = 0, 1, 2; returns at k = 3
    np.testing.assert_array_equal(out.numpy(), want)
    assert _launched(loop_k) == ["cuda"]
    assert any("kernel _return_in_loop: backend auto compiles it with CUDA C++" in m for m in _info_lines(caplog))
