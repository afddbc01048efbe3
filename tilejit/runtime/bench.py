"""``do_bench``: the median GPU time of a launch, measured with CUDA events, as ``triton.testing.do_bench`` measures it.

Each timed run is bracketed by its own pair of events on the stream, after ``before()`` (e.g. putting an in-place
kernel's output back) and after L2 is flushed by a memset of a buffer twice its size, so neither is timed and no
run finds the previous run's data in L2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The most timed (and warm-up) runs one call makes: a kernel of microseconds would otherwise take
#: ``rep / time`` runs, each costing far more host time than GPU time.
MAX_RUNS = 1000
_ESTIMATE_RUNS = 5


def do_bench(fn: Callable[[], object], *, warmup: float = 25.0, rep: float = 100.0,
             before: Callable[[], object] | None = None, stream: Any = None, device: Any = None) -> float:
    """The median milliseconds of ``fn()`` (which queues work on ``stream``, default: the current one): one
    untimed call (it may compile), five timed ones to estimate its time, about ``warmup`` ms of untimed calls,
    then about ``rep`` ms of timed ones (at most ``MAX_RUNS`` each). ``before()`` runs before every call, untimed."""
    import statistics

    from tilejit.runtime.device import get_device
    from tilejit.runtime.memory import DeviceBuffer
    from tilejit.runtime.stream import stream_handle

    dev = get_device() if device is None else device
    handle = stream_handle(stream)
    prepare = before if before is not None else _nothing
    prepare()
    fn()
    with DeviceBuffer(max(2 * dev.l2_cache_size, 1 << 20), dev) as flush:
        estimate = max(statistics.median(_timed(fn, prepare, _ESTIMATE_RUNS, flush, handle, dev)), 1e-4)
        for _ in range(_runs(warmup, estimate)):
            prepare()
            fn()
        return float(statistics.median(_timed(fn, prepare, _runs(rep, estimate), flush, handle, dev)))


def _nothing() -> None:
    pass


def _runs(ms: float, each: float) -> int:
    """How many runs of ``each`` ms fill ``ms`` ms: at least 1, at most ``MAX_RUNS``."""
    return max(1, min(MAX_RUNS, int(ms / each)))


def _timed(fn: Callable[[], object], prepare: Callable[[], object], n: int, flush: Any, handle: int,
           device: Any) -> list[float]:
    """Milliseconds of each of ``n`` calls of ``fn``, each after ``prepare()`` and an L2 flush, timed by events
    on the stream ``handle``."""
    from tilejit.runtime.event import Event

    pairs: list[tuple[Event, Event]] = []
    try:
        for _ in range(n):
            prepare()
            flush.memset(0, stream=handle)
            pair = (Event(device=device), Event(device=device))
            pairs.append(pair)
            pair[0].record(handle)
            fn()
            pair[1].record(handle)
        return [Event.elapsed_ms(start, end) for start, end in pairs]
    finally:
        for start, end in pairs:
            start.close()
            end.close()


__all__ = ["MAX_RUNS", "do_bench"]
