"""Memory order: ``sem=``/``scope=`` on every atomic, ``tj.fence`` and ``tj.barrier``, on both backends.

CPU: located errors for bad orders and scopes; the IR's attributes; the CUDA backend's PTX (``atom.<sem>.<scope>``,
``fence.acq_rel``, and ``bar.sync`` before a release and after an acquire, also in a spin lock's unlock after the
block's stores), before sm_70 (``membar`` fences, ``.sys`` refused) and with every CUDA major; Tile IR's text,
bytecode read back by tileirdisasm and CUBINs from tileiras, its located refusal of ``tj.fence``.
GPU (marker; each backend): Triton 05's layer-norm backward spin lock (many blocks adding partial dW/dB rows into
a few shared rows under a lock) against numpy under contention, a last-block reduction published by an acq_rel
counter (and, CUDA, by fences around a relaxed one), every sem and scope counting exactly, and a barrier between
a store and a load of another layout.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpu_arrays import dev
from source_lines import where_in

import tilejit as tj
from tilejit.errors import TileCompileError, TileIRUnsupportedError

LINES = Path(__file__).read_text(encoding="utf-8").splitlines()
SEMS = ("relaxed", "acquire", "release", "acq_rel")
SCOPES = ("cta", "gpu", "sys")
TILEIR_SCOPES = {"cta": "tl_blk", "gpu": "device", "sys": "sys"}
#: CPU tests of the CUDA backend's own paths (fences, sm_6x, a bfloat16 add's CAS loop on sm_80): their kernels stay
#: out of the Tile IR coverage check (test_tileir_coverage.py), which refuses them by design.
CUDA_PATHS = pytest.mark.cuda_only(reason="the CUDA backend's PTX for fences, sm_6x and 16-bit CAS loops")


# --------------------------------------------------------------------------------------------- kernels


def xchg_scalar(lock, SEM: tj.Constant[str], SCOPE: tj.Constant[str]):
    tj.atomic_xchg(lock, 0, 1, sem=SEM, scope=SCOPE)


def add_tile(h, SEM: tj.Constant[str], SCOPE: tj.Constant[str]):
    tj.atomic_add(h, tj.arange(128), 1, sem=SEM, scope=SCOPE)


def cas_scalar(lock, SEM: tj.Constant[str], SCOPE: tj.Constant[str]):
    tj.atomic_cas(lock, 0, 0, 1, sem=SEM, scope=SCOPE)


def fence_only(x, SEM: tj.Constant[str], SCOPE: tj.Constant[str]):
    tj.fence(sem=SEM, scope=SCOPE)


def barrier_between(x, out, BM: tj.Constant[int], BN: tj.Constant[int]):
    """Store a tile, then read it back transposed: another thread reads each element than the one that wrote it."""
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(BM, BN))
    tj.store(out, index=(i, 0), tile=t * 2.0)
    tj.barrier()
    back = tj.load(out, index=(i, 0), shape=(BM, BN))
    tj.store(out, index=(i, 0), tile=tj.transpose(tj.transpose(back) + 1.0))


def ln_bwd_partial(dy, x, dw_part, db_part, locks, counts, GROUP: tj.Constant[int], BN: tj.Constant[int],
                   LOCK: tj.Constant[str], UNLOCK: tj.Constant[str]):
    """Triton tutorial 05's layer-norm backward (dW, dB part): each row adds its dy * x and dy to one of GROUP
    shared partial rows, under that row's spin lock; the first row to get a lock stores instead of adding."""
    row = tj.bid(0)
    g = row % GROUP
    a = tj.load(dy, index=(row, 0), shape=(1, BN))
    pdw = a * tj.load(x, index=(row, 0), shape=(1, BN))
    pdb = a
    while tj.atomic_cas(locks, g, 0, 1, sem=LOCK) == 1:
        pass
    if tj.gather(counts, g) == 0:
        tj.atomic_xchg(counts, g, 1, sem="relaxed")
    else:
        pdw = pdw + tj.load(dw_part, index=(g, 0), shape=(1, BN))
        pdb = pdb + tj.load(db_part, index=(g, 0), shape=(1, BN))
    tj.store(dw_part, index=(g, 0), tile=pdw)
    tj.store(db_part, index=(g, 0), tile=pdb)
    tj.atomic_xchg(locks, g, 0, sem=UNLOCK)


def last_block_sum(x, partial, counter, out, TILE: tj.Constant[int], SEM: tj.Constant[str],
                   FENCE: tj.Constant[bool]):
    """Each block stores its tile's sum; the block that takes the last ticket adds every block's sum. ``FENCE``:
    publish and read with fences around a relaxed ticket instead of an ordered one (CUDA backend)."""
    i = tj.bid(0)
    tj.store(partial, index=(i,), tile=tj.reshape(tj.sum(tj.load(x, index=(i,), shape=(TILE,)), 0), (1,)))
    if FENCE:
        tj.fence(sem="release")
    ticket = tj.atomic_add(counter, 0, 1, sem=SEM)
    if ticket == tj.num_blocks(0) - 1:
        if FENCE:
            tj.fence(sem="acquire")
        acc = tj.zeros((TILE,), partial.dtype)
        for j in range(tj.cdiv(tj.num_blocks(0), TILE)):
            acc = acc + tj.load(partial, index=(j,), shape=(TILE,))
        tj.store(out, index=(0,), tile=tj.reshape(tj.sum(acc, 0), (1,)))


def count_all(own, shared, hi, lo, winner, SEM: tj.Constant[str], SCOPE: tj.Constant[str]):
    """Block b adds 1 from each of 256 lanes to own[b], takes the max and min of its lanes' values into hi[b] and
    lo[b] and lets one lane win winner[b] by CAS; for device or system scope also adds 1 per lane to shared[0]."""
    b = tj.bid(0)
    lanes = tj.arange(256)
    mine = tj.full((256,), b)
    tj.atomic_add(own, mine, 1, sem=SEM, scope=SCOPE)
    vals = ((lanes * 37 + b * 11) % 256).astype(tj.float32) - 100.0
    tj.atomic_max(hi, mine, vals, sem=SEM, scope=SCOPE)
    tj.atomic_min(lo, mine, vals, sem=SEM, scope=SCOPE)
    tj.atomic_cas(winner, mine, -1, lanes, sem=SEM, scope=SCOPE)
    if SCOPE != "cta":
        tj.atomic_add(shared, tj.zeros((256,), tj.int32), 1, sem=SEM, scope=SCOPE)


# --------------------------------------------------------------------------------------------- helpers


def where(snippet: str) -> tuple[int, int]:
    return where_in(LINES, snippet)


def compile_(fn: Any, sig: Any, constants: dict[str, Any], target: str = "sm_90") -> Any:
    return tj.compile(tj.kernel(fn), sig, constants=constants, target=target)


@functools.cache
def _nvrtc(major: int | None = None) -> Any:
    """The NVRTC of CUDA ``major`` (default: the newest) the tests compile with; skips without one."""
    from conftest import toolkits

    from tilejit.bindings.nvrtc import load_nvrtc

    found = [tk for tk in toolkits() if major is None or tk.major == major]
    if not found:
        pytest.skip(f"no CUDA {major or ''} toolkit in TILEJIT_TEST_CUDA_ROOTS or .ci-cache/")
    return load_nvrtc(str(found[0].nvrtc))


def ptx(art: Any, major: int | None = None) -> str:
    """The PTX of a compiled kernel's CUDA C++ (NVRTC of CUDA ``major``)."""
    from tilejit.compiler.nvrtc import compile_cuda

    ck = art.cuda_kernel()
    prog = compile_cuda(ck.source, name=f"{ck.name}.cu", headers=ck.headers, target=art.target, output="ptx",
                        nvrtc=_nvrtc(major), cache=False)
    return prog.code.decode() if isinstance(prog.code, bytes) else prog.code


_SYNC = re.compile(r"^\s*((?:bar\.sync|atom\.|fence\.|membar\.|st\.global)[^\s;]*)")


def sync_ops(text: str) -> list[str]:
    """The PTX instructions that order memory (and global stores), in program order: ``bar.sync``, ``atom.*``,
    ``fence.*``, ``membar.*``, ``st.global.*``."""
    return [m.group(1) for m in map(_SYNC.match, text.splitlines()) if m]


# --------------------------------------------------------------------------------------------- CPU: front end


def k_bad_sem(h):
    tj.atomic_add(h, 0, 1, sem="seq_cst")  # bad-sem


def k_bad_scope(h):
    tj.atomic_cas(h, 0, 0, 1, scope="block")  # bad-scope


def k_sem_not_str(h, s):
    tj.atomic_xchg(h, 0, 1, sem=s)  # sem-runtime


def k_relaxed_fence(h):
    tj.fence(sem="relaxed")  # relaxed-fence


def k_fence_scope(h):
    tj.fence(scope="grid")  # fence-scope


@pytest.mark.parametrize(("kernel", "at", "message"), [
    (k_bad_sem, 'tj.atomic_add(h, 0, 1, sem="seq_cst")',
     'tj.atomic_add(): sem must be one of "relaxed", "acquire", "release", "acq_rel", got the constant \'seq_cst\''),
    (k_bad_scope, 'tj.atomic_cas(h, 0, 0, 1, scope="block")',
     'tj.atomic_cas(): scope must be one of "cta", "gpu", "sys", got the constant \'block\''),
    (k_sem_not_str, "tj.atomic_xchg(h, 0, 1, sem=s)", "tj.atomic_xchg(): sem must be one of"),
    (k_relaxed_fence, 'tj.fence(sem="relaxed")', "tj.fence(): a relaxed fence orders nothing"),
    (k_fence_scope, 'tj.fence(scope="grid")', 'tj.fence(): scope must be one of "cta", "gpu", "sys"'),
])
def test_bad_orders_and_scopes_are_located_errors(kernel: Any, at: str, message: str) -> None:
    sig = (tj.int32[:], tj.int32) if kernel is k_sem_not_str else (tj.int32[:],)
    with pytest.raises(TileCompileError) as info:
        compile_(kernel, sig, {}).ir()
    err = info.value
    assert (err.filename, err.line, err.col) == (__file__, *where(at)), str(err)
    assert message in err.message, err.message
    assert str(err).splitlines()[2].endswith("^")


def test_the_ir_records_each_atomics_order_with_triton_defaults() -> None:
    from tilejit.language.ir import ops as O

    ir = compile_(ln_bwd_partial, (tj.float32[:, :],) * 4 + (tj.int32[:],) * 2,
                  {"GROUP": 4, "BN": 64, "LOCK": "acquire", "UNLOCK": "release"}).ir()
    orders = [(op.kind, op.sem, op.scope) for op in ir.body.walk() if isinstance(op, O.AtomicOp)]
    assert orders == [("cas", "acquire", "gpu"), ("xchg", "relaxed", "gpu"), ("xchg", "release", "gpu")]
    default = compile_(add_tile, (tj.int32[:],), {"SEM": "acq_rel", "SCOPE": "gpu"}).ir()
    (op,) = [op for op in default.body.walk() if isinstance(op, O.AtomicOp)]
    assert (op.sem, op.scope) == ("acq_rel", "gpu")
    assert "sem='acq_rel', scope='gpu'" in compile_(add_tile, (tj.int32[:],), {"SEM": "acq_rel", "SCOPE": "gpu"}
                                                    ).ir_text()


# --------------------------------------------------------------------------------------------- CPU: CUDA backend


@pytest.mark.parametrize("scope", SCOPES, ids=[f"scope={s}" for s in SCOPES])
@pytest.mark.parametrize("sem", SEMS)
def test_a_scalar_atomic_is_one_ordered_atom_with_the_blocks_barriers(sem: str, scope: str) -> None:
    """One thread does a scalar atomic: a release first waits for the block at a barrier (every thread's earlier
    stores happen before it), an acquire is followed by one (before every thread's later accesses)."""
    text = ptx(compile_(xchg_scalar, (tj.int32[:],), {"SEM": sem, "SCOPE": scope}))
    atom = f"atom.{sem}.{scope}.global.exch.b32"
    want = (["bar.sync"] if sem in ("release", "acq_rel") else []) + [atom] + (
        ["bar.sync"] if sem in ("acquire", "acq_rel") else [])
    assert sync_ops(text) == want


@pytest.mark.parametrize("sem", SEMS)
def test_a_tile_atomic_orders_the_whole_block_too(sem: str) -> None:
    text = ptx(compile_(add_tile, (tj.int32[:],), {"SEM": sem, "SCOPE": "gpu"}))
    ops = sync_ops(text)
    atoms = [o for o in ops if o.startswith("atom.")]
    assert atoms and set(atoms) == {f"atom.{sem}.gpu.global.add.s32"}
    assert (ops[0] == "bar.sync") == (sem in ("release", "acq_rel"))
    assert (ops[-1] == "bar.sync") == (sem in ("acquire", "acq_rel"))


@CUDA_PATHS
@pytest.mark.parametrize(("fn", "dtype", "target", "instr"), [
    (cas_scalar, "int32", "sm_90", "cas.b32"), (cas_scalar, "float64", "sm_90", "cas.b64"),
    (cas_scalar, "uint64", "sm_90", "cas.b64"), (add_tile, "bfloat16", "sm_80", "cas.b16"),
])
def test_cas_of_each_width_carries_the_order(fn: Any, dtype: str, target: str, instr: str) -> None:
    """Compare-and-swap of 32 and 64 bits, and the 16-bit one of a bfloat16 add's CAS loop before sm_90."""
    for sem in SEMS:
        text = ptx(compile_(fn, (getattr(tj, dtype)[:],), {"SEM": sem, "SCOPE": "cta"}, target))
        assert f"atom.{sem}.cta.global.{instr}" in sync_ops(text), sem


def test_a_float_max_loops_on_an_ordered_cas() -> None:
    def fmax(h, v, SEM: tj.Constant[str]):
        tj.atomic_max(h, tj.arange(64), tj.load(v, index=(0,), shape=(64,)), sem=SEM, scope="sys")

    text = ptx(compile_(fmax, (tj.float32[:], tj.float32[:]), {"SEM": "release"}))
    assert "atom.release.sys.global.cas.b32" in sync_ops(text)


@CUDA_PATHS
@pytest.mark.parametrize("scope", SCOPES, ids=[f"scope={s}" for s in SCOPES])
def test_a_fence_is_fence_acq_rel_between_two_barriers(scope: str) -> None:
    for sem in ("acquire", "release", "acq_rel"):
        text = ptx(compile_(fence_only, (tj.int32[:],), {"SEM": sem, "SCOPE": scope}))
        assert sync_ops(text) == ["bar.sync", f"fence.acq_rel.{scope}", "bar.sync"]


def test_barrier_is_bar_sync_between_the_store_and_the_load() -> None:
    art = compile_(barrier_between, (tj.float32[:, :], tj.float32[:, :]), {"BM": 16, "BN": 32})
    lines = art.cuda_source().splitlines()
    store = next(k for k, line in enumerate(lines) if "tj::store<" in line)
    load = next(k for k, line in enumerate(lines) if "tj::load<" in line and "u_out" in line)
    assert any(line.strip() == "__syncthreads();" for line in lines[store + 1:load]), lines[store:load + 1]
    found = (re.search(r"\b(st\.global|ld\.global|bar\.sync)", line) for line in ptx(art).splitlines())
    seq = [m.group(1) for m in found if m]
    first_store = seq.index("st.global")
    assert "bar.sync" not in seq[:first_store] and "bar.sync" in seq[first_store:seq.index("ld.global", first_store)]


def test_the_spin_locks_unlock_waits_for_every_threads_stores() -> None:
    """The bug of issue 20: the unlock (one thread's atomic_xchg) ran with no barrier after the other threads'
    stores of the partial rows. Now: the rows' stores, a barrier, then the release exchange."""
    art = compile_(ln_bwd_partial, (tj.float32[:, :],) * 4 + (tj.int32[:],) * 2,
                   {"GROUP": 4, "BN": 256, "LOCK": "acq_rel", "UNLOCK": "acq_rel"})
    ops = sync_ops(ptx(art))
    unlock = ops.index("atom.acq_rel.gpu.global.exch.b32", ops.index("atom.relaxed.gpu.global.exch.b32") + 1)
    last_store = max(k for k, o in enumerate(ops) if o.startswith("st.global"))
    assert last_store < unlock and "bar.sync" in ops[last_store:unlock]
    lock = ops.index("atom.acq_rel.gpu.global.cas.b32")
    assert ops[lock - 1] == "bar.sync" and ops[lock + 1] == "bar.sync"


@CUDA_PATHS
@pytest.mark.parametrize("major", [11, 12, 13])
def test_every_order_and_type_compiles_with_each_cuda_major(major: int) -> None:
    """Each sem and scope (a tile's int32 add), and each element type's add and exchange (some of them CAS loops) at
    acq_rel and system scope: NVRTC of CUDA 11, 12 and 13 compiles them to ordered atoms."""
    target = "sm_70" if major < 13 else "sm_75"
    cases = [(add_tile, "int32", sem, scope) for sem in SEMS for scope in SCOPES]
    cases += [(fn, d, "acq_rel", "sys") for d in ("uint64", "float32", "float16", "bfloat16", "float64")
              for fn in (add_tile, xchg_scalar) if fn is add_tile or d not in ("float16", "bfloat16")]
    for fn, dtype, sem, scope in cases:
        text = ptx(compile_(fn, (getattr(tj, dtype)[:],), {"SEM": sem, "SCOPE": scope}, target), major)
        assert any(o.startswith(f"atom.{sem}.{scope}.global.") for o in sync_ops(text)), (fn, dtype, sem, scope)


@CUDA_PATHS
def test_before_sm_70_atomics_run_between_membar_fences_and_sys_scope_is_refused() -> None:
    """Before sm_70 PTX has no .sem on atom: a release is a membar then the atom, an acquire the atom then a
    membar (a float64 add before sm_60 is a CAS loop)."""
    ops = sync_ops(ptx(compile_(xchg_scalar, (tj.int32[:],), {"SEM": "acq_rel", "SCOPE": "gpu"}, "sm_60"), 12))
    assert ops == ["bar.sync", "membar.gl", "atom.global.exch.b32", "membar.gl", "bar.sync"]
    ops = sync_ops(ptx(compile_(add_tile, (tj.float16[:],), {"SEM": "release", "SCOPE": "cta"}, "sm_60"), 12))
    assert ops[:2] == ["bar.sync", "membar.cta"] and "atom.global.cas.b32" in ops  # a CAS loop on the 32-bit word
    assert sync_ops(ptx(compile_(fence_only, (tj.int32[:],), {"SEM": "acq_rel", "SCOPE": "cta"}, "sm_60"), 12)) == [
        "bar.sync", "membar.cta", "bar.sync"]
    ops = sync_ops(ptx(compile_(add_tile, (tj.float64[:],), {"SEM": "acquire", "SCOPE": "gpu"}, "sm_52"), 12))
    assert "atom.global.cas.b64" in ops and "membar.gl" in ops and ops[-1] == "bar.sync"  # no f64 add before sm_60
    with pytest.raises(TileCompileError) as info:
        compile_(xchg_scalar, (tj.int32[:],), {"SEM": "release", "SCOPE": "sys"}, "sm_60").cuda_source()
    assert info.value.line == where("tj.atomic_xchg(lock, 0, 1, sem=SEM, scope=SCOPE)")[0]
    assert 'scope="sys" needs sm_70 or newer' in info.value.message


# --------------------------------------------------------------------------------------------- CPU: Tile IR


def tileir_text(fn: Any, sig: Any, constants: dict[str, Any]) -> str:
    from tilejit.backends.tileir import module_text

    return module_text(compile_(fn, sig, constants).ir(), "sm_90")


@pytest.mark.parametrize("scope", SCOPES, ids=[f"scope={s}" for s in SCOPES])
@pytest.mark.parametrize("sem", SEMS)
def test_tileir_atomics_carry_the_order_and_scope(sem: str, scope: str) -> None:
    rmw = tileir_text(add_tile, (tj.int32[:],), {"SEM": sem, "SCOPE": scope})
    assert re.search(rf"= atomic_rmw_tko {sem} {TILEIR_SCOPES[scope]} %\w+, add, ", rmw), rmw
    cas = tileir_text(cas_scalar, (tj.float32[:],), {"SEM": sem, "SCOPE": scope})
    assert re.search(rf"= atomic_cas_tko {sem} {TILEIR_SCOPES[scope]} %\w+, ", cas), cas


def test_tileir_float_max_loop_cas_carries_the_order() -> None:
    text = tileir_text(count_all, (tj.int32[:], tj.int32[:], tj.float32[:], tj.float32[:], tj.int32[:]),
                       {"SEM": "release", "SCOPE": "cta"})
    assert re.search(r"load_ptr_tko relaxed tl_blk ", text)
    assert re.search(r"atomic_cas_tko release tl_blk %\w+, %cur, ", text)


def test_tileir_bytecode_orders_read_back_and_compile(tileir_toolchain: Any, tmp_path: Path) -> None:
    """tileirdisasm reads each order and scope back from the bytecode, and tileiras compiles them all."""
    from tilejit.backends.tileir import generate_bytecode
    from tilejit.compiler.tileiras import run_tileiras

    if tileir_toolchain.tileirdisasm is None:
        pytest.skip("the toolchain has no tileirdisasm")
    for sem in SEMS:
        for scope in SCOPES:
            ir = compile_(add_tile, (tj.int32[:],), {"SEM": sem, "SCOPE": scope}).ir()
            for version in ((13, 1), (13, 5)):
                path = tmp_path / f"{sem}_{scope}.tileirbc"
                path.write_bytes(generate_bytecode(ir, "sm_90", version))
                out = subprocess.run([tileir_toolchain.tileirdisasm, str(path)], capture_output=True, text=True,
                                     timeout=60)
                assert out.returncode == 0, out.stderr
                assert f"atomic_rmw_tko {sem} {TILEIR_SCOPES[scope]} " in out.stdout, out.stdout
            assert run_tileiras(path.read_bytes(), "sm_90", toolchain=tileir_toolchain)[:4] == b"\x7fELF"


def test_tileir_compiles_the_spin_lock_and_the_barrier(tileir_toolchain: Any) -> None:
    from tilejit.backends.tileir import generate_bytecode
    from tilejit.compiler.tileiras import run_tileiras

    kernels = [(ln_bwd_partial, (tj.float32[:, :],) * 4 + (tj.int32[:],) * 2,
                {"GROUP": 4, "BN": 256, "LOCK": "acquire", "UNLOCK": "release"}),
               (barrier_between, (tj.float32[:, :],) * 2, {"BM": 16, "BN": 32}),
               (last_block_sum, (tj.float32[:], tj.float32[:], tj.int32[:], tj.float32[:]),
                {"TILE": 256, "SEM": "acq_rel", "FENCE": False})]
    for fn, sig, constants in kernels:
        ir = compile_(fn, sig, constants).ir()
        for target, version in (("sm_80", (13, 2)), ("sm_90", (13, 5)), ("sm_100", (13, 1))):
            assert run_tileiras(generate_bytecode(ir, target, version), target, toolchain=tileir_toolchain)[:4] == \
                b"\x7fELF"


def no_barrier_between(x, out, BM: tj.Constant[int], BN: tj.Constant[int]):
    i = tj.bid(0)
    t = tj.load(x, index=(i, 0), shape=(BM, BN))
    tj.store(out, index=(i, 0), tile=t * 2.0)
    back = tj.load(out, index=(i, 0), shape=(BM, BN))
    tj.store(out, index=(i, 0), tile=tj.transpose(tj.transpose(back) + 1.0))


def test_tileir_orders_the_load_after_the_store_with_or_without_a_barrier() -> None:
    """A Tile IR load already waits for the block's last store (tokens): tj.barrier() adds nothing there."""
    text = tileir_text(barrier_between, (tj.float32[:, :],) * 2, {"BM": 16, "BN": 32})
    stored = re.search(r"(%\w+) = store_view_tko weak %\w+, %out_tiles", text)
    assert stored, text
    assert re.search(rf"= load_view_tko weak %out_tiles\w*\[[^]]*\] token = {stored.group(1)} ", text), text
    plain = tileir_text(no_barrier_between, (tj.float32[:, :],) * 2, {"BM": 16, "BN": 32})
    assert plain.replace("no_barrier_between", "barrier_between") == text


def test_tileir_refuses_a_fence_naming_the_cuda_backend() -> None:
    from tilejit.backends.tileir import module_text

    ir = compile_(fence_only, (tj.int32[:],), {"SEM": "acq_rel", "SCOPE": "gpu"}).ir()
    with pytest.raises(TileIRUnsupportedError) as info:
        module_text(ir, "sm_90")
    err = info.value
    assert (err.filename, err.line) == (__file__, where("tj.fence(sem=SEM, scope=SCOPE)")[0])
    assert "cannot express 'fence' (tj.fence(): Tile IR has no memory fence" in err.message
    assert 'give the atomic that publishes the data sem="release"' in err.message and 'backend="cuda"' in err.message


# --------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("lock", "unlock"), [("acq_rel", "acq_rel"), ("acquire", "release")])
def test_spin_lock_layer_norm_backward_sums_every_row(lock: str, unlock: str, dtype: str,
                                                      rng: np.random.Generator) -> None:
    """1,537 rows of 300 columns, each a block, add into 6 partial rows under 6 spin locks (many blocks contend for
    each lock); the partial rows' sums are numpy's column sums of dy * x and dy. Three launches, fresh inputs."""
    m, n, group, bn = 1537, 300, 6, 512
    kernel = tj.kernel(ln_bwd_partial)
    rtol = 1e-4 if dtype == "float32" else 1e-10
    for _ in range(3):
        dy = rng.standard_normal((m, n)).astype(dtype)
        x = rng.standard_normal((m, n)).astype(dtype)
        dw = dev(np.full((group, n), np.nan, dtype))  # the first block of each group stores without reading
        db = dev(np.full((group, n), np.nan, dtype))
        locks, counts = dev(np.zeros(group, np.int32)), dev(np.zeros(group, np.int32))
        kernel[m](dev(dy), dev(x), dw, db, locks, counts, GROUP=group, BN=bn, LOCK=lock, UNLOCK=unlock)
        want_dw = (dy.astype(np.float64) * x).sum(0)
        np.testing.assert_allclose(dw.numpy().sum(0), want_dw, rtol=rtol, atol=rtol * 40)
        np.testing.assert_allclose(db.numpy().sum(0), dy.astype(np.float64).sum(0), rtol=rtol, atol=rtol * 40)
        per_group = np.stack([(dy[g::group].astype(np.float64) * x[g::group]).sum(0) for g in range(group)])
        np.testing.assert_allclose(dw.numpy(), per_group, rtol=rtol, atol=rtol * 20)
        np.testing.assert_array_equal(locks.numpy(), 0)
        np.testing.assert_array_equal(counts.numpy(), 1)


@pytest.mark.gpu
@pytest.mark.parametrize("sem", ["acq_rel", "relaxed"])
def test_the_last_block_sums_what_every_block_published(sem: str, tj_backend: str | None,
                                                        rng: np.random.Generator) -> None:
    """An acq_rel ticket publishes each block's stored sum to the last block; a relaxed ticket between a release
    and an acquire fence does too (the CUDA backend: Tile IR has no fence)."""
    fence = sem == "relaxed"
    if fence and tj_backend == "tileir":
        pytest.skip("tj.fence is the CUDA backend's (test_tileir_refuses_a_fence_naming_the_cuda_backend)")
    kernel = tj.kernel(last_block_sum)
    tile = 256
    for n in (300_001, 1_000_000):
        x = rng.random(n).astype(np.float32)
        blocks = -(-n // tile)
        partial = dev(np.full(blocks, np.nan, np.float32))
        out = dev(np.full(1, np.nan, np.float32))
        counter = dev(np.zeros(1, np.int32))
        kernel[blocks](dev(x), partial, counter, out, TILE=tile, SEM=sem, FENCE=fence)
        np.testing.assert_allclose(out.numpy()[0], x.astype(np.float64).sum(), rtol=1e-5)
        assert counter.numpy()[0] == blocks


@pytest.mark.gpu
@pytest.mark.parametrize("scope", SCOPES, ids=[f"scope={s}" for s in SCOPES])
@pytest.mark.parametrize("sem", SEMS)
def test_every_sem_and_scope_counts_exactly(sem: str, scope: str) -> None:
    blocks = 333
    own, shared = dev(np.zeros(blocks, np.int32)), dev(np.zeros(1, np.int32))
    hi, lo = dev(np.full(blocks, -1e9, np.float32)), dev(np.full(blocks, 1e9, np.float32))
    winner = dev(np.full(blocks, -1, np.int32))
    tj.kernel(count_all)[blocks](own, shared, hi, lo, winner, SEM=sem, SCOPE=scope)
    vals = ((np.arange(256)[None, :] * 37 + np.arange(blocks)[:, None] * 11) % 256).astype(np.float32) - 100
    np.testing.assert_array_equal(own.numpy(), 256)
    np.testing.assert_array_equal(hi.numpy(), vals.max(1))
    np.testing.assert_array_equal(lo.numpy(), vals.min(1))
    w = winner.numpy()
    assert ((w >= 0) & (w < 256)).all()
    assert shared.numpy()[0] == (0 if scope == "cta" else 256 * blocks)


@pytest.mark.gpu
def test_a_barrier_orders_a_store_before_a_load_of_other_threads(rng: np.random.Generator) -> None:
    m, n = 1000, 32
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = dev(np.full((m, n), np.nan, np.float32))
    tj.kernel(barrier_between)[-(-m // 64)](dev(x), out, BM=64, BN=n)
    np.testing.assert_array_equal(out.numpy(), x * 2 + 1)


def mm_k_loop(a, b, c, BK: tj.Constant[int], SYNC: tj.Constant[bool]):
    acc = tj.zeros((64, 64), tj.float32)
    for k in range(tj.cdiv(a.shape[1], BK)):
        acc = tj.mma(tj.load(a, index=(0, k), shape=(64, BK)), tj.load(b, index=(k, 0), shape=(BK, 64)), acc)
        if SYNC:
            tj.barrier()
    tj.store(c, index=(0, 0), tile=acc)


@CUDA_PATHS
def test_a_k_loop_that_synchronizes_keeps_its_loads_in_program_order() -> None:
    """The CUDA backend streams an mma K loop's loads ahead through cp.async stages, unless the loop has an atomic,
    fence or barrier: then a load could move across it."""
    sig = (tj.float16[:, ::1], tj.float16[:, ::1], tj.float32[:, ::1])
    plain = compile_(mm_k_loop, sig, {"BK": 32, "SYNC": False}, "sm_80").cuda_source()
    synced = compile_(mm_k_loop, sig, {"BK": 32, "SYNC": True}, "sm_80").cuda_source()
    assert "cp_async" in plain and "cp_async" not in synced and "__syncthreads();" in synced
