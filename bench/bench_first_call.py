"""First call of a small kernel in a new process: tilejit RawKernel vs CuPy RawKernel, cold and warm disk cache.

Every measurement is a fresh ``python`` process. Inside it, after the library is imported and the inputs are
on the GPU (so context creation is not counted), the timed "first call" builds the kernel object, launches a
vector add once and synchronizes: compile (or cache load), module load and launch. Cold runs get an empty
cache folder each (``TILEJIT_CACHE_DIR`` / ``CUPY_CACHE_DIR``); warm runs share one primed folder. Each result
is checked against numpy. Also reported: ``import tilejit`` and ``import cupy`` time, the time to define the
tile kernel (import its module), and the whole process from spawn to exit. Medians of ``--runs`` runs;
markdown table on stdout, JSON to ``$OUT`` when set.

    python bench/bench_first_call.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SOURCE = r"""
extern "C" __global__ void vadd(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
"""

# Both tilejit children time Python's garbage collector: gc_time() is its total run time so far.
GC_TIMER = r"""
import gc, time
_gc = [0.0, 0.0]
def _gc_cb(phase, info):
    if phase == "start":
        _gc[1] = time.perf_counter()
    else:
        _gc[0] += time.perf_counter() - _gc[1]
gc.callbacks.append(_gc_cb)
def gc_time():
    return _gc[0]
"""

CHILD_TILEJIT = GC_TIMER + r"""
import json, sys, time
t0 = time.perf_counter()
import tilejit as tj
t1 = time.perf_counter()
import numpy as np
src, n = sys.argv[1], 1 << 20
rng = np.random.default_rng(0)
x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
dx, dy, dout = tj.asarray(x), tj.asarray(y), tj.asarray(np.zeros(n, np.float32))
dev = tj.get_device()
dev.synchronize()
gc_before, t2 = gc_time(), time.perf_counter()
kernel = tj.RawKernel(src, "vadd")
ta = time.perf_counter()
kernel.compile()
tb = time.perf_counter()
kernel(((n + 255) // 256, 1, 1), (256, 1, 1), (dx, dy, dout, n))
dev.synchronize()
t3 = time.perf_counter()
ok = bool(np.array_equal(dout.numpy(), x + y))
gc_s = gc_time() - gc_before
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t2, "ok": ok, "gc_s": gc_s,
                  "phases_ms": [round(1e3 * (ta - t2), 2), round(1e3 * (tb - ta), 2), round(1e3 * (t3 - tb), 2)]}))
"""

CHILD_TILE = GC_TIMER + r"""
import json, sys, time
t0 = time.perf_counter()
import tilejit as tj
t1 = time.perf_counter()
import numpy as np
sys.path.insert(0, sys.argv[2])
import _common  # the example's helpers (argparse): not part of defining the kernel
td = time.perf_counter()
from vector_add import vector_add  # runs @tj.kernel
define_s = time.perf_counter() - td
n = 1 << 20
rng = np.random.default_rng(0)
x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
dx, dy, dout = tj.asarray(x), tj.asarray(y), tj.asarray(np.zeros(n, np.float32))
dev = tj.get_device()
dev.synchronize()
gc_before, t2 = gc_time(), time.perf_counter()
vector_add[tj.cdiv(n, 1024)](dx, dy, dout, TILE=1024)
dev.synchronize()
t3 = time.perf_counter()
gc_s = gc_time() - gc_before
ok = bool(np.array_equal(dout.numpy(), x + y))
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t2, "ok": ok, "gc_s": gc_s, "define_s": define_s}))
"""

CHILD_CUPY = r"""
import json, sys, time
t0 = time.perf_counter()
import cupy as cp
t1 = time.perf_counter()
import numpy as np
src, n = sys.argv[1], 1 << 20
rng = np.random.default_rng(0)
x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
dx, dy, dout = cp.asarray(x), cp.asarray(y), cp.zeros(n, cp.float32)
cp.cuda.Device().synchronize()
t2 = time.perf_counter()
kernel = cp.RawKernel(src, "vadd")
kernel(((n + 255) // 256,), (256,), (dx, dy, dout, np.int32(n)))
cp.cuda.Device().synchronize()
t3 = time.perf_counter()
ok = bool(np.array_equal(cp.asnumpy(dout), x + y))
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t2, "ok": ok}))
"""

CHILD_IMPORT = r"""
import json, time
t0 = time.perf_counter()
import tilejit
t1 = time.perf_counter()
with open("/proc/self/maps") as f:
    maps = f.read()
print(json.dumps({"import_s": t1 - t0, "cuda_loaded": "libcuda" in maps or "libnvrtc" in maps}))
"""


def run_child(script: str, env: dict[str, str]) -> dict[str, Any]:
    """One measurement in a new process; adds ``process_s`` (spawn to exit)."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", script, SOURCE, str(Path(__file__).resolve().parent.parent / "examples")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"child exited with {proc.returncode}:\n{proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if result.get("ok") is False:
        raise RuntimeError("wrong result: the kernel's output differs from numpy's x + y")
    result["process_s"] = elapsed
    return result


def measure(name: str, script: str, cache_var: str | None, runs: int, warm: bool, base: Path) -> dict[str, Any]:
    """Median and spread of ``runs`` fresh processes, cold (empty cache each) or warm (one primed cache)."""
    samples: list[dict[str, Any]] = []
    if cache_var is not None and warm:
        shared = tempfile.mkdtemp(prefix=f"{name}-warm-", dir=base)
        run_child(script, {cache_var: shared})  # prime
        samples = [run_child(script, {cache_var: shared}) for _ in range(runs)]
    elif cache_var is not None:
        samples = [
            run_child(script, {cache_var: tempfile.mkdtemp(prefix=f"{name}-cold-", dir=base)}) for _ in range(runs)
        ]
    else:
        samples = [run_child(script, {}) for _ in range(runs)]
    out: dict[str, Any] = {"runs": runs}
    for field in ("first_call_s", "import_s", "process_s", "gc_s", "define_s"):
        values = [s[field] for s in samples if field in s]
        if values:
            out[field] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
                "all": values,
            }
    if "phases_ms" in samples[0]:
        out["phases_ms"] = [statistics.median(s["phases_ms"][i] for s in samples) for i in range(3)]
    if "cuda_loaded" in samples[0]:
        out["cuda_loaded"] = any(s["cuda_loaded"] for s in samples)
    return out


def ms(stats: dict[str, Any] | None) -> str:
    if not stats:
        return "n/a"
    return f"{stats['median'] * 1e3:.1f} ({stats['min'] * 1e3:.1f}..{stats['max'] * 1e3:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="processes per measurement (median reported)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")

    cases = [
        ("import tilejit", "tilejit", CHILD_IMPORT, None, False),
        ("tilejit RawKernel, cold cache", "tilejit", CHILD_TILEJIT, "TILEJIT_CACHE_DIR", False),
        ("tilejit RawKernel, warm cache", "tilejit", CHILD_TILEJIT, "TILEJIT_CACHE_DIR", True),
        ("tilejit tile kernel (vector_add), cold cache", "tile", CHILD_TILE, "TILEJIT_CACHE_DIR", False),
        ("tilejit tile kernel (vector_add), warm cache", "tile", CHILD_TILE, "TILEJIT_CACHE_DIR", True),
        ("CuPy RawKernel, cold cache", "cupy", CHILD_CUPY, "CUPY_CACHE_DIR", False),
        ("CuPy RawKernel, warm cache", "cupy", CHILD_CUPY, "CUPY_CACHE_DIR", True),
    ]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-first-call-") as tmp:
        for label, name, script, cache_var, warm in cases:
            print(f"measuring {label} ({args.runs} processes)...", file=sys.stderr, flush=True)
            try:
                results[label] = measure(name, script, cache_var, args.runs, warm, Path(tmp))
            except Exception as exc:  # a missing peer or a failure must not stop the others
                results[label] = {"error": f"{type(exc).__name__}: {exc}"}

    lines = [
        f"First call in a new process, milliseconds: median (min..max) of {args.runs} runs",
        "",
        "| case | first call (compile/load + launch + sync) | import | whole process |",
        "|---|---|---|---|",
    ]
    for label, r in results.items():
        if "error" in r:
            lines.append(f"| {label} | error: {r['error'].splitlines()[-1][:120]} | | |")
            continue
        note = " (CUDA library loaded!)" if r.get("cuda_loaded") else ""
        lines.append(
            f"| {label} | {ms(r.get('first_call_s'))} | {ms(r.get('import_s'))}{note} | {ms(r.get('process_s'))} |"
        )
    for label, r in results.items():
        if "phases_ms" in r:
            a, b, c = r["phases_ms"]
            lines.append(
                f"\n{label}: RawKernel() {a:.1f} ms, compile (or cache hit) {b:.1f} ms, "
                f"module load + launch + sync {c:.1f} ms (medians)"
            )
    for label, r in results.items():
        if r.get("define_s"):
            lines.append(f"\n{label}: defining the kernel (importing its module, which runs @tj.kernel; before "
                         f"the first call, not in it) {ms(r['define_s'])} ms")
    for label, r in results.items():
        if r.get("gc_s"):
            lines.append(f"\n{label}: Python's garbage collector ran {ms(r['gc_s'])} ms of it")
    table = "\n".join(lines)
    print(table)

    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        meta = {"python": sys.version, "runs": args.runs, "source": SOURCE}
        Path(out_dir, "bench_first_call.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
        Path(out_dir, "bench_first_call.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
