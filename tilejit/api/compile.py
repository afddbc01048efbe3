"""Compile a tile kernel for a named target with no GPU: IR text, CUDA C++, PTX, Tile IR and CUBIN on demand.

The same pipeline serves launches (``tilejit.api.kernel``): front end → passes → a backend (the contract
of ``tilejit.backends.base``; CUDA C++ → NVRTC by default), with each stage's output kept on the artifact
so it is computed at most once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tilejit.config import DUMP_DIR
from tilejit.language.ir.types import ArrayHint, ArrayListType, ArrayType, DType, TileType, float32, int32, scalar
from tilejit.language.ir.types import bool_ as tj_bool
from tilejit.logs import logger_for, ms_since

if TYPE_CHECKING:
    from tilejit.backends.base import Backend, KernelHints, KernelImage
    from tilejit.backends.cuda.codegen import CudaKernel
    from tilejit.backends.cuda_backend import CudaBackend
    from tilejit.compiler.nvrtc import CompiledProgram
    from tilejit.compiler.targets import Target
    from tilejit.language.ir.ops import Function


def _as_param_type(name: str, t: object) -> ArrayType | ArrayListType | TileType:
    """Accept ``tj.float32[:]`` (arrays), ``tj.array_list(tj.float32[:])`` (array lists), dtypes or Python
    ``int``/``float``/``bool`` (scalars), or the same as text
    (``"float32[:]"``, ``"int32"``), as the command line writes them."""
    if isinstance(t, str):
        from tilejit.api.signature import parse_signature

        parsed = parse_signature(t, what=f"parameter '{name}'")
        if len(parsed) != 1:
            raise ValueError(f"parameter '{name}': expected one type, got {len(parsed)} in {t!r}")
        t = parsed[0]
    if isinstance(t, TileType | DType) and (t.dtype if isinstance(t, TileType) else t).is_float8:
        raise TypeError(f"parameter '{name}': 8-bit float scalars are not kernel parameters (arrays of them are); "
                        "pass a float and convert it in the kernel with .astype")
    if isinstance(t, ArrayType | ArrayListType | TileType):
        return t
    if isinstance(t, DType):
        return scalar(t)
    if t is int:
        return scalar(int32)
    if t is float:
        return scalar(float32)
    if t is bool:
        return scalar(tj_bool)
    raise TypeError(
        f"parameter '{name}': signature entries are array types like tj.float32[:] or tj.float16[:, :], "
        f"array lists like tj.array_list(tj.float16[:, :]), "
        f"scalar dtypes like tj.int32, or int/float/bool; got {t!r}"
    )


class Artifact:
    """One specialization of a kernel for one target and backend (``backend``: its name, "cuda" or "tileir"),
    compiled lazily stage by stage. ``auto``: the compile left the backend to ``backend="auto"``, so a kernel the
    Tile IR backend refuses is compiled with CUDA C++ when the image is made (``backend`` then says "cuda"), and
    the CUDA C++ stages (``cuda_kernel``, ``cuda_source``, ``ptx``) are the CUDA backend's whatever ``backend`` is.

    A plain class, not a dataclass: a warm-cache launch builds one to name its cache entry, and
    importing ``dataclasses`` would cost that launch milliseconds."""

    def __init__(
        self,
        kernel_func: Any,
        name: str,
        arg_types: dict[str, ArrayType | ArrayListType | TileType],
        constants: dict[str, Any],
        target: Target,
        num_threads: int | None = None,
        hints: dict[str, ArrayHint] | None = None,
        backend: str = "cuda",
        num_ctas: int | None = None,
        occupancy: int | None = None,
        auto: bool = False,
        num_stages: int | None = None,
    ) -> None:
        self.kernel_func = kernel_func
        self.name = name
        self.arg_types = arg_types
        self.constants = constants
        self.target = target
        self.num_threads = num_threads
        self.hints: dict[str, ArrayHint] = {} if hints is None else hints
        self.backend = backend
        self.num_ctas = num_ctas  # the user's performance hints (KernelHints), None where not given
        self.occupancy = occupancy
        self.num_stages = num_stages
        self.auto = auto
        self._fn: Function | None = None
        self._stages: dict[str, Any] = {}  # the backend's intermediate outputs (``Backend.generate``'s memo)
        self._dumped: set[str] = set()  # the backends whose first image went to TILEJIT_DUMP_DIR

    def __repr__(self) -> str:
        return (f"Artifact(name={self.name!r}, arg_types={self.arg_types!r}, constants={self.constants!r}, "
                f"target={self.target!r}, num_threads={self.num_threads!r}, num_ctas={self.num_ctas!r}, "
                f"occupancy={self.occupancy!r}, num_stages={self.num_stages!r}, hints={self.hints!r}, "
                f"backend={self.backend!r})")

    @property
    def kernel_hints(self) -> KernelHints:
        """The user's performance hints, as the backends take them."""
        from tilejit.backends.base import KernelHints

        return KernelHints(self.num_ctas, self.occupancy, self.num_stages)

    @property
    def _progs(self) -> dict[str, CompiledProgram]:
        """The CUDA backend's NVRTC outputs compiled so far, by kind."""
        return {k: v for k, v in self._stages.items() if k in ("ptx", "cubin")}

    def backend_impl(self) -> Backend:
        """The :class:`~tilejit.backends.base.Backend` this artifact compiles with."""
        from tilejit.backends.base import get_backend

        return get_backend(self.backend)

    def image(self, kind: str = "cubin") -> KernelImage:
        """The loadable kernel (``kind`` "cubin" or "ptx") with its launch facts, from the backend; with ``auto``, a
        kernel the Tile IR backend refuses (``backends.base.FALLBACK_ERRORS``) is compiled with CUDA C++ instead,
        logged at INFO level, and ``backend`` becomes "cuda"."""
        from tilejit.backends.base import FALLBACK_ERRORS, log_fallback

        try:
            return self.generate(kind)
        except FALLBACK_ERRORS as exc:
            if not self.auto or self.backend == "cuda":
                raise
            log_fallback(self.name, exc)
        self.backend = "cuda"
        return self.generate(kind)

    def generate(self, kind: str = "cubin") -> KernelImage:
        """The image (``kind`` "cubin" or "ptx") from ``backend`` itself, never another: a launch falls back to CUDA
        C++ itself, to try the CUDA backend's targets for its GPU."""
        return self._generate(self.backend_impl(), kind)

    def _generate(self, backend: Backend, kind: str) -> KernelImage:
        """``backend``'s image of ``kind`` (timed in a debug record), left in ``TILEJIT_DUMP_DIR`` when that is set."""
        fn = self.ir()
        log = logger_for(__name__)
        start = time.perf_counter() if log is not None else 0.0
        image = backend.generate(fn, self.target, self.hints, num_threads=self.num_threads,
                                 kernel_hints=self.kernel_hints, kind=kind, memo=self._stages)
        if log is not None:
            log.debug("kernel %s: %s backend: %s for %s in %.1f ms (%d threads per block)", self.name, backend.name,
                      kind, self.target.sm, ms_since(start), image.num_threads)
        if backend.name not in self._dumped and DUMP_DIR.get():
            from tilejit.api.dump import dump_artifact

            self._dumped.add(backend.name)
            dump_artifact(self, image)
        return image

    def ir(self) -> Function:
        """The optimized tile IR (the front end's and the passes' times in a debug record)."""
        if self._fn is None:
            from tilejit.language.frontend.translate import translate
            from tilejit.language.ir.passes import run_passes

            log = logger_for(__name__)
            start = time.perf_counter() if log is not None else 0.0
            fn = translate(self.kernel_func, self.arg_types, self.constants, name=self.name)
            translated = time.perf_counter() if log is not None else 0.0
            self._fn = run_passes(fn)
            if log is not None:
                log.debug("kernel %s: front end %.1f ms, IR passes %.1f ms (%d ops) for %s", self.name,
                          (translated - start) * 1e3, ms_since(translated), sum(1 for _ in fn.body.walk()),
                          self.describe())
        return self._fn

    def describe(self) -> str:
        """The specialization in one line: ``name(x: array<f32, 1>, n: i32; TILE=1024)``."""
        params = [f"{n}: {t}" for n, t in self.arg_types.items()]
        consts = [f"{n}={v!r}" for n, v in self.constants.items()]
        return f"{self.name}({', '.join(params)}{'; ' if consts else ''}{', '.join(consts)})"

    def ir_text(self) -> str:
        """The IR's stable text form."""
        from tilejit.language.ir.printer import print_function

        return print_function(self.ir())

    def _cuda_backend(self, stage: str) -> CudaBackend:
        """The CUDA backend, for its stages (``stage``: the method asked for): this artifact's, or with ``auto`` the
        one it falls back to; other backends have none."""
        from tilejit.backends.base import get_backend
        from tilejit.backends.cuda_backend import CudaBackend

        backend = get_backend("cuda") if self.auto else self.backend_impl()
        if not isinstance(backend, CudaBackend):
            raise TypeError(f"{self.name}: {stage}() is a stage of the CUDA C++ backend; this artifact was compiled "
                            f"with backend={self.backend!r}: use .image() (or tj.compile(..., backend='cuda'))")
        return backend

    def cuda_kernel(self) -> CudaKernel:
        """Generated CUDA C++ with its launch facts (threads, shared memory, parameter ABI)."""
        return self._cuda_backend("cuda_kernel").source(self.ir(), self.target, self.hints,
                                                         num_threads=self.num_threads,
                                                         kernel_hints=self.kernel_hints, memo=self._stages)

    def cuda_source(self) -> str:
        self._cuda_backend("cuda_source")
        return self.cuda_kernel().source

    def ptx(self) -> str:
        backend = self._cuda_backend("ptx") if self.auto else self.backend_impl()  # Tile IR's says it makes none
        return self._generate(backend, "ptx").image.decode()

    def tileir_bytecode(self, version: str | tuple[int, int] | None = None) -> bytes:
        """The kernel as Tile IR bytecode (what ``tileiras`` reads) at ``version`` ("13.1" .. "13.5"; default the
        newest the writer emits), whatever this artifact's backend; needs no toolchain."""
        from tilejit.backends.tileir_backend import TileIRBackend

        return TileIRBackend.bytecode(self.ir(), self.target, version, self._stages, self.hints, self.kernel_hints)

    def tileir_text(self) -> str:
        """The Tile IR bytecode's module in text form (``cuda_tile.module @name { ... }``); needs no toolchain."""
        text: str | None = self._stages.get("tileir_text")
        if text is None:
            from tilejit.backends.tileir import module_text
            from tilejit.backends.tileir_backend import tileiras_target

            text = self._stages["tileir_text"] = module_text(self.ir(), tileiras_target(self.target), self.hints,
                                                             self.kernel_hints)
        return text

    def cubin(self) -> bytes:
        return self.image("cubin").image


def specialize(kernel: Any,
               signature: Sequence[object] | Mapping[str, object]) -> dict[str, ArrayType | ArrayListType | TileType]:
    """Map a user signature (positional over non-constant params, or by name) to IR parameter types."""
    from tilejit.language.frontend.params import constant_params, signature_params

    func = getattr(kernel, "func", kernel)
    consts = set(constant_params(func))
    names = [p for p in signature_params(func) if p not in consts]
    if isinstance(signature, Mapping):
        unknown = [n for n in signature if n not in names]
        missing = [n for n in names if n not in signature]
        if unknown or missing:
            parts = []
            const_named = [n for n in unknown if n in consts]
            if const_named:
                parts.append(
                    ", ".join(f"'{n}'" for n in const_named)
                    + (" is" if len(const_named) == 1 else " are")
                    + " annotated tj.Constant[...]: give constants a value in constants=, not a type in the "
                    "signature (remove the annotation from an array parameter)"
                )
            other = [n for n in unknown if n not in consts]
            if other:
                verb = "is not a parameter" if len(other) == 1 else "are not parameters"
                parts.append(f"{', '.join(repr(n) for n in other)} {verb}")
            if missing:
                parts.append(f"missing the type of {', '.join(repr(n) for n in missing)}")
            raise TypeError(f"{func.__name__}: signature: " + "; ".join(parts))
        pairs = [(n, signature[n]) for n in names]
    else:
        if isinstance(signature, str):
            from tilejit.api.signature import parse_signature

            signature = parse_signature(signature, what="signature")
        if isinstance(signature, bytes) or not isinstance(signature, Sequence | tuple | list):
            raise TypeError(
                f"{func.__name__}: the signature must be a tuple or list of parameter types (one per non-constant "
                f"parameter: {', '.join(names) or 'none'}), e.g. (tj.float32[:], int), a dict by name, or the same "
                f"as text, e.g. 'float32[:], int32'; got {type(signature).__name__}"
            )
        if len(signature) != len(names):
            raise TypeError(
                f"{func.__name__} takes {len(names)} non-constant parameters ({', '.join(names)}), "
                f"signature has {len(signature)}"
            )
        pairs = list(zip(names, signature))
    return {n: _as_param_type(n, t) for n, t in pairs}


def check_backend(backend: object, where: str) -> str | None:
    """``backend`` as given to ``where`` (e.g. ``tj.compile``): None (the default) or "cuda", "tileir", "auto"."""
    from tilejit.config import BACKEND

    if backend is None:
        return None
    if not isinstance(backend, str) or backend not in BACKEND.choices:
        choices = ", ".join(repr(c) for c in BACKEND.choices)
        raise ValueError(f"{where}: backend must be one of {choices}, got {backend!r}")
    return backend


def _int_option(name: str, n: object, where: str, ok: Callable[[int], bool], rule: str) -> int:
    """The kernel option ``name`` given as ``n``: an int for which ``ok`` holds (``rule`` says which); errors
    start with ``where``."""
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"{where}: {name} must be an int, got {n!r}")
    v = int(n.__index__())
    if not ok(v):
        raise ValueError(f"{where}: {name} must be {rule}, got {v}")
    return v


def _pow2(v: int) -> bool:
    return v > 0 and not v & (v - 1)


def check_num_threads(n: object, where: str) -> int:
    """A kernel's ``num_threads``: a power of two from 32 to 1024 (the CUDA block limit)."""
    return _int_option("num_threads", n, where, lambda v: 32 <= v <= 1024 and _pow2(v),
                       "a power of two from 32 to 1024")


def check_num_warps(n: object, where: str) -> int:
    """A kernel's ``num_warps`` (Triton's name for its block size): a power of two from 1 to 32."""
    return _int_option("num_warps", n, where, lambda v: v <= 32 and _pow2(v),
                       "a power of two from 1 to 32 (32 to 1024 threads)")


def check_num_stages(n: object, where: str) -> int:
    """A kernel's ``num_stages`` (the depth of its software pipelines): an int >= 1."""
    return _int_option("num_stages", n, where, lambda v: v >= 1, "an int >= 1")


def check_num_ctas(n: object, where: str) -> int:
    """A kernel's ``num_ctas`` (CTAs per cluster): a power of two from 1 to 16 (Tile IR's ``num_cta_in_cga``
    values)."""
    return _int_option("num_ctas", n, where, lambda v: v <= 16 and _pow2(v),
                       "a power of two from 1 to 16 (CTAs per cluster)")


def check_occupancy(n: object, where: str) -> int:
    """A kernel's ``occupancy`` (CTAs per SM the compiler should aim for): an int from 1 to 32."""
    return _int_option("occupancy", n, where, lambda v: 1 <= v <= 32, "an int from 1 to 32 (CTAs per SM)")


def block_threads(num_threads: object, num_warps: object, where: str) -> int | None:
    """The block size a kernel asks for as ``num_threads`` or as Triton's ``num_warps`` (32 threads each), or None
    for the compiler's choice; both given must agree."""
    threads = None if num_threads is None else check_num_threads(num_threads, where)
    if num_warps is None:
        return threads
    warps = check_num_warps(num_warps, where)
    if threads is not None and threads != 32 * warps:
        raise ValueError(f"{where}: num_warps={warps} is {32 * warps} threads, but num_threads={threads}; give "
                         "one of them (num_warps=n is num_threads=32*n)")
    return 32 * warps


def _kernel_function(kernel: object) -> Any:
    """The Python function of a ``@tj.kernel`` (or a plain function), or a ``TypeError`` naming the argument."""
    import types

    from tilejit.api.kernel import Kernel

    if isinstance(kernel, Kernel):
        return kernel.func
    if isinstance(kernel, types.FunctionType):
        return kernel
    hint = "; a RawKernel compiles with its own .compile(target)" if type(kernel).__name__ == "RawKernel" else ""
    raise TypeError(f"tj.compile: kernel must be a @tj.kernel or a Python function, got {type(kernel).__name__} "
                    f"{kernel!r}{hint}")


def _check_constants(func: Any, constants: object) -> dict[str, Any]:
    """``constants`` as a dict of parameter name → value, or an error naming the argument."""
    if constants is None:
        return {}
    if not isinstance(constants, Mapping):
        raise TypeError(f"tj.compile({func.__name__}): constants must be a dict of constant parameter name → value, "
                        f"e.g. {{'TILE': 1024}}; got {type(constants).__name__} {constants!r}")
    bad = [k for k in constants if not isinstance(k, str)]
    if bad:
        raise TypeError(f"tj.compile({func.__name__}): constants keys must be parameter names (str), got {bad[0]!r}")
    return dict(constants)


def compile(
    kernel: Any,
    signature: Sequence[object] | Mapping[str, object] | str,
    *,
    constants: Mapping[str, Any] | None = None,
    target: str | int | Target | None = None,
    num_threads: int | None = None,
    backend: str | None = None,
    num_ctas: int | None = None,
    occupancy: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> Artifact:
    """Compile ``kernel`` for ``target`` (e.g. "sm_90") with no GPU needed (a ``tj.fuse`` function: its kernel for
    contiguous arrays of the signature's dtypes and ranks, see ``Fused.compile``).

    ``signature`` gives each non-constant parameter's type: ``tj.float32[:]`` for a rank-1 array,
    ``tj.int32`` or ``int`` for a scalar; or as text, as the command line takes it: ``"float32[:], int32"``.
    ``tj.float16[:, ::1]`` promises the launch passes an array with unit inner stride and 16-byte-aligned
    base and row strides, as a kernel launched from Python would detect, so the compile gets the same
    vectorized/pipelined code. Stages run when their output is first asked for.
    ``backend``: "cuda" (CUDA C++ through NVRTC), "tileir" (Tile IR through tileiras) or "auto"; default: the
    kernel's own ``@tj.kernel(backend=...)``, else ``TILEJIT_BACKEND`` (default auto). ``auto`` is Tile IR where a
    consistent Tile IR toolchain is found that compiles for ``target`` (and no ``num_threads`` is set), else CUDA
    C++; a kernel the Tile IR backend then refuses (what Tile IR cannot express, a tileiras failure) is compiled
    with CUDA C++ when its image is first made, logged at INFO level on the ``tilejit`` logger, and ``art.backend``
    says the backend actually used once the image is made. Give "cuda" or "tileir" to use one backend only.
    ``num_ctas`` (CTAs per cluster, 1..16), ``occupancy`` (CTAs per SM to aim for, 1..32) and ``num_stages`` (the
    depth of the CUDA backend's cp.async pipelines): performance hints, default the kernel's own
    ``@tj.kernel(...)``; a backend or target that cannot use one ignores it. ``num_warps=n`` is ``num_threads=32*n``.
    """
    from tilejit.backends.base import choose_backend, requested_backend
    from tilejit.compiler.targets import resolve_target

    if type(kernel).__name__ == "Fused" and type(kernel).__module__ == "tilejit.api.fuse":
        if constants or num_threads is not None or num_ctas is not None or occupancy is not None:
            raise TypeError(f"tj.compile({kernel.__name__}): a fused function takes a signature, target= and "
                            "backend= only (its kernel chooses its own tiles)")
        return kernel.compile(signature, target=target, backend=backend)  # type: ignore[no-any-return]
    func = _kernel_function(kernel)
    where = f"tj.compile({func.__name__})"
    requested = check_backend(backend, where)
    if requested is None:
        requested = getattr(kernel, "backend", None)
    arg_types = specialize(func, signature)
    consts = _check_constants(func, constants)
    tgt = resolve_target(target)
    threads = block_threads(num_threads, num_warps, where)
    if threads is None:
        threads = getattr(kernel, "num_threads", None)
    ctas = check_num_ctas(num_ctas, where) if num_ctas is not None else getattr(kernel, "num_ctas", None)
    occ = check_occupancy(occupancy, where) if occupancy is not None else getattr(kernel, "occupancy", None)
    stages = check_num_stages(num_stages, where) if num_stages is not None else getattr(kernel, "num_stages", None)
    # A ``::1`` array promises what a launch would check: unit inner stride, 16-byte-aligned rows, and shapes and
    # strides in [0, 2**31) (the Tile IR image marks it so that tilejit's launcher refuses larger ones).
    hints = {
        n: ArrayHint(unit_stride=True, aligned16=True, index32=True)
        for n, t in arg_types.items()
        if isinstance(t, ArrayType) and t.contiguous
    }
    chosen, _ = choose_backend(requested, tgt, num_threads=threads)
    return Artifact(func, func.__name__, arg_types, consts, tgt, threads, hints, chosen.name, ctas, occ,
                    requested_backend(requested) == "auto", stages)


def backend_for(backend: str | None = None, target: str | int | Target | None = None, *,
                num_threads: int | None = None) -> str:
    """The backend, "cuda" or "tileir", that a kernel built with ``backend`` ("cuda", "tileir", "auto"; None:
    ``TILEJIT_BACKEND``, else auto) and ``num_threads`` compiles with for ``target`` (None: the one rule of
    ``tj.compile``: this GPU, else ``TILEJIT_ARCH``), so that host code can choose tile shapes per backend. Under
    auto, a kernel that the Tile IR backend refuses still falls back to CUDA C++ when it is built."""
    from tilejit.backends.base import choose_backend
    from tilejit.compiler.targets import resolve_target

    return choose_backend(backend, resolve_target(target), num_threads=num_threads)[0].name
