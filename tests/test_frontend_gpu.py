"""Front-end semantics end to end: kernels written with the front end's control flow and Python
features compile (CPU, every CUDA toolkit present) and compute what Python would (GPU)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilejit as tj


@tj.function
def stats(t):
    return tj.sum(t), tj.max(t)


@tj.kernel
def fe_loops(x, out, n: int, TILE: tj.Constant[int]):
    i = tj.bid(0)
    if i >= tj.num_tiles(x, 0, (TILE,)):
        return
    t = tj.load(x, index=(i,), shape=(TILE,))
    k = 0
    total = 0.0
    while True:
        if k >= n:
            break
        total += k
        k += 1
    acc = tj.zeros((TILE,), tj.float32)
    for j in range(10):
        if j == 1:
            continue
        if j >= n:
            break
        acc = acc + t * j
    tj.store(out, index=(i,), tile=acc + total)


@tj.kernel
def fe_exprs(x, out, n: int, MODE: tj.Constant[str], TILE: tj.Constant[int]):
    t = tj.load(x, index=(0,), shape=(TILE,))
    s, m = stats(t)
    for u in (t, t * 2.0):
        t = t + u
    v = 1.0 if 0 < n < 10 and m > 0 else -1.0
    w = s if MODE == "sum" else m
    tj.store(out, index=(0,), tile=t + v + w)


def fe_loops_reference(x: np.ndarray, n: int) -> np.ndarray:
    total = float(sum(range(n)))
    factor = sum(j for j in range(min(n, 10)) if j != 1)
    return x.astype(np.float64) * factor + total


def fe_exprs_reference(x: np.ndarray, n: int, mode: str) -> np.ndarray:
    x64 = x.astype(np.float64)
    v = 1.0 if 0 < n < 10 and x64.max() > 0 else -1.0
    w = x64.sum() if mode == "sum" else x64.max()
    return 4 * x64 + v + w


def test_features_compile_with_every_toolkit(toolkit: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend and NVRTC accept every control-flow shape the front end produces."""
    monkeypatch.setenv("TILEJIT_NVRTC", str(toolkit.nvrtc))
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    f32 = tj.float32[:]
    loops = tj.compile(fe_loops, (f32, f32, tj.int32), constants={"TILE": 128}, target="sm_80")
    exprs = tj.compile(fe_exprs, (f32, f32, tj.int32), constants={"MODE": "max", "TILE": 64}, target="sm_80")
    for art in (loops, exprs):
        assert ".entry" in art.ptx()
    kinds = {type(op).__name__ for op in loops.ir().body.walk()}
    assert {"LoopOp", "ForOp", "IfOp", "BreakOp", "ContinueOp", "ReturnOp"} <= kinds


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 1, 5, 30])
def test_loops_break_continue_and_early_return(n: int) -> None:
    rng = np.random.default_rng()
    size, tile = 1000, 128
    x = rng.standard_normal(size, dtype=np.float32)
    tiles = -(-size // tile)
    out = tj.asarray(np.full(size + 2 * tile, np.nan, np.float32))
    fe_loops[tiles + 2](tj.asarray(x), out, n, TILE=tile)
    got = out.numpy()
    want = fe_loops_reference(x, n)
    err = np.linalg.norm(got[:size] - want) / max(np.linalg.norm(want), 1e-30)
    assert err < 1e-6, f"relative error {err:.2e}"
    # blocks past the last tile of x return before storing: out's tail keeps its NaN poison
    assert np.isnan(got[tiles * tile:]).all()


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "mode"), [(3, "sum"), (3, "max"), (20, "sum"), (0, "max")])
def test_helpers_tuples_and_conditional_expressions(n: int, mode: str) -> None:
    rng = np.random.default_rng()
    tile = 64
    x = rng.standard_normal(tile, dtype=np.float32)
    out = tj.asarray(np.full(tile, np.nan, np.float32))
    fe_exprs[1](tj.asarray(x), out, n, MODE=mode, TILE=tile)
    want = fe_exprs_reference(x, n, mode)
    got = out.numpy().astype(np.float64)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5), np.abs(got - want).max()


@tj.kernel
def fe_axpy(x, y, out, a: float, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,)) * a + tj.load(y, index=(i,), shape=(TILE,))
    tj.store(out, index=(i,), tile=t)


@pytest.mark.gpu
def test_launches_through_the_checked_then_generated_paths_and_the_memo() -> None:
    """A specialization's first CHECKED_LAUNCHES launches take the checked path, later ones the generated
    one; repeated identical arguments reuse the last specialization. Every launch computes the right thing:
    same arrays with new contents, other arrays, another scalar, another constant."""
    from tilejit.runtime.launch import CHECKED_LAUNCHES

    rng = np.random.default_rng()
    n, tile = 10_007, 256
    xs = [tj.asarray(rng.standard_normal(n, dtype=np.float32)) for _ in range(2)]
    y = tj.asarray(rng.standard_normal(n, dtype=np.float32))
    out = tj.empty(n, "float32")
    launch = fe_axpy[-(-n // tile)]
    a = 1.5
    for i in range(2 * CHECKED_LAUNCHES + 4):
        x = xs[i % 2] if i >= CHECKED_LAUNCHES else xs[0]
        scale = a if i % 3 else 0.25
        if i % 5 == 0:
            x.copy_from_host(rng.standard_normal(n, dtype=np.float32))
        out.poison()
        launch(x, y, out, scale, TILE=tile)
        want = x.numpy() * np.float32(scale) + y.numpy()
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)
    (compiled,) = {id(c): c for c in fe_axpy._fast.values()}.values()
    assert compiled.base.first_launches.ready(threading.get_ident())  # past its checked launches: generated ones
    from tilejit.compiler.cache import cached_compile

    assert compiled.base.compile_code is cached_compile  # a new process loads the launch code, not compiles it
    out.poison()
    fe_axpy[-(-n // 128)](xs[1], y, out, a, TILE=128)
    np.testing.assert_allclose(out.numpy(), xs[1].numpy() * np.float32(a) + y.numpy(), rtol=1e-6, atol=1e-6)


@tj.kernel
def fe_scale(x, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) * 2.0)


@tj.kernel
def fe_increment(x, by: float, TILE: tj.Constant[int]):
    i = tj.bid(0)
    tj.store(x, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) + by)


@pytest.mark.gpu
def test_repeated_identical_launches_relaunch_the_right_block_on_every_grid_and_stream() -> None:
    """Hundreds of identical ``kernel[grid](...)`` calls (the fused relaunch) interleaved with other
    arrays, another grid of the same kernel, another scalar and another current stream: each array ends
    up incremented exactly as often as it was launched on, and only where its grid reached."""
    from tilejit.runtime.stream import Stream, set_current_stream

    n, tile = 5_003, 128
    blocks = -(-n // tile)
    a, b = tj.asarray(np.zeros(n, np.float32)), tj.asarray(np.zeros(n, np.float32))
    whole, half = fe_increment[blocks], fe_increment[blocks // 2]
    want_a, want_b = np.zeros(n, np.float32), np.zeros(n, np.float32)
    stream = Stream()
    for step in range(6):
        for _ in range(100):
            whole(a, 1.0, TILE=tile)
        want_a += 100
        whole(b, 2.0, TILE=tile)
        want_b += 2
        half(a, 1.0, TILE=tile)
        want_a[: blocks // 2 * tile] += 1
        if step % 2:
            tj.get_device().synchronize()  # the stream does not wait for the legacy stream's increments
            previous = set_current_stream(stream)
            try:
                for _ in range(10):
                    whole(a, 1.0, TILE=tile)
            finally:
                set_current_stream(previous)
            stream.synchronize()
            want_a += 10
    np.testing.assert_array_equal(a.numpy(), want_a)
    np.testing.assert_array_equal(b.numpy(), want_b)
    stream.close()


_WARM_CHILD = """
import json, sys
import numpy as np
import tilejit as tj
before = set(sys.modules)
sys.path.insert(0, sys.argv[1])
from warm_kernel import add_one
n = 3000
x = tj.asarray(np.arange(n, dtype=np.float32))
out = tj.asarray(np.full(n, np.nan, np.float32))
add_one[tj.cdiv(n, 256)](x, out, TILE=256)
ok = bool(np.array_equal(out.numpy(), np.arange(n, dtype=np.float32) + 1))
with open("/proc/self/maps") as f:
    nvrtc_loaded = "libnvrtc" in f.read()
print(json.dumps({"ok": ok, "nvrtc_loaded": nvrtc_loaded, "imported": sorted(set(sys.modules) - before)}))
"""


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="checks which CUDA-backend and NVRTC modules a warm launch imports and loads")
def test_warm_first_launch_in_a_new_process_skips_the_compiler(tmp_path: Path) -> None:
    """Defining a kernel and a disk-cache hit import neither the translator nor the IR ops, and the hit names
    NVRTC and the device headers in its key without importing the NVRTC driver, the CUDA backend or NVRTC's
    bindings, and without loading NVRTC."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "warm_kernel.py").write_text(
        "import tilejit as tj\n\n\n@tj.kernel\ndef add_one(x, out, TILE: tj.Constant[int]):\n"
        "    i = tj.bid(0)\n    tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) + 1.0)\n"
    )
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TILEJIT_CACHE", None)
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _WARM_CHILD, str(tmp_path)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["ok"] and warm["ok"]
    assert {"tilejit.compiler.nvrtc", "tilejit.language.ir.ops"} <= set(cold["imported"])  # the check can fail
    assert cold["nvrtc_loaded"]
    heavy = {"tilejit.compiler.nvrtc", "tilejit.bindings.nvrtc", "tilejit.backends.cuda", "tilejit.backends.cuda.abi",
             "tilejit.backends.cuda.codegen", "tilejit.language.frontend.translate", "tilejit.language.ir.ops",
             "tilejit.language.frontend.values", "tilejit.language.ir.core"}
    assert sorted(heavy & set(warm["imported"])) == []
    assert warm["nvrtc_loaded"] is False


@pytest.mark.gpu
def test_a_strided_array_after_a_one_element_one_gets_strided_code() -> None:
    """A length-1 array of stride 2 and a longer one of stride 2 share the dispatch key (dtype, strides,
    alignment), so the specialization must not assume unit stride from the first one's length."""
    rng = np.random.default_rng()
    for n in (1, 19, 300):
        a = rng.standard_normal(2 * n).astype(np.float32)
        x = tj.asarray(a)[::2]
        out = tj.empty(n, "float32").poison()
        fe_scale[-(-n // 16)](x, out, TILE=16)
        np.testing.assert_array_equal(out.numpy(), a[::2] * np.float32(2.0))


@tj.kernel
def fe_add_scalar_named_i(x, out, i: float, s: int, TILE: tj.Constant[int]):
    b = tj.bid(0)
    tj.store(out, index=(b,), tile=tj.load(x, index=(b,), shape=(TILE,)) + i + s)


@pytest.mark.gpu
def test_parameters_named_like_generated_code_keep_their_values() -> None:
    """Scalars named i and s once read the generated element index / loop counter instead (C++ name capture)."""
    rng = np.random.default_rng()
    n = 300
    a = rng.standard_normal(n).astype(np.float32)
    out = tj.empty(n, "float32").poison()
    fe_add_scalar_named_i[-(-n // 128)](tj.asarray(a), out, 0.5, 3, TILE=128)
    np.testing.assert_array_equal(out.numpy(), a + np.float32(0.5) + np.float32(3))


@tj.kernel
def norm(x, out, TILE: tj.Constant[int]):  # the name of a CUDA math function
    b = tj.bid(0)
    t = tj.load(x, index=(b,), shape=(TILE,))
    tj.store(out, index=(b,), tile=tj.sqrt(t * t))


@pytest.mark.gpu
def test_a_kernel_named_like_a_cuda_math_function_runs() -> None:
    """``norm`` (declared by CUDA's math headers) compiles under a mangled symbol, loads and computes."""
    rng = np.random.default_rng()
    n = 1000
    a = rng.standard_normal(n).astype(np.float32)
    out = tj.empty(n, "float32").poison()
    norm[-(-n // 256)](tj.asarray(a), out, TILE=256)
    np.testing.assert_allclose(out.numpy(), np.abs(a), rtol=1e-6)


@tj.kernel
def fe_count_range(out, lo: int, hi: int, step: int):
    count = 0
    for _ in range(lo, hi, step):
        count += 1
        if count > 5:  # a counter that wrapped past 2**31-1 would loop forever; stop and let the test see it
            break
    tj.store(out, index=(0,), tile=tj.full((1,), count, tj.int32))


@tj.kernel
def fe_count_unit_range(out, lo: int, hi: int):
    count = 0
    for _ in range(lo, hi):
        count += 1
        if count > 5:
            break
    tj.store(out, index=(0,), tile=tj.full((1,), count, tj.int32))


@pytest.mark.gpu
@pytest.mark.parametrize(("lo", "hi"), [(2**31 - 4, 2**31 - 1), (2**31 - 2, 2**31 - 1), (2**31 - 1, 2**31 - 1),
                                        (-(2**31), -(2**31) + 3), (7, -(2**31))])
def test_unit_step_loops_stop_at_the_int32_limit(lo: int, hi: int) -> None:
    """A step-1 loop over int32 bounds may count in int32 (Tile IR does): the last counter is hi - 1."""
    out = tj.empty(1, "int32").poison()
    fe_count_unit_range[1](out, lo, hi)
    assert int(out.numpy()[0]) == min(len(range(lo, hi)), 6)


@pytest.mark.gpu
@pytest.mark.parametrize(("lo", "hi", "step"), [(2**31 - 10, 2**31 - 1, 2**30), (0, 2**31 - 1, 2**30), (5, 9, 0),
                                                (5, 9, -1), (0, 7, 2)])
def test_range_loops_stop_like_python_near_the_int32_limit(lo: int, hi: int, step: int) -> None:
    """int32 loop bounds: the counter must not wrap past 2**31-1 and start over; a step <= 0 runs nothing."""
    out = tj.empty(1, "int32").poison()
    fe_count_range[1](out, lo, hi, step)
    expected = min(len(range(lo, hi, step)), 6) if step else 0
    assert int(out.numpy()[0]) == expected
