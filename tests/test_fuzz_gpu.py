"""Differential fuzzing: random tile programs (``fuzz_model.generate``) run on the GPU against the numpy
model of tile.py's rules, with every output a view inside a poisoned buffer. Without a GPU the CPU tests
check the generator: its programs compile for sm_90 (each one asserts, at compile time, the dtype and
shape the model gives every value), the model runs without numpy warnings, and ``check`` finds wrong,
missing and stray elements.

``TILEJIT_FUZZ_CASES`` (default 400) programs run, in blocks of seeds from ``TILEJIT_FUZZ_SEED_BASE``
(default 0); ``TILEJIT_FUZZ_SEEDS=3,17`` runs just those. A failure shows each failing program's seed and
source; ``python tests/fuzz_model.py SEED`` prints one with its inputs and the model's outputs (a seed
gives the same program with any numpy; the model's float64 math may differ in the last bits).
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import fuzz_model as fm
import numpy as np
import pytest

import tilejit as tj

CASES = int(os.environ.get("TILEJIT_FUZZ_CASES", "400"))
SEED_BASE = int(os.environ.get("TILEJIT_FUZZ_SEED_BASE", "0"))
BLOCKS = 20  # on Tile IR every program is a tileiras run (about a second): small blocks spread over workers
_CHOSEN = [int(s) for s in os.environ.get("TILEJIT_FUZZ_SEEDS", "").replace(",", " ").split()]
SEED_BLOCKS = [_CHOSEN] if _CHOSEN else [
    list(range(SEED_BASE + b * -(-CASES // BLOCKS), SEED_BASE + min(CASES, (b + 1) * -(-CASES // BLOCKS))))
    for b in range(BLOCKS)
]


def load_kernel(prog: fm.Program, folder: Path) -> Any:
    """The program's kernel, imported from a file (tile kernels are read from their source file)."""
    path = folder / f"{prog.name}.py"
    path.write_text(prog.source)
    spec = importlib.util.spec_from_file_location(prog.name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, prog.name)


def signature(prog: fm.Program, contiguous: bool = False) -> tuple[Any, ...]:
    """``tj.compile`` types of the kernel's arrays (``[..., ::1]``: the promise a contiguous launch gets)."""
    types = []
    for buf in prog.inputs + prog.outputs:
        dims = [slice(None)] * buf.phys.ndim
        if contiguous:
            dims[-1] = slice(None, None, 1)
        types.append(getattr(tj, "bool_" if buf.dtype == "bool" else buf.dtype)[tuple(dims)])
    return tuple(types)


def device_buffers(prog: fm.Program) -> tuple[list[Any], list[Any]]:
    """(whole device buffers, the kernel's views of them), inputs then outputs; bfloat16 buffers travel as
    their raw 16 bits and are viewed as bfloat16 (no ml_dtypes needed)."""
    raws, views = [], []
    for buf in prog.inputs + prog.outputs:
        raw = tj.asarray(buf.phys)
        typed = raw if buf.dtype != "bfloat16" else tj.DeviceArray(
            raw.shape, "bfloat16", device=raw.device, strides=raw.strides, ptr=raw.ptr, base=raw)
        raws.append(raw)
        views.append(typed[buf.view])
    return raws, views


def run_program(prog: fm.Program, folder: Path) -> list[str]:
    """Launch the program once on the GPU; what differs from the model (empty: nothing)."""
    kernel = load_kernel(prog, folder)
    raws, views = device_buffers(prog)
    kernel[prog.grid](*views)
    problems: list[str] = []
    n_in = len(prog.inputs)
    for buf, raw in zip(prog.inputs, raws[:n_in]):
        if raw.numpy().tobytes() != buf.phys.tobytes():
            problems.append(f"{buf.name}: the kernel changed an input buffer")
    for buf, want, raw in zip(prog.outputs, prog.expected, raws[n_in:]):
        problems += fm.check(buf, want, raw.numpy())
    return problems


@pytest.mark.gpu
@pytest.mark.parametrize("seeds", SEED_BLOCKS, ids=lambda s: f"seeds{s[0]}-{s[-1]}" if s else "none")
def test_random_programs_match_the_numpy_model(seeds: list[int], tmp_path: Path) -> None:
    """Each program of the block runs once; every difference from the model is reported with its source."""
    failures: list[str] = []
    failed: list[int] = []
    for seed in seeds:
        prog = fm.generate(seed)
        try:
            problems = run_program(prog, tmp_path)
        except tj.CUDAError as exc:  # the context may be unusable after a fault: stop this block here
            failed.append(seed)
            failures.append(f"{prog.report()}\nCUDA error: {exc}")
            break
        except Exception as exc:
            problems = [f"{type(exc).__name__}: {exc}"]
        if problems:
            failed.append(seed)
            failures.append(prog.report() + "\n".join(problems))
    assert not failures, (f"{len(failed)} of {len(seeds)} random programs differ from the model (seeds {failed}):\n\n"
                          + "\n\n".join(failures[:4]))


# --------------------------------------------------------------------------- the generator, without a GPU


def test_generated_programs_are_valid_and_the_model_is_warning_free() -> None:
    """Hundreds of programs generate with numpy warnings as errors, and together they use the language."""
    seen: Counter[str] = Counter()
    words = ("tj.load", "tj.where", "tj.arange", "[None, :]", "tj.broadcast_to", "tj.expand_dims", "reshape",
             "transpose", ".T", "tj.sum", "prod", "argmax", "argmin", "cumsum", "tj.full", "tj.zeros", "astype",
             "tj.exp", "tj.sigmoid", "tj.erf", "tj.maximum", " // ", " % ", " << ", " >> ", " ** ", " < ", " != ",
             'float("inf")', 'float("nan")', "keepdims=True", "axis=(")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed in range(300):
            prog = fm.generate(seed)
            assert len(prog.outputs) == len(prog.expected) > 0
            for buf, want in zip(prog.outputs, prog.expected):
                assert buf.phys[buf.view].shape == want.value.shape == want.written.shape
                assert want.written.any()
                assert fm.check(buf, want, buf.phys), "an output left as poison must be reported"
                seen["out " + buf.dtype] += 1
                seen["an element no store covers"] += not want.written.all()
            for word in words:
                seen[word] += word in prog.source
            seen[f"grid {prog.grid}"] += 1
    wanted = ["out " + d for d in fm.DTYPES] + ["an element no store covers", "grid 1", "grid 2", "grid 3", *words]
    assert not [k for k in wanted if not seen[k]], f"300 programs never use {[k for k in wanted if not seen[k]]}"


def test_generated_programs_compile_for_sm_90(tmp_path: Path) -> None:
    """A few dozen programs compile to CUBIN without a GPU; the asserts in their source check that the
    front end gives every value the dtype and shape the model does."""
    for seed in range(1000, 1024):
        prog = fm.generate(seed)
        kernel = load_kernel(prog, tmp_path)
        try:
            art = tj.compile(kernel, signature(prog, contiguous=seed % 4 == 0), target="sm_90")
            assert art.cubin()[:4] == b"\x7fELF"
        except Exception as exc:
            raise AssertionError(f"{prog.report()}\n{type(exc).__name__}: {exc}") from exc


def test_the_error_bounds_admit_every_result_a_correct_gpu_may_give() -> None:
    """Replays move every float result anywhere within the bound its own op may add (ulps of math
    functions and of float32 division, FMA contraction, the order of a reduction) and recompute the rest
    from there, through comparisons, floors and casts: the model must accept every replay, or the fuzzer
    would report correct GPU results as wrong."""
    for seed in range(400):
        prog = fm.generate(seed)
        for k in range(2):
            outs = prog.replay(np.random.default_rng([seed, k]))
            for buf, want, got in zip(prog.outputs, prog.expected, outs):
                problems = fm.check(buf, want, got)
                assert not problems, f"{prog.report()}\nreplay {k}: {problems}"


def _correct_result(buf: fm.Buffer, want: fm.Expect) -> np.ndarray:
    """The buffer a correct kernel leaves: the model's values where it stored, poison elsewhere."""
    got = buf.phys.copy()
    inner = got[buf.view]
    inner[want.written] = fm.to_bits(want.value, buf.dtype)[want.written]
    return got


def _bits(raw: np.ndarray) -> np.ndarray:
    """The raw elements as unsigned integers of their size (a view: writes change ``raw``)."""
    return raw.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[raw.dtype.itemsize])


def _set(raw: np.ndarray, view: tuple[slice, ...], index: tuple[int, ...], value: Any, dt: str) -> np.ndarray:
    """A copy of ``raw`` with element ``index`` of its ``view`` set to the model value ``value``."""
    out = raw.copy()
    out[view][index] = fm.to_bits(np.array([value], fm.HOLD[dt]), dt)[0]
    return out


def test_check_finds_wrong_missing_and_stray_elements() -> None:
    """``check`` accepts what a correct kernel writes and names each kind of wrong element."""
    kinds: Counter[str] = Counter()
    for seed in range(200):
        prog = fm.generate(seed)
        for buf, want in zip(prog.outputs, prog.expected):
            dt, view = buf.dtype, buf.view
            good = _correct_result(buf, want)
            assert fm.check(buf, want, good) == [], prog.report()

            differs = want.written & (fm.to_bits(want.value, dt) != buf.phys[view])
            if differs.any():  # an element the kernel should have written, left as poison
                i = tuple(int(k) for k in np.argwhere(differs)[0])
                missing = good.copy()
                _bits(missing)[view][i] = _bits(buf.phys)[view][i]
                assert any(f"{list(i)} was not written" in p for p in fm.check(buf, want, missing)), prog.report()
                kinds["missing"] += 1

            outside = np.ones(buf.phys.shape, bool)
            outside[view] = False
            j = tuple(int(k) for k in np.argwhere(outside)[-1])
            stray = good.copy()
            _bits(stray)[j] ^= 1
            assert any(f"element {j} of the buffer" in p for p in fm.check(buf, want, stray)), prog.report()
            kinds["stray"] += 1

            i = tuple(int(k) for k in np.argwhere(want.written)[0])
            value = want.value[i]
            if dt == "bool":
                changed: Any = not value
            elif dt in fm.INTS:
                changed = int(value) ^ 1
            elif not np.isfinite(value):
                changed = 0.0
            else:
                assert want.err is not None
                changed = float(fm.round_to(float(value) + 2 * float(want.err[i]) + abs(float(value)) + 1.0, dt))
            assert any(f"{list(i)} is" in p for p in fm.check(buf, want, _set(good, view, i, changed, dt))), \
                prog.report()
            kinds[dt] += 1

            if want.err is not None:
                zeros = np.argwhere(want.written & (want.value == 0) & (want.err == 0))
                if len(zeros):  # an exact zero with the wrong sign
                    z = tuple(int(k) for k in zeros[0])
                    flipped = _set(good, view, z, -want.value[z], dt)
                    assert any(f"{list(z)} is" in p for p in fm.check(buf, want, flipped)), prog.report()
                    kinds["signed zero"] += 1
    assert all(kinds[k] for k in ("missing", "stray", "signed zero", *fm.DTYPES)), kinds
