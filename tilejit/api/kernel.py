"""``@tj.kernel``: a tile kernel that specializes, compiles (with a disk cache) and launches itself.

``kernel[grid](*args, **constants)`` launches on the current stream; ``kernel[grid, stream](...)``
on a given one. Each distinct combination of argument dtypes/ranks/layout facts, constant values
and device is one specialization, compiled once per process and cached on disk across processes.
"""

from __future__ import annotations

import functools
import marshal
import sys
import threading
from collections.abc import Callable, Sequence
from types import CodeType
from typing import Any

from tilejit.api.compile import Artifact
from tilejit.api.signature import array_key, scalar_type_of
from tilejit.errors import LaunchError, TargetError
from tilejit.language.ir.types import ArrayHint, ArrayType, TileType
from tilejit.runtime.interop import ArrayView as _AV
from tilejit.runtime.interop import as_view


class _Compiled:
    """One loaded specialization: its launcher and what produced it."""

    __slots__ = ("artifact", "launcher", "module")

    def __init__(self, launcher: Any, artifact: Artifact | None, module: Any) -> None:
        self.launcher = launcher
        self.artifact = artifact
        self.module = module

    def __repr__(self) -> str:
        return f"_Compiled(launcher={self.launcher!r}, artifact={self.artifact!r}, module={self.module!r})"


_PY_SCALARS = frozenset({int, float, bool})
# Constants the dispatch may remember by identity (arguments: runtime.launch.IMMUTABLE_ARGS).
_KEEP_CONST = frozenset({int, float, bool, str})
_MEMO_LIMIT = 4096
_MISSING = object()


def _as_view_or_scalar(name: str, a: Any) -> Any:
    """An ArrayView of a device array, or ``a`` itself when it is a numpy/0-d scalar."""
    try:
        return as_view(a)
    except (TypeError, ValueError) as exc:
        if getattr(a, "shape", None) == () and getattr(a, "dtype", None) is not None:
            return a
        raise LaunchError(f"parameter '{name}': {exc}") from None
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def _scalar_annotations(func: Callable[..., Any], names: list[str]) -> dict[str, TileType]:
    """Scalar parameters whose annotation fixes their type (``float`` → float32, ``tj.int64``...)."""
    from tilejit.api.compile import _as_param_type

    out: dict[str, TileType] = {}
    for name in names:
        ann = func.__annotations__.get(name)
        if isinstance(ann, str):
            ann = {"int": int, "float": float, "bool": bool}.get(ann, ann)
        if ann is None or isinstance(ann, str):
            continue
        try:
            t = _as_param_type(name, ann)
        except TypeError:
            continue
        if isinstance(t, TileType):
            out[name] = t
    return out


def _normalize_grid(grid: object) -> tuple[int, int, int]:
    dims = grid if isinstance(grid, tuple) else (grid,)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d >= 1 for d in dims):
        raise LaunchError(f"grid must be a positive int or a tuple of 1 to 3 positive ints, got {grid!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


def _source_bytes(func: Callable[..., Any]) -> bytes:
    """The text of the file that defines ``func`` plus its qualified name; ``inspect.getsource`` only
    when there is no file (it costs a first launch several ms in ``inspect`` and ``tokenize``).

    Hashing the whole file is conservative: an edit anywhere in it changes the fingerprint.
    """
    code = func.__code__
    try:
        with open(code.co_filename, "rb") as f:
            return f.read() + b"\0" + func.__qualname__.encode()
    except (OSError, ValueError, TypeError):
        pass
    import inspect

    try:
        return inspect.getsource(func).encode()
    except (OSError, TypeError):
        return code.co_code


def _source_fingerprint(func: Callable[..., Any], seen: set[int] | None = None) -> str:
    """A hash of the kernel's source and of every global it names that can change the code."""
    from tilejit.compiler.cache import sha256

    seen = seen if seen is not None else set()
    if id(func) in seen:
        return ""
    seen.add(id(func))
    h = sha256()
    h.update(_source_bytes(func))
    g = getattr(func, "__globals__", {})
    for name in sorted(set(func.__code__.co_names)):
        value = g.get(name)
        inner = getattr(value, "func", None)
        if inner is not None and callable(inner) and hasattr(inner, "__code__"):
            h.update(name.encode() + _source_fingerprint(inner, seen).encode())
        elif isinstance(value, int | float | bool | str | tuple | type(None)):
            h.update(f"{name}={value!r};".encode())
    return h.hexdigest()


def _dispatch_source(
    args: Sequence[str], constants: Sequence[str], annotated: Sequence[str]
) -> str:
    """Source of ``make(...)``, which returns the launch function of one ``kernel[grid]``.

    The function is unrolled over the kernel's parameters: it classifies each argument inline (own
    arrays, views and Python scalars; anything else through ``classify``), builds the same fast key as
    :meth:`Kernel._launch`, and launches the specialization it maps to. Any other call shape (missing,
    extra or positional constants) goes to ``Kernel._launch``, which checks it and raises.
    """
    n = len(args)
    count_kw = f"len(kw) != {len(constants)}" if constants else "kw"
    lines = [f"if {count_kw} or len(args) != {n}: return slow(grid, stream, args, kw)"]
    if n:
        lines.append("".join(f"a{i}, " for i in range(n)) + "= args")
    for j, c in enumerate(constants):
        lines.append(f"c{j} = kw.get({c!r}, MISSING)")
    if constants:
        lines.append(f"if {' or '.join(f'c{j} is MISSING' for j in range(len(constants)))}: "
                     "return slow(grid, stream, args, kw)")
        consts = "(" + "".join(f"(c{j}.__class__, c{j}), " for j in range(len(constants))) + ")"
    else:
        consts = "()"
    # The same immutable arguments and constants as the last call: its specialization and views. The
    # memo is one tuple, replaced whole, so a thread never sees half of another thread's update.
    slots = [f"a{i}" for i in range(n)] + [f"c{j}" for j in range(len(constants))]
    k = len(slots)
    same = [f"{v} is mm[{i}]" for i, v in enumerate(slots)] or ["mm[0] is not None"]
    lines += ["mm = memo",
              f"if {' and '.join(same)}:",
              f"    return mm[{k}].launcher(grid, mm[{k + 1}], stream)"]
    for i, name in enumerate(args):
        a = f"a{i}"
        ann = name in annotated
        lines += [
            f"cl = {a}.__class__",
            f"if cl is DA: v{i} = {a}._view; k{i} = (v{i}[3], v{i}[2], v{i}[0] & 15)",
            f"elif cl is AV: v{i} = {a}; k{i} = ({a}[3], {a}[2], {a}[0] & 15)",
            f"elif cl is int: v{i} = {a}; k{i} = "
            + ("None" if ann else f"int if {_I32_MIN} <= {a} <= {_I32_MAX} else 'i64'"),
            f"elif cl is float or cl is bool: v{i} = {a}; k{i} = " + ("None" if ann else "cl"),
            f"else: v{i}, k{i} = classify({name!r}, {a})",
        ]
    key = "(" + consts + ", " + "".join(f"k{i}, " for i in range(n)) + ")"
    views = "(" + "".join(f"v{i}, " for i in range(n)) + ")"
    run = "(" + "".join(f"a{i}, " for i in range(n)) + ")"
    const_values = "(" + "".join(f"c{j}, " for j in range(len(constants))) + ")"
    lines += [
        f"key = {key}",
        "try:",
        "    compiled = fast[key]",
        "except KeyError:",
        f"    compiled = specialize(key, list({run}), list({views}), {const_values})",
        "except TypeError:  # an unhashable constant: the checked path says which",
        "    return slow(grid, stream, args, kw)",
        f"views = {views}",
        "compiled.launcher(grid, views, stream)",
        "memo = ("
        + "".join(f"a{i} if a{i}.__class__ in KEEP else MISSING, " for i in range(n))
        + "".join(f"c{j} if c{j}.__class__ in KEEP_CONST else MISSING, " for j in range(len(constants)))
        + "compiled, views)",
    ]
    body = "".join(f"        {line}\n" for line in lines)
    return (
        "def make(grid, stream, fast, specialize, slow, classify, DA, AV, MISSING, KEEP, KEEP_CONST):\n"
        f"    memo = ({'MISSING, ' * k}None, None)\n"
        "    def launch(*args, **kw):\n"
        "        nonlocal memo\n"
        f"{body}"
        "    return launch\n"
    )


def _dispatch_code(src: str, filename: str) -> CodeType:
    """``compile(src)``, kept in the disk cache for this exact Python: compiling costs a first launch
    about 1 ms, loading the marshalled code 20 µs."""
    from tilejit import config

    if not config.CACHE.get():
        return compile(src, filename, "exec")
    from tilejit.compiler.cache import cache_key, default_cache

    cache = default_cache()
    key = cache_key("tilejit.dispatch.v1", sys.version, sys.implementation.cache_tag or "", filename, src)
    entry = cache.get(key)
    if entry is not None:
        try:
            code = marshal.loads(entry["code"])
        except (KeyError, TypeError, ValueError, EOFError):
            code = None
        if isinstance(code, CodeType):
            return code
    code = compile(src, filename, "exec")
    cache.put(key, {"code": marshal.dumps(code)})
    return code


def _classify(name: str, a: Any) -> tuple[Any, Any]:
    """(view or scalar, fast-key entry) of an argument that is not a DeviceArray, view or Python scalar."""
    v = _as_view_or_scalar(name, a)
    return v, ((v.dtype, v.strides, v.ptr & 15) if v.__class__ is _AV else ("scalar", str(v.dtype)))


class Kernel:
    """A tile kernel. Launch with ``kernel[grid](args...)``; compile ahead with ``tj.compile``."""

    def __init__(self, func: Callable[..., Any], *, num_threads: int | None = None) -> None:
        from tilejit.language.frontend.params import constant_params, signature_params

        self.func = func
        self.__name__ = func.__name__
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self.num_threads = num_threads
        self._params = signature_params(func)
        consts = set(constant_params(func))
        self._constants = [p for p in self._params if p in consts]
        self._args = [p for p in self._params if p not in consts]
        self._annotated = _scalar_annotations(func, self._args)
        self._nargs = 0 if self._constants else len(self._args)  # 0: always take the keyword path
        self._specs: dict[tuple[Any, ...], _Compiled] = {}
        self._fast: dict[tuple[Any, ...], _Compiled] = {}
        self._bound: dict[object, Callable[..., None]] = {}
        self._lock = threading.Lock()
        self._fingerprint: str | None = None
        self._make: Callable[..., Callable[..., None]] | None = None

    def __repr__(self) -> str:
        return f"<tilejit.Kernel {self.func.__module__}.{self.func.__qualname__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"launch a tile kernel with a grid: {self.__name__}[grid](...)")

    def __getitem__(self, item: object) -> Callable[..., None]:
        bound = self._bound.get(item)
        if bound is None:
            bound = self._bind(item)
        return bound

    def _bind(self, item: object) -> Callable[..., None]:
        """The launch function for ``kernel[item]``; memoized, since grids repeat."""
        if isinstance(item, tuple) and len(item) == 2 and not isinstance(item[1], int):
            grid, stream = _normalize_grid(item[0]), item[1]
        else:
            grid, stream = _normalize_grid(item), None
        make = self._make
        if make is None:
            from tilejit.runtime.array import DeviceArray
            from tilejit.runtime.launch import IMMUTABLE_ARGS

            src = _dispatch_source(self._args, self._constants, list(self._annotated))
            namespace: dict[str, Any] = {}
            exec(_dispatch_code(src, f"<tilejit dispatch {self.__name__}>"), namespace)
            make = self._make = functools.partial(
                namespace["make"], fast=self._fast, specialize=self._specialize, slow=self._launch,
                classify=_classify, DA=DeviceArray, AV=_AV, MISSING=_MISSING, KEEP=IMMUTABLE_ARGS,
                KEEP_CONST=_KEEP_CONST,
            )
        bound = make(grid, stream)
        try:
            if len(self._bound) >= _MEMO_LIMIT:
                self._bound.clear()
            self._bound[item] = bound
        except TypeError:  # an unhashable stream object: no memo
            pass
        return bound

    # ------------------------------------------------------------------ launching

    def _split(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], tuple[Any, ...]]:
        """Separate run-time arguments (in parameter order) from constant values."""
        n = len(self._args)
        if not kwargs and len(args) == n and not self._constants:
            return list(args), ()
        values = dict(zip(self._args, args))
        if len(args) > n:
            raise LaunchError(
                f"{self.__name__}() takes {n} positional arguments ({', '.join(self._args)}); constants "
                f"({', '.join(self._constants)}) are passed by keyword; got {len(args)} positional"
            )
        for k, v in kwargs.items():
            if k not in self._params:
                raise LaunchError(f"{self.__name__}() got an unexpected argument '{k}'")
            if k in values:
                raise LaunchError(f"{self.__name__}() got multiple values for argument '{k}'")
            values[k] = v
        missing = [p for p in self._params if p not in values]
        if missing:
            raise LaunchError(f"{self.__name__}() missing arguments: {', '.join(missing)}")
        consts = tuple(values[c] for c in self._constants)
        for c, v in zip(self._constants, consts):
            try:
                hash(v)
            except TypeError:
                raise LaunchError(f"constant '{c}' must be hashable, got {type(v).__name__}") from None
        return [values[a] for a in self._args], consts

    def _launch(self, grid: tuple[int, int, int], stream: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        run_args: Sequence[Any]
        if kwargs or len(args) != self._nargs:
            run_args, consts = self._split(args, kwargs)
        else:
            run_args, consts = args, ()
        # The fast key uses raw facts (dtype, strides, pointer alignment); _specialize maps it to the
        # canonical specialization, so an unseen stride pattern costs a dict insert, not a compile.
        # Constants are keyed with their type: 1, 1.0 and True compare equal but compile differently.
        key: list[Any] = [tuple([(c.__class__, c) for c in consts])] if consts else [()]
        views: list[Any] = []
        annotated = self._annotated
        for name, a in zip(self._args, run_args):
            cls = a.__class__
            if cls is _AV:
                views.append(a)
                key.append((a.dtype, a.strides, a.ptr & 15))
            elif cls in _PY_SCALARS:
                views.append(a)
                if name in annotated:
                    key.append(None)
                else:
                    key.append(cls if cls is not int or _I32_MIN <= a <= _I32_MAX else "i64")
            else:
                v, k = _classify(name, a)
                views.append(v)
                key.append(k)
        k = tuple(key)
        compiled = self._fast.get(k)
        if compiled is None:
            compiled = self._specialize(k, list(run_args), views, consts)
        compiled.launcher(grid, views, stream)

    def _specialize(
        self, fast_key: tuple[Any, ...], run_args: list[Any], views: list[Any], consts: tuple[Any, ...]
    ) -> _Compiled:
        arg_types, hints = self._types_of(run_args, views)
        typed = tuple((c.__class__, c) for c in consts)
        key = (typed, tuple(arg_types.values()), tuple(sorted(hints.items())))
        with self._lock:
            compiled = self._specs.get(key)
            if compiled is None:
                compiled = self._build(arg_types, hints, consts)
                self._specs[key] = compiled
            if len(self._fast) >= _MEMO_LIMIT:
                self._fast.clear()
            self._fast[fast_key] = compiled
            return compiled

    def _types_of(
        self, run_args: list[Any], views: list[Any]
    ) -> tuple[dict[str, ArrayType | TileType], dict[str, Any]]:
        """IR parameter types and backend layout hints of one launch's arguments."""
        arg_types: dict[str, ArrayType | TileType] = {}
        hints: dict[str, Any] = {}
        for name, a, v in zip(self._args, run_args, views):
            if v.__class__ is not _AV:
                arg_types[name] = self._annotated.get(name) or scalar_type_of(name, a)
            else:
                dtype, ndim, unit, aligned = array_key(v.dtype, v.shape, v.strides, v.ptr)
                arg_types[name] = ArrayType(dtype, ndim)
                hints[name] = ArrayHint(unit_stride=unit, aligned16=aligned)
        return arg_types, hints

    def _build(
        self, arg_types: dict[str, ArrayType | TileType], hints: dict[str, Any], consts: tuple[Any, ...]
    ) -> _Compiled:
        from tilejit.api.loader import load_artifact
        from tilejit.compiler.targets import Target, parse_target
        from tilejit.config import ARCH_SPECIFIC
        from tilejit.runtime.device import get_device

        if self._fingerprint is None:
            self._fingerprint = _source_fingerprint(self.func)
        target = parse_target(get_device().arch)
        constants = dict(zip(self._constants, consts))
        if target.number == 90 and ARCH_SPECIFIC.get():
            # Hopper: the arch-specific target unlocks wgmma; an NVRTC older than 12.0 lacks it
            try:
                native = Artifact(self.func, self.func.__name__, arg_types, constants, Target(9, 0, "a"),
                                  self.num_threads, hints)
                return load_artifact(native, self._fingerprint)
            except TargetError:
                pass
        artifact = Artifact(self.func, self.func.__name__, arg_types, constants, target, self.num_threads, hints)
        return load_artifact(artifact, self._fingerprint)


def kernel(func: Callable[..., Any] | None = None, *, num_threads: int | None = None) -> Any:
    """Decorate a Python function as a tile kernel; ``num_threads`` overrides the compiler's choice."""
    if func is None:
        return lambda f: Kernel(f, num_threads=num_threads)
    return Kernel(func, num_threads=num_threads)


__all__ = ["Kernel", "kernel"]
