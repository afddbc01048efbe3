"""The backend contract (``tilejit.backends.base``): one selection rule for every entry point, the CUDA
backend behind it, and what goes through it (Artifact, the loader's cache key, launches, the CLI, doctor)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import Toolkit

import tilejit as tj
from tilejit.api import loader
from tilejit.backends import base
from tilejit.backends.base import Backend, KernelImage, choose_backend, get_backend
from tilejit.backends.cuda_backend import CudaBackend
from tilejit.compiler.targets import Target, parse_target
from tilejit.errors import ConfigError, TargetError

ROOT = Path(__file__).resolve().parent.parent
SIG = (tj.float32[:], tj.float32[:])


@tj.kernel
def _copy(x, out, TILE: tj.Constant[int]):  # type: ignore[no-untyped-def]
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)))


class _FakeTileIR(Backend):
    """A Tile IR backend stand-in that is available for the targets it is given."""

    name = "tileir"
    title = "Tile IR through tileiras"

    def __init__(self, targets: tuple[str, ...], identity: str = "tileiras 13.1") -> None:
        self.targets = targets
        self.identity = identity

    def available(self, target: Target) -> str | None:
        return None if target.sm in self.targets else f"tileiras does not target {target.sm}"

    def cache_identity(self) -> str:
        return self.identity

    def generate(self, fn: Any, target: Target, hints: Mapping[str, Any], *, num_threads: int | None = None,
                 kernel_hints: base.KernelHints = base.NO_HINTS, kind: str = "cubin",
                 memo: dict[str, Any] | None = None) -> KernelImage:
        return KernelImage(backend="tileir", image=b"\x7fELF-fake", kind=kind, symbol=fn.name, num_threads=128,
                           shared_bytes=0, params=(("x", ("array", "float32", 1)),), cache_identity=self.identity)


@pytest.fixture(autouse=True)
def _no_backend_setting(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with TILEJIT_BACKEND unset and the registry as tilejit fills it."""
    monkeypatch.delenv("TILEJIT_BACKEND", raising=False)
    saved = dict(base._LOADED)
    yield
    base._LOADED.clear()
    base._LOADED.update(saved)


def _with_tileir(monkeypatch: pytest.MonkeyPatch, backend: Backend) -> None:
    """``backend`` as the Tile IR backend."""
    monkeypatch.setitem(base._LOADED, "tileir", backend)


@pytest.fixture
def no_toolchain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """No CUDA Tile IR toolchain here (TILEJIT_TILEIRAS names an empty folder): why the Tile IR backend says so."""
    from tilejit.bindings.tileiras import unavailable

    empty = tmp_path / "no-tileiras"
    empty.mkdir()
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(empty))
    reason = unavailable()
    assert reason is not None and str(empty) in reason
    return reason


# ------------------------------------------------------------------ the selection rule


def test_auto_is_cuda_without_a_toolchain_and_says_why(no_toolchain: str) -> None:
    backend, why = choose_backend(None, parse_target("sm_90"))
    assert backend.name == "cuda" and isinstance(backend, CudaBackend)
    assert why == f"auto picks it since Tile IR cannot be used: {no_toolchain}"
    assert choose_backend("auto", parse_target("sm_80"))[0] is backend
    assert get_backend("tileir").missing() == no_toolchain and get_backend("cuda").missing() is None


def test_auto_is_tile_ir_where_the_toolchain_is(tileir_toolchain: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 17's rule (a kernel Tile IR refuses still compiles: tests/test_backend_auto.py)."""
    monkeypatch.setenv("TILEJIT_TILEIRAS", tileir_toolchain.tileiras)
    tileir = get_backend("tileir")
    assert tileir.available(parse_target("sm_100")) is None
    assert choose_backend(None, parse_target("sm_100")) == (
        tileir, "auto picks it: a Tile IR toolchain is found and sm_100 supports it")
    assert choose_backend("tileir", parse_target("sm_100")) == (tileir, "asked for by backend='tileir'")
    assert choose_backend("cuda", parse_target("sm_100"))[0].name == "cuda"
    monkeypatch.setenv("TILEJIT_BACKEND", "tileir")
    assert choose_backend(None, parse_target("sm_90a"))[0] is tileir


def test_auto_is_tile_ir_only_where_the_tile_ir_backend_says_it_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeTileIR(("sm_100",))
    _with_tileir(monkeypatch, fake)
    backend, why = choose_backend("auto", parse_target("sm_100"))
    assert backend is fake and why == "auto picks it: a Tile IR toolchain is found and sm_100 supports it"
    backend, why = choose_backend("auto", parse_target("sm_90"))
    assert backend.name == "cuda" and why.endswith("tileiras does not target sm_90")
    assert choose_backend("cuda", parse_target("sm_100"))[0].name == "cuda"  # asked for: no auto


def test_the_environment_variable_chooses_when_no_backend_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_tileir(monkeypatch, _FakeTileIR(("sm_100",)))
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    assert choose_backend(None, parse_target("sm_100")) == (get_backend("cuda"), "asked for by TILEJIT_BACKEND=cuda")
    monkeypatch.setenv("TILEJIT_BACKEND", " TileIR ")
    assert choose_backend(None, parse_target("sm_100"))[0].name == "tileir"
    assert choose_backend("cuda", parse_target("sm_100"))[0].name == "cuda"  # an argument beats the variable
    monkeypatch.setenv("TILEJIT_BACKEND", "")
    assert choose_backend(None, parse_target("sm_100"))[0].name == "tileir"  # empty: the default, auto


@pytest.mark.parametrize("value", ["ptx", "nvrtc", "cuda,tileir", "1"])
def test_a_bad_environment_value_is_a_config_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                                       value: str) -> None:
    monkeypatch.setenv("TILEJIT_BACKEND", value)
    with pytest.raises(ConfigError) as err:
        choose_backend(None, parse_target("sm_90"))
    assert str(err.value) == f"environment variable TILEJIT_BACKEND={value!r}: expected one of auto, cuda, tileir"


def test_asking_for_tile_ir_says_why_not_and_suggests_cuda(monkeypatch: pytest.MonkeyPatch,
                                                           no_toolchain: str) -> None:
    with pytest.raises(TargetError) as err:
        choose_backend("tileir", parse_target("sm_90"))
    assert str(err.value) == (
        f"backend='tileir': tileir backend not available here: {no_toolchain}; use backend='cuda' (CUDA C++ through "
        "NVRTC), or 'auto' to use the best backend available"
    )
    monkeypatch.setenv("TILEJIT_BACKEND", "tileir")
    with pytest.raises(TargetError, match=r"^TILEJIT_BACKEND=tileir: tileir backend not available here: "):
        choose_backend(None, parse_target("sm_90"))
    _with_tileir(monkeypatch, _FakeTileIR(("sm_100",)))
    with pytest.raises(TargetError, match="tileiras does not target sm_90; use backend='cuda'"):
        choose_backend("tileir", parse_target("sm_90"))


def test_a_backend_whose_module_is_missing_never_generates_a_fake_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(base._MODULES, "tileir", "tilejit.backends.no_such_backend")
    base._LOADED.pop("tileir", None)
    missing = get_backend("tileir")
    reason = ("its module tilejit.backends.no_such_backend cannot be imported: No module named "
              "'tilejit.backends.no_such_backend'")
    assert missing.available(parse_target("sm_100")) == reason
    fn = tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_80").ir()
    with pytest.raises(TargetError, match=f"^backend='tileir': tileir backend not available here: {reason}; use "):
        missing.generate(fn, parse_target("sm_100"), {})


def test_unknown_backend_names_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^backend must be one of 'auto', 'cuda', 'tileir', got 'metal'$"):
        choose_backend("metal", parse_target("sm_90"))
    with pytest.raises(ValueError, match="backend must be one of auto, cuda, tileir, got 'auto'"):
        get_backend("auto")  # a backend's name, not a choice


# ------------------------------------------------------------------ entry points


def test_compile_takes_backend_and_the_artifact_names_it(monkeypatch: pytest.MonkeyPatch, no_toolchain: str) -> None:
    art = tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_80", backend="cuda")
    assert art.backend == "cuda" and "backend='cuda'" in repr(art)
    assert art.backend_impl() is get_backend("cuda")
    assert tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_80").backend == "cuda"  # auto
    with pytest.raises(TargetError, match=r"^backend='tileir': tileir backend not available here"):
        tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_80", backend="tileir")
    with pytest.raises(ValueError, match=r"^tj.compile\(_copy\): backend must be one of 'auto', 'cuda', 'tileir', "
                                         r"got 'CUDA C\+\+'$"):
        tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_80", backend="CUDA C++")
    _with_tileir(monkeypatch, _FakeTileIR(("sm_100",)))
    tile = tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_100")
    assert tile.backend == "tileir"
    image = tile.image()
    assert (image.backend, image.kind, image.symbol, image.cache_identity) == ("tileir", "cubin", "_copy",
                                                                               "tileiras 13.1")
    assert "__global__" in tile.cuda_source() and tile.backend == "tileir"  # auto: the CUDA stages are the fallback's
    named = tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_100", backend="tileir")
    with pytest.raises(TypeError, match=r"cuda_source\(\) is a stage of the CUDA C\+\+ backend; this artifact was "
                                        r"compiled with backend='tileir'"):
        named.cuda_source()


def test_kernel_decorator_takes_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    k = tj.kernel(_copy.func, backend="cuda")
    assert k.backend == "cuda" and tj.kernel(_copy.func).backend is None
    _with_tileir(monkeypatch, _FakeTileIR(("sm_100",)))
    assert tj.compile(k, SIG, constants={"TILE": 128}, target="sm_100").backend == "cuda"  # the kernel's own
    assert tj.compile(k, SIG, constants={"TILE": 128}, target="sm_100", backend="auto").backend == "tileir"
    with pytest.raises(ValueError, match=r"^@tj.kernel\(backend=...\): backend must be one of 'auto', 'cuda', "
                                         r"'tileir', got 'gpu'$"):
        tj.kernel(backend="gpu")
    with pytest.raises(ValueError, match=r"^@tj.kernel\(backend=...\) of _copy: backend must be one of"):
        tj.kernel(_copy.func, backend=3)


class _Device:
    arch = "sm_90"


def _tried(monkeypatch: pytest.MonkeyPatch, kernel: tj.Kernel, refuse: str = "") -> list[tuple[str, str]]:
    """The (target, backend) of each artifact a launch's build loads, refusing ``refuse`` as an old NVRTC would."""
    tried: list[tuple[str, str]] = []

    def load(artifact: Any, fingerprint: str, device: Any = None) -> str:
        tried.append((artifact.target.sm, artifact.backend))
        if artifact.target.sm == refuse:
            raise TargetError(f"NVRTC does not support {refuse}")
        return "loaded"

    monkeypatch.setattr(loader, "load_artifact", load)
    assert kernel._build({"x": tj.float32[:], "out": tj.float32[:]}, {}, (128,), _Device()) == "loaded"
    return tried


def test_a_launch_tries_the_targets_the_backend_names(monkeypatch: pytest.MonkeyPatch, no_toolchain: str) -> None:
    """The sm_90a-then-sm_90 retry on Hopper is the CUDA backend's ``launch_targets``."""
    k = tj.kernel(_copy.func)
    assert _tried(monkeypatch, k) == [("sm_90a", "cuda")]
    assert _tried(monkeypatch, k, refuse="sm_90a") == [("sm_90a", "cuda"), ("sm_90", "cuda")]
    monkeypatch.setenv("TILEJIT_ARCH_SPECIFIC", "0")
    assert _tried(monkeypatch, k) == [("sm_90", "cuda")]
    assert CudaBackend().launch_targets(parse_target("sm_80")) == (parse_target("sm_80"),)
    assert CudaBackend().launch_targets(parse_target("sm_100")) == (parse_target("sm_100"),)


def test_a_launch_asking_for_an_unavailable_backend_is_not_retried(monkeypatch: pytest.MonkeyPatch,
                                                                   no_toolchain: str) -> None:
    with pytest.raises(TargetError, match=r"^backend='tileir': tileir backend not available here"):
        _tried(monkeypatch, tj.kernel(_copy.func, backend="tileir"))
    _with_tileir(monkeypatch, _FakeTileIR(("sm_90",)))
    assert _tried(monkeypatch, tj.kernel(_copy.func)) == [("sm_90", "tileir")]  # auto, one target


# ------------------------------------------------------------------ the loader's cache key


def _key(art: Any) -> str:
    return loader._specialization_key(art, "fingerprint")


def test_the_kernel_cache_key_names_the_backend_and_its_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_100", backend="cuda")
    fake = _FakeTileIR(("sm_100",))
    _with_tileir(monkeypatch, fake)
    tile = tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_100", backend="tileir")
    assert _key(cuda) == _key(tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_100", backend="cuda"))
    assert _key(cuda) != _key(tile)
    before = _key(tile), _key(cuda)
    fake.identity = "tileiras 13.2"
    monkeypatch.setattr(CudaBackend, "cache_identity", lambda self: "another nvrtc|headers")
    assert (_key(tile), _key(cuda)) == (_key(tile), _key(cuda))
    assert _key(tile) != before[0] and _key(cuda) != before[1]


def test_a_warm_key_loads_neither_the_code_generator_nor_nvrtc(tmp_path: Path) -> None:
    """Choosing the backend and naming the cache entry, as a warm launch does, ask the backend's light module:
    not the backend's package (no codegen, no headers), no NVRTC bindings."""
    code = textwrap.dedent("""
        import sys
        from tilejit.api.compile import Artifact
        from tilejit.api.loader import _specialization_key
        from tilejit.backends.base import choose_backend
        from tilejit.compiler.targets import Target
        from tilejit.language.ir.types import ArrayType, float32
        backend, _ = choose_backend(None, Target(9, 0))  # what a launch's build does first
        target = backend.launch_targets(Target(9, 0))[0]
        art = Artifact(None, "k", {"x": ArrayType(float32, 1)}, {}, target, None, {}, backend.name)
        key = _specialization_key(art, "fp")
        heavy = ["tilejit.backends.cuda", "tilejit.backends.cuda.codegen", "tilejit.backends.cuda.abi",
                 "tilejit.bindings.nvrtc", "tilejit.compiler.nvrtc", "tilejit.language.frontend.translate",
                 "dataclasses", "json"]
        print(len(key), [m for m in heavy if m in sys.modules], "tilejit.backends.cuda_backend" in sys.modules)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    env["TILEJIT_CACHE_DIR"] = str(tmp_path)
    env.update(_no_tileiras_env(tmp_path))  # auto: CUDA C++
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split(" ", 1)[1].strip() == "[] True"


def test_an_image_carries_what_a_cache_entry_holds(toolkit: Toolkit, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEJIT_NVRTC", str(toolkit.nvrtc))
    art = tj.compile(_copy, SIG, constants={"TILE": 128}, target="sm_80", backend="cuda")
    ck = art.cuda_kernel()
    image = art.image("ptx")
    assert (image.backend, image.kind, image.symbol, image.num_threads, image.shared_bytes, image.params) == (
        "cuda", "ptx", ck.name, ck.num_threads, ck.shared_bytes, ck.params)
    assert image.image == art.ptx().encode() and image.cache_identity == get_backend("cuda").cache_identity()
    assert art.image("cubin").image == art.cubin() and art.cubin()[:4] == b"\x7fELF"
    assert set(image.entry()) == loader._FIELDS - {"reads"}
    with pytest.raises(ValueError, match="KernelImage kind must be 'cubin' or 'ptx', got 'ltoir'"):
        KernelImage(backend="cuda", image=b"", kind="ltoir", symbol="k", num_threads=32, shared_bytes=0, params=(),
                    cache_identity="")


# ------------------------------------------------------------------ command line


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    full.update({"PYTHONIOENCODING": "utf-8", **(env or {})})
    return subprocess.run([sys.executable, "-m", "tilejit", *args], env=full, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def _backends_section(out: str) -> list[str]:
    return out.split("\nBackends\n", 1)[1].split("\n\n", 1)[0].splitlines()


def _no_tileiras_env(tmp_path: Path) -> dict[str, str]:
    """Settings for a CLI run that finds no Tile IR toolchain (TILEJIT_TILEIRAS names an empty folder)."""
    empty = tmp_path / "no-tileiras"
    empty.mkdir(exist_ok=True)
    return {"TILEJIT_TILEIRAS": str(empty)}


def _used_line(lines: list[str]) -> str:
    (used,) = [line for line in lines if line.startswith("  used")]
    return used


def test_doctor_says_which_backend_is_used_and_why(toolkit: Toolkit, tmp_path: Path) -> None:
    env = {"TILEJIT_NVRTC": str(toolkit.nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path), "TILEJIT_ARCH": "sm_80",
           **_no_tileiras_env(tmp_path)}
    r = _cli("doctor", env=env)
    assert "Traceback" not in r.stdout + r.stderr
    lines = _backends_section(r.stdout)
    assert lines[:3] == [
        "  cuda (CUDA C++ through NVRTC): available",
        "  tileir (Tile IR through tileiras): not available: could not load tileiras (the CUDA Tile IR assembler); "
        "tried:",
        f"      - {tmp_path / 'no-tileiras' / 'tileiras'} ($TILEJIT_TILEIRAS): file does not exist",
    ]
    assert lines[3].startswith("    install the CUDA Tile IR toolchain")
    used = _used_line(lines)
    if "TILEJIT_ARCH" in used:  # no GPU here: the configured target
        assert used == ("  used for sm_80 (TILEJIT_ARCH): cuda (auto picks it since Tile IR cannot be used: see the "
                        "tileir line above)")
    else:
        assert used.startswith("  used for sm_") and "(this GPU's target): cuda (auto picks it" in used
    assert not any(line.startswith("  fallback") for line in lines)
    r = _cli("doctor", env={**env, "TILEJIT_BACKEND": "cuda"})
    assert _used_line(_backends_section(r.stdout)).endswith(": cuda (asked for by TILEJIT_BACKEND=cuda)")
    r = _cli("doctor", env={**env, "TILEJIT_BACKEND": "tileir"})
    assert _used_line(_backends_section(r.stdout)).startswith("  used: none: TILEJIT_BACKEND=tileir: tileir backend "
                                                              "not available here: could not load tileiras")
    r = _cli("doctor", env={**env, "TILEJIT_BACKEND": "fast"})
    assert "Traceback" not in r.stdout + r.stderr
    assert _used_line(_backends_section(r.stdout)) == ("  used: none: environment variable TILEJIT_BACKEND='fast': "
                                                       "expected one of auto, cuda, tileir")


def test_doctor_says_auto_uses_tile_ir_where_it_is_available(toolkit: Toolkit, tileir_toolchain: Any,
                                                              tmp_path: Path) -> None:
    env = {"TILEJIT_NVRTC": str(toolkit.nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path), "TILEJIT_ARCH": "sm_100",
           "TILEJIT_TILEIRAS": tileir_toolchain.tileiras}
    lines = _backends_section(_cli("doctor", env=env).stdout)
    assert lines[1] == "  tileir (Tile IR through tileiras): available"
    if "TILEJIT_ARCH" in lines[2]:
        assert lines[2] == ("  used for sm_100 (TILEJIT_ARCH): tileir (auto picks it: a Tile IR toolchain is found and "
                            "sm_100 supports it)")
        assert lines[3].startswith("  fallback: auto compiles a kernel with CUDA C++ where the Tile IR backend "
                                   "refuses it")
    lines = _backends_section(_cli("doctor", env={**env, "TILEJIT_BACKEND": "tileir"}).stdout)
    assert lines[2].endswith(": tileir (asked for by TILEJIT_BACKEND=tileir)")
    assert lines[3] == ("  fallback: none, as Tile IR is asked for by name: a kernel it refuses is an error that "
                        "suggests backend='cuda'")


def _kernel_file(tmp_path: Path) -> Path:
    path = tmp_path / "kernels.py"
    path.write_text("import tilejit as tj\n\n\n@tj.kernel\ndef copy(x, out, TILE: tj.Constant[int]):\n"
                    "    i = tj.bid(0)\n    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)))\n")
    return path


def test_cli_compile_takes_backend(tmp_path: Path) -> None:
    path = _kernel_file(tmp_path)
    common = ("compile", str(path), "--kernel", "copy", "--signature", "float32[:],float32[:]", "-C", "TILE=128",
              "--arch", "sm_80", "--emit", "cuda", "-o", str(tmp_path / "out"))
    r = _cli(*common, "--backend", "cuda")
    assert r.returncode == 0, r.stderr
    assert "tj::Array<float, 1>" in (tmp_path / "out" / "kernels.copy.sm_80.cu").read_text()
    r = _cli(*common, "--backend", "tileir", env=_no_tileiras_env(tmp_path))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("tilejit compile: error: backend='tileir': tileir backend not available here: could "
                               "not load tileiras (the CUDA Tile IR assembler)")
    r = _cli(*common, env={"TILEJIT_BACKEND": "tileir", **_no_tileiras_env(tmp_path)})
    assert r.returncode == 1 and "TILEJIT_BACKEND=tileir: tileir backend not available here" in r.stderr
    r = _cli(*common, "--backend", "ptx")
    assert r.returncode == 2 and "argument --backend: invalid choice: 'ptx'" in r.stderr
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    r = _cli("compile", str(tmp_path / "k.cu"), "--arch", "sm_80", "--backend", "cuda")
    assert r.returncode == 2
    assert "--backend applies to Python files only, and " in r.stderr
    assert "a CUDA C++ file compiles with NVRTC" in r.stderr


def test_doctor_backends_without_nvrtc_or_with_a_bad_target(tmp_path: Path) -> None:
    """Doctor reports, never dies of, a missing NVRTC or a malformed TILEJIT_ARCH in its Backends section."""
    env = {"TILEJIT_NVRTC": str(tmp_path / "missing.so"), "TILEJIT_CACHE_DIR": str(tmp_path)}
    r = _cli("doctor", env=env)
    assert "Traceback" not in r.stdout + r.stderr
    lines = _backends_section(r.stdout)
    assert lines[0] == "  cuda (CUDA C++ through NVRTC): not available: no NVRTC (see above)"
    assert lines[1].startswith("  tileir (Tile IR through tileiras): ")
    if "this GPU's target" not in lines[-1]:
        assert lines[-1] == "  used: none: no target to choose for (no GPU, no NVRTC, TILEJIT_ARCH unset)"
    r = _cli("doctor", env={**env, "TILEJIT_ARCH": "sm_x"})
    assert "Traceback" not in r.stdout + r.stderr
    last = _backends_section(r.stdout)[-1]
    assert last.startswith("  used: none: TILEJIT_ARCH='sm_x': invalid target 'sm_x'") or "this GPU's target" in last


@pytest.mark.gpu
@pytest.mark.own_backend(reason="chooses its backends itself")
def test_a_launch_goes_through_the_chosen_backend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """On a GPU: backend='cuda' (and auto) launch and compute; an explicit unavailable backend is refused at
    the launch with the contract's error, before anything is compiled; the cache keeps working."""
    import numpy as np

    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    (tmp_path / "no-tileiras").mkdir()
    monkeypatch.setenv("TILEJIT_TILEIRAS", str(tmp_path / "no-tileiras"))  # the refusals below need no toolchain
    x = np.arange(300, dtype=np.float32)
    for backend in ("cuda", "auto", None):
        k = tj.kernel(_copy.func, backend=backend)
        out = tj.asarray(np.full(300, np.nan, np.float32))
        k[3](tj.asarray(x), out, TILE=128)
        assert np.array_equal(out.numpy(), x), backend
        (compiled,) = k._specs.values()
        assert compiled.artifact is not None and compiled.artifact.backend == "cuda"
    refused = tj.kernel(_copy.func, backend="tileir")
    with pytest.raises(TargetError, match=r"^backend='tileir': tileir backend not available here: "):
        refused[3](tj.asarray(x), tj.empty(300, "float32"), TILE=128)
    monkeypatch.setenv("TILEJIT_BACKEND", "tileir")
    with pytest.raises(TargetError, match=r"^TILEJIT_BACKEND=tileir: tileir backend not available here: "):
        tj.kernel(_copy.func)[3](tj.asarray(x), tj.empty(300, "float32"), TILE=128)
