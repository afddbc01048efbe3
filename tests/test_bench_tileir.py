"""bench/bench_tileir.py on the CPU: its arguments, its tables and geometric means on made-up numbers, how it
reports refusals and errors, and its compile-only path (no timing here: the lead runs the real thing on a GPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tilejit.errors import TileCompileError

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "bench_tileir.py"
CUTILE = ROOT / ".ci-cache" / "cutile"


@pytest.fixture(scope="module")
def bt() -> ModuleType:
    """The benchmark script as a module (the sys.path entries it adds for its own imports are taken back)."""
    saved = sys.path[:]
    spec = importlib.util.spec_from_file_location("bench_tileir_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path[:] = saved
    return module


def test_arguments_defaults_quick_and_out(bt: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OUT", raising=False)
    args = bt.parse_args([])
    assert args.kernels == ("vadd", "softmax", "layernorm", "matmul", "compile")
    assert args.tile_list == [(128, 256, 32), (128, 128, 64)]
    assert args.compile_reps == 3 and args.out is None and not args.quick
    monkeypatch.setenv("OUT", "/some/where")
    quick = bt.parse_args(["--quick", "--only", "softmax,matmul", "--tiles", "64x64x32"])
    assert quick.kernels == ("softmax", "matmul") and quick.tile_list == [(64, 64, 32)]
    assert quick.compile_reps == 1 and quick.out == "/some/where"
    assert bt.parse_args(["--out", "/else"]).out == "/else"


@pytest.mark.parametrize("argv", [["--only", "softmax,gemm"], ["--tiles", "128x100x64"], ["--tiles", "128x128"],
                                  ["--compile-reps", "0"]])
def test_bad_arguments_exit_with_usage(bt: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bt.parse_args(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_plan_full_covers_the_issue_shapes_and_quick_is_a_subset(bt: ModuleType) -> None:
    full, quick = bt.plan(False), bt.plan(True)
    assert full["rows"] == (1024, 2048, 4096, 8192, 16384, 32768)
    assert {(2048,) * 3, (4096,) * 3, (8192,) * 3} <= set(full["matmul"])
    assert any(len(set(s)) > 1 for s in full["matmul"])  # non-square shapes too
    for key in full:
        assert set(quick[key]) < set(full[key])
    assert all(bt.ROW_ELEMENTS % n == 0 for n in full["rows"])


def test_geomean(bt: ModuleType) -> None:
    assert bt.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert bt.geomean([0.5, 2.0, 1.0]) == pytest.approx(1.0)
    assert bt.geomean([]) is None
    assert bt.geomean([0.0, -1.0, float("nan")]) is None
    assert bt.geomean([8.0, float("nan")]) == pytest.approx(8.0)


def test_result_rates(bt: ModuleType) -> None:
    r = bt.result("g", "s", "c", "GB/s", ms=1.0, work=1e9)
    assert r["rate"] == pytest.approx(1000.0)
    assert bt.result("g", "s", "c", "TFLOP/s", ms=2.0, work=4e12)["rate"] == pytest.approx(2000.0)
    assert bt.result("g", "s", "c", "GB/s", status="n/a (x)")["rate"] is None


def fake_results(bt: ModuleType) -> list[dict[str, Any]]:
    """Two groups of made-up cells: every kind of status, and rates with known ratios."""
    r = bt.result
    return [
        r("softmax f32", "64x1024", "tilejit cuda", "GB/s", ms=1.0, work=2e9),   # 2000 GB/s
        r("softmax f32", "64x1024", "tilejit tileir", "GB/s", ms=2.0, work=2e9),  # 0.5x
        r("softmax f32", "64x1024", "torch", "GB/s", status="wrong: result differs: relative error 1e+00 > 1e-05"),
        r("softmax f32", "64x1024", "cuTile", "GB/s", status="n/a (cuda.tile: No module named 'cuda')"),
        r("softmax f32", "32x2048", "tilejit cuda", "GB/s", ms=1.0, work=2e9),
        r("softmax f32", "32x2048", "tilejit tileir", "GB/s", status="refused: softmax.py:15:9: error: a|b"),
        r("softmax f32", "32x2048", "torch", "GB/s", ms=0.5, work=2e9),            # 2.0x
        r("softmax f32", "32x2048", "cuTile", "GB/s", status="n/a (cuda.tile: No module named 'cuda')"),
        r("matmul bf16", "4096x4096x4096", "cuBLAS", "TFLOP/s", ms=1.0, work=6e14),  # 600 TFLOP/s
        r("matmul bf16", "4096x4096x4096", "triton 128x256x64", "TFLOP/s", ms=1.25, work=6e14),  # 0.8x
        r("matmul bf16", "8192x8192x8192", "cuBLAS", "TFLOP/s", ms=1.0, work=6e14),
        r("matmul bf16", "8192x8192x8192", "triton 128x256x64", "TFLOP/s", ms=0.8, work=6e14),  # 1.25x
    ]


def test_ratios_are_against_the_units_reference(bt: ModuleType) -> None:
    res = fake_results(bt)
    soft = bt.ratios(res, "softmax f32")
    assert soft["tilejit cuda"] == {"64x1024": 1.0, "32x2048": 1.0}
    assert soft["tilejit tileir"] == {"64x1024": pytest.approx(0.5)}
    assert soft["torch"] == {"32x2048": pytest.approx(2.0)}
    assert "cuTile" not in soft
    mm = bt.ratios(res, "matmul bf16")
    assert mm["triton 128x256x64"] == {"4096x4096x4096": pytest.approx(0.8), "8192x8192x8192": pytest.approx(1.25)}


def test_group_table_cells_and_geomean_row(bt: ModuleType) -> None:
    lines = bt.group_table(fake_results(bt), "softmax f32")
    assert lines[0] == "### softmax f32 (GB/s; ratio to tilejit cuda; shape rows x length)"
    assert lines[2] == "| shape | tilejit cuda | tilejit tileir | torch | cuTile |"
    rows = {ln.split(" | ")[0]: ln.split(" | ")[1:] for ln in lines[4:]}
    assert rows["| 64x1024"][:2] == ["2000 (1.00x)", "1000 (0.50x)"]
    assert rows["| 64x1024"][2].startswith("wrong: result differs")
    assert rows["| 64x1024"][3] == "n/a (cuda.tile: No module named 'cuda') |"
    assert lines[5].split(" | ")[2] == "refused: softmax.py:15:9: error: a\\|b"  # a | in a message is escaped
    gm = lines[-1].split(" | ")
    assert gm[0] == "| geomean vs tilejit cuda"
    assert gm[1:4] == ["1.00x", "0.50x (1/2)", "2.00x (1/2)"]
    assert gm[4] == " |"  # no ratio at all for cuTile
    mm = bt.group_table(fake_results(bt), "matmul bf16")
    assert mm[0] == "### matmul bf16 (TFLOP/s; ratio to cuBLAS; shape MxNxK)"
    assert mm[-1].endswith("| 1.00x | 1.00x |")  # geomean(0.8, 1.25) = 1


def test_render_summary_and_compile_table(bt: ModuleType) -> None:
    compile_rows = [
        {"kernel": "vector_add f32",
         "cuda": {"front_ms": 1.0, "backend_ms": 200.0, "total_ms": 201.0, "status": "ok"},
         "tileir": {"front_ms": 1.0, "backend_ms": 300.0, "total_ms": 301.0, "status": "ok"},
         "cutile": {"total_ms": 500.0, "status": "ok"}},
        {"kernel": "softmax f32 BLOCK=8192",
         "cuda": {"front_ms": 8.0, "backend_ms": 330.0, "total_ms": 338.0, "status": "ok"},
         "tileir": {"status": "refused: softmax.py:15:9: error: no exp"},
         "cutile": {"status": "n/a (cuda.tile: missing)"}},
    ]
    text = bt.render(fake_results(bt), compile_rows, ["## head"])
    assert text.startswith("## head\n")
    assert "| softmax f32 | tilejit tileir | 0.50x | 1/2 |" in text
    assert "| matmul bf16 | triton 128x256x64 | 1.00x | 2/2 |" in text
    assert "| vector_add f32 | 1 | 200 | 300 | 1.50x | 201 | 301 | 500 |" in text
    assert ("| softmax f32 BLOCK=8192 | 8 | 330 | refused: softmax.py:15:9: error: no exp |  | 338 |  | "
            "n/a (cuda.tile: missing) |") in text
    assert text.index("### softmax f32") < text.index("### matmul bf16") < text.index("### cold compile")
    only_compile = bt.render([], compile_rows, ["## head"])
    assert "### geometric means" not in only_compile and "### cold compile" in only_compile


def test_failure_text_refused_only_for_the_tile_ir_backends_compile_errors(bt: ModuleType) -> None:
    err = TileCompileError("the Tile IR backend cannot express 'unary' (fn='exp' on float32) yet",
                           "/x/y/examples/softmax.py", 15, 8, "    e = tj.exp(t)")
    assert bt.failure("tilejit tileir", err) == ("refused: softmax.py:15:9: error: the Tile IR backend cannot express "
                                                 "'unary' (fn='exp' on float32) yet")
    assert bt.failure("tilejit tileir 128x128x64", err).startswith("refused: softmax.py:15:9")
    assert bt.failure("tilejit cuda", err).startswith("error: TileCompileError: softmax.py:15:9: error:")
    assert bt.failure("tilejit tileir", RuntimeError("\n  boom\nmore")) == "error: RuntimeError: boom"
    assert bt.first_line(ValueError("a b: c")) == "a b: c"  # a head with spaces is no path


def test_plot_writes_one_png_per_group_or_says_why_not(bt: ModuleType, tmp_path: Path) -> None:
    out = bt.plot(fake_results(bt), tmp_path)
    if len(out) == 1 and out[0].startswith("plots: n/a (matplotlib"):
        return
    assert sorted(Path(p).name for p in out) == ["bench_tileir_matmul_bf16.png", "bench_tileir_softmax_f32.png"]
    assert all(Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in out)


def test_compile_only_path_runs_without_a_gpu(tmp_path: Path) -> None:
    """The script's --compile-only path end to end: every compiled kernel gets a row; with the Tile IR toolchain
    the backend's vector add compiles (a kernel it covers), and with cuTile its export makes a CUBIN."""
    from conftest import tileir_root

    env = dict(os.environ)
    env.pop("OUT", None)
    env["TILEJIT_CACHE_DIR"] = str(tmp_path / "cache")
    env["CUDA_TILE_CACHE_DIR"] = "off"
    paths = [str(ROOT)] + ([str(CUTILE)] if (CUTILE / "cuda" / "tile").is_dir() else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    tileiras = tileir_root() / "nvidia" / "cu13" / "bin" / "tileiras"
    if tileiras.is_file():
        env["TILEJIT_TILEIRAS"] = str(tileiras)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        env.pop(var, None)
    done = subprocess.run([sys.executable, str(SCRIPT), "--compile-only", "--compile-reps", "1", "--tiles",
                           "64x64x32", "--arch", "sm_90", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "### cold compile, ms" in done.stdout
    report = json.loads((tmp_path / "out" / "bench_tileir.json").read_text())
    assert report["results"] == []
    rows = {r["kernel"]: r for r in report["compile"]}
    assert list(rows) == ["vector_add f32", "softmax f32 BLOCK=8192", "softmax bf16 BLOCK=8192",
                          "layer_norm f32 BLOCK=8192", "layer_norm bf16 BLOCK=8192", "matmul bf16 64x64x32"]
    for row in rows.values():
        for key in ("cuda", "tileir", "cutile"):
            status = row[key]["status"]
            assert status == "ok" or status.startswith(("refused: ", "error: ", "n/a (")), (key, status)
            assert (status == "ok") == isinstance(row[key].get("total_ms"), float)
    assert (tmp_path / "out" / "bench_tileir.md").read_text().rstrip() == done.stdout.rstrip().split("\n", 1)[1]
    if tileiras.is_file() and rows["vector_add f32"]["cuda"]["status"] == "ok":
        assert rows["vector_add f32"]["tileir"]["status"] == "ok", rows["vector_add f32"]
    if (CUTILE / "cuda" / "tile").is_dir() and tileiras.is_file():
        assert rows["vector_add f32"]["cutile"]["status"] == "ok", rows["vector_add f32"]
