"""The current device and stream are per thread, on real GPUs: one thread per GPU sets its device and
launches a tile kernel and a RawKernel on arrays of its own, all at once; on one GPU, two threads launch on
the current streams they set. Every result is exact (small integers in float32)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import tilejit as tj
from tilejit.api.raw import RawKernel
from tilejit.runtime.array import asarray, zeros
from tilejit.runtime.device import Device, device_count, get_device
from tilejit.runtime.launch import CHECKED_LAUNCHES
from tilejit.runtime.stream import Stream, current_stream, set_current_stream, stream_handle

pytestmark = pytest.mark.gpu

ITERS = CHECKED_LAUNCHES + 24  # past the checked launches, into the generated ones
TILE = 256


@tj.kernel
def acc_tile(x, out, a, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(out, index=(i,), shape=(TILE,)) + tj.load(x, index=(i,), shape=(TILE,)) * a
    tj.store(out, index=(i,), tile=t)


ACC_RAW = r"""
extern "C" __global__ void acc_raw(const float* x, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += x[i] * a;
}
"""


def run_together(worker: Callable[[int, threading.Barrier], None], n: int) -> None:
    """``worker(k, barrier)`` on ``n`` threads at once; the first error of any is raised here."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            worker(k, barrier)
        except BaseException as exc:  # reported below
            barrier.abort()
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]


def accumulate(k: int, barrier: threading.Barrier, raw: RawKernel,
               results: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, float]]) -> None:
    """Thread ``k``: ``ITERS`` times ``out += x * a`` through the tile kernel and the RawKernel, on the
    thread's current device and stream, its arrays allocated there."""
    n = 1000 + 37 * k  # a partial last tile
    x = np.random.default_rng(k).integers(-4, 5, n).astype(np.float32)
    dx, out_tile, out_raw = asarray(x), zeros(n, "float32"), zeros(n, "float32")
    a = float(k + 1)
    barrier.wait(60)
    for _ in range(ITERS):
        acc_tile[tj.cdiv(n, TILE)](dx, out_tile, a, TILE=TILE)
        raw(tj.cdiv(n, 128), 128, (dx, out_raw, a, n))
    results[k] = (x, out_tile.numpy(), out_raw.numpy(), a)  # copies on the current stream, after its work


def check(results: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, float]], n: int) -> None:
    assert sorted(results) == list(range(n))
    for k, (x, got_tile, got_raw, a) in results.items():
        want = x * np.float32(a * ITERS)
        np.testing.assert_array_equal(got_tile, want, err_msg=f"tile kernel, thread {k}")
        np.testing.assert_array_equal(got_raw, want, err_msg=f"RawKernel, thread {k}")


def test_one_thread_per_gpu_launches_on_its_own_device() -> None:
    count = device_count()
    if count < 2:
        pytest.skip(f"needs 2 or more GPUs, this machine has {count}")
    n = min(count, 8)
    main_device = get_device()
    raw = RawKernel(ACC_RAW, "acc_raw")
    results: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, float]] = {}
    placed: dict[int, list[int]] = {}

    def worker(k: int, barrier: threading.Barrier) -> None:
        dev = Device(k).set_current()
        accumulate(k, barrier, raw, results)
        assert get_device() is dev
        dev.synchronize()
        placed[k] = [asarray(np.ones(4, np.float32)).device.ordinal, zeros(4).device.ordinal]

    run_together(worker, n)
    check(results, n)
    assert placed == {k: [k, k] for k in range(n)}
    assert get_device() is main_device  # the threads' choices are their own
    assert set(raw._functions) == set(range(n))


def test_two_threads_launch_on_their_own_current_streams() -> None:
    raw = RawKernel(ACC_RAW, "acc_raw")
    results: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, float]] = {}
    handles: dict[int, tuple[int, int]] = {}

    def worker(k: int, barrier: threading.Barrier) -> None:
        with Stream() as s:  # non-blocking: ordered only with this thread's own work on it
            set_current_stream(s)
            try:
                accumulate(k, barrier, raw, results)
                handles[k] = (current_stream().handle, stream_handle(None))
                assert handles[k] == (s.handle, s.handle)
                s.synchronize()
            finally:
                set_current_stream(None)

    run_together(worker, 2)
    check(results, 2)
    assert len({h for h, _ in handles.values()}) == 2
    assert current_stream() is Stream.legacy()
