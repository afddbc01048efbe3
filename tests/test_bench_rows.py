"""bench/bench_rows.py on the CPU: its arguments, GB/s, ratios to Triton and geometric means on made-up numbers, its
plot, and its ``--ptxas`` mode (NVRTC's ptxas -v of the example row kernels; the lead runs the sweep on a GPU)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "bench_rows.py"


@pytest.fixture(scope="module")
def br() -> ModuleType:
    """The benchmark script as a module (it puts bench/ and examples/ on sys.path for its own imports)."""
    spec = importlib.util.spec_from_file_location("bench_rows_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arguments(br: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OUT", raising=False)
    args = br.parse_args([])
    assert args.family_list == ("softmax", "softmax_bwd", "layer_norm", "layer_norm_bwd", "rms_norm", "rms_norm_bwd")
    assert args.dtype_list == ("float32", "bfloat16", "float16")
    assert args.length_list == br.LENGTHS and args.out is None and not args.ptxas
    quick = br.parse_args(["--quick", "--families", "rms_norm,softmax", "--dtypes", "float16"])
    assert quick.length_list == br.QUICK_LENGTHS and set(quick.length_list) < set(br.LENGTHS)
    assert quick.family_list == ("rms_norm", "softmax") and quick.dtype_list == ("float16",)
    assert br.parse_args(["--quick", "--lengths", "3000,65537"]).length_list == (3000, 65537)
    monkeypatch.setenv("OUT", "/some/where")
    assert br.parse_args([]).out == "/some/where" and br.parse_args(["--out", "/else"]).out == "/else"


@pytest.mark.parametrize("argv", [["--families", "softmax,gelu"], ["--dtypes", "float64"], ["--lengths", "1k"],
                                  ["--lengths", "0"], ["--jobs", "0"]])
def test_bad_arguments_exit_with_usage(br: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        br.parse_args(argv)
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err


def test_the_sweep_covers_the_issue_shapes(br: ModuleType) -> None:
    """Row lengths 256..65536, powers of two and not; every shape about 2**26 elements."""
    assert {1 << k for k in range(8, 17)} <= set(br.LENGTHS)
    assert any(n & (n - 1) for n in br.LENGTHS) and {3000, 12288, 50000} <= set(br.LENGTHS)
    assert all(0.999 < (br.ELEMENTS // n) * n / 2**26 <= 1 for n in br.LENGTHS)


def test_cell_rates_count_the_row_traffic(br: ModuleType) -> None:
    fwd = br.cell("softmax", "float32", 1024, "triton", ms=1.0)
    assert fwd["m"] == 65536 and fwd["gbs"] == pytest.approx(2 * 2**26 * 4 / 1e-3 / 1e9)
    bwd = br.cell("layer_norm_bwd", "bfloat16", 3000, "torch", ms=2.0, itemsize=2)
    assert bwd["gbs"] == pytest.approx(3 * (2**26 // 3000) * 3000 * 2 / 2e-3 / 1e9)
    assert br.cell("rms_norm", "float16", 256, "triton", status="n/a (x)")["gbs"] is None
    for family in ("softmax_bwd", "rms_norm_bwd"):  # y (or x) and dy read, dx written
        assert br.cell(family, "float32", 1024, "triton", ms=1.0)["gbs"] == pytest.approx(3 * 2**26 * 4 / 1e-3 / 1e9)


def test_every_family_is_wired(br: ModuleType) -> None:
    """Each family has its traffic, a Case builder, and (checked by their names) the example host function and the
    Triton peer it runs: the backward families call the examples' ``softmax_backward`` / ``rms_norm_backward`` and
    the peers' launchers."""
    import inspect

    assert set(br.TRAFFIC) == set(br.FAMILIES)
    for family in br.FAMILIES:
        assert callable(getattr(br.Case, f"_{family}", None)), family
    source = {f: inspect.getsource(getattr(br.Case, f"_{f}")) for f in ("softmax_bwd", "rms_norm_bwd")}
    assert "softmax_backward(y, dy, dx, backend=be)" in source["softmax_bwd"]
    assert "triton_softmax_bwd_launch" in source["softmax_bwd"] and "_softmax_backward_data" in source["softmax_bwd"]
    assert "rn.rms_norm_backward(" in source["rms_norm_bwd"] and "triton_rms_norm_bwd_launch" in source["rms_norm_bwd"]


def test_backward_peers_say_which_rows_one_program_cannot_hold(br: ModuleType) -> None:
    """The Triton backward peers hold a row whole in one program, as the tutorials do: the softmax's at any length
    (as tutorial 02's forward, long rows spill), the norms' up to 64 KB (the layer-norm tutorial refuses longer
    rows); past that they are "n/a (why)", without touching the GPU (or torch)."""
    from types import SimpleNamespace

    import _tileir_peers as peers

    def rows(n: int, dtype: str, itemsize: int) -> Any:
        return SimpleNamespace(shape=(8, n), dtype=f"torch.{dtype}", element_size=lambda: itemsize)

    kernels = SimpleNamespace()
    for n, dtype, size in ((16384, "float32", 4), (16385, "float16", 2), (65536, "float32", 4)):
        assert callable(peers.triton_softmax_bwd_launch(kernels, rows(n, dtype, size), None, None))
    for n, dtype, size, most in ((16385, "float32", 4, 16384), (32769, "bfloat16", 2, 32768)):
        for why in (peers.triton_rms_norm_bwd_launch(kernels, rows(n, dtype, size), None, None, None, None, None),
                    peers.triton_layer_norm_bwd_launch(kernels, rows(n, dtype, size), *[None] * 7)):
            assert why == f"n/a (the tutorial's backward holds whole rows of at most {most} {dtype} elements)"


def test_the_norms_backward_runs_each_backend_with_its_own_plan(br: ModuleType) -> None:
    """Each tilejit backend's norm backward gets its own plan (the CUDA backend's long rows in 4096-element chunks,
    Tile IR's in 16 KB) and scratch buffers sized for that plan, made once before the timing."""
    from types import SimpleNamespace

    import layer_norm as ln

    made: list[tuple[int, ...]] = []

    def empty(shape: tuple[int, ...], device: str) -> tuple[int, ...]:
        made.append(shape)
        return shape

    torch = SimpleNamespace(empty=empty,
                            cuda=SimpleNamespace(get_device_properties=lambda i: SimpleNamespace(
                                multi_processor_count=132)))
    x = SimpleNamespace(shape=(64, 65536), itemsize=2)
    plans = br.backward_plans(torch, x, ln.backward_scratch)
    assert plans["cuda"][0] == ln.BackwardPlan(4096, 0, 16) and plans["tileir"][0] == ln.BackwardPlan(8192, 0, 33)
    assert plans["cuda"][1] == ((16, 65536), (16, 65536), (64,), (64,))
    assert plans["tileir"][1] == ((33, 65536), (33, 65536), (64,), (64,))
    assert len(made) == 8


def fake(br: ModuleType) -> list[dict[str, Any]]:
    """Two families, made-up times with known ratios to Triton, and each kind of status."""
    c = br.cell
    return [
        c("softmax", "float32", 1024, "tilejit cuda", ms=1.0),    # 1.0x
        c("softmax", "float32", 1024, "tilejit tileir", ms=2.0),  # 0.5x
        c("softmax", "float32", 1024, "torch", status="wrong: y relative error 1e+00 > 1e-05"),
        c("softmax", "float32", 1024, "triton", ms=1.0),
        c("softmax", "float32", 65536, "tilejit cuda", ms=0.5),   # 4.0x
        c("softmax", "float32", 65536, "tilejit tileir", status="n/a (no tileiras | here)"),
        c("softmax", "float32", 65536, "torch", ms=1.0),          # 2.0x
        c("softmax", "float32", 65536, "triton", ms=2.0),
        c("layer_norm_bwd", "bfloat16", 65536, "tilejit cuda", ms=1.0, itemsize=2),
        c("layer_norm_bwd", "bfloat16", 65536, "triton", status="n/a (rows over 64 KB)"),
    ]


def test_ratios_geomeans_and_table(br: ModuleType) -> None:
    res = fake(br)
    rat = br.ratios(res)
    assert rat[("softmax", "float32", 1024)] == {"tilejit cuda": 1.0, "tilejit tileir": 0.5, "triton": 1.0}
    assert rat[("softmax", "float32", 65536)] == {"tilejit cuda": 4.0, "torch": 2.0, "triton": 1.0}
    assert ("layer_norm_bwd", "bfloat16", 65536) not in rat  # no Triton time: no ratio
    means = br.family_geomeans(res)
    assert means["softmax"]["tilejit cuda"] == (pytest.approx(2.0), 2)
    assert means["softmax"]["tilejit tileir"] == (pytest.approx(0.5), 1) and "layer_norm_bwd" not in means
    lines = br.table(res).splitlines()
    assert lines[0] == "| family | tilejit cuda / triton | tilejit tileir / triton | torch / triton | triton / triton |"
    assert lines[2] == "| softmax | 2.00x (2) | 0.50x (1) | 2.00x (1) | 1.00x (2) |"
    assert lines[3] == "| layer_norm_bwd |  |  |  |  |"
    assert lines[5:] == [
        "| family | dtype | rows x length | tilejit cuda | tilejit tileir | torch | triton |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        "| softmax | float32 | 65536x1024 | 537 (1.00x) | 268 (0.50x) | wrong: y relative error 1e+00 > 1e-05 | "
        "537 (1.00x) |",
        "| softmax | float32 | 1024x65536 | 1074 (4.00x) | n/a (no tileiras \\| here) | 537 (2.00x) | 268 (1.00x) |",
        "| layer_norm_bwd | bfloat16 | 1024x65536 | 403 |  |  | n/a (rows over 64 KB) |",
    ]


def test_plot_is_one_png_of_every_family_and_dtype(br: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = br.plot(fake(br), tmp_path / "plots" / "rows.png")
    assert out == str(tmp_path / "plots" / "rows.png")
    assert Path(out).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_mode_redraws_a_saved_run_without_a_gpu(br: ModuleType, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps({"wall_s": 1.0, "results": fake(br)}))
    assert br.main(["--plot", str(saved), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "| softmax | 2.00x (2) |" in printed and (tmp_path / "out" / "bench_rows.png").is_file()


def test_ptxas_mode_lists_every_row_kernel_and_the_ones_the_examples_use_do_not_spill(
        br: ModuleType, nvrtc_here: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NVRTC's ptxas -v for sm_90a (what a launch on an H100 builds): float16 rows of 256 and 8192 elements are held
    whole by the forward and backward kernels (the norms' backward 16 rows of 256 a step; a whole 8192-element row
    256 threads), and the chunked kernels work on 16384-element chunks (forward, softmax backward; and layer norm's
    8192 and 4096 with 8 warps, the CUDA plans' 16384 (softmax, layer norm) and 8192 (RMS norm) with 8 warps) and
    8192 (the norms' backward); none of them spills (before issue 19's plan: 56 B in layer norm, 12-36 B in the
    backward kernels under the resident-block caps)."""
    argv = ["--ptxas", "--dtypes", "float16", "--lengths", "200,8192", "--jobs", "2", "--out", str(tmp_path)]
    assert br.main(argv) == 0
    out = capsys.readouterr().out
    assert "0 kernel(s) the examples use spill" in out
    assert "| softmax | float16 | ROWS=1 BLOCK=8192 | yes | 256 |" in out
    rows = json.loads((tmp_path / "bench_rows_ptxas.json").read_text())
    whole = ["softmax", "softmax_bwd", "layer_norm", "layer_norm_fwd", "layer_norm_bwd", "rms_norm", "rms_norm_bwd"]
    assert [r["kernel"] for r in rows] == whole * 2 + [
        "softmax_chunked", "softmax_bwd_chunked",
        "layer_norm_fwd_chunked", "layer_norm_fwd_chunked", "layer_norm_fwd_chunked",
        "softmax_chunked", "layer_norm_fwd_chunked", "rms_norm_chunked",  # the CUDA plans' two-chunk rows
        "layer_norm_bwd_sums", "layer_norm_bwd_chunked",
        "rms_norm_chunked", "rms_norm_bwd_sums", "rms_norm_bwd_chunked", "sum_partials"]
    assert [r["constants"] for r in rows if r["kernel"] == "layer_norm_bwd"] == [{"ROWS": 16, "BLOCK": 256},
                                                                                 {"ROWS": 1, "BLOCK": 8192}]
    for r in rows:
        assert r["status"] == "ok" and r["target"] == "sm_90a" and r["used"], r
        assert r["spill_stores"] == r["spill_loads"] == 0 and 0 < r["registers"] <= 255, r


def test_ptxas_info_reports_a_refusal(br: ModuleType, nvrtc_here: Path) -> None:
    """A tile too large for the CUDA backend (a 2**20-element row: 1024 per thread at 1024 threads) is the
    refusal's first line, not a traceback."""
    import tilejit as tj

    sys.path.insert(0, str(ROOT / "examples"))
    from softmax import softmax

    info = br.ptxas_info(softmax, (tj.float32[:, ::1], tj.float32[:, ::1]), {"ROWS": 1, "BLOCK": 2**20}, "sm_90")
    assert info["status"].startswith("refused: softmax.py:") and "too large for the CUDA backend" in info["status"]
