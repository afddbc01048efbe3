"""Control flow on the Tile IR backend: ``for`` (constant and run-time bounds, carried scalars and tiles,
nested, loads and stores inside), ``while`` with ``break``, ``if``/``else`` with values, ``break``/``continue``
inside ``if`` inside loops, and the memory-ordering tokens they carry. On the CPU: tileiras compiles each
kernel for sm_80, sm_90 and sm_100, tileirdisasm reads it back as the text form prints it; on a GPU: each
kernel runs on both backends against numpy."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_tileir_writer import normalized, tool

import tilejit as tj
from tilejit.backends.tileir import generate_bytecode, module_text

F32 = tj.float32


@tj.kernel
def scale_thrice(x, out, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    for k in range(3):
        t = t * 2.0 + k
    tj.store(out, index=(i,), tile=t)


@tj.kernel
def row_sum(x, out, lo, hi, step, TM: tj.Constant[int], TN: tj.Constant[int]):
    """out[i-tile] = the sum of x's column tiles lo, lo + step, ... < hi (rows of tile i), and how many."""
    i = tj.bid(0)
    acc = tj.zeros((TM,), tj.float32)
    count = 0
    for k in range(lo, hi, step):
        acc = acc + tj.sum(tj.load(x, index=(i, k), shape=(TM, TN)), axis=1)
        count += 1
    tj.store(out, index=(i,), tile=acc + count.astype(tj.float32) * 1000.0)


@tj.kernel
def nested(x, out, n, m, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    total = tj.zeros((TILE,), tj.float32)
    steps = 0
    for a in range(n):
        for b in range(m):
            total = total + t * (a * 10 + b).astype(tj.float32)
            steps += 1
    tj.store(out, index=(i,), tile=total + steps.astype(tj.float32))


@tj.kernel
def accumulate_in_place(x, y, n, TILE: tj.Constant[int]):
    """y[i-tile] = y + x[0] + ... + x[n-1], read and written back through y each iteration (the order of
    iteration k's load of y after iteration k-1's store is what the tokens must keep)."""
    i = tj.bid(0)
    for k in range(n):
        cur = tj.load(y, index=(i,), shape=(TILE,))
        tj.store(y, index=(i,), tile=cur * 0.5 + tj.load(x, index=(k, i), shape=(1, TILE)).reshape((TILE,)))


@tj.kernel
def double_until(x, out, limit, TILE: tj.Constant[int]):
    """Doubles a tile until its sum passes ``limit`` (at most 20 times); stores the tile and the count."""
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    k = 0
    while True:
        if tj.sum(t, axis=0) > limit:
            break
        if k == 20:
            break
        t = t * 2.0
        k += 1
    tj.store(out, index=(i,), tile=t + k.astype(tj.float32) * 1000.0)


@tj.kernel
def count_down(x, out, n, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    k = n
    while k > 0:
        t = t + k.astype(tj.float32)
        k -= 3
    tj.store(out, index=(i,), tile=t)


@tj.kernel
def branchy(x, out, s, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    if s > 0:
        v = t * 2.0
        w = s * 3
    else:
        v = t - 1.0
        w = s - 7
    tj.store(out, index=(i,), tile=v + w.astype(tj.float32))


@tj.kernel
def skip_and_stop(x, out, log, n, TILE: tj.Constant[int]):
    """Adds k for each k in range(0, n, 2) but k == 4, stops after k > 9; each counted k stores its partial
    tile to the next row of log (stores inside the loop, a continue and a break that leave past them)."""
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    row = 0
    for k in range(0, n, 2):
        if k == 4:
            continue
        if k > 9:
            break
        t = t + k.astype(tj.float32)
        tj.store(log, index=(row, i), tile=t.reshape((1, TILE)))
        row += 1
    tj.store(out, index=(i,), tile=t + row.astype(tj.float32) * 1000.0)


@tj.kernel
def store_in_branch(x, out, n, TILE: tj.Constant[int]):
    """In each iteration stores to out in one branch and reads it back in the other (ordering through if
    results of token type inside a loop)."""
    i = tj.bid(0)
    for k in range(n):
        if (k & 1) == 0:
            tj.store(out, index=(i,), tile=tj.load(x, index=(i,), shape=(TILE,)) + k.astype(tj.float32))
        else:
            tj.store(out, index=(i,), tile=tj.load(out, index=(i,), shape=(TILE,)) * 2.0)


@tj.kernel
def exp_in_loop(x, out, n, TILE: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i,), shape=(TILE,))
    for _ in range(n):
        t = tj.exp(t)
    tj.store(out, index=(i,), tile=t)


I32 = tj.int32
#: name -> (kernel, signature, constants)
KERNELS: dict[str, tuple[Any, tuple[Any, ...], dict[str, int]]] = {
    "scale_thrice": (scale_thrice, (F32[:], F32[:]), {"TILE": 128}),
    "row_sum": (row_sum, (F32[:, :], F32[:], I32, I32, I32), {"TM": 16, "TN": 32}),
    "nested": (nested, (F32[:], F32[:], I32, I32), {"TILE": 128}),
    "accumulate_in_place": (accumulate_in_place, (F32[:, :], F32[:], tj.int64), {"TILE": 128}),
    "double_until": (double_until, (F32[:], F32[:], F32), {"TILE": 128}),
    "count_down": (count_down, (F32[:], F32[:], I32), {"TILE": 128}),
    "branchy": (branchy, (F32[:], F32[:], I32), {"TILE": 128}),
    "skip_and_stop": (skip_and_stop, (F32[:], F32[:], F32[:, :], tj.int64), {"TILE": 128}),
    "store_in_branch": (store_in_branch, (F32[:], F32[:], I32), {"TILE": 128}),
}


def ir_of(name: str) -> Any:
    """The IR of test kernel ``name`` (skips the kernels that need a rule another part of the lowering owns,
    while it is missing: ``count_down``'s ``while`` condition is negated with ``not``)."""
    kernel, sig, constants = KERNELS[name]
    fn = tj.compile(kernel, sig, constants=constants, target="sm_90").ir()
    if name == "count_down":
        try:
            module_text(fn, "sm_90")
        except tj.TileCompileError as e:
            if "'unary' (fn='not' on bool)" not in e.message:
                raise
            pytest.skip("the Tile IR lowering has no rule for 'not' on bool yet (elementwise rules)")
    return fn


def text_of(name: str) -> str:
    return module_text(ir_of(name), "sm_90")
