"""The tilejit command line, run as a separate process the way users run it."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import Toolkit, has_gpu

from tilejit.compiler.cache import DiskCache, cache_key

ROOT = Path(__file__).resolve().parent.parent
KERNEL = """#include "scale.h"
#include "local.cuh"
template <typename T>
__global__ void scale(T* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * (T)SCALE + (T)OFFSET + local_bias();
}
"""


def tilejit(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    full_env.update({"PYTHONIOENCODING": "utf-8", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "tilejit", *args], env=full_env, cwd=cwd, capture_output=True, timeout=300,
        encoding="utf-8", errors="strict",
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define SCALE 3\n")
    (tmp_path / "local.cuh").write_text("__device__ inline int local_bias() { return 1; }\n")
    (tmp_path / "scale.cu").write_text(KERNEL)
    return tmp_path


def test_doctor_with_nvrtc(toolkit: Toolkit, tmp_path: Path) -> None:
    from tilejit.bindings.nvrtc import load_nvrtc

    lib = load_nvrtc(str(toolkit.nvrtc))
    archs = lib.supported_archs()
    r = tilejit("doctor", env={"TILEJIT_NVRTC": str(toolkit.nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    out = r.stdout
    assert f"  found: {toolkit.nvrtc}" in out
    assert f"  version: {lib.version[0]}.{lib.version[1]}" in out
    assert "sm_80, " in out
    assert f"{tmp_path / 'c'}: 0 entries" in out
    assert "\nCUDA driver\n" in out and "\nGPUs\n" in out and "\nnvJitLink" in out
    summary = out.strip().splitlines()[-1]
    if has_gpu():
        assert summary.startswith("Summary: ready:")
    else:
        assert summary == (
            f"Summary: No GPU: you can compile for any of sm_{archs[0]}…sm_{archs[-1]} here "
            f"(NVRTC {lib.version[0]}.{lib.version[1]}); running kernels needs a GPU."
        )
        assert "  none: " in out.split("\nGPUs\n")[1]


def test_doctor_on_an_ascii_terminal(toolkit: Toolkit, tmp_path: Path) -> None:
    r = tilejit("doctor", env={"TILEJIT_NVRTC": str(toolkit.nvrtc), "PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    if not has_gpu():
        assert "Summary: No GPU: you can compile for any of sm_" in r.stdout
        assert "..." in r.stdout.strip().splitlines()[-1]


def test_doctor_without_nvrtc_lists_places_tried(tmp_path: Path) -> None:
    # Hide pip wheels (site-packages) and toolkit folders, so NVRTC can only come from the system loader.
    code = textwrap.dedent(
        f"""
        import site, sys
        sys.path[:] = [{str(ROOT)!r}] + [p for p in sys.path if p and "site-packages" not in p]
        site.getsitepackages = lambda: []
        site.getusersitepackages = lambda: {str(tmp_path / "user")!r}
        from tilejit.cli.main import main
        sys.exit(main(["doctor"]))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    for var in ("CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH"):
        env.pop(var, None)
    env.update({"TILEJIT_CACHE_DIR": str(tmp_path / "c"), "PYTHONIOENCODING": "utf-8"})
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, encoding="utf-8", timeout=300, cwd=tmp_path
    )
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    nvrtc_section = r.stdout.split("NVRTC (compiler)\n")[1].split("\n\n")[0]
    if nvrtc_section.startswith("  found:"):
        pytest.skip(f"NVRTC is installed system-wide here: {nvrtc_section.splitlines()[0]}")
    assert nvrtc_section.startswith("  not found:")
    assert "$TILEJIT_NVRTC: not set" in nvrtc_section
    assert "libnvrtc.so.13 (system loader)" in nvrtc_section
    assert 'pip install "tilejit[cu13]"' in nvrtc_section
    assert r.returncode == 1
    assert r.stdout.strip().splitlines()[-1].startswith("Summary: no NVRTC, so nothing can be compiled here")


def test_doctor_with_a_truncated_nvrtc(toolkit: Toolkit, tmp_path: Path) -> None:
    """A truncated NVRTC made doctor die of SIGBUS; now it lists the file and why it was not loaded."""
    bad = tmp_path / toolkit.nvrtc.name
    with open(toolkit.nvrtc, "rb") as f:
        bad.write_bytes(f.read(10_000_000))
    r = tilejit("doctor", env={"TILEJIT_NVRTC": str(bad), "TILEJIT_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr
    nvrtc_section = r.stdout.split("NVRTC (compiler)\n")[1].split("\n\n")[0]
    assert nvrtc_section.startswith("  not found:\n")
    assert f"      - {bad} ($TILEJIT_NVRTC): damaged library (truncated?): program header " in nvrtc_section
    assert "\nDisk cache\n" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("Summary: no NVRTC")


def test_doctor_reports_a_crashing_probe_and_goes_on(tmp_path: Path) -> None:
    """A library that crashes its loader (a signal) is reported by name; doctor goes on to the other sections."""
    if not hasattr(os, "fork"):
        pytest.skip("probes run in a child process only where there is fork")
    code = textwrap.dedent(
        """
        import os, signal, sys
        import tilejit.bindings.nvrtc
        tilejit.bindings.nvrtc.nvrtc = lambda: os.kill(os.getpid(), signal.SIGBUS)
        from tilejit.cli.main import main
        sys.exit(main(["doctor"]))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    env.update({"TILEJIT_CACHE_DIR": str(tmp_path / "c"), "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(ROOT)})
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, encoding="utf-8", timeout=300)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr
    nvrtc_section = r.stdout.split("NVRTC (compiler)\n")[1].split("\n\n")[0]
    assert nvrtc_section == f"  not found:\n    probing NVRTC crashed (signal {int(signal.SIGBUS)}, SIGBUS)"
    assert "\nnvJitLink (LTO linker): " in r.stdout and "\nCUDA driver\n" in r.stdout
    assert f"{tmp_path / 'c'}: 0 entries" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("Summary: no NVRTC")


def test_compile_writes_each_output(toolkit: Toolkit, project: Path) -> None:
    out = project / "out"
    r = tilejit(
        "compile", str(project / "scale.cu"), "--arch", "sm_80,sm_90", "--emit", "ptx,cubin", "-o", str(out),
        "-I", str(project / "inc"), "-D", "OFFSET=2", "--name-expr", "scale<float>",
        env={"TILEJIT_NVRTC": str(toolkit.nvrtc)},
    )
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["scale.sm_80.cubin", "scale.sm_80.ptx", "scale.sm_90.cubin", "scale.sm_90.ptx"]
    for arch in (80, 90):
        cubin = (out / f"scale.sm_{arch}.cubin").read_bytes()
        assert cubin[:4] == b"\x7fELF"
        flags = struct.unpack_from("<I", cubin, 48)[0]
        assert ((flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF) == arch
        ptx = (out / f"scale.sm_{arch}.ptx").read_text()
        assert f".target sm_{arch}" in ptx
        assert f"wrote {out / f'scale.sm_{arch}.cubin'}" in r.stdout
    assert "scale<float> -> _Z5scaleIfEvPT_i" in r.stdout
    # The CLI does not cache: headers from -I folders are invisible to the cache key.
    assert "Traceback" not in r.stderr


def test_compile_next_to_the_source_by_default(toolkit: Toolkit, project: Path) -> None:
    r = tilejit(
        "compile", "scale.cu", "--arch", "80", "-I", "inc", "-D", "OFFSET=2",
        env={"TILEJIT_NVRTC": str(toolkit.nvrtc)}, cwd=project,
    )
    assert r.returncode == 0, r.stderr
    assert (project / "scale.sm_80.cubin").read_bytes()[:4] == b"\x7fELF"


def test_compile_ltoir(toolkit: Toolkit, project: Path) -> None:
    r = tilejit(
        "compile", str(project / "scale.cu"), "--arch", "sm_80", "--emit", "ltoir", "-I", str(project / "inc"),
        "-D", "OFFSET=2", env={"TILEJIT_NVRTC": str(toolkit.nvrtc)},
    )
    if toolkit.major < 12:
        assert r.returncode == 1
        assert "output='ltoir' needs NVRTC 12.0 or newer" in r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert (project / "scale.sm_80.ltoir").stat().st_size > 64


def test_compile_error_prints_message_and_exits_1(toolkit: Toolkit, tmp_path: Path) -> None:
    lines = ['extern "C" __global__ void k(float* x) {', "    float a = x[0];", "    x[1] = a * SCALE;", "}"]
    (tmp_path / "broken.cu").write_text("\n".join(lines) + "\n")
    r = tilejit("compile", str(tmp_path / "broken.cu"), "--arch", "sm_80", env={"TILEJIT_NVRTC": str(toolkit.nvrtc)})
    assert r.returncode == 1, r.stdout
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("tilejit compile: error: NVRTC")
    assert 'broken.cu(3): error: identifier "SCALE" is undefined' in r.stderr
    assert "> 3 |     x[1] = a * SCALE;" in r.stderr
    assert "  2 |     float a = x[0];" in r.stderr
    assert not list(tmp_path.glob("broken.sm_80.*"))


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["--arch", "sm_8"], 1, "invalid target 'sm_8'"),
        (["--arch", "sm_990"], 1, "sm_990 is not supported by NVRTC"),
        (["--arch", "sm_80", "--emit", "sass"], 2, "--emit 'sass': choose from ptx, cubin, ltoir"),
        (["--arch", "sm_80", "--nvrtc-option=-arch=sm_90"], 2, "choose targets with --arch"),
        (["--arch", ",,"], 2, "--arch ',,' names no target"),
    ],
)
def test_compile_bad_input(toolkit: Toolkit, project: Path, args: list[str], code: int, text: str) -> None:
    r = tilejit("compile", str(project / "scale.cu"), *args, env={"TILEJIT_NVRTC": str(toolkit.nvrtc)})
    assert r.returncode == code, r.stderr
    assert text in r.stderr
    assert "Traceback" not in r.stderr


def test_compile_missing_file_and_unknown_kind(tmp_path: Path) -> None:
    r = tilejit("compile", str(tmp_path / "nope.cu"), "--arch", "sm_80")
    assert (r.returncode, "Traceback" in r.stderr) == (2, False)
    assert f"cannot read {tmp_path / 'nope.cu'}" in r.stderr
    (tmp_path / "k.txt").write_text("x")
    r = tilejit("compile", str(tmp_path / "k.txt"), "--arch", "sm_80")
    assert r.returncode == 2
    assert "don't know how to compile '.txt' files" in r.stderr


def test_compile_output_that_cannot_be_written(toolkit: Toolkit, project: Path) -> None:
    env = {"TILEJIT_NVRTC": str(toolkit.nvrtc)}
    (project / "afile").write_text("x")
    r = tilejit("compile", str(project / "scale.cu"), "--arch", "sm_80", "-o", str(project / "afile"), env=env)
    assert (r.returncode, "Traceback" in r.stderr) == (1, False), r.stderr
    assert f"cannot create the output folder {project / 'afile'}" in r.stderr
    (project / "out" / "scale.sm_80.cubin").mkdir(parents=True)
    r = tilejit("compile", str(project / "scale.cu"), "--arch", "sm_80", "-o", str(project / "out"),
                "-I", str(project / "inc"), "-D", "OFFSET=2", env=env)
    assert (r.returncode, "Traceback" in r.stderr) == (1, False), r.stderr
    assert f"cannot write {project / 'out' / 'scale.sm_80.cubin'}: Is a directory" in r.stderr
    assert [p.name for p in (project / "out").iterdir()] == ["scale.sm_80.cubin"], "no temp file left behind"


@pytest.mark.parametrize(
    ("env", "text"),
    [
        ({"TILEJIT_CACHE_MAX_BYTES": "lots"}, "TILEJIT_CACHE_MAX_BYTES='lots': expected a size in bytes"),
        ({"TILEJIT_CACHE_MAX_BYTES": "-1"}, "TILEJIT_CACHE_MAX_BYTES='-1': a size must be >= 0"),
        ({"TILEJIT_CACHE_MAX_BYTES": "infG"}, "TILEJIT_CACHE_MAX_BYTES='infG': expected a size in bytes"),
        ({"TILEJIT_CACHE": "maybe"}, "TILEJIT_CACHE='maybe': expected one of 1/0/true/false"),
    ],
)
def test_bad_settings_are_clear_errors(tmp_path: Path, env: dict[str, str], text: str) -> None:
    commands = [["cache", "info"]] + ([["cache", "clear"]] if "TILEJIT_CACHE_MAX_BYTES" in env else [])
    for command in commands:
        r = tilejit(*command, env={"TILEJIT_CACHE_DIR": str(tmp_path), **env})
        assert (r.returncode, "Traceback" in r.stderr) == (1, False), r.stderr
        assert text in r.stderr


def test_compile_with_a_bad_tilejit_arch(project: Path) -> None:
    if has_gpu():
        pytest.skip("with a GPU the target defaults to it")
    r = tilejit("compile", str(project / "scale.cu"), env={"TILEJIT_ARCH": "sm_9"})
    assert (r.returncode, "Traceback" in r.stderr) == (1, False), r.stderr
    assert "TILEJIT_ARCH='sm_9': invalid target 'sm_9'" in r.stderr


def test_cache_info_says_when_nothing_can_be_stored(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        ({"TILEJIT_CACHE_DIR": str(tmp_path / "c")}, "caching:   on"),
        ({"TILEJIT_CACHE_DIR": str(tmp_path / "c"), "TILEJIT_CACHE": "0"}, "caching:   off (TILEJIT_CACHE=0)"),
        ({"TILEJIT_CACHE_DIR": str(tmp_path / "c"), "TILEJIT_CACHE_MAX_BYTES": "0"},
         "caching:   off: TILEJIT_CACHE_MAX_BYTES=0 leaves no room for entries"),
        ({"TILEJIT_CACHE_DIR": str(afile)}, f"caching:   off: {afile} is not a folder"),
    ]
    for env, line in cases:
        r = tilejit("cache", "info", env=env)
        assert r.returncode == 0, r.stderr
        assert line in r.stdout.splitlines(), (env, r.stdout)


def test_compile_without_arch_or_gpu(project: Path) -> None:
    if has_gpu():
        pytest.skip("with a GPU the target defaults to it")
    r = tilejit("compile", str(project / "scale.cu"))
    assert r.returncode == 2
    assert "pass --arch sm_90, set TILEJIT_ARCH=sm_90, or run where a GPU is" in r.stderr


def test_cache_info_and_clear(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    cache = DiskCache(folder)
    for i in range(3):
        cache.put(cache_key(str(i)), {"code": b"x" * 1000})
    size = sum(p.stat().st_size for p in folder.iterdir())
    env = {"TILEJIT_CACHE_DIR": str(folder), "TILEJIT_CACHE_MAX_BYTES": "64M"}
    r = tilejit("cache", "info", env=env)
    assert r.returncode == 0, r.stderr
    assert f"directory: {folder}" in r.stdout
    assert "entries:   3" in r.stdout
    assert f"({size} bytes)" in r.stdout
    assert "max size:  64.0 MiB" in r.stdout
    r = tilejit("cache", "clear", env=env)
    assert (r.returncode, r.stdout.strip()) == (0, f"removed 3 entries from {folder}")
    assert list(folder.iterdir()) == []
    assert "entries:   0" in tilejit("cache", "info", env=env).stdout


def test_usage_errors() -> None:
    r = tilejit()
    assert r.returncode == 2
    assert "COMMAND" in r.stderr
    r = tilejit("cache", "wipe")
    assert r.returncode == 2
    assert "invalid choice: 'wipe'" in r.stderr
    r = tilejit("--version")
    assert (r.returncode, r.stdout.strip()) == (0, "tilejit 0.1.0")


def test_console_script_entry_point() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "tilejit"]
    assert ep.value == "tilejit.cli.main:main"
    from tilejit.cli.main import main

    assert ep.load() is main


# ---------------------------------------------------------------- issue 16: signatures, imports, flags, builds

TILE_FILE = """import tilejit as tj

@tj.kernel
def scale(x, out, s, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) * s)
"""


def _tile_project(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "kernels.py").write_text(TILE_FILE + extra)
    return tmp_path / "kernels.py"


def _outputs(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("", ()),
        ("  ", ()),
        ("float32[:]", (("float32", 1, False),)),
        ("f16[:,::1], float16[:,:],float32[ : , : ]", (("float16", 2, True), ("float16", 2, False),
                                                        ("float32", 2, False))),
        ("bool[:], i64[:,:,::1]", (("bool", 1, False), ("int64", 3, True))),
        ("int, float, bool, u8, bf16", ("int32", "float32", "bool", "uint8", "bfloat16")),
    ],
)
def test_parse_signature_accepts(text: str, want: tuple[object, ...]) -> None:
    from tilejit.api.signature import parse_signature
    from tilejit.language.ir.types import ArrayType, TileType

    got = parse_signature(text)
    assert len(got) == len(want)
    for t, w in zip(got, want):
        if isinstance(w, tuple):
            assert isinstance(t, ArrayType)
            assert (t.dtype.name, t.ndim, t.contiguous) == w
        else:
            assert isinstance(t, TileType) and t.shape == () and t.dtype.name == w


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("float32[:],float32[", 19, "expected ':' or '::1' for a dimension, found the end"),
        ("float32[:],float32", None, None),  # fine: the second parameter is a scalar, as written
        ("float32[:,:", 11, "expected ',' or ']' to close the '[' at column 7, found the end"),
        ("float32[]", 8, "expected ':' or '::1' for a dimension, found ']'"),
        ("float32[::2]", 10, "only ::1 (unit inner stride) may follow '::'"),
        ("float32[::1,:]", 8, "::1 is allowed only as the last dimension"),
        ("float32[:,::10]", 13, "expected ',' or ']' to close the '[' at column 7, found '0'"),
        ("float32[1]", 8, "expected ':' or '::1' for a dimension, found '1'"),
        ("float33[:,:],int32", 0, "unknown type 'float33[:,:]'"),
        ("int32,Float32", 6, "unknown type 'Float32'"),
        ("float32 int32", 8, "expected ',' or the end after 'float32', found 'i'"),
        ("float32[:]x", 10, "expected ',' or the end after 'float32[:]', found 'x'"),
        (",int32", 0, "expected a parameter type, found ','"),
        ("int32,,f32", 6, "expected a parameter type, found ','"),
        ("int32, ", 7, "expected a parameter type after ',', found the end"),
        ("int[:]", 3, "'int' is a Python scalar type and takes no dimensions; an array needs a dtype, e.g. int32[:]"),
        ("f32[:],\tf64[", 12, "expected ':' or '::1' for a dimension, found the end"),
    ],
)
def test_parse_signature_rejects_with_the_column(text: str, column: int | None, message: str | None) -> None:
    from tilejit.api.signature import parse_signature

    if column is None:
        assert len(parse_signature(text)) == 2
        return
    with pytest.raises(ValueError) as info:
        parse_signature(text)
    first, shown, caret = str(info.value).split("\n")
    assert first.startswith(f"column {column}: {message}")
    assert shown == "  " + text.replace("\t", " ")
    assert caret == "  " + " " * column + "^"


def test_parse_signature_wants_text() -> None:
    from tilejit.api.signature import parse_signature

    with pytest.raises(TypeError, match="signature text must be str, got list"):
        parse_signature(["float32[:]"])  # type: ignore[arg-type]


def test_compile_py_refuses_a_malformed_signature(tmp_path: Path) -> None:
    """Issue 16: 'float32[:],float32[' made the second parameter a float32 scalar and compiled."""
    kernels = _tile_project(tmp_path)
    r = tilejit("compile", str(kernels), "--kernel", "scale", "--signature", "float32[:],float32[:],float32[",
                "-C", "TILE=256", "--arch", "sm_80", "--emit", "cuda", "-o", str(tmp_path / "out"),
                env={"TILEJIT_CACHE_DIR": str(tmp_path / "c")})
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr
    assert r.stderr.splitlines() == [
        "tilejit compile: error: --signature: column 30: expected ':' or '::1' for a dimension, found the end; "
        "write arrays as dtype[:] (rank 1) or dtype[:,:] (rank 2), with ::1 last for unit inner stride and "
        "16-byte-aligned rows (e.g. f16[:,::1])",
        "  float32[:],float32[:],float32[",
        "                                ^",
    ]
    assert _outputs(tmp_path / "out") == []


def test_compile_py_a_scalar_is_a_scalar(tmp_path: Path) -> None:
    kernels = _tile_project(tmp_path)
    r = tilejit("compile", str(kernels), "--kernel", "scale", "--signature", "float32[:], float32[:], float32",
                "-C", "TILE=256", "--arch", "sm_80", "--emit", "ir", "-o", str(tmp_path / "out"),
                env={"TILEJIT_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr
    ir = (tmp_path / "out" / "kernels.scale.sm_80.ir").read_text()
    assert "array<f32, 1>" in ir and "s: f32" in ir, ir[:400]


@pytest.mark.parametrize(
    ("body", "lines"),
    [
        ("import sys\nsys.exit(0)\n", [
            "tilejit compile: error: {file} called sys.exit(0) while being imported, so nothing was compiled; a "
            'script that compiles must keep its own work under `if __name__ == "__main__":`',
            "  at {file}:8 in <module>: sys.exit(0)",
        ]),
        ("import sys\nsys.exit('no GPU')\n", [
            "tilejit compile: error: {file} called sys.exit('no GPU') while being imported, so nothing was "
            'compiled; a script that compiles must keep its own work under `if __name__ == "__main__":`',
            "  at {file}:8 in <module>: sys.exit('no GPU')",
        ]),
        ("import json\ndef setup():\n    return json.loads('{')\nsetup()\n", [
            "tilejit compile: error: cannot import {file}: JSONDecodeError: Expecting property name enclosed in "
            "double quotes: line 1 column 2 (char 1)",
            "  at {json}:{line} in raw_decode: {code}",
            "  called from {file}:9 in setup: return json.loads('{{')",
        ]),
        ("x = (1,\n", [
            "tilejit compile: error: cannot import {file}: SyntaxError: '(' was never closed",
            "  at {file}:7",
            "    x = (1,",
            "        ^",
        ]),
    ],
)
def test_compile_py_reports_a_failed_import(tmp_path: Path, body: str, lines: list[str]) -> None:
    """Issue 16: a file calling sys.exit(0) at import made `tilejit compile` exit 0 having written nothing."""
    import json.decoder
    import traceback

    kernels = _tile_project(tmp_path, body)
    r = tilejit("compile", str(kernels), "--kernel", "scale", "--signature", "float32[:],float32[:],float32",
                "-C", "TILE=256", "--arch", "sm_80", "-o", str(tmp_path / "out"),
                env={"TILEJIT_CACHE_DIR": str(tmp_path / "c")})
    assert (r.returncode, "Traceback" in r.stderr) == (1, False), r.stderr
    fields = {"file": str(kernels), "json": json.decoder.__file__}
    if "json" in body:
        try:
            json.loads("{")
        except ValueError as exc:
            last = traceback.extract_tb(exc.__traceback__)[-1]
            fields.update(line=str(last.lineno), code=(last.line or "").strip())
    assert r.stderr.splitlines() == [line.format(**fields) for line in lines]
    assert _outputs(tmp_path / "out") == []


def test_compile_py_interrupted_at_import_exits_130(tmp_path: Path) -> None:
    kernels = _tile_project(tmp_path, "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\n")
    r = tilejit("compile", str(kernels), "--kernel", "scale", "--signature", "float32[:],float32[:],float32",
                "-C", "TILE=256", "--arch", "sm_80", "-o", str(tmp_path / "out"))
    assert (r.returncode, r.stdout, r.stderr) == (130, "", "")


@pytest.mark.parametrize(
    ("flag", "why"),
    [
        (["-I", "inc"], "-I applies to CUDA C++ files only, and {file} is not one: a tile kernel's CUDA C++ is "
                        "generated, with tilejit's headers built in"),
        (["-D", "X=1"], "-D applies to CUDA C++ files only, and {file} is not one: a tile kernel takes "
                        "compile-time values as tj.Constant parameters (-C NAME=VALUE)"),
        (["--name-expr", "scale"], "--name-expr applies to CUDA C++ files only, and {file} is not one: a tile "
                                   "kernel is named by --kernel and has no C++ template to instantiate"),
        (["--nvrtc-option=--use_fast_math"], "-X/--nvrtc-option applies to CUDA C++ files only, and {file} is not one: "
                                    "tile kernels compile with the NVRTC options tilejit chooses for them"),
        (["-X-G"], "-X/--nvrtc-option applies to CUDA C++ files only"),
    ],
)
def test_compile_py_refuses_cuda_options(tmp_path: Path, flag: list[str], why: str) -> None:
    """Issue 16: -I, -D, --name-expr and -X were silently ignored for .py files."""
    kernels = _tile_project(tmp_path)
    r = tilejit("compile", str(kernels), "--kernel", "scale", "--signature", "float32[:],float32[:],float32",
                "-C", "TILE=256", "--arch", "sm_80", "-o", str(tmp_path / "out"), *flag,
                env={"TILEJIT_CACHE_DIR": str(tmp_path / "c")})
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr
    assert r.stderr.startswith("tilejit compile: error: " + why.format(file=kernels)), r.stderr
    assert _outputs(tmp_path / "out") == []


@pytest.mark.parametrize(
    ("flag", "why"),
    [
        (["--kernel", "scale"], "--kernel applies to Python files only, and {file} is not one: NVRTC compiles "
                                "every kernel of a CUDA C++ file (--name-expr names template instances)"),
        (["--signature", ""], "--signature applies to Python files only, and {file} is not one: a CUDA C++ "
                              "kernel's parameter types are in its source"),
        (["-C", "N=1"], "-C applies to Python files only, and {file} is not one: define CUDA C++ macros with "
                        "-D NAME=VALUE"),
    ],
)
def test_compile_cu_refuses_python_options(project: Path, flag: list[str], why: str) -> None:
    r = tilejit("compile", str(project / "scale.cu"), "--arch", "sm_80", "-o", str(project / "out"), *flag)
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr
    assert r.stderr.strip() == "tilejit compile: error: " + why.format(file=project / "scale.cu")


def _counting_nvrtc(toolkit: Toolkit, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Make ``toolkit``'s NVRTC the one compile_cuda uses in this process; returns the options of each compile."""
    import ctypes

    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler import nvrtc as nvrtc_module

    lib = load_nvrtc(str(toolkit.nvrtc))
    real = lib.nvrtcCompileProgram
    calls: list[tuple[str, ...]] = []

    def compile_program(prog: object, n: int, opts: ctypes.Array[ctypes.c_char_p]) -> int:
        calls.append(tuple((opts[i] or b"").decode() for i in range(n)))
        return int(real(prog, n, opts))

    monkeypatch.setattr(lib, "nvrtcCompileProgram", compile_program)
    monkeypatch.setattr(nvrtc_module, "_default_nvrtc", lambda: lib)
    return calls


def test_compile_ptx_and_cubin_from_one_nvrtc_run(toolkit: Toolkit, project: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16: `--emit ptx,cubin` ran NVRTC twice per target."""
    from tilejit.cli.main import main

    calls = _counting_nvrtc(toolkit, monkeypatch)
    out = project / "out"
    rc = main(["compile", str(project / "scale.cu"), "--arch", "sm_80", "--emit", "cubin,ptx", "-o", str(out),
               "-I", str(project / "inc"), "-D", "OFFSET=2", "--name-expr", "scale<float>"])
    assert rc == 0
    assert len(calls) == 1 and "-arch=sm_80" in calls[0], calls
    assert _outputs(out) == ["scale.sm_80.cubin", "scale.sm_80.ptx"]
    ptx = (out / "scale.sm_80.ptx").read_text()
    assert ".target sm_80" in ptx and "_Z5scaleIfEvPT_i" in ptx
    assert (out / "scale.sm_80.cubin").read_bytes()[:4] == b"\x7fELF"


def test_compile_py_ptx_and_cubin_from_one_nvrtc_run(toolkit: Toolkit, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tilejit.cli.main import main

    monkeypatch.setenv("TILEJIT_CACHE", "0")
    calls = _counting_nvrtc(toolkit, monkeypatch)
    kernels = _tile_project(tmp_path)
    out = tmp_path / "out"
    rc = main(["compile", str(kernels), "--kernel", "scale", "--signature", "float32[:],float32[:],float32",
               "-C", "TILE=256", "--arch", "sm_80", "--emit", "ptx,cubin,cuda", "-o", str(out)])
    assert rc == 0
    assert len(calls) == 1 and "-arch=sm_80" in calls[0], calls
    assert _outputs(out) == ["kernels.scale.sm_80.cu", "kernels.scale.sm_80.cubin", "kernels.scale.sm_80.ptx",
                             "tilejit"]
    assert ".target sm_80" in (out / "kernels.scale.sm_80.ptx").read_text()
    assert (out / "tilejit" / "tilejit.cuh").is_file(), "the headers the .cu includes are written beside it"


@pytest.mark.parametrize("options", [(), ("-lineinfo",), ("--use_fast_math", "-DX=2")])
def test_ptx_and_cubin_of_one_run_are_those_of_two(toolkit: Toolkit, options: tuple[str, ...]) -> None:
    """The PTX of a compile for sm_XX is byte for byte the PTX of a compile for compute_XX, for every major."""
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda, compile_cuda_ptx_and_cubin

    lib = load_nvrtc(str(toolkit.nvrtc))
    source = KERNEL.replace('#include "scale.h"\n#include "local.cuh"\n', "#define SCALE 3\n#define OFFSET X\n")
    source = source.replace("+ local_bias()", "+ __expf((float)x[0])")
    targets = ["sm_75", "sm_80", "sm_90"] + (["sm_90a"] if lib.version >= (12, 0) else [])
    for target in targets:
        kw = {"target": target, "options": ("-DX=1", *options), "name_expressions": ("scale<float>",), "nvrtc": lib}
        ptx, cubin = compile_cuda_ptx_and_cubin(source, **kw)  # type: ignore[arg-type]
        want_ptx = compile_cuda(source, output="ptx", cache=False, **kw)  # type: ignore[arg-type]
        want_cubin = compile_cuda(source, output="cubin", cache=False, **kw)  # type: ignore[arg-type]
        assert (ptx.kind, cubin.kind) == ("ptx", "cubin")
        assert ptx.code == want_ptx.code, target
        assert cubin.code == want_cubin.code, target
        assert ptx.lowered_names == cubin.lowered_names == want_ptx.lowered_names
        assert ptx.target == cubin.target == want_cubin.target


def test_ptx_and_cubin_errors_are_compile_cudas(toolkit: Toolkit) -> None:
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda_ptx_and_cubin
    from tilejit.errors import CompileError, TargetError

    lib = load_nvrtc(str(toolkit.nvrtc))
    with pytest.raises(CompileError, match=r"could not compile bad\.cu for sm_80"):
        compile_cuda_ptx_and_cubin("__global__ void k() { oops }", name="bad.cu", target="sm_80", nvrtc=lib)
    with pytest.raises(TargetError, match="sm_990 is not supported"):
        compile_cuda_ptx_and_cubin("__global__ void k() {}", target="sm_990", nvrtc=lib)
    with pytest.raises(ValueError, match="choose the architecture with target="):
        compile_cuda_ptx_and_cubin("__global__ void k() {}", target="sm_80", options=["-arch=sm_90"], nvrtc=lib)


def test_compile_many_targets_in_processes_with_a_failure(toolkit: Toolkit, tmp_path: Path) -> None:
    """Issue 16: targets built one at a time; now in processes, and a failing one stops none of the others."""
    log = tmp_path / "imports.log"
    record_pid = f"import os\nwith open({str(log)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
    kernels = _tile_project(tmp_path, record_pid)
    r = tilejit("compile", str(kernels), "--kernel", "scale", "--signature", "float32[:],float32[:],float32",
                "-C", "TILE=256", "--arch", "sm_990,sm_80,sm_90,sm_80", "--emit", "ptx,cubin", "-j", "2",
                "-o", str(tmp_path / "out"),
                env={"TILEJIT_NVRTC": str(toolkit.nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path / "c")})
    assert (r.returncode, "Traceback" in r.stderr) == (1, False), r.stderr
    assert _outputs(tmp_path / "out") == [f"kernels.scale.sm_{a}.{e}" for a in (80, 90) for e in ("cubin", "ptx")]
    errors = r.stderr.strip().splitlines()
    assert errors[0].startswith("tilejit compile: error: sm_990: sm_990 is not supported by NVRTC"), errors
    assert errors[-1] == "tilejit compile: error: 1 of 3 builds failed (sm_990); the others' outputs were written"
    assert "%|" not in r.stderr  # stderr is not a terminal: no progress bar unless asked for
    pids = log.read_text().split()
    assert len(set(pids)) >= 2, pids  # this process imported the file, and so did a worker process


def test_compile_cu_many_targets_progress_bar(toolkit: Toolkit, project: Path) -> None:
    archs = [a for a in ("sm_75", "sm_80", "sm_86", "sm_90") if int(a[3:]) in _supported(toolkit)]
    r = tilejit("compile", str(project / "scale.cu"), "--arch", ",".join(archs), "--emit", "cubin", "--progress",
                "-o", str(project / "out"), "-I", str(project / "inc"), "-D", "OFFSET=2",
                env={"TILEJIT_NVRTC": str(toolkit.nvrtc)})
    assert (r.returncode, "Traceback" in r.stderr) == (0, False), r.stderr
    assert _outputs(project / "out") == [f"scale.{a}.cubin" for a in archs]
    assert "compiling scale.cu: 100%|" in r.stderr and f"{len(archs)}/{len(archs)}" in r.stderr, r.stderr
    assert sorted(ln for ln in r.stdout.splitlines()) == sorted(
        f"wrote {project / 'out' / f'scale.{a}.cubin'} ({_size(project / 'out' / f'scale.{a}.cubin')})" for a in archs
    )
    r = tilejit("compile", str(project / "scale.cu"), "--arch", ",".join(archs), "--no-progress", "-j", "1",
                "-o", str(project / "out2"), "-I", str(project / "inc"), "-D", "OFFSET=2",
                env={"TILEJIT_NVRTC": str(toolkit.nvrtc)})
    assert (r.returncode, r.stderr) == (0, "")
    written = [ln.split()[1] for ln in r.stdout.splitlines()]
    assert written == [str(project / "out2" / f"scale.{a}.cubin") for a in archs]  # -j 1: in order


def _supported(toolkit: Toolkit) -> list[int]:
    from tilejit.bindings.nvrtc import load_nvrtc

    return list(load_nvrtc(str(toolkit.nvrtc)).supported_archs())


def _size(path: Path) -> str:
    from tilejit.cli.main import _bytes

    return _bytes(path.stat().st_size)


@pytest.mark.parametrize(("args", "text"), [(["-j", "0"], "expected a positive number of builds at once, got '0'"),
                                            (["-j", "many"], "expected a positive number of builds at once")])
def test_compile_bad_job_count(project: Path, args: list[str], text: str) -> None:
    r = tilejit("compile", str(project / "scale.cu"), "--arch", "sm_80", *args)
    assert (r.returncode, "Traceback" in r.stderr) == (2, False)
    assert text in r.stderr


def test_messages_count_in_words(tmp_path: Path) -> None:
    """Issue 16: `cache clear` printed 'removed 1 entries'."""
    folder = tmp_path / "c"
    DiskCache(folder).put(cache_key("one"), {"code": b"x"})
    env = {"TILEJIT_CACHE_DIR": str(folder)}
    r = tilejit("doctor", env=env)
    assert f"  {folder}: 1 entry, " in r.stdout, r.stdout
    r = tilejit("cache", "clear", env=env)
    assert (r.returncode, r.stdout.strip()) == (0, f"removed 1 entry from {folder}")
    r = tilejit("cache", "clear", env=env)
    assert (r.returncode, r.stdout.strip()) == (0, f"removed 0 entries from {folder}")


def _nvjitlink_of(toolkit: Toolkit) -> Path | None:
    found = sorted(toolkit.root.glob(f"nvidia/*/lib/libnvJitLink.so.{toolkit.major}"))
    return found[0] if found else None


def test_doctor_reports_nvjitlink_in_one_line(toolkit: Toolkit, tmp_path: Path) -> None:
    """Issue 16: a missing nvJitLink, which nothing uses, took a 10-line 'not found' block."""
    env = {"TILEJIT_NVRTC": str(toolkit.nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path / "c"),
           "TILEJIT_NVJITLINK": str(tmp_path / "libnvJitLink.so.12")}
    r = tilejit("doctor", env=env)
    assert r.returncode == 0, r.stderr
    section = r.stdout.split("\n\nnvJitLink")[1].split("\n\n")[0]
    assert "nvJitLink" + section == "nvJitLink (LTO linker): not found (optional: nothing in tilejit uses it yet)"
    library = _nvjitlink_of(toolkit)
    if library is None:
        return
    from tilejit.bindings.nvjitlink import load_nvjitlink

    version = ".".join(map(str, load_nvjitlink(str(library)).version))
    r = tilejit("doctor", env={**env, "TILEJIT_NVJITLINK": str(library)})
    section = r.stdout.split("\n\nnvJitLink")[1].split("\n\n")[0]
    assert "nvJitLink" + section == (
        f"nvJitLink (LTO linker): {version} at {library} (optional: nothing in tilejit uses it yet)"
    )


def _doctor_targets(toolkit: Toolkit, tmp_path: Path) -> dict[str, str]:
    r = tilejit("doctor", env={"TILEJIT_NVRTC": str(toolkit.nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr
    nvrtc = r.stdout.split("NVRTC (compiler)\n")[1].split("\n\n")[0]
    return dict(ln.strip().split(": ", 1) for ln in nvrtc.splitlines())


def test_doctor_lists_arch_specific_and_family_targets(toolkit: Toolkit, tmp_path: Path) -> None:
    """Issue 16: doctor listed no arch-specific targets, though sm_90a and sm_100a compile. Each one it lists
    compiles, and each 'a'/'f' spelling of a supported architecture that it leaves out does not."""
    from tilejit.bindings.nvrtc import load_nvrtc
    from tilejit.compiler.nvrtc import compile_cuda
    from tilejit.errors import TilejitError

    lib = load_nvrtc(str(toolkit.nvrtc))
    lines = _doctor_targets(toolkit, tmp_path)
    for key, suffix, first in (("arch-specific targets", "a", 90), ("family targets", "f", 100)):
        listed = [] if lines[key].startswith("none") else lines[key].split(", ")
        for number in lib.supported_archs():
            if number < first:
                continue
            try:
                compile_cuda("__global__ void k() {}", target=f"sm_{number}{suffix}", nvrtc=lib, cache=False)
                compiles = True
            except TilejitError:
                compiles = False
            assert compiles == (f"sm_{number}{suffix}" in listed), (key, number, lines[key])
        if not listed:
            need = "12.0" if suffix == "a" else "12.9"
            assert lines[key] == (f"none (they need NVRTC {need} or newer)" if lib.version < (12, int(need[3]))
                                  else "none")
    if lib.version >= (12, 0):
        assert "sm_90a" in lines["arch-specific targets"]


def test_readme_targets_are_what_doctor_reports(toolkit: Toolkit, tmp_path: Path) -> None:
    """Issue 16: the README's target ranges disagreed with doctor. Its table has a row per NVRTC version that
    CI installs; a toolkit of another version is not described there (an older minor supports fewer)."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = {m[0]: m[1:] for m in re.findall(r"^\| (\d+\.\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", readme, re.M)}
    assert rows, "README.md has no table of each NVRTC's targets"
    from tilejit.bindings.nvrtc import load_nvrtc

    version = ".".join(map(str, load_nvrtc(str(toolkit.nvrtc)).version))
    if version not in rows:
        pytest.skip(f"README.md's target table has no row for NVRTC {version} (rows: {', '.join(rows)})")
    lines = _doctor_targets(toolkit, tmp_path)
    want = [lines[k].split(" (")[0] for k in ("targets", "arch-specific targets", "family targets")]
    assert [cell.strip() for cell in rows[version]] == want


def test_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    """`tilejit doctor | head -1` printed two BrokenPipeError tracebacks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    env["TILEJIT_CACHE_DIR"] = str(tmp_path / "c")
    proc = subprocess.Popen([sys.executable, "-m", "tilejit", "doctor"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command prints anything: it starts in far more than this takes
    err = proc.stderr.read().decode()
    assert (proc.wait(timeout=300), err) == (141, "")


def test_ctrl_c_stops_parallel_builds_at_once(toolkit: Toolkit, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during builds in worker processes
    exits 130 at once, with no traceback from any process, though a worker is busy for a minute."""
    import time

    busy_worker = (
        "import multiprocessing, os, signal, time\n"
        "if multiprocessing.parent_process() is not None:  # a build process, not the command\n"
        "    os.killpg(os.getpgid(0), signal.SIGINT)\n"
        "    time.sleep(60)\n"
    )
    kernels = _tile_project(tmp_path, busy_worker)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    env.update({"TILEJIT_NVRTC": str(toolkit.nvrtc), "TILEJIT_CACHE_DIR": str(tmp_path / "c")})
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "tilejit", "compile", str(kernels), "--kernel", "scale", "--signature",
         "float32[:],float32[:],float32", "-C", "TILE=256", "--arch", "sm_80,sm_90", "-j", "2",
         "-o", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=120, start_new_session=True,
    )
    assert (r.returncode, r.stderr) == (130, ""), r.stderr
    assert time.monotonic() - start < 30


def test_compile_py_missing_file(tmp_path: Path) -> None:
    r = tilejit("compile", str(tmp_path / "nope.py"), "--kernel", "k", "--signature", "float32[:]", "--arch", "sm_80")
    assert (r.returncode, r.stderr.strip()) == (2, f"tilejit compile: error: cannot read {tmp_path / 'nope.py'}: "
                                                   "no such file")


def test_ctrl_c_while_build_processes_start_is_held_not_lost() -> None:
    """While the build processes start, Ctrl-C is held back (so none of them prints a traceback), then stops the
    command: ignoring it there lost a Ctrl-C that came in the first moments, and the command ran on."""
    if not hasattr(signal, "pthread_sigmask"):
        pytest.skip("no signal masks here: Ctrl-C is ignored while the processes start")
    code = textwrap.dedent(
        """
        import os, signal, time
        from tilejit.cli.main import _interrupts_held
        try:
            with _interrupts_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
                print("held", flush=True)
            print("lost")
        except KeyboardInterrupt:
            print("stopped")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.stdout.split(), r.stderr) == (["held", "stopped"], "")


def test_compile_tile_ir_for_many_targets_writes_text_bytecode_and_cubins_with_a_progress_bar(
        tileir_toolchain: Any, tmp_path: Path) -> None:
    """Issue 17: ``--backend tileir --emit tileir,tileirbc,cubin`` for three targets writes each target's Tile IR
    text, bytecode and tileiras CUBIN, with a tqdm progress bar when asked for; the default on a pipe is none."""
    from tilejit.backends.tileir_backend import elf_sections
    from tilejit.compiler.tileiras import disassemble

    kernels = _tile_project(tmp_path)
    archs = ("sm_80", "sm_90", "sm_100")
    args = ("compile", str(kernels), "--kernel", "scale", "--signature", "float32[:],float32[:],float32", "-C",
            "TILE=256", "--backend", "tileir", "--emit", "tileir,tileirbc,cubin", "--arch", ",".join(archs))
    env = {"TILEJIT_TILEIRAS": tileir_toolchain.tileiras, "TILEJIT_CACHE_DIR": str(tmp_path / "c")}
    r = tilejit(*args, "--progress", "-o", str(tmp_path / "out"), env=env)
    assert (r.returncode, "Traceback" in r.stderr) == (0, False), r.stderr
    out = tmp_path / "out"
    assert _outputs(out) == sorted(f"kernels.scale.{a}.{e}" for a in archs for e in ("cubin", "tileir", "tileirbc"))
    assert "compiling kernels.py: 100%|" in r.stderr and "3/3" in r.stderr, r.stderr
    for a in archs:
        assert (out / f"kernels.scale.{a}.tileir").read_text().startswith("cuda_tile.module @scale {")
        bytecode = (out / f"kernels.scale.{a}.tileirbc").read_bytes()
        assert "entry @scale(" in disassemble(bytecode, toolchain=tileir_toolchain)
        cubin = (out / f"kernels.scale.{a}.cubin").read_bytes()
        assert b"___NV_TILE_LAUNCH_META_DATA___" in elf_sections(cubin)[".strtab"]  # tileiras's, not NVRTC's
    assert sorted(r.stdout.splitlines()) == sorted(
        f"wrote {out / f'kernels.scale.{a}.{e}'} ({_size(out / f'kernels.scale.{a}.{e}')})"
        for a in archs for e in ("cubin", "tileir", "tileirbc"))
    r = tilejit(*args, "-o", str(tmp_path / "out2"), env=env)
    assert (r.returncode, "%|" in r.stderr) == (0, False), r.stderr  # stderr is a pipe: no bar unless asked for
    assert _outputs(tmp_path / "out2") == _outputs(out)
