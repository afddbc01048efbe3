"""``MmaOp`` → C++: operands through padded shared memory, then tensor cores or an FMA loop."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tilejit.backends.cuda import tables
from tilejit.backends.cuda.layouts import Layout
from tilejit.backends.cuda.plan import MmaPlan, Pipeline, StagedOperand
from tilejit.backends.cuda.values import CV
from tilejit.language.ir.core import Value
from tilejit.language.ir.ops import ForOp, LoadOp, MmaOp
from tilejit.language.ir.types import ArrayType, DType, TileType

if TYPE_CHECKING:
    from tilejit.backends.cuda.lower import Lowering


def lower_mma(lw: Lowering, op: MmaOp) -> None:
    """Emit ``result = a @ b + acc`` for the strategy chosen in the plan."""
    p = lw.plan.mma[id(op)]
    out_layout = lw.plan.layout_of(op.result)
    staged = lw.staged.get(id(op))
    if staged is not None and staged[2]:
        # overlapped wgmma: accumulate in place in the loop-carried variable (no copy of registers
        # that the previous batch may still be writing)
        acc = lw.vals[op.acc].text
        lw.vals[op.result] = lw.vals[op.acc]
    else:
        acc = lw.define_tile(op.result, out_layout)
        lw._assign(acc, op.acc, op.result)
    if staged is not None:  # operands already in shared memory (cp.async pipeline)
        _compute(lw, p, acc, staged[0], staged[1], 1 if staged[2] else 0)
        for line in lw.after_mma.get(id(op), ()):
            lw.line(line)
        return
    _lower_unpipelined(lw, op, p, acc)


def _lower_unpipelined(lw: Lowering, op: MmaOp, p: MmaPlan, acc: str) -> None:
    """``acc += a @ b`` outside a K pipeline: A from registers (``p.ra``, in its planned fragment layout), from its
    staged buffer (a loop-invariant A copied once) or written to the scratch area, B from its staged buffer (cp.async,
    ``StagedOperand``) or written after A."""
    t_in, item = tables.ctype(p.in_dtype), p.in_dtype.itemsize
    st = lw.plan.staged.get(id(op))
    st_a = lw.plan.staged_a.get(id(op))
    writes: list[str] = []
    a_name = "" if st_a is not None else lw.tile(op.a, lw.plan.layout_of(op.a) if p.ra else _operand_layout(lw, op.a))
    if not p.ra and st_a is None:
        writes.append(f"tj::to_smem<{p.k}, {p.lda}, {_operand_layout(lw, op.a).vec}>(tj_As, {a_name});")
    if st is None:
        b_layout = _operand_layout(lw, op.b)
        b_name = lw.tile(op.b, b_layout)
        writes.append(f"tj::to_smem<{p.n}, {p.ldb}, {b_layout.vec}>(tj_Bs, {b_name});")
    a_elems = 0 if p.ra or st_a is not None else p.a_elems
    lw.need_smem((a_elems + (0 if st is not None else p.k * p.ldb)) * item)
    lw.line("{")
    lw.depth += 1
    if st_a is not None:
        lw.line(f"{t_in}* tj_As = {staged_buffer(lw, st_a, t_in)};")
    elif not p.ra:
        lw.line(f"{t_in}* tj_As = reinterpret_cast<{t_in}*>(tj_smem);")
    b_at = staged_buffer(lw, st, t_in) if st is not None else f"reinterpret_cast<{t_in}*>(tj_smem) + {a_elems}"
    lw.line(f"{t_in}* tj_Bs = {b_at};")
    if writes:
        lw.line("__syncthreads();")
        for w in writes:
            lw.line(w)
    # a staged A's copy is older than B's: waiting for B (here or at an earlier mma) waits for it too
    wait = st.wait if st is not None else 0 if st_a is not None else -1
    if wait >= 0:
        lw.line(f"tj::cp_async_wait<{wait}>();")
    if writes or wait >= 0:
        lw.line("__syncthreads();")
    for nxt in lw.plan.refill.get(id(op), ()):  # past the barrier: every warp is done with the other buffers
        _issue_next(lw, nxt)
    if p.ra:
        assert p.grid is not None and p.grid.wn == 1
        stream = ", true" if lw.plan.crowded else ""  # B's fragments read as used (fewer registers)
        lw.line(f"tj::TensorCoreRA<{t_in}, {p.m}, {p.n}, {p.k}, {p.grid.wm}, {p.ldb}, {str(p.tb).lower()}{stream}>"
                f"::run({acc}, {a_name}, tj_Bs);")
    else:
        _compute(lw, p, acc, "tj_As", "tj_Bs")
    lw.depth -= 1
    lw.line("}")


def staged_buffer(lw: Lowering, st: StagedOperand, t_in: str, ahead: bool = False) -> str:
    """The C++ pointer to a staged B operand's buffer (the staging area follows the scratch area: ``tj_stage``); of a
    prefetched one, the buffer of this iteration (of the next with ``ahead``)."""
    off = str(st.offset)
    if st.size:
        parity = lw.parity[st.loop][0]
        off = f"{st.offset} + ({parity}{' ^ 1' if ahead else ''}) * {st.size}"
    return f"reinterpret_cast<{t_in}*>(tj_smem + tj_stage + {off})"


def _index_at(lw: Lowering, v: Value, loop: ForOp, iv: str) -> str:
    """Scalar ``v`` (affine in ``loop``'s variable, ``Plan._affine_in``) at the iteration whose variable is ``iv``:
    the ops inside the loop recomputed, not read from this iteration's variables."""
    if v is loop.body.args[0]:
        return iv
    op = lw.plan.defs.get(v)
    if op is None or not lw.plan._inside(op, loop):
        return lw.scalar(v)
    return "(" + lw.render(op, lambda x: _index_at(lw, x, loop, iv)) + ")"


def _copy(lw: Lowering, st: StagedOperand, dst: str, at_iv: tuple[ForOp, str] | None = None) -> None:
    """The cp.async statement of a staged load into ``dst`` (``at_iv``: its loop's iteration with that variable)."""
    op = st.load
    t = op.result.type
    assert isinstance(t, TileType)
    ixs = [_index_at(lw, ix, *at_iv) if at_iv else lw.scalar(ix) for ix in op.index]
    org = ", ".join(f"(tj::i64){ix} * {s}" for ix, s in zip(ixs, t.shape))
    lw.line(f"tj::cp_async_tile<{t.shape[-2]}, {t.shape[-1]}, {st.ld}, {lw.plan.nt}, 0>"
            f"({dst}, {lw.vals[op.array].text}, {org});")


def _in_dtype(st: StagedOperand) -> str:
    at = st.load.array.type
    assert isinstance(at, ArrayType)
    return tables.ctype(at.dtype)


def issue_staged(lw: Lowering, st: StagedOperand) -> None:
    """Start the cp.async copy of a staged mma operand where the program loads it, after a barrier (shared with the
    copy just started, if any) so that no warp still reads the buffer's previous contents; a prefetched one's next
    copy is issued by the first mma that waits for this iteration's (``Plan.refill``), not here."""
    if st.size:
        return
    if not lw.lines or lw.lines[-1].strip() != "tj::cp_async_commit();":
        lw.line("__syncthreads();")
    _copy(lw, st, staged_buffer(lw, st, _in_dtype(st)))
    lw.line("tj::cp_async_commit();")


def _issue_next(lw: Lowering, st: StagedOperand) -> None:
    """The cp.async copy of a prefetched operand's next iteration (if any) into its other buffer."""
    _, loop, nxt, has_next = lw.parity[st.loop]
    lw.line(f"if ({has_next}) {{")
    lw.depth += 1
    _copy(lw, st, staged_buffer(lw, st, _in_dtype(st), ahead=True), (loop, nxt))
    lw.depth -= 1
    lw.line("}")
    lw.line("tj::cp_async_commit();")


def prefetch_prologue(lw: Lowering, loop: ForOp, wn: str, lo: str, hi: str, step: str, positive: str) -> str:
    """Before a loop that prefetches staged operands: declare the buffer parity and copy the first iteration's
    operands into buffers 0; returns the ``for`` statement's extra increment (the parity flips each iteration)."""
    parity = lw.fresh("p")
    ivt = loop.body.args[0].type
    assert isinstance(ivt, TileType)
    ct = tables.ctype(ivt.dtype)
    lw.line(f"int {parity} = 0;")
    lw.parity[id(loop)] = (parity, loop, f"(({ct})({wn} + {step}))", f"{wn} + {step} < {hi}")
    lw.line("__syncthreads();")
    lw.line(f"if ({lo} < {hi}{positive}) {{")
    lw.depth += 1
    for st in lw.plan.prefetched[id(loop)]:
        _copy(lw, st, staged_buffer(lw, st, _in_dtype(st)), (loop, f"(({ct})({lo}))"))
        lw.line("tj::cp_async_commit();")
    lw.depth -= 1
    lw.line("}")
    return f"{parity} ^= 1"


def _compute(lw: Lowering, p: MmaPlan, acc: str, a_smem: str, b_smem: str, pending: int = 0) -> None:
    t_in = tables.ctype(p.in_dtype)
    if p.path == "wgmma":
        lw.line(f"{_wgmma_type(lw, p)}::run<{pending}>({acc}, {a_smem}, {b_smem});")
    elif p.path == "tc":
        assert p.grid is not None
        trans = f", {str(p.ta).lower()}, {str(p.tb).lower()}" if p.ta or p.tb else ""
        lw.line(
            f"tj::TensorCore<{t_in}, {p.m}, {p.n}, {p.k}, {p.grid.wm}, {p.grid.wn}, {p.lda}, {p.ldb}{trans}>"
            f"::run({acc}, {a_smem}, {b_smem});"
        )
    elif p.path in ("tf32", "fp8"):
        assert p.grid is not None
        name = "TensorCoreTF32<" if p.path == "tf32" else f"TensorCoreFP8<{t_in}, "
        lw.line(
            f"tj::{name}{p.m}, {p.n}, {p.k}, {p.grid.wm}, {p.grid.wn}, {p.lda}, {p.ldb}>"
            f"::run({acc}, {a_smem}, {b_smem});"
        )
    else:
        lw.line(f"tj::mma_fma<{p.k}, {p.n}, {p.lda}, {p.ldb}>({acc}, {a_smem}, {b_smem});")


def _wgmma_type(lw: Lowering, p: MmaPlan) -> str:
    """``tj::Wgmma<...>`` for plan ``p``, declaring the m64nNk16 instruction it issues once per kernel."""
    assert p.grid is not None
    t_in, wtn = tables.ctype(p.in_dtype), p.n // p.grid.wn
    decl = wgmma_instruction(p.in_dtype, wtn, p.ta, p.tb)
    if decl not in lw.decls:
        lw.decls.append(decl)
    trans = f", {str(p.ta).lower()}, {str(p.tb).lower()}" if p.ta or p.tb else ""
    return f"tj::Wgmma<{t_in}, {p.m}, {p.n}, {p.k}, {p.grid.wm}, {p.grid.wn}, {p.swa}, {p.swb}{trans}>"


def wgmma_instruction(dtype: DType, n: int, ta: bool = False, tb: bool = False) -> str:
    """``tj::WgmmaOp<T, n, trans-a, trans-b>``: one wgmma.mma_async m64nNk16 with f32 accumulators
    (n/2 per thread), A and B from shared-memory descriptors; A K-major (imm-trans-a = 0) unless
    ``ta`` (M-major), B N-major (imm-trans-b = 1) unless ``tb`` (K-major)."""
    regs = n // 2
    ptx = {"float16": "f16", "bfloat16": "bf16"}[dtype.name]
    acc = ", ".join(f"%{i}" for i in range(regs))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    imm_a, imm_b = int(ta), int(not tb)
    args = f"{tables.ctype(dtype)}, {n}" + (f", {imm_a}, {imm_b}" if ta or tb else "")
    return "\n".join([
        "namespace tj {",
        f"template <> struct WgmmaOp<{args}> {{",
        "  __device__ __forceinline__ static void mma(float* d, u64 da, u64 db) {",
        f'    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} "',
        f'                 "{{{acc}}}, %{regs}, %{regs + 1}, 1, 1, 1, {imm_a}, {imm_b};"',
        f'                 : {outs}',
        '                 : "l"(da), "l"(db));',
        "  }",
        "};",
        "}  // namespace tj",
        "",
    ])


def _operand_layout(lw: Lowering, v: Value) -> Layout:
    """Where an mma operand already lives (a tile variable's layout), else its planned layout."""
    c = lw.vals[v]
    if c.kind == "tile" and c.layout is not None:
        return c.layout
    return lw.plan.layout_of(v)


@dataclass(frozen=True)
class _Ring:
    """The C++ names and sizes of a K loop's shared-memory stages (``_ring``)."""

    pipe: Pipeline
    p: MmaPlan
    lo: str  # the loop's bounds, step and trip count (tj::i64)
    hi: str
    step: str
    count: str
    prefix: str  # of the loop's other names (k8_it, ...)
    base: str  # the first stage (1024-byte aligned for wgmma)
    stage_elems: int
    iv: Value  # the loop variable
    iv_t: str  # its C type


def _ring(lw: Lowering, op: ForOp, stages: int) -> _Ring:
    """Declare a pipelined K loop's bounds, trip count and stage base."""
    pipe = lw.plan.pipelines[id(op)]
    p = lw.plan.mma[id(pipe.mma)]
    ivt = op.body.args[0].type
    assert isinstance(ivt, TileType)
    t_in = tables.ctype(p.in_dtype)
    n = lw.fresh("k")
    lo, hi, st, nk, base = (f"{n}_{x}" for x in ("lo", "hi", "step", "n", "smem"))
    lw.line(f"const tj::i64 {lo} = {lw.scalar(op.lower)}, {hi} = {lw.scalar(op.upper)}, {st} = {lw.scalar(op.step)};")
    # a run-time step <= 0 runs no iterations (no division by zero)
    lw.line(f"const tj::i64 {nk} = {hi} > {lo} && {st} > 0 ? ({hi} - {lo} - 1) / {st} + 1 : 0;")
    if p.path == "wgmma":  # swizzled stages must start 1024-byte aligned
        lw.need_smem(stages * pipe.stage_bytes + 1024, pipe.mma)
        lw.line(f"{t_in}* {base} = reinterpret_cast<{t_in}*>(tj::align_smem<1024>(tj_smem));")
    else:
        lw.need_smem(stages * pipe.stage_bytes, pipe.mma)
        lw.line(f"{t_in}* {base} = reinterpret_cast<{t_in}*>(tj_smem);")
    return _Ring(pipe, p, lo, hi, st, nk, n, base, pipe.stage_bytes // p.in_dtype.itemsize, op.body.args[0],
                 tables.ctype(ivt.dtype))


def _issue(lw: Lowering, r: _Ring, k: str, stage: str, threads: int | None = None, tid: str = "") -> None:
    """The cp.async statements that copy iteration ``k``'s two operand tiles into stage ``stage``, shared by
    ``threads`` threads (default: the block's) numbered by ``tid`` (default: threadIdx.x)."""
    operands = ((r.pipe.load_a, "0", r.p.lda, r.p.swa), (r.pipe.load_b, str(r.p.a_elems), r.p.ldb, r.p.swb))
    for load, off, ld, sw in operands:
        t, org = _origins(lw, r, load, k)
        fn, by = ("cp_async_tile_by", f", {tid}") if tid else ("cp_async_tile", "")
        lw.line(f"tj::{fn}<{t.shape[-2]}, {t.shape[-1]}, {ld}, {threads or lw.plan.nt}, {sw}>"
                f"({r.base} + ({stage}) * {r.stage_elems} + {off}, {lw.vals[load.array].text}, {', '.join(org)}{by});")


def _origins(lw: Lowering, r: _Ring, load: LoadOp, k: str) -> tuple[TileType, list[str]]:
    """A streamed load's tile type and the C expressions of its origin along each dim (tj::i64) in iteration
    ``k``; a 3-D load's leading (batch) dim has tile size 1."""
    t = load.result.type
    assert isinstance(t, TileType)
    env = {r.iv: f"(({r.iv_t})({r.lo} + ({k}) * {r.step}))"}
    return t, [f"(tj::i64){lw.expr_at(ix, env)} * {s}" for ix, s in zip(load.index, t.shape)]


def _issue_tma(lw: Lowering, r: _Ring, k: str, stage: str, bar: str) -> list[str]:
    """The statements with which one thread copies iteration ``k``'s two operand tiles into stage ``stage`` by TMA
    (the kernel's tensor maps ``tj_tmap0``/``tj_tmap1``, as ``Plan.tma_maps`` describes them): arm ``bar`` with the
    stage's bytes, then one box per swizzle span of each tile (zero-filled outside the arrays)."""
    total = 0
    lines: list[str] = []
    operands = ((r.pipe.load_a, "0", r.p.swa), (r.pipe.load_b, str(r.p.a_elems), r.p.swb))
    for m, (load, off, sw) in enumerate(operands):
        t, org = _origins(lw, r, load, k)
        total += t.size * r.p.in_dtype.itemsize
        lines.append(f"tj::tma_tile<{t.shape[-2]}, {t.shape[-1]}, {sw}>({r.base} + ({stage}) * {r.stage_elems} + "
                     f"{off}, tj_tmap{m}, {bar}, {', '.join(org)});")
    return [f"tj::mbar_expect_tx({bar}, {total});  // full[s] completes when these {total} bytes have landed",
            *lines]


def lower_pipelined_for(lw: Lowering, op: ForOp) -> None:
    """A K loop whose two mma operands stream into a ring of shared-memory stages with cp.async:
    stage s+S-1 is fetched while stage s is multiplied, one barrier per iteration."""
    pipe = lw.plan.pipelines[id(op)]
    p = lw.plan.mma[id(pipe.mma)]
    carried = op.body.args[1:]
    names = lw._declare_vars(carried, op.init)
    lw._bind_vars(carried, names)
    stages = pipe.stages
    r = _ring(lw, op, stages)
    n, nk, it, base, stage_elems = r.prefix, r.count, f"{r.prefix}_it", r.base, r.stage_elems
    wgmma = p.path == "wgmma"
    # prefetch distance: stages - 1, or stages - 2 when a wgmma batch stays in flight (the stage it
    # reads is refilled one iteration later)
    ahead = stages - 2 if pipe.overlap else stages - 1
    lw.line("#pragma unroll")
    lw.line(f"for (int s = 0; s < {ahead}; ++s) {{")
    lw.depth += 1
    lw.line(f"if (s < {nk}) {{")
    lw.depth += 1
    _issue(lw, r, "s", "s")
    lw.depth -= 1
    lw.line("}")
    lw.line("tj::cp_async_commit();")
    lw.depth -= 1
    lw.line("}")
    rd, wr = f"{n}_rd", f"{n}_wr"  # stage read and stage refilled this iteration (no modulo)
    lw.line(f"int {rd} = 0, {wr} = {ahead % stages};")
    lw.line("#pragma unroll 1")
    bump = " = {0} + 1 == " + str(stages) + " ? 0 : {0} + 1"
    lw.line(f"for (tj::i64 {it} = 0; {it} < {nk}; ++{it}, {rd}{bump.format(rd)}, {wr}{bump.format(wr)}) {{")
    lw.depth += 1
    _define_iv(lw, r, it)
    lw.line(f"tj::cp_async_wait<{ahead - 1}>();")
    if wgmma:
        lw.line(f"{_wgmma_type(lw, p)}::fence_smem();")
    lw.line("__syncthreads();")
    lw.line(f"if ({it} + {ahead} < {nk}) {{")
    lw.depth += 1
    _issue(lw, r, f"{it} + {ahead}", wr)
    lw.depth -= 1
    lw.line("}")
    lw.line("tj::cp_async_commit();")
    lw.staged[id(pipe.mma)] = (f"({base} + {rd} * {stage_elems})", f"({base} + {rd} * {stage_elems} + {p.a_elems})",
                               pipe.overlap)
    lw.depth -= 1
    _body(lw, op, names, carried)
    lw.line("}")
    if pipe.overlap:
        acc_name = names[carried.index(pipe.mma.acc)]
        lw.line(f"{_wgmma_type(lw, p)}::wait<0>({acc_name});")
    lw.line("tj::cp_async_wait<0>();")
    lw.line("__syncthreads();")
    lw._bind_vars(op.results, names)


def _define_iv(lw: Lowering, r: _Ring, it: str) -> None:
    """Define the loop variable in iteration ``it`` of a pipelined loop (0, 1, ...)."""
    ivn = lw.fresh("v")
    ivt = r.iv.type
    assert isinstance(ivt, TileType)
    lw.vals[r.iv] = _scalar_cv(ivn, ivt)
    lw.line(f"const {r.iv_t} {ivn} = ({r.iv_t})({r.lo} + {it} * {r.step});")


def _body(lw: Lowering, op: ForOp, names: list[str], carried: list[Value]) -> None:
    """A pipelined loop's body: its ops but the views of the staged loads (the stages serve them)."""
    pipe = lw.plan.pipelines[id(op)]
    lw.loop_vars.append((names, carried))
    views = {id(v) for v in pipe.views}
    lw.nested(replace(op.body, ops=[o for o in op.body.ops if id(o) not in views]) if views else op.body)
    lw.loop_vars.pop()


def lower_warp_specialized(lw: Lowering, op: ForOp) -> None:
    """The plan's ``WarpSpecialized`` K loop: the producer warpgroup (threads nt..nt+127) copies each iteration's
    operand tiles into a ring of S stages with cp.async and exits; the consumer warpgroups (threads 0..nt-1)
    multiply stage after stage with wgmma, one batch in flight, and go on to the code after the loop (which
    needs no block barrier: the plan checked, and generate() checks the code). Stage s's mbarriers: full[s]
    (the producer's copies landed, 128 arrivals) and empty[s] (every consumer's wgmmas reading it completed,
    nt arrivals); no block barrier inside the loop. With ``ws.tma`` the producer's first thread alone fills the
    stages with TMA (full[s]: 1 arrival plus the stage's bytes) when the launch passed both tensor maps, and the
    cp.async producer runs otherwise (a map the launch could not encode is 128 zero bytes)."""
    ws = lw.plan.ws
    assert ws is not None and ws.loop is op
    pipe = lw.plan.pipelines[id(op)]
    p = lw.plan.mma[id(pipe.mma)]
    nt, stages = lw.plan.nt, ws.stages
    carried = op.body.args[1:]
    producers = ws.threads - nt
    lw.line(f"// ---- warp-specialized K loop: consumer warpgroups 0..{nt // 128 - 1} (threads 0..{nt - 1}) issue "
            f"the wgmmas, producer warpgroup {nt // 128} (threads {nt}..{ws.threads - 1}) copies {stages} stages")
    r = _ring(lw, op, stages)
    n, it = r.prefix, f"{r.prefix}_it"
    full, empty, stage, phase = f"{n}_full", f"{n}_empty", f"{n}_s", f"{n}_ph"
    # static shared memory: the scratch area (dynamic, from the stages' start) never overlaps the barriers
    lw.static_smem += 2 * 8 * stages
    lw.line(f"__shared__ tj::u64 {full}[{stages}];  // full[s]: stage s has landed")
    lw.line(f"__shared__ tj::u64 {empty}[{stages}];  // empty[s]: the wgmmas reading stage s are done")
    tma = f"{n}_tma"
    if ws.tma:  # the launch passes zeros for a map it could not encode (an empty array...): then cp.async
        lw.line(f"const bool {tma} = tj::tma_ready(tj_tmap0) && tj::tma_ready(tj_tmap1);  // else cp.async")
    arrivals = f"{tma} ? 1 : {producers}" if ws.tma else str(producers)
    lw.line("if (tj_tid == 0) {")
    lw.depth += 1
    lw.line(f"for (int s = 0; s < {stages}; ++s) {{")
    lw.line(f"  tj::mbar_init({full} + s, {arrivals});  // TMA: one arrival and the stage's bytes; cp.async: one "
            "tracked arrival per producer thread")
    lw.line(f"  tj::mbar_init({empty} + s, {nt});  // one arrival per consumer thread")
    lw.line("}")
    lw.depth -= 1
    lw.line("}")
    lw.line("__syncthreads();  // the barriers are initialized (the last block-wide barrier)")
    # the stage and its round's phase parity advance together (no modulo)
    bump = f"{phase} ^= {stage} + 1 == {stages} ? 1u : 0u, {stage} = {stage} + 1 == {stages} ? 0 : {stage} + 1"

    def producer_loop(issue: list[str] | None) -> None:
        """The producer's loop over the stages: wait until a stage is free, then fill it (``issue``: the TMA
        statements; None: this thread's cp.asyncs and their tracked arrival)."""
        lw.line(f"int {stage} = 0;")
        lw.line(f"tj::u32 {phase} = 0;")
        lw.line("#pragma unroll 1")
        lw.line(f"for (tj::i64 {it} = 0; {it} < {r.count}; ++{it}, {bump}) {{")
        lw.depth += 1
        lw.line(f"tj::mbar_wait({empty} + {stage}, {phase} ^ 1);  // the consumers released this stage's last round")
        if issue is not None:
            for line in issue:
                lw.line(line)
        else:
            _issue(lw, r, it, stage, producers, ptid)
            lw.line(f"tj::cp_async_mbar_arrive({full} + {stage});  // full[s] completes when these copies have landed")
        lw.depth -= 1
        lw.line("}")

    lw.line(f"if (tj_tid >= {nt}) {{")
    lw.depth += 1
    lw.line(f"// producer warpgroup: keeps {ws.producer_registers} registers, gives the rest to the consumers")
    lw.line(f"tj::regs_dec<{ws.producer_registers}>();")
    ptid = f"{n}_ptid"
    if ws.tma:
        lw.line(f"if ({tma}) {{")
        lw.depth += 1
        lw.line(f"if (tj_tid == {nt}) {{  // one thread issues every copy")
        lw.depth += 1
        lw.line("tj::tma_prefetch(tj_tmap0);")
        lw.line("tj::tma_prefetch(tj_tmap1);")
        producer_loop(_issue_tma(lw, r, it, stage, f"{full} + {stage}"))
        lw.depth -= 1
        lw.line("}")
        lw.line("return;")
        lw.depth -= 1
        lw.line("}")
    lw.line(f"const int {ptid} = tj_tid - {nt};")
    producer_loop(None)
    lw.line("tj::cp_async_wait_all();")
    lw.line("return;")
    lw.depth -= 1
    lw.line("}")

    lw.line(f"// consumer warpgroups: take the producer's registers ({ws.registers} -> {ws.consumer_registers})")
    if ws.consumer_registers > ws.registers:
        lw.line(f"tj::regs_inc<{ws.consumer_registers}>();")
    names = lw._declare_vars(carried, op.init)
    lw._bind_vars(carried, names)
    prev = f"{n}_prev"
    lw.line(f"int {stage} = 0, {prev} = 0;")
    lw.line(f"tj::u32 {phase} = 0;")
    lw.line("#pragma unroll 1")
    lw.line(f"for (tj::i64 {it} = 0; {it} < {r.count}; ++{it}, {prev} = {stage}, {bump}) {{")
    lw.depth += 1
    _define_iv(lw, r, it)
    lw.line(f"tj::mbar_wait({full} + {stage}, {phase});  // this stage has landed")
    # cp.async writes through the generic proxy, wgmma reads through the async one (as TMA writes: no fence then)
    lw.line(f"{f'if (!{tma}) ' if ws.tma else ''}{_wgmma_type(lw, p)}::fence_smem();  // cp.async wrote it")
    at = f"{r.base} + {stage} * {r.stage_elems}"
    lw.staged[id(pipe.mma)] = (f"({at})", f"({at} + {p.a_elems})", True)
    # after the batch is issued, wait_group 1 leaves it in flight: the previous one is done, its stage free
    lw.after_mma[id(pipe.mma)] = [f"if ({it} > 0) tj::mbar_arrive({empty} + {prev});  // release the previous stage"]
    lw.depth -= 1
    _body(lw, op, names, carried)
    lw.line("}")
    acc_name = names[carried.index(pipe.mma.acc)]
    lw.line(f"{_wgmma_type(lw, p)}::wait<0>({acc_name});")
    lw.line("// ---- after the K loop: consumer warpgroups only (their barriers: tj::block_sync, named barrier 1)")
    lw.ws_epilogue = len(lw.lines)
    lw._bind_vars(op.results, names)


def _scalar_cv(name: str, t: TileType) -> CV:
    return CV("scalar", name, t.dtype)
