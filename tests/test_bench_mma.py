"""bench/bench_mma.py on the CPU: its arguments, shape lists, FLOP counts, ratios to the best peer, tables, geometric
means and plot on made-up numbers, and that its own tilejit kernels compile (no timing here: the lead runs the real
thing on a GPU)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import tilejit as tj

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "bench_mma.py"


@pytest.fixture(scope="module")
def bm() -> ModuleType:
    """The benchmark script as a module (the sys.path entries it adds for its own imports are taken back)."""
    saved = sys.path[:]
    spec = importlib.util.spec_from_file_location("bench_mma_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path[:] = saved
    return module


def test_help_works_without_torch_or_triton(tmp_path: Path) -> None:
    """--help imports neither torch nor Triton (this machine has neither; the check holds where they exist too)."""
    code = (f"import runpy, sys\nsys.argv = [{str(SCRIPT)!r}, '--help']\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, 'imported torch or triton'\n"
            "print('HELP OK')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TILEJIT_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--families" in proc.stdout and "--quick" in proc.stdout and "HELP OK" in proc.stdout


def test_arguments(bm: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OUT", raising=False)
    args = bm.parse_args([])
    assert args.family_list == bm.FAMILIES and args.backend_list == ("cuda", "tileir") and args.out is None
    assert args.dtype_list == ("bfloat16", "float16") and not args.quick
    monkeypatch.setenv("OUT", "/some/where")
    quick = bm.parse_args(["--quick", "--families", "attention,matmul", "--backends", "cuda"])
    assert quick.family_list == ("attention", "matmul") and quick.backend_list == ("cuda",)
    assert quick.out == "/some/where" and bm.parse_args(["--out", "/else"]).out == "/else"


@pytest.mark.parametrize("argv", [["--families", "matmul,gemm"], ["--backends", "cuda,ptx"], ["--dtypes", "f32"]])
def test_bad_arguments_exit_with_usage(bm: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bm.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "unknown" in err


def test_plan_covers_the_issue_shapes_and_quick_is_a_subset(bm: ModuleType) -> None:
    full, quick = bm.plan(False), bm.plan(True)
    mm = set(full["matmul"])
    assert {(2048,) * 3, (4096,) * 3, (8192,) * 3} <= mm
    assert {(4096, 14336, 4096), (8192, 4096, 14336), (14336, 4096, 4096), (4096, 8192, 14336)} <= mm  # + transposes
    assert {(3000, 5000, 4000), (1000, 1000, 1000)} <= mm
    assert {(16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096)} <= mm
    assert {(c[2], c[3], c[4]) for c in full["attention"]} == {(n, d, c) for n in (1024, 4096) for d in (64, 128)
                                                              for c in (False, True)}
    assert all(c[0] * c[1] == 128 for c in full["attention"])
    for key in full:
        assert set(quick[key]) <= set(full[key])
        assert len(quick[key]) < len(full[key]), key


def test_flop_counts(bm: ModuleType) -> None:
    assert bm.matmul_flops(2, 3, 4) == 48.0
    assert bm.matmul_flops(2, 3, 4, batch=5) == 240.0
    assert bm.attention_flops(1, 1, 8, 4, False) == 4 * 8 * 8 * 4
    assert bm.attention_flops(4, 32, 4096, 64, True) == bm.attention_flops(4, 32, 4096, 64, False) / 2
    assert bm.attention_flops(1, 2, 16, 64, False, backward=True) == 2.5 * bm.attention_flops(1, 2, 16, 64, False)
    assert bm.shape_label((4096, 14336, 4096)) == "4096x14336x4096"
    assert bm.attention_label(4, 32, 1024, 128, True) == "4x32x1024 d128 causal"


def fake_results(bm: ModuleType) -> list[dict[str, Any]]:
    """Made-up cells with known ratios: two shapes, three peers, tilejit on two backends, every kind of status."""
    r = bm.result

    def cell(shape: str, who: str, ms: float, config: str = "") -> dict[str, Any]:
        """A measured cell of 1e12 flops in ``ms``."""
        out = r("matmul bf16", shape, who, "TFLOP/s", ms=ms, work=1e12)
        out["config"] = config
        return out

    return [
        cell("4096x4096x4096", "cuBLAS", 2.0),                    # 500 TFLOP/s
        cell("4096x4096x4096", "triton", 2.5, "128x256x64 w8 s3"),  # 400
        cell("4096x4096x4096", "tilejit cuda", 4.0, "128x128x64"),  # 250: 0.5x of the best peer
        r("matmul bf16", "4096x4096x4096", "tilejit tileir", "TFLOP/s", status="refused: k.py:3:1: error: a|b"),
        cell("16x4096x4096", "cuBLAS", 2.0),                      # 500
        cell("16x4096x4096", "triton", 1.0),                      # 1000: the best peer here
        cell("16x4096x4096", "tilejit cuda", 0.5),                # 2000: 2.0x
        cell("16x4096x4096", "tilejit tileir", 2.0),              # 0.5x
        r("epilogue bias+ReLU bf16", "4096x4096x4096", "cuBLAS addmm + torch relu", "TFLOP/s",
          status="wrong: result differs: relative error 1e+00 > 0.01"),
        cell("x", "tilejit cuda", 1.0) | {"group": "epilogue bias+ReLU bf16", "shape": "4096x4096x4096"},
        cell("x", "tilejit cuda plain", 0.8) | {"group": "epilogue bias+ReLU bf16", "shape": "4096x4096x4096"},
    ]


def test_ratios_are_against_the_best_peer_per_shape(bm: ModuleType) -> None:
    rat = bm.ratios(fake_results(bm), "matmul bf16")
    assert rat["cuBLAS"] == {"4096x4096x4096": 1.0, "16x4096x4096": 0.5}
    assert rat["triton"] == {"4096x4096x4096": pytest.approx(0.8), "16x4096x4096": 1.0}
    assert rat["tilejit cuda"] == {"4096x4096x4096": pytest.approx(0.5), "16x4096x4096": pytest.approx(2.0)}
    assert rat["tilejit tileir"] == {"16x4096x4096": pytest.approx(0.5)}
    assert bm.ratios(fake_results(bm), "epilogue bias+ReLU bf16") == {}  # its only peer was wrong: no ratio
    assert bm.is_peer("cuBLAS") and bm.is_peer("SDPA flash") and not bm.is_peer("tilejit tileir grouped")


def test_group_table_summary_and_epilogue_cost(bm: ModuleType) -> None:
    res = fake_results(bm)
    lines = bm.group_table(res, "matmul bf16")
    assert lines[0] == "### matmul bf16 (TFLOP/s; ratio to the best peer)"
    assert lines[2] == "| shape | cuBLAS | triton | tilejit cuda | tilejit tileir |"
    first = lines[4].split(" | ")
    assert first[3] == "250 (0.50x) [128x128x64]" and first[2] == "400 (0.80x) [128x256x64 w8 s3]"
    assert first[4] == "refused: k.py:3:1: error: a\\|b |"  # a | in a message is escaped
    gm = lines[-1].split(" | ")
    assert gm[0] == "| geomean vs best peer"
    assert gm[3] == "1.00x"  # geomean(0.5, 2.0)
    assert gm[4] == "0.50x (1/2) |"
    text = bm.render(res, [], ["## head"], ["a note"])
    assert "| matmul bf16 | tilejit cuda | 1.00x | 2/2 |" in text
    assert "- a note" in text
    cost = bm.epilogue_cost(res)
    assert cost == ["- 4096x4096x4096, tilejit cuda: bias + ReLU costs +25.0% over the same kernel without it"]


def test_register_table(bm: ModuleType) -> None:
    rows = [{"kernel": "matmul", "backend": "cuda", "config": "BM=128 BN=128 BK=64", "threads": 256, "registers": 168,
             "local_bytes": 0, "static_shared": 0, "dynamic_shared": 73728, "status": "ok"},
            {"kernel": "attn_fwd", "backend": "tileir", "config": "BLOCK_M=128", "status": "refused: x"}]
    lines = bm.register_table(rows)
    assert lines[4] == "| matmul | cuda | BM=128 BN=128 BK=64 | 256 | 168 | 0 | 0 | 73728 |"
    assert lines[5].startswith("| attn_fwd | tileir | BLOCK_M=128 | refused: x |")
    assert bm.config_text({"BM": 1, "__dtype": "x", "CAUSAL": True}) == "BM=1 CAUSAL=True"


def test_plot_writes_one_png(bm: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench_mma.png"
    assert bm.plot(fake_results(bm), path) == str(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_why(bm: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert bm.plot(fake_results(bm), tmp_path / "x.png").startswith("plot: n/a (matplotlib")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("target,backend", [("sm_80", "cuda"), ("sm_90a", "cuda"), ("sm_90", "tileir")])
def test_the_bench_kernels_compile(bm: ModuleType, target: str, backend: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Every tilejit kernel the bench writes itself compiles for the signatures its launches get."""
    if backend == "tileir":
        request.getfixturevalue("tileir_env")  # skips with the reason where the toolchain is absent
    else:
        monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    kernels = bm.bench_kernels()
    tile = {"BM": 128, "BN": 128, "BK": 64}
    cases = [("matmul_grouped", {**tile, "GROUP": 8}), ("matmul_t", {**tile, "TRANS_A": True, "TRANS_B": False}),
             ("matmul_t", {**tile, "TRANS_A": False, "TRANS_B": True}), ("matmul_batched", tile),
             ("matmul_bias_relu", tile), ("matmul_splitk", tile), ("splitk_sum", {"BM": 8, "BN": 128, "SLICES": 8})]
    for name, consts in cases:
        art = tj.compile(kernels[name], bm.kernel_signature(name, tj.bfloat16), constants=consts, target=target,
                         backend=backend)
        assert art.cubin()[:4] == b"\x7fELF", name


def test_small_m_matmul_adds_split_k_configs(bm: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The matmul family's tilejit cell also tries examples/matmul.py's split-K launches where ``splitk_slices``
    cuts K (labelled with the tile and the slices, so the table says which variant ran), with a float32 workspace
    of (slices, M, N); for large M none; the register table gets both kernels."""
    from types import SimpleNamespace

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    made: list[tuple[Any, ...]] = []

    class Torch:
        float32 = "float32"
        cuda = SimpleNamespace(get_device_properties=lambda device: SimpleNamespace(multi_processor_count=132))

        @staticmethod
        def empty(*shape: int, device: str, dtype: str) -> tuple[Any, ...]:
            made.append((shape, dtype))
            return shape

    runner = bm.Runner.__new__(bm.Runner)
    runner.torch, runner.args, runner.launched = Torch, SimpleNamespace(quick=True), {}
    small = (SimpleNamespace(shape=(16, 4096)), SimpleNamespace(shape=(4096, 4096)), SimpleNamespace(device=0))
    labels = [label for label, _ in runner.splitk_configs("cuda", *small)]
    assert labels == ["128x256x32 split-K 8", "128x128x64 split-K 4"]
    assert made == [((8, 16, 4096), "float32"), ((4, 16, 4096), "float32")]
    assert {k[0] for k in runner.launched} == {"matmul_splitk", "splitk_sum"}
    big = (SimpleNamespace(shape=(4096, 4096)), SimpleNamespace(shape=(4096, 4096)), SimpleNamespace(device=0))
    assert runner.splitk_configs("cuda", *big) == []


def test_quick_transposed_runs_also_try_bk64(bm: ModuleType) -> None:
    """tile_configs adds ``more`` tiles the plan lacks (the transposed family's 128x256x64 in a quick run: K-major
    tiles get 128-byte rows only with BK=64), once."""
    from types import SimpleNamespace

    runner = bm.Runner.__new__(bm.Runner)
    runner.args, runner.launched, runner.by_backend = SimpleNamespace(quick=True), {}, {}
    runner.kernels = {"matmul_t": bm.matmul_t}

    def labels() -> list[str]:
        """The labels of the transposed family's B^T configs."""
        return [label for label, _ in runner.tile_configs(
            "matmul_t", "cuda", lambda m, n: (1, 1), lambda k, g, c: None, {"TRANS_A": False, "TRANS_B": True},
            (bm.QUICK_K_MAJOR_TILE,))]

    assert labels() == ["128x256x32", "128x128x64", "128x256x64"]
    runner.args.quick = False
    assert labels() == ["x".join(map(str, t)) for t in bm.TILES]
