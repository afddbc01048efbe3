"""Tile IR → one CUDA C++ kernel plus the device headers it includes (handed to NVRTC in memory).

Kernel ABI (what the launcher packs): ``extern "C" __global__ void __launch_bounds__(NT)
NAME(tj::Array<T, N> u_x, ..., <scalars>)`` in IR parameter order (user names are spelled by
``values.c_ident``, the symbol by ``values.kernel_symbol``), where ``tj::Array`` is
``{T* ptr; int64_t shape[N]; int64_t stride[N];}`` (strides in elements) and scalars are passed as
their C types (``tj::half``/``tj::bf16`` have the layout of ``__half``/``__nv_bfloat16``). Dynamic
shared memory of ``shared_bytes`` is the block's scratch area.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tilejit.backends.base import ARRAY_LIST_SPEC
from tilejit.backends.cuda import tables
from tilejit.backends.cuda.abi import ParamSpec, device_headers
from tilejit.backends.cuda.lower import Lowering
from tilejit.backends.cuda.plan import Plan, located, max_shared_bytes
from tilejit.backends.cuda.schedule import emission_orders
from tilejit.backends.cuda.values import CV, c_ident, kernel_symbol
from tilejit.errors import CompileError, TileCompileError
from tilejit.language.ir.core import UNKNOWN_LOC, Loc, Op
from tilejit.language.ir.ops import Function, MmaOp
from tilejit.language.ir.types import BY_NAME, ArrayHint, ArrayListType, ArrayType, TileType

#: Kernel parameter space: 4 KiB, or 32764 bytes with CUDA 12.1+ on sm_70 and newer (CUDA programming guide).
PARAM_BYTES = 4096
LARGE_PARAM_BYTES = 32764

_USER_NAMES = {"permute": "transpose", "scan": "cumsum", "reduce": "reduction", "argreduce": "argmax/argmin"}


@dataclass(frozen=True)
class CudaKernel:
    """Generated CUDA C++ and what launching it needs."""

    name: str  # the extern "C" symbol
    source: str
    headers: dict[str, str] = field(hash=False)
    num_threads: int
    shared_bytes: int  # dynamic shared memory
    params: tuple[tuple[str, ParamSpec], ...]


def _arch(target: Any) -> tuple[int, str]:
    """The architecture number and feature suffix of a ``Target`` (or anything ``parse_target`` reads)."""
    number, suffix = getattr(target, "number", None), getattr(target, "suffix", None)
    if isinstance(number, int) and isinstance(suffix, str):
        return number, suffix
    from tilejit.compiler.targets import parse_target

    t = parse_target(target)
    return t.number, t.suffix


def param_bytes(params: list[tuple[str, ParamSpec]]) -> int:
    """The kernel parameter space the parameters take, as NVRTC counts it: the sum of their sizes (alignment
    padding between them not counted). An array of N dims is ``tj::Array``, a pointer and 2 * N int64:
    8 + 16 * N bytes; a tensor map 128 bytes; a scalar is its C type."""
    return sum(128 if spec[0] == "tensormap" else 8 + 16 * int(spec[2]) if len(spec) == 3
               else BY_NAME[str(spec[1])].itemsize for _, spec in params)


def _nvrtc_version() -> tuple[int, int] | None:
    """The version of the NVRTC that compiles by default, or None when none can be loaded."""
    from tilejit.bindings.nvrtc import nvrtc
    from tilejit.errors import TilejitError

    try:
        major, minor = nvrtc().version[:2]
    except (OSError, TilejitError):
        return None
    return int(major), int(minor)


def check_param_space(fn: Function, params: list[tuple[str, ParamSpec]], arch: int,
                      nvrtc_version: tuple[int, int] | None = None) -> None:
    """Refuse, at the kernel's ``def`` line, parameters that overflow the kernel parameter space
    (NVRTC's "Formal parameter space overflowed", which points into generated code)."""
    size = param_bytes(params)
    if size <= PARAM_BYTES:
        return
    version = nvrtc_version if nvrtc_version is not None else _nvrtc_version()
    if version is None and size <= LARGE_PARAM_BYTES:
        return  # no NVRTC to ask: NVRTC itself will check when it compiles
    large = arch >= 70 and version is not None and version >= (12, 1)
    limit = LARGE_PARAM_BYTES if large else PARAM_BYTES
    if size <= limit:
        return
    arrays = sum(1 for _, spec in params if spec[0] == "array")
    why = (f"CUDA 12.1 and newer allow {LARGE_PARAM_BYTES} bytes on sm_70 and newer, {PARAM_BYTES} before"
           if not large else f"{PARAM_BYTES} bytes before CUDA 12.1")
    nv = f"NVRTC {version[0]}.{version[1]}" if version is not None else "CUDA"
    loc = fn.options.get("loc")
    raise located(loc if isinstance(loc, Loc) else UNKNOWN_LOC, (
        f"kernel {fn.name}: its {len(params)} parameters ({arrays} arrays, {len(params) - arrays} scalars) take "
        f"{size} bytes, more than the {limit} bytes of kernel parameters that {nv} allows for sm_{arch} ({why}; "
        f"an array of N dims takes 8 + 16 * N bytes): pass fewer arrays or scalars"
    ))


def _smem_error(op: Op | None, fn: Function, needed: int, arch: int, limit: int) -> TileCompileError:
    """A located error for a kernel whose scratch area does not fit the target's shared memory."""
    if isinstance(op, MmaOp) and isinstance(op.a.type, TileType) and isinstance(op.b.type, TileType):
        what = f"this mma of {op.a.type.dtype.name} tiles of shapes {op.a.type.shape} and {op.b.type.shape}"
    elif op is not None:
        what = f"this {_USER_NAMES.get(op.NAME, op.NAME)}"
    else:
        what = f"kernel {fn.name}"
    return located(op.loc if op is not None else UNKNOWN_LOC, (
        f"{what} needs {needed} bytes of shared memory per block; sm_{arch} allows at most {limit} "
        f"({limit // 1024} KiB): use smaller tiles"
    ))


def generate(
    fn: Function,
    *,
    target: Any,
    num_threads: int | None = None,
    hints: Mapping[str, ArrayHint] | None = None,
    nvrtc_version: tuple[int, int] | None = None,
    occupancy: int | None = None,
    num_stages: int | None = None,
    staging: int = 2,
    warp_specialize: bool | None = None,
    tma: bool | None = None,
) -> CudaKernel:
    """Generate the CUDA C++ kernel for ``fn`` on ``target`` (a ``Target``, e.g. parse_target("sm_90"));
    ``nvrtc_version``: of the NVRTC that will compile it (default: the one loaded by default); ``occupancy``:
    the user's blocks per SM, ``__launch_bounds__``'s second argument (default: the plan's choice); ``num_stages``:
    the user's cp.async pipeline depth (default: the plan's choice; 1: no pipeline); ``staging``: mma operands
    staged in their own buffers and prefetched (2), staged (1) or neither (0), lowered while they do not fit;
    ``warp_specialize``: a wgmma K loop may run on a producer and consumer warpgroups (default:
    ``TILEJIT_CUDA_WARP_SPECIALIZE``; not with an occupancy above 1, whose register cap setmaxnreg cannot share);
    ``tma``: its producer may copy with TMA (default: ``TILEJIT_CUDA_TMA``), taking a tensor map of each operand's
    array as a parameter after the user's (``("tensormap", dtype, ndim, array, swizzle, *box)``)."""
    number, suffix = _arch(target)
    if warp_specialize is None:
        from tilejit.config import CUDA_WARP_SPECIALIZE

        warp_specialize = CUDA_WARP_SPECIALIZE.get()
    if tma is None:
        from tilejit.config import CUDA_TMA

        tma = CUDA_TMA.get()
    wgmma = number == 90 and suffix == "a"
    plan = Plan(fn, number, num_threads, dict(hints or {}), wgmma=wgmma, num_stages=num_stages, staging=staging,
                warp_specialize=wgmma and warp_specialize and occupancy in (None, 1), tma=tma)
    if occupancy is not None:
        plan.min_blocks_arg = f", {occupancy}"
    lw = Lowering(plan, plan.hints)
    lw.orders = emission_orders(fn)
    params: list[tuple[str, ParamSpec]] = []
    decls: list[str] = []
    used: set[str] = set()
    for pname, v in zip(fn.param_names, fn.params):
        cname = c_ident(pname)
        if cname in used:
            raise CompileError(f"kernel {fn.name}: parameter name '{pname}' is repeated")
        used.add(cname)
        t = v.type
        if isinstance(t, ArrayType):
            decls.append(f"tj::Array<{tables.ctype(t.dtype)}, {t.ndim}> {cname}")
            params.append((pname, ("array", t.dtype.name, t.ndim)))
            lw.vals[v] = CV("array", cname, t.dtype)
        elif isinstance(t, ArrayListType):  # its table: one int64 row per array (tj::array_item)
            decls.append(f"tj::Array<tj::i64, 2> {cname}")
            params.append((pname, ARRAY_LIST_SPEC))
            lw.vals[v] = CV("array_list", cname, t.dtype)
        elif isinstance(t, TileType) and t.is_scalar:
            decls.append(f"{tables.ctype(t.dtype)} {cname}")
            params.append((pname, ("scalar", t.dtype.name)))
            lw.vals[v] = CV("scalar", cname, t.dtype)
        else:
            raise CompileError(f"kernel {fn.name}: parameter '{pname}' has type {t}; only arrays, array lists and "
                               "scalars")
    for k, m in enumerate(plan.tma_maps()):  # derived from array parameters: a launch encodes them (last, 64-aligned)
        decls.append(f"const __grid_constant__ tj::TensorMap tj_tmap{k}")
        params.append((f"tj_tmap{k}", ("tensormap", m.dtype.name, m.ndim, m.array, m.swizzle, *m.box)))
    check_param_space(fn, params, plan.arch, nvrtc_version)
    lw.line("const int tj_tid = threadIdx.x;")
    lw.line("extern __shared__ __align__(16) unsigned char tj_smem[];")
    lw.line("(void)tj_tid;")
    lw.line("(void)tj_smem;")
    lw.block(fn.body)
    if lw.ws_epilogue is not None and _needs_whole_block(lw.lines[lw.ws_epilogue:]):
        # the code after a warp-specialized loop syncs the whole block, which the exited producer warpgroup
        # cannot join: the plain pipeline instead (tj::block_sync in the headers syncs the consumers only)
        return generate(fn, target=target, num_threads=num_threads, hints=hints, nvrtc_version=nvrtc_version,
                        occupancy=occupancy, num_stages=num_stages, staging=staging, warp_specialize=False, tma=tma)
    shared = lw.smem
    if plan.stage_bytes:  # staged mma operands' buffers follow the scratch area
        stage = -(-lw.smem // 128) * 128
        lw.lines.insert(2, f"  constexpr int tj_stage = {stage};")
        shared = stage + plan.stage_bytes
    limit = max_shared_bytes(plan.arch) - lw.static_smem  # the block's static and dynamic shared memory together
    if shared > limit and plan.stage_bytes:  # staged mma operands with fewer buffers
        return generate(fn, target=target, num_threads=num_threads, hints=hints, nvrtc_version=nvrtc_version,
                        occupancy=occupancy, num_stages=num_stages, staging=staging - 1,
                        warp_specialize=warp_specialize, tma=tma)
    if shared > limit:
        raise _smem_error(lw.smem_op, fn, shared, plan.arch, limit)
    name = kernel_symbol(fn.name)
    threads = plan.ws.threads if plan.ws is not None else plan.nt
    out = [
        f"// generated by tilejit from kernel '{fn.name}' ({fn.filename}) for sm_{plan.arch}{suffix}; its headers: "
        "-I \"$(tilejit include-dir)\"",
        *([f"#define TJ_SYNC_THREADS {plan.nt}  // tj::block_sync: the consumer warpgroups (named barrier 1)"]
          if plan.ws is not None else []),
        "#include <tilejit/tilejit.cuh>",
        "",
        *lw.decls,
        *(f"using {n} = {lay.cxx()};" for lay, n in lw.layout_names.items()),
        "",
        f'extern "C" __global__ void __launch_bounds__({threads}{plan.min_blocks_arg}) {name}(',
        ("    " + ",\n    ".join(decls) + ") {") if decls else ") {",
        *lw.lines,
        "}",
        "",
    ]
    return CudaKernel(name, "\n".join(out), device_headers(), threads, shared, tuple(params))


#: What in generated code needs every thread of the block: a barrier not made by ``tj::block_sync`` (which a
#: warp-specialized kernel's consumers meet at without the producer).
_WHOLE_BLOCK = ("__syncthreads", "bar.sync", "barrier.sync")


def _needs_whole_block(lines: list[str]) -> bool:
    """Whether any of these generated statements needs every thread of the block (``_WHOLE_BLOCK``)."""
    return any(word in line for line in lines for word in _WHOLE_BLOCK)


__all__ = ["CudaKernel", "ParamSpec", "check_param_space", "device_headers", "generate", "param_bytes"]
