"""`tilejit compile FILE.py --kernel ...`: tile kernels compiled from the command line, no GPU needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tilejit", *args], capture_output=True, text=True,
                          encoding="utf-8", timeout=300)


def test_compile_tile_kernel_every_output(tmp_path: Path) -> None:
    proc = _cli("compile", str(EXAMPLES / "matmul.py"), "--kernel", "matmul",
                "--signature", "f16[:,::1], float16[:,:], float32[:,:]", "-C", "BM=64", "-C", "BN=64", "-C", "BK=32",
                "--arch", "sm_80", "--emit", "ir,cuda,ptx,cubin", "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    stem = tmp_path / "matmul.matmul.sm_80"
    assert "mma" in Path(f"{stem}.ir").read_text()
    assert 'extern "C"' in Path(f"{stem}.cu").read_text()
    assert ".target sm_80" in Path(f"{stem}.ptx").read_text()
    assert Path(f"{stem}.cubin").read_bytes()[:4] == b"\x7fELF"


def test_compile_tile_kernel_bad_input(tmp_path: Path) -> None:
    base = ["compile", str(EXAMPLES / "softmax.py"), "--arch", "sm_90", "-o", str(tmp_path)]
    proc = _cli(*base, "--kernel", "nope", "--signature", "float32[:,:],float32[:,:]")
    assert proc.returncode == 2 and "no @tj.kernel named 'nope'" in proc.stderr and "softmax" in proc.stderr
    proc = _cli(*base, "--kernel", "softmax", "--signature", "float33[:,:],float32[:,:]", "-C", "ROWS=1", "-C",
                "BLOCK=1024")
    assert proc.returncode == 2 and "unknown type 'float33[:,:]'" in proc.stderr
    proc = _cli(*base, "--kernel", "softmax", "--signature", "float32[::1,:],float32[:,:]", "-C", "ROWS=1", "-C",
                "BLOCK=1024")
    assert proc.returncode == 2 and "with ::1 last" in proc.stderr
    proc = _cli(*base, "--kernel", "softmax", "--signature", "float32[:,:]", "-C", "ROWS=1", "-C", "BLOCK=1024")
    assert proc.returncode == 2 and "2 non-constant parameters" in proc.stderr
    proc = _cli(*base, "--kernel", "softmax", "--signature", "float32[:,:],float32[:,:]", "-C", "ROWS=1", "-C",
                "BLOCK=1000")
    assert proc.returncode != 0 and "power of two" in proc.stderr and "Traceback" not in proc.stderr
