"""The tilejit command line, run as a separate process the way users run it."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

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
    assert "\nnvJitLink (LTO linker, optional)\n" in r.stdout and "\nCUDA driver\n" in r.stdout
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
    assert "pass --arch" in r.stderr


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
