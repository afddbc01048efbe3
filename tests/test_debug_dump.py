"""Seeing what the compiler did (issue 20): ``TILEJIT_LOG`` and the ``tilejit`` logger's records of each compile
stage, ``TILEJIT_DUMP_DIR`` folders of every stage of a compiled kernel, and ``tilejit include-dir``."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import Toolkit, toolkits

import tilejit as tj
from tilejit.compiler.dump import write_folder
from tilejit.errors import DumpWarning
from tilejit.logs import HANDLER_NAME, logger_for

ROOT = Path(__file__).resolve().parent.parent
HEADERS = ["layout.cuh", "math.cuh", "memory.cuh", "mma.cuh", "reduce.cuh", "tile.cuh", "tilejit.cuh", "types.cuh"]
F32 = tj.float32[::1]


@tj.kernel
def dumped_add(x, y, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) + tj.load(y, index=(i,), shape=(TILE,)))


def _compile(tile: int = 256, backend: str = "cuda", target: str = "sm_80") -> Any:
    return tj.compile(dumped_add, (F32, F32, F32), constants={"TILE": tile}, target=target, backend=backend)


def _python(code: str, env: dict[str, str], script: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``code`` run by a new Python with no ``TILEJIT_*`` setting but ``env``'s (from the file ``script`` when given:
    kernels need a source file)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    full.update({"PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8", **env})
    args = ["-c", code]
    if script is not None:
        script.write_text(code)
        args = [str(script)]
    return subprocess.run([sys.executable, *args], env=full, capture_output=True, encoding="utf-8", timeout=300,
                          cwd=ROOT)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    full.update({"PYTHONIOENCODING": "utf-8", **(env or {})})
    return subprocess.run([sys.executable, "-m", "tilejit", *args], env=full, capture_output=True, encoding="utf-8",
                          timeout=300, cwd=ROOT)


# ------------------------------------------------------------------------------------------ TILEJIT_LOG


def test_tilejit_log_puts_one_stderr_handler_on_the_package_logger() -> None:
    code = ("import logging, tilejit; from tilejit.logs import configure; configure(); log = logging.getLogger("
            "'tilejit'); print(log.level, [h.get_name() for h in log.handlers], logging.getLogger().handlers)")
    r = _python(code, {"TILEJIT_LOG": "Debug"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"10 ['{HANDLER_NAME}'] []", "configured again, the handler is replaced, not added"
    assert _python(code.replace("configure(); ", ""), {"TILEJIT_LOG": "info"}).stdout.strip() == \
        f"20 ['{HANDLER_NAME}'] []"


def test_without_tilejit_log_importing_tilejit_adds_no_handler_and_loads_no_logging() -> None:
    r = _python("import sys, tilejit; loaded = 'logging' in sys.modules; import logging; "
                "print(loaded, logging.getLogger('tilejit').handlers, logging.getLogger('tilejit').level)", {})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False [] 0"


def test_a_bad_tilejit_log_warns_and_import_goes_on() -> None:
    r = _python("import logging, tilejit; print(logging.getLogger('tilejit').handlers)", {"TILEJIT_LOG": "loud"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    assert "RuntimeWarning: environment variable TILEJIT_LOG='loud': expected one of debug, info, warning" in r.stderr


def test_tilejit_log_prints_compile_stages_to_stderr(nvrtc_here: Path, tmp_path: Path) -> None:
    code = ("import tilejit as tj\n@tj.kernel\ndef k(x, T: tj.Constant[int]):\n"
            "    tj.store(x, index=(tj.bid(0),), tile=tj.load(x, index=(tj.bid(0),), shape=(T,)) * 2)\n"
            "tj.compile(k, (tj.float32[:],), constants={'T': 128}, target='sm_80', backend='cuda').cubin()\n")
    env = {"TILEJIT_NVRTC": os.environ["TILEJIT_NVRTC"], "TILEJIT_CACHE_DIR": str(nvrtc_here)}
    r = _python(code, {**env, "TILEJIT_LOG": "debug"}, tmp_path / "k.py")
    assert r.returncode == 0, r.stderr
    assert "[tilejit DEBUG tilejit.api.compile] kernel k: front end " in r.stderr
    assert re.search(r"\[tilejit DEBUG tilejit.compiler.nvrtc\] NVRTC \d+\.\d+ compiled k\.cu for sm_80 to cubin "
                     r"in \d+\.\d ms", r.stderr), r.stderr
    assert _python(code, {**env, "TILEJIT_LOG": "warning"}, tmp_path / "k.py").stderr == ""


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("tilejit")]


def test_debug_records_of_each_stage_with_times_and_cache_keys(nvrtc_here: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="tilejit")
    _compile(512).cubin()
    first = _messages(caplog)
    assert re.fullmatch(r"kernel dumped_add: front end \d+\.\d ms, IR passes \d+\.\d ms \(\d+ ops\) for dumped_add\("
                        r"x: array<f32, 1>, y: array<f32, 1>, out: array<f32, 1>; TILE=512\)", first[0]), first
    assert re.fullmatch(r"kernel dumped_add: CUDA C\+\+ for sm_80 generated in \d+\.\d ms \(\d+ threads, 0 bytes of "
                        r"shared memory\)", first[1]), first
    miss = [m for m in first if m.startswith("disk cache miss: ")]
    assert len(miss) == 1 and re.fullmatch(rf"disk cache miss: [0-9a-f]{{16}} in {re.escape(str(nvrtc_here))}", miss[0])
    key = miss[0].split()[3]
    assert f"disk cache stored {key} " in "\n".join(first)
    assert any(re.fullmatch(r"NVRTC \d+\.\d+ compiled dumped_add\.cu for sm_80 to cubin in \d+\.\d ms", m)
               for m in first), first
    assert re.fullmatch(r"kernel dumped_add: cuda backend: cubin for sm_80 in \d+\.\d ms \(\d+ threads per block\)",
                        first[-1]), first
    caplog.clear()
    _compile(512).cubin()  # a new artifact of the same kernel: NVRTC's output comes from the disk cache
    again = _messages(caplog)
    assert f"disk cache hit: {key} in {nvrtc_here}" in again
    assert f"NVRTC output from the disk cache: dumped_add.cu for sm_80 (cubin, key {key})" in again
    assert not any(m.startswith("NVRTC 1") for m in again), "no NVRTC run on a hit"


def test_no_record_is_made_and_no_message_built_below_the_level(nvrtc_here: Path, caplog: pytest.LogCaptureFixture,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.api.compile import Artifact

    caplog.set_level(logging.INFO, logger="tilejit")

    def no_describe(self: Any) -> str:
        raise AssertionError("a debug message was built although debug records are off")

    monkeypatch.setattr(Artifact, "describe", no_describe)
    _compile(128).cubin()
    assert _messages(caplog) == []
    assert logger_for("tilejit.compiler.cache") is None
    monkeypatch.delitem(sys.modules, "logging")  # a process that never imported logging: nothing is asked of it
    assert logger_for("tilejit.compiler.cache", 40) is None


def test_the_tile_ir_backend_logs_the_writer_and_tileiras(tileir_env: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="tilejit")
    art = tj.compile(dumped_add, (F32, F32, F32), constants={"TILE": 256}, target="sm_90", backend="tileir",
                     num_stages=3)
    art.cubin()
    text = "\n".join(_messages(caplog))
    assert re.search(r"kernel dumped_add: Tile IR bytecode 13\.\d+ for sm_90 written in \d+\.\d ms \(\d+ bytes\)", text)
    assert re.search(r"tileiras \S+ compiled \d+ bytes of bytecode for sm_90 in \d+\.\d ms \(\d+-byte CUBIN\)", text)
    assert "kernel dumped_add: num_stages=3 ignored: tileiras chooses the Tile IR backend's pipelines" in text


@pytest.mark.gpu
@pytest.mark.own_backend("logs the CUDA backend's module load; a Tile IR one is logged alike")
def test_module_loads_are_logged(caplog: pytest.LogCaptureFixture, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    caplog.set_level(logging.DEBUG, logger="tilejit")
    host = np.random.default_rng().standard_normal(300).astype(np.float32)
    x = tj.asarray(host)
    out = tj.asarray(np.full(300, np.nan, np.float32))
    dumped_add[(3,)](x, x, out, TILE=128)
    assert np.array_equal(out.numpy(), 2 * host)
    assert any(re.fullmatch(r"loaded a \d+-byte (cubin|ptx) module on device \d \(sm_\d+\) in \d+\.\d\d ms", m)
               for m in _messages(caplog)), _messages(caplog)


# ------------------------------------------------------------------------------------------ TILEJIT_DUMP_DIR


def _only_folder(root: Path) -> Path:
    (folder,) = list(root.iterdir())
    return folder


def test_a_compiled_kernel_leaves_every_stage_in_its_dump_folder(nvrtc_here: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "dumps"
    monkeypatch.setenv("TILEJIT_DUMP_DIR", str(root))
    art = _compile(256)
    cubin = art.cubin()
    folder = _only_folder(root)
    assert re.fullmatch(r"dumped_add\.sm_80\.cuda\.[0-9a-f]{12}", folder.name)
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert names == ["dumped_add.cu", "dumped_add.cubin", "dumped_add.ir", "dumped_add.ptx", "info.json",
                     *(f"tilejit/{h}" for h in HEADERS)]
    assert (folder / "dumped_add.cubin").read_bytes() == cubin
    assert (folder / "dumped_add.ir").read_text() == art.ir_text()
    assert (folder / "dumped_add.cu").read_text() == art.cuda_source()
    assert (folder / "dumped_add.ptx").read_text() == art.ptx()
    info = json.loads((folder / "info.json").read_text())
    assert info["specialization"] == "dumped_add(x: array<f32, 1>, y: array<f32, 1>, out: array<f32, 1>; TILE=256)"
    assert (info["backend"], info["target"], info["symbol"]) == ("cuda", "sm_80", "dumped_add")
    assert info["num_threads"] == art.cuda_kernel().num_threads and info["array_facts"]["x"]["aligned16"] is True
    assert info["compile"] == "nvcc -std=c++17 -arch=sm_80 -cubin -I . dumped_add.cu"
    assert info["files"] == [n for n in names if n != "info.json"]
    assert not list(root.glob(".*")), "no temporary folder is left"
    art.cubin()
    art.ptx()
    assert [p.name for p in root.iterdir()] == [folder.name], "an image already made is not dumped again"


def test_the_dumped_source_compiles_with_only_its_folder_as_include_path(toolkit: Toolkit, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda

    monkeypatch.setenv("TILEJIT_NVRTC", str(toolkit.nvrtc))
    monkeypatch.setenv("TILEJIT_DUMP_DIR", str(tmp_path / "dumps"))
    art = _compile(1024)
    art.cubin()
    folder = _only_folder(tmp_path / "dumps")
    source = (folder / "dumped_add.cu").read_text()
    assert source.splitlines()[0].endswith('its headers: -I "$(tilejit include-dir)"')
    prog = compile_cuda(source, name="dumped_add.cu", options=[f"-I{folder}"], target="sm_80", cache=False,
                        nvrtc=load_nvrtc(str(toolkit.nvrtc)))
    assert prog.code[:4] == b"\x7fELF"
    nvcc = shutil.which("nvcc")
    if nvcc is not None and toolkit is toolkits()[0]:  # as info.json says, with the CUDA toolkit on PATH
        done = subprocess.run([nvcc, "-std=c++17", "-arch=sm_80", "-cubin", "-I", ".", "dumped_add.cu", "-o",
                               str(tmp_path / "nvcc.cubin")], cwd=folder, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr


def test_a_tile_ir_kernel_dumps_its_text_bytecode_and_cubin(tileir_env: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.compiler.tileiras import BYTECODE_MAGIC

    monkeypatch.setenv("TILEJIT_DUMP_DIR", str(tmp_path / "dumps"))
    art = tj.compile(dumped_add, (F32, F32, F32), constants={"TILE": 256}, target="sm_90", backend="tileir")
    cubin = art.cubin()
    folder = _only_folder(tmp_path / "dumps")
    assert re.fullmatch(r"dumped_add\.sm_90\.tileir\.[0-9a-f]{12}", folder.name)
    assert sorted(p.name for p in folder.iterdir()) == ["dumped_add.cubin", "dumped_add.ir", "dumped_add.tileir",
                                                         "dumped_add.tileirbc", "info.json"]
    assert (folder / "dumped_add.cubin").read_bytes() == cubin
    assert (folder / "dumped_add.tileir").read_text() == art.tileir_text()
    assert (folder / "dumped_add.tileirbc").read_bytes().startswith(BYTECODE_MAGIC)
    info = json.loads((folder / "info.json").read_text())
    assert info["backend"] == "tileir" and "compile" not in info


def test_each_specialization_has_its_folder_and_a_recompile_replaces_it_whole(nvrtc_here: Path, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.api.dump import folder_name

    root = tmp_path / "dumps"
    monkeypatch.setenv("TILEJIT_DUMP_DIR", str(root))
    arts = [_compile(256), _compile(512), _compile(256, target="sm_90")]
    names = [folder_name(art, art.image()) for art in arts]
    assert sorted(p.name for p in root.iterdir()) == sorted(names)
    assert len(set(names)) == 3 and names[0].split(".")[:2] == ["dumped_add", "sm_80"], names
    first = root / names[0]
    (first / "stale.txt").write_text("from an older compile")
    _compile(256).cubin()
    assert sorted(p.name for p in root.iterdir()) == sorted(names)
    assert not (first / "stale.txt").exists() and (first / "info.json").is_file()


def test_a_dump_that_cannot_be_written_is_a_warning(nvrtc_here: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TILEJIT_DUMP_DIR", str(blocker))
    with pytest.warns(DumpWarning, match=rf"TILEJIT_DUMP_DIR: cannot write {re.escape(str(blocker))}/dumped_add\."
                                         r"sm_80\.cuda\.[0-9a-f]{12}: .*; the kernel is not dumped"):
        cubin = _compile(128).cubin()
    assert cubin[:4] == b"\x7fELF" and blocker.read_text() == "not a folder"


def test_a_stage_that_fails_is_left_out_with_a_warning(nvrtc_here: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.backends.cuda_backend import CudaBackend
    from tilejit.errors import CompileError

    program = CudaBackend.program

    def no_ptx(self: CudaBackend, *args: Any, kind: str = "cubin", **kwargs: Any) -> Any:
        if kind == "ptx":
            raise CompileError("NVRTC fails on purpose\nsecond line")
        return program(self, *args, kind=kind, **kwargs)

    monkeypatch.setattr(CudaBackend, "program", no_ptx)
    monkeypatch.setenv("TILEJIT_DUMP_DIR", str(tmp_path / "dumps"))
    with pytest.warns(DumpWarning, match=r"left out dumped_add\.ptx \(CompileError: NVRTC fails on purpose\)$"):
        _compile(128).cubin()
    folder = _only_folder(tmp_path / "dumps")
    assert (folder / "dumped_add.cu").is_file() and not (folder / "dumped_add.ptx").exists()
    assert "dumped_add.ptx" not in json.loads((folder / "info.json").read_text())["files"]


def test_a_kernel_the_disk_cache_serves_is_not_dumped(nvrtc_here: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Dumps are of compiles (as Triton's): a launch whose kernel comes from the disk cache writes none."""
    import tilejit.runtime.launch as rt_launch
    import tilejit.runtime.module as rt_module
    from tilejit.api import loader
    from tilejit.api.kernel import _source_fingerprint

    class Module:
        @classmethod
        def load(cls, image: bytes, kind: str | None = None, device: Any = None) -> Module:
            return cls()

        def get_function(self, name: str) -> str:
            return name

    class Launcher:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def launch_any_thread(self, grid: Any, args: Any, stream: Any = None) -> None:
            raise AssertionError("not launched here")

    monkeypatch.setattr(rt_module, "Module", Module)
    monkeypatch.setattr(rt_launch, "Launcher", Launcher)
    root = tmp_path / "dumps"
    monkeypatch.setenv("TILEJIT_DUMP_DIR", str(root))
    fingerprint = _source_fingerprint(dumped_add.func)
    loader.load_artifact(_compile(64), fingerprint)
    folder = _only_folder(root)
    shutil.rmtree(folder)
    loader.load_artifact(_compile(64), fingerprint)
    assert list(root.iterdir()) == []
    monkeypatch.setenv("TILEJIT_CACHE", "0")
    loader.load_artifact(_compile(64), fingerprint)
    assert [p.name for p in root.iterdir()] == [folder.name]


def test_write_folder_is_whole_under_concurrent_writers(tmp_path: Path) -> None:
    files = {f"f{i}.txt": bytes([i]) * 1000 for i in range(20)} | {"sub/deeper/x.bin": b"x"}
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for _ in range(10):
                assert write_folder(str(tmp_path), "k", files) == str(tmp_path / "k")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [p.name for p in tmp_path.iterdir()] == ["k"], "no temporary or old folder is left"
    got = {str(p.relative_to(tmp_path / "k")): p.read_bytes() for p in (tmp_path / "k").rglob("*") if p.is_file()}
    assert got == files


@pytest.mark.parametrize("bad", ["../escape", "/abs", "a/../../b", ""])
def test_write_folder_takes_only_paths_inside_the_folder(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="a dump's file name must be a relative path inside its folder"):
        write_folder(str(tmp_path), "k", {bad: b""})
    assert list(tmp_path.iterdir()) == []


def test_a_file_in_place_of_the_folder_is_left_alone_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "k").write_text("mine")
    with pytest.warns(DumpWarning, match="cannot write"):
        assert write_folder(str(tmp_path), "k", {"a": b"1"}) is None
    assert (tmp_path / "k").read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["k"]


# ------------------------------------------------------------------------------------------ the command line


def test_include_dir_prints_the_folder_of_the_device_headers(tmp_path: Path) -> None:
    r = _cli("include-dir")
    assert r.returncode == 0, r.stderr
    folder = Path(r.stdout.strip())
    assert folder == ROOT / "tilejit" / "backends" / "cuda" / "include"
    assert sorted(p.name for p in (folder / "tilejit").glob("*.cuh")) == HEADERS
    r = _cli("include-dir", "--copy-to", str(tmp_path / "inc"))
    assert r.returncode == 0 and r.stdout.strip() == str(tmp_path / "inc")
    for name in HEADERS:
        assert (tmp_path / "inc" / "tilejit" / name).read_bytes() == (folder / "tilejit" / name).read_bytes()


def test_doctor_shows_the_include_dir(tmp_path: Path) -> None:
    r = _cli("doctor", env={"TILEJIT_CACHE_DIR": str(tmp_path)})
    assert "Traceback" not in r.stdout + r.stderr
    include = ROOT / "tilejit" / "backends" / "cuda" / "include"
    assert (f"\nDevice headers (what generated CUDA C++ includes): {include} (nvcc -I this folder; `tilejit "
            "include-dir` prints it)\n") in r.stdout


def test_emitted_cuda_compiles_on_its_own(toolkit: Toolkit, tmp_path: Path) -> None:
    """`tilejit compile --emit cuda` wrote a .cu that no compiler could read without tilejit's include path."""
    env = {"TILEJIT_NVRTC": str(toolkit.nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path / "c")}
    out = tmp_path / "out"
    r = _cli("compile", "examples/vector_add.py", "--kernel", "vector_add", "--signature",
             "float32[:],float32[:],float32[:]", "-C", "TILE=1024", "--arch", "sm_80", "--emit", "cuda", "-o", str(out),
             env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"wrote the 8 device headers the .cu files include to {out / 'tilejit'}"
    assert sorted(p.name for p in (out / "tilejit").iterdir()) == HEADERS
    cu = out / "vector_add.vector_add.sm_80.cu"
    r = _cli("compile", str(cu), "--arch", "sm_80", "-o", str(tmp_path / "built"), env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "built" / "vector_add.vector_add.sm_80.sm_80.cubin").read_bytes()[:4] == b"\x7fELF"
