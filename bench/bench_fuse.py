"""``tj.fuse`` on one GPU: chains of elementwise operations against torch eager, torch.compile (inductor), cupy.fuse
and a hand-written tilejit tile kernel, side by side in one run.

Each case is a chain of 2, 4, 8 or 16 elementwise operations (multiplies and adds with a second input and with
numbers, ``tanh``, ``sigmoid``, ``maximum``) over 2^24 to 2^28 elements of float32 or bfloat16, with both inputs of
the full shape ("flat") or the second a row broadcast over the rows ("bcast"). Every contender's result is checked
against torch eager (in float32) before it is timed. Timings are medians of device events (``triton.testing.
do_bench`` when Triton is there); the rate is GB/s of the bytes each call must move (each input read once, the
output written once), against the device's copy bandwidth (``torch.Tensor.copy_`` of the largest size). Also:

- ``--launch``: per-call time (microseconds, wall clock over many calls with one sync) of a small call: the fused
  function with ``out=`` against a hand-written tile kernel, torch eager and torch.compile;
- ``--first-call``: the first call in a fresh process with an empty cache (tilejit: ``TILEJIT_CACHE_DIR``;
  torch.compile: ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR``), medians of ``--runs`` processes after one
  uncounted process (file pages warm), tilejit's bytecode written first as an install writes it; and where
  tilejit's first call spends its time (imports, driver and device, NVRTC's load and compile, module load, GPU
  wait, the rest) in one more process. ``--first-call-cpu`` times those parts with no GPU (a stand-in device).

A contender that is missing or fails is reported and skipped. Prints markdown tables; writes the data to
``bench/data/bench_fuse.json`` and a plot to ``bench/plots/bench_fuse.png`` (matplotlib), or under ``$OUT``.

    python bench/bench_fuse.py [--quick] [--sizes 24,26,28] [--chains 2,4,8,16] [--dtypes float32,bfloat16]
                               [--no-launch] [--no-first-call] [--runs 3] [--time-limit 220]
    python bench/bench_fuse.py --plot-from bench/data/bench_fuse.json   # no GPU: tables and plot of a saved run
    python bench/bench_fuse.py --first-call-cpu [--runs 5]              # no GPU: the parts of tilejit's first call

The whole run takes about 6 minutes on an H100 (``--time-limit`` caps the bandwidth part), ``--quick`` under 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tilejit as tj

#: torch and the timer, imported by ``main`` once it knows the run needs a GPU (``--help``, argument errors and
#: ``--plot-from`` work without torch).
torch: Any = None
QUICK = False

#: The chain's operations, cycled: (name, on a value ``v`` with the second input ``y``), written once per library
#: as text with ``T`` standing for its module (``tj``, ``torch``, ``cupy``).
OPS = [
    ("mul y", "v * y"),
    ("add", "v + 0.5"),
    ("tanh", "T.tanh(v)"),
    ("sub y", "v - y"),
    ("mul", "v * 0.75"),
    ("relu", "T.maximum(v, ZERO)"),
    ("sigmoid", "SIGMOID(v)"),
    ("add y", "v + y"),
]
ROWS: list[dict[str, Any]] = []
FAILED: dict[str, str] = {}


def chain_body(k: int, lib: str) -> str:
    """The Python body of a chain of ``k`` operations for ``lib`` ("tj", "torch", "cupy")."""
    sigmoid = {"tj": "tj.sigmoid", "torch": "torch.sigmoid", "cupy": "_cupy_sigmoid"}[lib]
    zero = {"tj": "0.0", "torch": "ZERO_T", "cupy": "0.0"}[lib]
    lines = ["v = x"]
    for i in range(k):
        text = OPS[i % len(OPS)][1].replace("T.", f"{lib}.").replace("SIGMOID", sigmoid).replace("ZERO", zero)
        lines.append(f"v = {text}")
    return "\n".join(lines) + "\nreturn v\n"


def make(k: int, lib: str, env: dict[str, Any]) -> Callable[..., Any]:
    """The chain as a Python function ``f(x, y)`` for ``lib``, defined in a file (torch.compile reads sources)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-fuse-"))
    path = folder / f"chain_{lib}_{k}.py"
    src = "def f(x, y):\n" + textwrap.indent(chain_body(k, lib), "    ")
    path.write_text(src)
    ns = dict(env)
    exec(compile(src, str(path), "exec"), ns)
    return ns["f"]  # type: ignore[no-any-return]


def hand_kernel(k: int, bcast: bool) -> Any:
    """A hand-written tile kernel of the chain: 1-D tiles of 4096 (8192 for 16-bit) over flat arrays, or 2-D tiles
    with the broadcast row loaded once per tile of rows."""
    folder = Path(tempfile.mkdtemp(prefix="bench-fuse-hand-"))
    path = folder / f"hand_{k}_{int(bcast)}.py"
    body = chain_body(k, "tj").replace("return v\n", "")
    if bcast:
        src = ("import tilejit as tj\n\n@tj.kernel\n"
               "def hand(x, y, out, TM: tj.Constant[int], TN: tj.Constant[int]):\n"
               "    i = tj.bid(0)\n    j = tj.bid(1)\n"
               "    x = tj.load(x, index=(i, j), shape=(TM, TN))\n"
               "    y = tj.load(y, index=(0, j), shape=(1, TN))\n"
               + textwrap.indent(body, "    ") +
               "    tj.store(out, index=(i, j), tile=v)\n")
    else:
        src = ("import tilejit as tj\n\n@tj.kernel\n"
               "def hand(x, y, out, TILE: tj.Constant[int]):\n"
               "    i = tj.bid(0)\n"
               "    x = tj.load(x, index=(i,), shape=(TILE,))\n"
               "    y = tj.load(y, index=(i,), shape=(TILE,))\n"
               + textwrap.indent(body, "    ") +
               "    tj.store(out, index=(i,), tile=v)\n")
    path.write_text(src)
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.hand


def bench(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn`` with device events (``bench_tile.bench``; shorter with ``--quick``)."""
    if QUICK:
        try:
            from triton.testing import do_bench

            return float(do_bench(fn, warmup=10, rep=60, return_mode="median"))
        except ImportError:
            pass
    from bench_tile import bench as full_bench

    return full_bench(fn)


def close(got: Any, want: Any, dtype: str, k: int) -> None:
    """Raise unless ``got`` is within a dtype's rounding of each of ``k`` operations of torch eager in float32."""
    g = torch.as_tensor(got, device="cuda").float() if not isinstance(got, torch.Tensor) else got.float()
    err = ((g.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30)).item()
    tol = 1e-5 if dtype == "float32" else 2.0**-8 * (k + 2)  # bfloat16: each operation rounds
    if not err <= tol:
        raise AssertionError(f"result differs from torch eager: relative error {err:.2e} > {tol}")


def record(case: dict[str, Any], impl: str, ms: float, nbytes: int) -> None:
    ROWS.append({**case, "impl": impl, "ms": ms, "gbps": nbytes / (ms * 1e-3) / 1e9})


def run_case(log2n: int, dtype: str, k: int, bcast: bool, fns: dict[str, Any]) -> None:
    n = 1 << log2n
    cols = 4096
    rows = n // cols
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(k)
    x = (torch.rand(rows, cols, device="cuda", generator=gen) - 0.5).to(tdt)
    y = (torch.rand(cols if bcast else (rows, cols), device="cuda", generator=gen) + 0.5).to(tdt)
    if not bcast:
        y = y.reshape(rows, cols)
    out = torch.empty_like(x)
    case = {"log2n": log2n, "dtype": dtype, "chain": k, "layout": "bcast" if bcast else "flat"}
    nbytes = (x.numel() + y.numel() + out.numel()) * x.element_size()
    want = fns["torch"](x.float(), y.float())
    name = f"2^{log2n} {dtype} chain {k} {case['layout']}"

    def attempt(impl: str, call: Callable[[], Any], result: Callable[[], Any]) -> None:
        try:
            call()
            torch.cuda.synchronize()
            close(result(), want, dtype, k)
            record(case, impl, bench(call), nbytes)
        except Exception as exc:
            FAILED[f"{impl}: {name}"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            if os.environ.get("BENCH_FUSE_DEBUG"):
                traceback.print_exc()

    attempt("tilejit fuse", lambda: fns["fuse"](x, y, out=out), lambda: out)
    hand = fns["hand"]
    if bcast:
        tm = 4 if x.element_size() == 4 else 8
        grid = (tj.cdiv(rows, tm), tj.cdiv(cols, 1024))
        attempt("tilejit hand-written", lambda: hand[grid](x, y.reshape(1, cols), out, TM=tm, TN=1024), lambda: out)
    else:
        tile = 4096 if x.element_size() == 4 else 8192
        xf, yf, of = x.reshape(-1), y.reshape(-1), out.reshape(-1)
        attempt("tilejit hand-written", lambda: hand[tj.cdiv(n, tile)](xf, yf, of, TILE=tile), lambda: out)
    attempt("torch eager", lambda: fns["torch"](x, y), lambda: fns["torch"](x, y))
    if fns.get("compiled") is not None:
        attempt("torch.compile", lambda: fns["compiled"](x, y), lambda: fns["compiled"](x, y))
    if fns.get("cupy") is not None and dtype != "bfloat16":
        import cupy

        cx, cy = cupy.asarray(x), cupy.asarray(y)
        attempt("cupy.fuse", lambda: fns["cupy"](cx, cy), lambda: torch.as_tensor(fns["cupy"](cx, cy), device="cuda"))


def copy_bandwidth(log2n: int) -> float:
    """GB/s of a device-to-device copy (bytes read and written), float32."""
    a = torch.empty(1 << log2n, device="cuda")
    b = torch.empty_like(a)
    ms = bench(lambda: b.copy_(a))
    return 2 * a.numel() * 4 / (ms * 1e-3) / 1e9


def contenders(k: int, bcast: bool) -> dict[str, Any]:
    zero = torch.zeros((), device="cuda")
    fns: dict[str, Any] = {
        "fuse": tj.fuse(make(k, "tj", {"tj": tj})),
        "torch": make(k, "torch", {"torch": torch, "ZERO_T": zero}),
        "hand": hand_kernel(k, bcast),
    }
    try:
        fns["compiled"] = torch.compile(make(k, "torch", {"torch": torch, "ZERO_T": zero}))
    except Exception as exc:
        FAILED["torch.compile"] = f"{type(exc).__name__}: {exc}"[:200]
    try:
        import cupy

        fns["cupy"] = cupy.fuse(make(k, "cupy", {"cupy": cupy, "_cupy_sigmoid": lambda v: 1 / (1 + cupy.exp(-v))}))
    except ImportError:
        FAILED["cupy.fuse"] = "CuPy is not installed"
    return fns


# ------------------------------------------------------------------------------------------------ launch overhead


def launch_overhead(calls: int = 2000, repeats: int = 21) -> list[dict[str, Any]]:
    """Microseconds per call of a small chain of 4 (4096 float32 elements) with preallocated outputs."""
    k, n = 4, 4096
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    fns = contenders(k, False)
    hand = fns["hand"]
    cases: dict[str, Callable[[], Any]] = {
        "tilejit fuse (out=)": lambda: fns["fuse"](x, y, out=out),
        "tilejit hand-written": lambda: hand[1](x, y, out, TILE=4096),
        "torch eager": lambda: fns["torch"](x, y),
    }
    if fns.get("compiled") is not None:
        cases["torch.compile"] = lambda: fns["compiled"](x, y)
    xa, ya, oa = tj.asarray(x.cpu().numpy()), tj.asarray(y.cpu().numpy()), tj.empty(n, "float32")
    cases["tilejit fuse, tilejit arrays (out=)"] = lambda: fns["fuse"](xa, ya, out=oa)
    cases["tilejit hand-written, tilejit arrays"] = lambda: hand[1](xa, ya, oa, TILE=4096)
    per: dict[str, list[float]] = {name: [] for name in cases}
    for name, call in list(cases.items()):
        try:
            for _ in range(200):
                call()
            torch.cuda.synchronize()
        except Exception as exc:
            FAILED[f"launch {name}"] = f"{type(exc).__name__}: {exc}"[:200]
            del cases[name], per[name]
    for _ in range(repeats):
        for name, call in cases.items():
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(calls):
                call()
            torch.cuda.synchronize()
            per[name].append((time.perf_counter() - t) / calls * 1e6)
    return [{"impl": name, "us_per_call": statistics.median(v)} for name, v in per.items()]


# ------------------------------------------------------------------------------------------------ first call

FIRST_TJ = r"""
import sys, time
sys.path.insert(0, {root!r})
import torch
import tilejit as tj
x = torch.rand(1 << 20, device="cuda"); y = torch.rand(1 << 20, device="cuda"); torch.cuda.synchronize()
@tj.fuse
def f(x, y):
{body}
t = time.perf_counter(); r = f(x, y); torch.cuda.synchronize(); print(time.perf_counter() - t)
"""
FIRST_TORCH = r"""
import time
import torch
x = torch.rand(1 << 20, device="cuda"); y = torch.rand(1 << 20, device="cuda"); torch.cuda.synchronize()
ZERO_T = torch.zeros((), device="cuda")
def f(x, y):
{body}
g = torch.compile(f)
t = time.perf_counter(); r = g(x, y); torch.cuda.synchronize(); print(time.perf_counter() - t)
"""
#: The first call of FIRST_TJ with its parts timed (one more process, not counted in the first call's time): the
#: modules it imports, the driver's load and the current device (``device``), NVRTC's load and compile, the driver's
#: module load, the wait for the GPU, and the rest (tracing, planning, the front end, passes, code generation, the
#: disk cache, the launch). With ``cpu`` no GPU is needed: tilejit views of no memory on a stand-in sm_90 device,
#: the driver, its module load and launch left out.
FIRST_PARTS = r"""
import builtins, json, sys, time
sys.path.insert(0, {root!r})
CPU = {cpu!r}
if not CPU:
    import torch
import tilejit as tj
from tilejit.compiler import nvrtc as nv
from tilejit.runtime import module as mod
spent = dict(imports=0.0, device=0.0, nvrtc_load=0.0, nvrtc_compile=0.0, module_load=0.0, gpu_wait=0.0)
depth = [0]
wrapped = []
real_import = builtins.__import__


def timed_import(name, *args, **kwargs):
    if depth[0] or name in sys.modules:
        return real_import(name, *args, **kwargs)
    depth[0] += 1
    t = time.perf_counter()
    try:
        return real_import(name, *args, **kwargs)
    finally:
        spent["imports"] += time.perf_counter() - t
        depth[0] -= 1


def timed(part, fn):
    def run(*args, **kwargs):
        depth[0] += 1  # imports inside it count for it
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[part] += time.perf_counter() - t
            depth[0] -= 1
    return run


def nvrtc():
    lib = timed("nvrtc_load", default_nvrtc)()
    if not wrapped:  # the compile itself: NVRTC's one call
        wrapped.append(lib.nvrtcCompileProgram)
        lib.nvrtcCompileProgram = timed("nvrtc_compile", lib.nvrtcCompileProgram)
    return lib


load = mod.Module.load.__func__
default_nvrtc = nv._default_nvrtc
nv._default_nvrtc = nvrtc
if CPU:
    import ctypes
    from types import SimpleNamespace
    from tilejit.runtime import device as device_state
    from tilejit.runtime.interop import ArrayView

    class StandInDevice(device_state.Device):
        ordinal = 0
        arch = "sm_90"
        multiprocessor_count = 132

    class StandInModule:
        def get_function(self, name):
            return SimpleNamespace(name=name, handle=0xF00D, module=self)

    driver = SimpleNamespace(cuLaunchKernelEx=ctypes.CDLL(None).geteuid, check=None)
    device_state.thread_state().device[0] = object.__new__(StandInDevice)
    device_state.initialized_driver = lambda: driver
    load = lambda cls, image, kind=None, device=None: StandInModule()
    x, y, o = (ArrayView(p, (1 << 20,), (1,), "float32", None) for p in (0x7000_0000, 0x7100_0000, 0x7200_0000))
else:
    from tilejit.runtime import device as device_state
    device_state._device_of_this_thread = timed("device", device_state._device_of_this_thread)
    x = torch.rand(1 << 20, device="cuda"); y = torch.rand(1 << 20, device="cuda"); torch.cuda.synchronize()
mod.Module.load = classmethod(timed("module_load", load))
@tj.fuse
def f(x, y):
{body}
builtins.__import__ = timed_import
t = time.perf_counter()
r = f(x, y, out=o) if CPU else f(x, y)  # (the stand-in driver has no memory for a new output)
if not CPU:
    w = time.perf_counter(); torch.cuda.synchronize(); spent["gpu_wait"] += time.perf_counter() - w
total = time.perf_counter() - t
builtins.__import__ = real_import
spent["rest"] = total - sum(spent.values())
print(json.dumps(dict(total=total, **spent)))
"""
PARTS = ("imports", "device", "nvrtc_load", "nvrtc_compile", "module_load", "gpu_wait", "rest")


def _bytecode() -> bool:
    """Write tilejit's bytecode (``__pycache__``), as installing a package does, so that no first-call process
    compiles tilejit's sources (with ``PYTHONDONTWRITEBYTECODE`` none would write it; torch's is installed)."""
    import compileall

    return bool(compileall.compile_dir(str(ROOT / "tilejit"), quiet=1))


def _child(script: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(cache / "tj"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "ind"),
           "TRITON_CACHE_DIR": str(cache / "triton")}
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)


def first_call(runs: int, cpu: bool = False) -> list[dict[str, Any]]:
    """Seconds of the first call of a chain of 8 in a fresh process with an empty cache, per contender (median of
    ``runs`` processes, after one not counted that warms the files' pages), and tilejit's parts in one more; with
    ``cpu`` only tilejit's parts, on a stand-in device. The scripts and caches live in a folder removed after."""
    with tempfile.TemporaryDirectory(prefix="bench-fuse-first-") as tmp:
        return _first_calls(Path(tmp), runs, cpu)


def _first_calls(folder: Path, runs: int, cpu: bool) -> list[dict[str, Any]]:
    out = []
    if not _bytecode():
        FAILED["tilejit bytecode"] = "compileall failed: first calls may compile tilejit's sources"
    body = textwrap.indent(chain_body(8, "tj"), "    ")
    parts_script = folder / "first_parts.py"
    parts_script.write_text(FIRST_PARTS.format(root=str(ROOT), body=body, cpu=cpu))
    contenders = [] if cpu else [("tilejit fuse", FIRST_TJ, "tj"), ("torch.compile", FIRST_TORCH, "torch")]
    for impl, template, body_lib in contenders:
        script = folder / f"first_{body_lib}.py"
        script.write_text(template.format(root=str(ROOT), body=textwrap.indent(chain_body(8, body_lib), "    ")))
        times = []
        for r in range(runs + 1):
            done = _child(script, folder / f"cache_{body_lib}_{r}")
            if done.returncode != 0:
                FAILED[f"first call {impl}"] = done.stderr.strip().splitlines()[-1][:200] if done.stderr else "?"
                break
            if r:  # the first process only warms the files' pages
                times.append(float(done.stdout.split()[-1]))
        if times:
            out.append({"impl": impl, "seconds": statistics.median(times), "runs": len(times)})
    parts: list[dict[str, float]] = []
    for r in range(runs if cpu else 1):
        done = _child(parts_script, folder / f"cache_parts_{r}")
        if done.returncode != 0:
            FAILED["first call parts"] = done.stderr.strip().splitlines()[-1][:200] if done.stderr else "?"
            break
        parts.append(json.loads(done.stdout.splitlines()[-1]))
    if parts:
        out.append({"impl": "tilejit fuse parts" + (" (CPU, stand-in device)" if cpu else ""), "runs": len(parts),
                    "seconds": statistics.median(p["total"] for p in parts),
                    "parts": {k: statistics.median(p[k] for p in parts) for k in PARTS}})
    return out


# ------------------------------------------------------------------------------------------------ output


def table(copy_gbps: float) -> str:
    impls = ["tilejit fuse", "tilejit hand-written", "torch eager", "torch.compile", "cupy.fuse"]
    lines = [f"Copy bandwidth (torch copy_, bytes read and written): {copy_gbps:.0f} GB/s", "",
             "| case | " + " | ".join(impls) + " | fuse / copy | fuse / torch.compile |",
             "| --- | " + " | ".join("---:" for _ in impls) + " | ---: | ---: |"]
    keys = sorted({(r["dtype"], r["layout"], r["chain"], r["log2n"]) for r in ROWS})
    for dtype, layout, chain, log2n in keys:
        got = {r["impl"]: r["gbps"] for r in ROWS if (r["dtype"], r["layout"], r["chain"], r["log2n"]) ==
               (dtype, layout, chain, log2n)}
        cells = [f"{got[i]:.0f}" if i in got else "-" for i in impls]
        fuse = got.get("tilejit fuse")
        ratio_copy = f"{fuse / copy_gbps:.2f}x" if fuse else "-"
        ratio_tc = f"{fuse / got['torch.compile']:.2f}x" if fuse and "torch.compile" in got else "-"
        lines.append(f"| 2^{log2n} {dtype} chain {chain} {layout} | " + " | ".join(cells) +
                     f" | {ratio_copy} | {ratio_tc} |")
    return "\n".join(lines)


def plot(path: Path, copy_gbps: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chains = sorted({r["chain"] for r in ROWS})
    panels = sorted({(r["dtype"], r["layout"]) for r in ROWS})
    fig, axes = plt.subplots(len(chains), len(panels), figsize=(4 * len(panels), 3 * len(chains)), squeeze=False)
    for i, chain in enumerate(chains):
        for j, (dtype, layout) in enumerate(panels):
            ax = axes[i][j]
            for impl in sorted({r["impl"] for r in ROWS}):
                pts = sorted((r["log2n"], r["gbps"]) for r in ROWS if r["impl"] == impl and r["chain"] == chain
                             and (r["dtype"], r["layout"]) == (dtype, layout))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
            ax.axhline(copy_gbps, color="gray", linestyle="--", linewidth=1)
            ax.set_title(f"chain {chain}, {dtype}, {layout}", fontsize=9)
            ax.set_xlabel("log2(elements)")
            ax.set_ylabel("GB/s")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(data: dict[str, Any]) -> str:
    """The markdown of a run's data: the bandwidth table, per-call times and first calls, each with its ratio."""
    parts = [table(data["copy_gbps"])] if "copy_gbps" in data else []
    launch = {r["impl"]: r["us_per_call"] for r in data.get("launch", [])}
    if launch:
        rows = [f"| {name} | {us:.2f} |" for name, us in launch.items()]
        pairs = (("tilejit fuse (out=)", "tilejit hand-written"),
                 ("tilejit fuse, tilejit arrays (out=)", "tilejit hand-written, tilejit arrays"))
        rows += [f"| {a} / {b} | {launch[a] / launch[b]:.2f}x |" for a, b in pairs if a in launch and b in launch]
        parts.append("| call (4096 float32, chain of 4) | us per call |\n| --- | ---: |\n" + "\n".join(rows))
    first = {r["impl"]: r for r in data.get("first_call", [])}
    if first:
        rows = [f"| {name} | {r['seconds']:.3f} | {r['runs']} |" for name, r in first.items()]
        rows += [f"| {name}: {part} | {sec:.3f} | |" for name, r in first.items()
                 for part, sec in r.get("parts", {}).items()]
        if "tilejit fuse" in first and "torch.compile" in first:  # (the parts' process is not one of the runs)
            ratio = first["torch.compile"]["seconds"] / first["tilejit fuse"]["seconds"]
            rows.append(f"| torch.compile / tilejit fuse | {ratio:.1f}x | |")
        parts.append("| first call, fresh process, empty cache (chain of 8, 2^20 float32) | seconds | runs |\n"
                     "| --- | ---: | ---: |\n" + "\n".join(rows))
    parts += [f"skipped {name}: {why}" for name, why in data.get("failed", {}).items()]
    if data.get("seconds"):
        parts.append("seconds per part: " + ", ".join(f"{k} {v:.0f}" for k, v in data["seconds"].items()))
    return "\n\n".join(parts)


def write(data: dict[str, Any]) -> None:
    """The data as JSON and the plot, under ``$OUT`` (else ``bench/``): ``data/bench_fuse.json``,
    ``plots/bench_fuse.png``."""
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "bench"
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "data" / "bench_fuse.json").write_text(json.dumps(data, indent=1))
    try:
        (out_dir / "plots").mkdir(parents=True, exist_ok=True)
        plot(out_dir / "plots" / "bench_fuse.png", data["copy_gbps"])
    except ImportError:
        print("no plot: matplotlib is not installed")


def _ints(text: str, what: str, lo: int, hi: int, parser: argparse.ArgumentParser) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        parser.error(f"{what}: comma-separated integers expected, got {text!r}")
    if not values or any(not lo <= v <= hi for v in values):
        parser.error(f"{what}: each in {lo}..{hi}, got {text!r}")
    return values


def main() -> None:
    global torch, QUICK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="2^24 and 2^26, chains 2 and 16, shorter timings, one first-call process (< 2 min)")
    parser.add_argument("--sizes", default="24,26,28", help="log2 of the element counts (12..28)")
    parser.add_argument("--chains", default="2,4,8,16", help="operations per chain (1..64)")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="float32 and/or bfloat16")
    parser.add_argument("--no-launch", action="store_true", help="skip the per-call overhead")
    parser.add_argument("--no-first-call", action="store_true", help="skip the fresh-process first calls")
    parser.add_argument("--first-call-cpu", action="store_true",
                        help="no GPU: only the parts of tilejit's first call, on a stand-in device (--runs processes)")
    parser.add_argument("--runs", type=int, default=None, help="fresh processes per first call (3; --quick 1)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds after which no further chain's bandwidth cases start (220; --quick 60)")
    parser.add_argument("--plot-from", metavar="JSON", type=Path,
                        help="no GPU: print the tables of a saved run and write its plot")
    opts = parser.parse_args()
    if opts.plot_from is not None:
        try:
            data = json.loads(opts.plot_from.read_text())
            ROWS[:] = data["rows"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parser.error(f"--plot-from {opts.plot_from}: not a saved bench_fuse run ({exc})")
        print(report(data))
        write(data)
        return
    if opts.first_call_cpu:
        runs = opts.runs if opts.runs is not None else 5
        data = {"first_call": first_call(runs, cpu=True), "failed": FAILED}
        print(report(data))
        return
    QUICK = opts.quick
    sizes = [24, 26] if opts.quick else _ints(opts.sizes, "--sizes", 12, 28, parser)
    chains = [2, 16] if opts.quick else _ints(opts.chains, "--chains", 1, 64, parser)
    dtypes = [d.strip() for d in opts.dtypes.split(",") if d.strip()]
    if not dtypes or any(d not in ("float32", "bfloat16") for d in dtypes):
        parser.error(f"--dtypes: float32 and/or bfloat16, got {opts.dtypes!r}")
    runs = opts.runs if opts.runs is not None else 1 if opts.quick else 3
    if runs < 1:
        parser.error("--runs must be at least 1")
    limit = opts.time_limit if opts.time_limit is not None else 60.0 if opts.quick else 220.0
    import torch as _torch

    torch = _torch
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    copy_gbps = copy_bandwidth(max(sizes))
    for k in sorted(chains, reverse=True):  # the longest chains first: a time limit skips the short ones
        for bcast in (True, False):
            if time.perf_counter() - start > limit:
                FAILED[f"chain {k} {'bcast' if bcast else 'flat'}"] = f"past --time-limit {limit:.0f} s"
                continue
            fns = contenders(k, bcast)
            for dtype in dtypes:
                for log2n in sizes:
                    run_case(log2n, dtype, k, bcast, fns)
                    torch.cuda.empty_cache()
    seconds["bandwidth"] = time.perf_counter() - start
    data: dict[str, Any] = {"copy_gbps": copy_gbps, "rows": ROWS, "failed": FAILED, "quick": opts.quick,
                            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "seconds": seconds}
    if not opts.no_launch:
        t = time.perf_counter()
        data["launch"] = launch_overhead(500, 7) if opts.quick else launch_overhead()
        seconds["launch"] = time.perf_counter() - t
    if not opts.no_first_call:
        t = time.perf_counter()
        data["first_call"] = first_call(runs)
        seconds["first call"] = time.perf_counter() - t
    print(report(data))
    write(data)


if __name__ == "__main__":
    main()
