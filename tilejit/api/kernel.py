"""``@tj.kernel``: a tile kernel that specializes, compiles (with a disk cache) and launches itself.

``kernel[grid](*args, **constants)`` launches on the calling thread's current device and stream;
``kernel[grid, stream](...)`` on a given stream. Each distinct combination of argument
dtypes/ranks/layout facts, constant values and device is one specialization, compiled once per
process and cached on disk across processes.
"""

from __future__ import annotations

import builtins
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tilejit.api.compile import (
    Artifact,
    block_threads,
    check_backend,
    check_num_ctas,
    check_num_stages,
    check_num_threads,
    check_occupancy,
)
from tilejit.api.signature import ALONE, EXTENT16, array_key, launch_facts, scalar_type_of
from tilejit.errors import LaunchError, TargetError
from tilejit.language.ir.types import BY_NAME, ArrayHint, ArrayListType, ArrayType, DType, TileType, normalize_const
from tilejit.runtime.array_table import ArrayTable
from tilejit.runtime.interop import _BY_TYPE as _VIEW_BY_TYPE
from tilejit.runtime.interop import ArrayView as _AV

if TYPE_CHECKING:
    from tilejit.backends.base import Backend
    from tilejit.compiler.targets import Target


class _Compiled:
    """One loaded specialization: the function a launch calls when it has no launch function of its own
    (``launcher``: the Launcher's ``launch_any_thread``, checked at first, then generated), the runtime
    :class:`Launcher` behind it (``base``, None for stand-ins in tests) and what produced it."""

    __slots__ = ("artifact", "base", "launcher", "module")

    def __init__(self, launcher: Any, artifact: Artifact | None, module: Any, base: Any = None) -> None:
        self.launcher = launcher
        self.artifact = artifact
        self.module = module
        self.base = base

    def __repr__(self) -> str:
        return f"_Compiled(launcher={self.launcher!r}, artifact={self.artifact!r}, module={self.module!r})"


_OWNS_LIMIT = 64
_THREADS_LIMIT = 256  # other threads' launch functions one kernel[grid] keeps


def _own_launch(compiled: _Compiled, owns: dict[_Compiled, Any], owner: int) -> tuple[Callable[..., None], Any] | None:
    """(launch function, its ``now``) private to the ``kernel[grid]`` function of the thread ``owner``, or None
    to use the shared one: on its first use of ``compiled``, or while the thread is on its checked launches of
    ``compiled`` (the Launcher's ``first_launches``). A ``kernel[grid]`` called once never pays for a launcher
    of its own."""
    if compiled not in owns:
        if len(owns) >= _OWNS_LIMIT:
            owns.clear()
        owns[compiled] = None
        return None
    base = compiled.base
    if base is None or not base.first_launches.ready(owner):
        return None
    launch = base.private_launch(owner)
    entry = (launch, launch.now)  # type: ignore[attr-defined]
    owns[compiled] = entry
    return entry


# Constants the dispatch may remember by identity (arguments: runtime.dispatch.IMMUTABLE_ARGS).
_KEEP_CONST = frozenset({int, float, bool, str})
_MEMO_LIMIT = 4096
_MISSING = object()  # an argument not given
_NOKEEP = object()  # a remembered argument slot that matches nothing


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


def _code_names(code: Any) -> set[str]:
    """The global and attribute names ``code`` reads, with those of the code objects nested in it
    (comprehensions and generator expressions have code objects of their own)."""
    names = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names |= _code_names(c)
    return names


def _value_text(value: Any, names: set[str], seen: set[int], depth: int = 0) -> str | None:
    """Text of a value a kernel may read at compile time (a constant, a tuple or list of them, a
    ``@tj.function``/kernel by its own fingerprint, a module's or class's attributes that the code names),
    or None for anything else. Part of the cache key only, to tell common variants apart at no cost: what
    makes a cache hit safe is the entry's record of every value the translation read (``_read_text``)."""
    try:
        return _scanned_text(value, names, seen, depth)
    except Exception:  # a user object whose attribute lookup or conversion fails
        return None


def _scanned_text(value: Any, names: set[str], seen: set[int], depth: int) -> str | None:
    """``_value_text`` without the guard."""
    inner = getattr(value, "func", None)
    if inner is not None and callable(inner) and hasattr(inner, "__code__"):
        return "fn:" + _source_fingerprint(inner, seen)
    if isinstance(value, type | types.ModuleType):
        if depth >= 2:
            return None
        parts = []
        for attr in sorted(names):
            try:
                item = getattr(value, attr)
            except Exception:  # a missing name, or a module attribute that fails to load
                continue
            text = _value_text(item, names, seen, depth + 1)
            if text is not None:
                parts.append(f"{attr}={text}")
        return "{" + ";".join(parts) + "}"
    v = normalize_const(value)
    if v is None or isinstance(v, bool | int | float | str):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, DType):
        return f"dtype:{v.name}"
    if isinstance(v, tuple | list) and depth < 8 and len(v) <= _SCAN_ITEMS:
        items = [_value_text(x, names, seen, depth + 1) for x in v]
        return type(v).__name__ + "(" + ",".join("?" if t is None else t for t in items) + ")"
    return _read_text(v)  # a dict, an object, an Enum member... (None when too large: the key just leaves it out)


_SCAN_ITEMS = 1024  # a longer tuple or list is left out of the cache key (the entry's reads still hold it)


def _source_fingerprint(func: Callable[..., Any], seen: set[int] | None = None) -> str:
    """A hash of the kernel's source file and of the values it names that a scan of its code finds: the
    globals it names, its closure's variables (two kernels made by one factory share their source) and
    the attributes it names of modules and classes. The cache key holds it; what the scan misses (items,
    deeper attributes, helpers' globals...) is in the entry's record of every value the translation read,
    which a lookup checks (``tilejit.api.loader``)."""
    from tilejit.compiler.cache import sha256
    from tilejit.language.frontend.params import closure_of

    seen = seen if seen is not None else set()
    if id(func) in seen:
        return ""
    seen.add(id(func))
    h = sha256()
    h.update(_source_bytes(func))
    names = _code_names(func.__code__)
    g = getattr(func, "__globals__", {})
    for where, env, keys in (("g", g, sorted(names)), ("c", closure_of(func), sorted(func.__code__.co_freevars))):
        for name in keys:
            if name not in env:
                continue
            text = _value_text(env[name], names, seen)
            if text is not None:
                h.update(f"{where}:{name}={text};".encode())
    return h.hexdigest()


# ---------------------------------------------------------------------- values read from outside

#: A value with more text than this (characters) has none: a kernel that reads it whole is not cached.
_TEXT_LIMIT = 1 << 16
_ARRAY_LIMIT = 1 << 16  # bytes of a numpy array read whole (its text holds their hash)
_DEPTH_LIMIT = 24
_LITERALS = frozenset({type(None), bool, int, float, str, bytes})
_FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodWrapperType,
                   types.WrapperDescriptorType, types.MethodDescriptorType, types.ClassMethodDescriptorType)
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (or a C extension's type spec)
_source_hashes: dict[Any, str] = {}
#: Classes whose values ``normalize_const`` keeps (not numbers, tuples, lists or numpy's), learned as met.
_KEPT: set[type] = {type(None), bool, int, float, str, bytes, dict, DType, types.ModuleType, types.FunctionType,
                    types.BuiltinFunctionType, type}
_MISSING_VALUE = object()  # a recorded path that leads nowhere now


class _NoText(Exception):
    """A value with no deterministic text (see ``_read_text``)."""


def _read_text(value: Any) -> str | None:
    """Deterministic text of a value a kernel read from outside, the same in every process that has the same
    value, or None when there is none.

    Plain data (None, bool, int, float, str, bytes, dtypes, numpy scalars, Enum members, and tuples, lists,
    dicts and sets of them, in their iteration order) is written out in full; Enum classes with their members;
    modules, classes and functions by their qualified names,
    ``@tj.function`` helpers and kernels also by the hash of their source file; numpy arrays up to
    ``_ARRAY_LIMIT`` bytes by dtype, shape and the hash of their bytes; other objects by their type and the
    texts of their attributes (``__dict__`` and ``__slots__``). A value that is too large (more than
    ``_TEXT_LIMIT`` characters), nested too deep (or holding itself), of a type with no known state, or whose
    reading raises has none: a kernel that read it is compiled as usual but kept out of the kernel-level
    disk cache.
    """
    parts: list[str] = []
    try:
        _write_text(value, parts, [_TEXT_LIMIT], 0)
    except Exception:  # _NoText, RecursionError, and anything a user's property or __len__ raises
        return None
    return "".join(parts)


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', None)}"


def _function_text(func: Any) -> str:
    """A helper's or kernel's function by name and the hash of its source file (kept per function object)."""
    text = _source_hashes.get(func)
    if text is None:
        from tilejit.compiler.cache import sha256

        text = _qualified(func) + ":" + sha256(_source_bytes(func)).hexdigest()
        if len(_source_hashes) >= _MEMO_LIMIT:
            _source_hashes.clear()
        _source_hashes[func] = text
    return text


def _write_text(v: Any, out: list[str], budget: list[int], depth: int) -> None:
    """Append the text of ``v`` to ``out`` (``_read_text``); raises when it has none."""
    if depth > _DEPTH_LIMIT or budget[0] < 0:
        raise _NoText
    v = _normalized(v)
    cls = type(v)
    enum = sys.modules.get("enum")
    if enum is not None and isinstance(v, enum.Enum):
        out.append(f"enum:{_qualified(cls)}.{v.name}=")
        _write_text(v.value, out, budget, depth + 1)
        return
    if cls in _LITERALS:
        text = f"{cls.__name__}:{v!r}"
    elif isinstance(v, bool | int | float | str | bytes):  # a subclass: its type, and the value as the base type's
        base = next(b for b in (bool, int, float, str, bytes) if isinstance(v, b))
        text = f"{_qualified(cls)}:{base.__repr__(v)}"
    elif cls is DType:
        text = f"dtype:{v.name}:{v.kind}:{v.bits}"
    elif isinstance(v, tuple | list | set | frozenset | dict):
        if len(v) > budget[0]:
            raise _NoText
        # A set in its iteration order: that of strings follows their hashes, which differ between processes
        # (so may the code of a kernel that iterates it).
        out.append((cls.__name__ if cls in (tuple, list, set, frozenset, dict) else _qualified(cls)) + "(")
        for x in v.items() if isinstance(v, dict) else v:
            _write_text(x, out, budget, depth + 1)
            out.append(",")
        text = ")"
    elif cls is range or cls is slice:
        out.append(cls.__name__ + "(")
        for x in (v.start, v.stop, v.step):
            _write_text(x, out, budget, depth + 1)
            out.append(",")
        text = ")"
    elif isinstance(v, types.ModuleType):
        text = f"module:{v.__name__}"
    elif enum is not None and isinstance(v, enum.EnumMeta):  # iterating it gives its members
        out.append(f"enumclass:{_qualified(v)}(")
        for member in v:
            _write_text(member, out, budget, depth + 1)
            out.append(",")
        text = ")"
    elif isinstance(v, type):
        text = f"class:{_qualified(v)}"
    elif isinstance(v, _FUNCTION_TYPES):
        text = f"fn:{_qualified(v)}"
    elif cls.__module__.startswith("tilejit.") and hasattr(getattr(v, "func", None), "__code__"):
        text = f"{cls.__name__}:{_function_text(v.func)}"  # a @tj.function or a kernel
    else:
        text = _object_text(v, out, budget, depth)
    budget[0] -= len(text)
    if budget[0] < 0:
        raise _NoText
    out.append(text)


def _object_text(v: Any, out: list[str], budget: list[int], depth: int) -> str:
    """The text of an object that is not plain data (``_read_text``): numpy arrays and dtypes, other objects
    by their attributes. Writes the start to ``out``, returns the end."""
    cls = type(v)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(v, np.ndarray):
        if v.dtype.hasobject or v.nbytes > _ARRAY_LIMIT:
            raise _NoText
        from tilejit.compiler.cache import sha256

        return f"ndarray:{v.dtype.str}:{v.shape}:{sha256(np.ascontiguousarray(v).tobytes()).hexdigest()}"
    if np is not None and isinstance(v, np.dtype):
        if v.hasobject or v.fields is not None:
            raise _NoText
        return f"npdtype:{v.str}"
    if not all(c is types.SimpleNamespace or _written_in_python(c) for c in cls.__mro__[:-1]):
        raise _NoText  # an instance of a type written in C keeps state that its attributes do not show
    attrs = getattr(v, "__dict__", None)
    slots = [name for c in cls.__mro__ for name in c.__dict__.get("__slots__", ())]
    if not isinstance(attrs, dict) and not slots:
        raise _NoText
    out.append(f"obj:{_qualified(cls)}{{")
    for name, item in (attrs or {}).items():
        out.append(f"{name}=")
        _write_text(item, out, budget, depth + 1)
        out.append(",")
    for name in slots:
        if name in ("__dict__", "__weakref__"):
            continue
        item = getattr(v, name, _MISSING_VALUE)
        if item is not _MISSING_VALUE:
            out.append(f"{name}=")
            _write_text(item, out, budget, depth + 1)
            out.append(",")
    return "}"


def _written_in_python(cls: type) -> bool:
    """True for a class made by a class statement: a heap type without a ``__new__`` written in C."""
    return bool(cls.__flags__ & _HEAP_TYPE) and not isinstance(cls.__dict__.get("__new__"), types.BuiltinFunctionType)


def _follow(func: Any, path: Any) -> Any:
    """The value at ``path`` (``tilejit.language.frontend.scope.Path``) from the kernel's function ``func``,
    read as the translation read it: names from the closure, then globals, then builtins; attributes and
    items of constants (numpy scalars become Python ones). Raises when the path leads nowhere.

    Tuples and lists on the way are not normalized (item by item, as the translation does): an item of one is
    the same either way, and a long one would cost a copy."""
    v = func
    for step in path:
        if v.__class__ is not tuple and v.__class__ is not list:
            v = _normalized(v)
        kind = step[0]
        if kind == "env":
            v = _env_value(v, step[1])
        elif kind == "attr":
            if step[1].startswith("__"):  # as the translator: never a dunder (an entry is data, not code)
                raise LookupError(f"attribute {step[1]!r}")
            v = getattr(v, step[1])
        elif kind == "item":
            v = v[_key(func, step[1])]
        elif kind == "defaults":
            v = v.__defaults__
        elif kind == "kwdefaults":
            v = v.__kwdefaults__
        else:
            raise LookupError(f"unknown path step {step!r}")
    return _normalized(v)


def _normalized(v: Any) -> Any:
    """``normalize_const(v)``, at once for the classes whose values it keeps as they are (it asks the ``numbers``
    ABCs, which costs microseconds a value)."""
    cls = v.__class__
    if cls in _KEPT:
        return v
    out = normalize_const(v)
    if out is v and cls is not tuple and cls is not list and cls.__module__ != "numpy" and len(_KEPT) < _MEMO_LIMIT:
        _KEPT.add(cls)
    return out


def _env_value(func: Any, name: str) -> Any:
    """``name`` as the function ``func``'s code sees it (``Translator.lookup``), not normalized."""
    code = func.__code__
    if name in code.co_freevars:
        try:
            return func.__closure__[code.co_freevars.index(name)].cell_contents
        except ValueError:  # a cell not filled yet
            pass
    g = func.__globals__
    if name in g:
        return g[name]
    return getattr(builtins, name)


def _key(func: Any, spec: Any) -> Any:
    """The item key that ``spec`` (``Reads._key_spec``) names."""
    kind = spec[0]
    if kind == "v":
        return spec[1]
    if kind == "dtype":
        return BY_NAME[spec[1]]
    if kind == "tuple":
        return tuple(_key(func, s) for s in spec[1])
    if kind == "slice":
        return slice(*(_key(func, s) for s in spec[1:]))
    if kind == "path":
        return _follow(func, spec[1])
    raise LookupError(f"unknown key {spec!r}")


def _read_texts(values: Sequence[Any]) -> list[str | None]:
    """``_read_text`` of each value, marked with the first earlier one that is the same object (``is`` in
    kernel code compares identities, which texts alone do not show)."""
    first: dict[int, int] = {}
    texts: list[str | None] = []
    for i, v in enumerate(values):
        if v is _MISSING_VALUE:
            texts.append(None)
            continue
        text = _read_text(v)
        if text is not None and type(v) not in _LITERALS and not isinstance(v, tuple | list | DType):
            same = first.setdefault(id(v), i)
            if same != i:
                text = f"@{same}:{text}"
        texts.append(text)
    return texts


def _texts_now(func: Any, paths: Sequence[Any]) -> list[str | None]:
    """``_read_texts`` of the values that ``paths`` lead to now (None for a path that leads nowhere)."""
    values = []
    for path in paths:
        try:
            values.append(_follow(func, path))
        except Exception:
            values.append(_MISSING_VALUE)
    return _read_texts(values)


#: Words that start the names the dispatch source makes for one parameter (``_tj_view_x``...): no other name it
#: makes starts with one, so no two parameters' names, nor a parameter's and another name, can come out alike.
_PER_PARAMETER = ("last_", "view_", "key_", "ptr_", "dtype_", "shape_", "stride_", "getptr_", "iscontig_")
#: What the dispatch remembers of a torch tensor argument (``ptr_x`` None: the argument is none), and its class's
#: ``data_ptr`` and ``is_contiguous``, read unbound (``dispatch.tensor_methods``).
_TENSOR_STATE = ("ptr", "dtype", "shape", "stride", "getptr", "iscontig")
#: The names a generated dispatch source reads, each with its prefix: globals, the same for every ``kernel[grid]``...
_KERNEL_ENV = ("fast", "specialize", "slow", "classify", "own_of", "for_thread", "DeviceArray", "ArrayView", "VIEW",
               "MISSING", "NOKEEP", "KEEP", "KEEP_CONST", "get_device", "thread_id", "stream_handle", "NAME", "facts",
               "torch_view", "torch_dtype_of", "tensor_methods")
#: ... and the parameters of its ``make``, those of one (its thread's id, current device and stream handle cells,
#: grid and stream).
_FUNCTION_ENV = ("owner", "current_device", "current_stream_handle", "grid", "stream")


#: Keywords a launch takes besides the kernel's parameters (``kernel[grid](..., num_warps=8)``), each overriding the
#: kernel's own for that launch's specialization; a parameter of the same name hides one.
LAUNCH_OPTIONS = ("num_warps", "num_stages")
#: The first item of a checked launch's fast key when it gives launch options (generated keys start with a device).
_OPTIONS = object()


def _dispatch_prefix(names: Sequence[str]) -> str:
    """The prefix of every name the dispatch source makes: ``_tj_``, with more underscores while a parameter's name
    starts with it."""
    p = "_tj_"
    while any(name.startswith(p) for name in names):
        p = "_" + p
    return p


def _dispatch_source(args: Sequence[str], constants: Sequence[str], annotated: Sequence[str],
                     facts: bool = False, kernel: str = "kernel", options: Sequence[str] = ()) -> str:
    """Source of ``make(...)``, which returns the launch function of one ``kernel[grid]`` for one thread.

    The function takes the kernel's own parameters (run-time ones positional or keyword, constants
    keyword-only), so a call builds no ``*args`` tuple or ``**kw`` dict. It belongs to one thread, whose
    current device and stream it reads from that thread's cells, bound once; another thread's call goes
    on to that thread's own function (made on its first call), so each function's memo, private
    launchers and cells are one thread's. It remembers its last call: when the same arguments come again (the
    same objects: immutable ones, or torch tensors whose address, shape, strides and dtype read the same) on the
    same device and stream, it relaunches what its private launcher's buffers already hold with one ctypes
    call. Otherwise it classifies each argument inline (own arrays, views, Python scalars with
    ``runtime.dispatch``'s int rule, then the array converter ``as_view`` found for its type; a type seen for the
    first time, or an error, through ``runtime.dispatch.classify``), maps the fast key to a specialization and
    launches through that. A call with arguments missing or extra positional ones goes to
    ``Kernel._launch_given``, which checks it and raises. With ``facts`` the fast key also holds which arrays
    overlap no other and which have innermost extents of whole 16-byte units (``signature.launch_facts``), facts
    the Tile IR backend compiles in. ``options`` are the launch options it takes by keyword (``num_warps``,
    ``num_stages``: :data:`LAUNCH_OPTIONS` not named by a parameter); a call that gives one takes the checked path.
    """
    from tilejit.runtime.dispatch import (
        bound_comment,
        int_dtype_text,
        make_header,
        nonlocal_lines,
        remembered_strides_text,
        torch_reads_same,
    )

    names = [*args, *constants]
    p = _dispatch_prefix(names)
    miss = f"{p}MISSING"
    params = [f"{a}={miss}" for a in args] + [f"*{p}more"] + [f"{c}={miss}" for c in constants]
    params += [f"{o}=None" for o in options]
    values = "(" + "".join(f"{name}, " for name in names) + ")"
    forward = ", ".join([*args, f"*{p}more", *(f"{c}={c}" for c in [*constants, *options])])
    # The last call again: the same objects, on the same device, with no extra arguments, and any torch tensor
    # among them reading the same as then.
    identity = " and ".join([*(f"{name} is {p}last_{name}" for name in names),
                             f"{p}current_device[0] is {p}memo_device", f"not {p}more"])
    # A torch tensor reads the same (torch_reads_same) when its address, dtype, shape and strides are those
    # remembered, each read inline: 70-160 ns a read with torch 2.11 on an H100 host.
    states = []
    for a in args:
        same = torch_reads_same(a, f"{p}ptr_{a}", f"{p}dtype_{a}", f"{p}shape_{a}", f"{p}stride_{a}",
                                methods=(f"{p}getptr_{a}", f"{p}iscontig_{a}"))
        states.append([f"({p}ptr_{a} is None or {same[0]} and {same[1]}", f"        and {same[2]}",
                       f"        and {same[3]})"])
    no_options = "".join(f" and {o} is None" for o in options)
    hit = [f"if {identity}{no_options}:"] if not args else [
        f"if ({identity}",
        *([f"       {no_options}"] if options else []),
        f"        and ({p}no_state",
        *(f"             {'or' if i == 0 else 'and'} {line}" if j == 0 else f"             {line}"
          for i, state in enumerate(states) for j, line in enumerate(state)),
    ]
    hit[-1] += ")):" if args else ""
    given = " or ".join([f"{p}more", *(f"{name} is {miss}" for name in names), *(f"{o} is not None" for o in options)])
    given_options = "".join(f", {o}={o}" for o in options)
    consts = "(" + "".join(f"({c}.__class__, {c}), " for c in constants) + ")"
    classify: list[str] = []
    for a in args:
        v, key = f"{p}view_{a}", f"{p}key_{a}"
        scalar_key = "None" if a in annotated else int_dtype_text(a)
        classify += [
            f"{p}cl = {a}.__class__",
            f"if {p}cl is {p}DeviceArray:",
            f"    {v} = {a}._view; {key} = ({v}[3], {v}[2], {v}[0] & 15)",
            f"elif {p}cl is {p}ArrayView:",
            f"    {v} = {a}; {key} = ({a}[3], {a}[2], {a}[0] & 15)",
            f"elif {p}cl is int:",
            f"    {v} = {a}; {key} = {scalar_key}",
            f"elif {p}cl is float or {p}cl is bool:",
            f"    {v} = {a}; {key} = " + ("None" if a in annotated else f"{p}cl"),
            "else:",
            f"    {p}foreign = True",
            "    try:",
            f"        {v} = {p}VIEW[{p}cl]({a}); {key} = ({v}[3], {v}[2], {v}[0] & 15)",
            "    except Exception:  # a type seen for the first time, a numpy scalar, or an error",
            f"        {v}, {key} = {p}classify({a!r}, {a}, {a in annotated})",
        ]
    view_tuple = "(" + "".join(f"{p}view_{a}, " for a in args) + ")"
    fast_key = f"({p}dev, {consts}, " + "".join(f"{p}key_{a}, " for a in args)
    fast_key += f"{p}facts({view_tuple}))" if facts else ")"
    run_list = "[" + ", ".join(args) + "]"
    const_tuple = "(" + "".join(f"{c}, " for c in constants) + ")"

    def remember(relaunch: str, handle: str) -> list[str]:
        """Lines remembering this call: its arguments (immutable ones, and torch tensors with their state),
        constants, device, specialization, views, and what relaunches it on which stream. The device comes last:
        it makes the memo whole."""
        out: list[str] = []
        if args:
            out += [f"if {p}foreign:  # remember torch tensors too, with what they read now"]
            for i, a in enumerate(args):
                out += [f"    if {p}VIEW.get({a}.__class__) is {p}torch_view and {p}views[{i}][0]:",
                        f"        {p}ptr_{a}, {p}shape_{a} = {p}views[{i}][:2]",
                        f"        {p}stride_{a} = {remembered_strides_text(a, f'{p}views[{i}][2]')}",
                        f"        {p}dtype_{a} = {p}torch_dtype_of[{p}views[{i}][3]]  # its dtype, not read again",
                        f"        {p}getptr_{a}, {p}iscontig_{a} = {p}tensor_methods({a})",
                        f"    else: {p}ptr_{a} = None  # not a torch tensor, or one of address 0: not remembered"]
            out += [f"    {p}no_state = {' and '.join(f'{p}ptr_{a} is None' for a in args)}"]
            out += [f"    {p}last_{a} = {a} if {a}.__class__ in {p}KEEP or {p}ptr_{a} is not None else {p}NOKEEP"
                    for a in args]
            out += ["else:", f"    {p}no_state = True"]
            out += [f"    {p}last_{a} = {a} if {a}.__class__ in {p}KEEP else {p}NOKEEP" for a in args]
        out += [f"{p}last_{c} = {c} if {c}.__class__ in {p}KEEP_CONST else {p}NOKEEP" for c in constants]
        out += [f"{p}memo_compiled, {p}memo_views = {p}c, {p}views",
                f"{p}memo_relaunch, {p}memo_handle = {relaunch}, {handle}",
                f"{p}memo_device = {p}dev"]
        return out

    handle_now = [
        f"if {p}stream is None: {p}h = {p}current_stream_handle[0]",
        "else:",
    ]
    memo = [f"{p}last_{name}" for name in names] + [f"{p}{x}_{a}" for x in _TENSOR_STATE for a in args]
    memo += [f"{p}no_state", f"{p}memo_device", f"{p}memo_compiled", f"{p}memo_views", f"{p}memo_relaunch",
             f"{p}memo_handle"]
    constants_doc = f"; constants {', '.join(constants)}" if constants else ""
    body = [
        f'"""Launch tile kernel {kernel!r} ({", ".join(args) or "no arguments"}{constants_doc}) on this function\'s '
        "grid and stream, for one thread.",
        "",
        "Made by tilejit.api.kernel (``_dispatch_source``). The last call's arguments again (the same objects,",
        "immutable or reading the same) on the same device and stream relaunch what its private launcher holds;",
        "other calls classify each argument, find the specialization by the fast key and launch through it.",
        '"""',
        *nonlocal_lines(memo),
        f"{p}thread = {p}thread_id()",
        f"if {p}thread != {p}owner:  # another thread: its own function, with its own cells and memo",
        f"    {p}f = {p}threads.get({p}thread)",
        f"    if {p}f is None: {p}f = {p}for_thread({p}threads, {p}thread, {p}grid, {p}stream)",
        f"    return {p}f({forward})",
        *hit,
        "    # the last call again: relaunch what its private launcher's buffers hold, when on the same stream",
        f"    if {p}memo_relaunch is not None:",
        *("        " + line for line in handle_now),
        f"            try: {p}h = {p}stream_handle({p}stream)",
        f"            except (TypeError, ValueError): {p}h = None  # not a stream (now): the launch below says why",
        f"        if {p}h == {p}memo_handle:",
        f"            {p}status = {p}memo_relaunch()",
        f"            if {p}status:",
        f"                {p}memo_device = {p}NOKEEP  # forget the failed launch",
        f"                {p}memo_compiled.base.failed({p}status, {p}grid, {p}memo_views, {p}memo_handle)",
        "            return",
        f"    {p}c = {p}memo_compiled; {p}views = {p}memo_views; {p}dev = {p}memo_device",
        f"    {p}foreign = not {p}no_state",
        "else:",
        f"    {p}memo_device = {p}NOKEEP  # the private launcher's buffers may be rewritten below",
        f"    if {given}:",
        f"        return {p}slow({p}grid, {p}stream, {p}more, {values}{given_options})",
        f"    {p}dev = {p}current_device[0]",
        f"    if {p}dev is None: {p}dev = {p}get_device()  # the thread's first device: chosen now",
        f"    {p}foreign = False  # whether an argument is another library's array",
        *("    " + line for line in classify),
        f"    {p}key = {fast_key}",
        "    try:",
        f"        {p}c = {p}fast[{p}key]",
        "    except KeyError:",
        f"        {p}c = {p}specialize({p}key, {run_list}, list({view_tuple}), {const_tuple})",
        "    except TypeError:  # an unhashable constant: the checked path says which",
        f"        return {p}slow({p}grid, {p}stream, {p}more, {values})",
        f"    {p}views = {view_tuple}",
        f"{p}o = {p}owns.get({p}c)",
        f"if {p}o is None: {p}o = {p}own_of({p}c, {p}owns, {p}owner)",
        f"if {p}o is None:  # the specialization's shared launcher (checked first, then generated)",
        f"    {p}c.launcher({p}grid, {p}views, {p}stream)",
        f"    {p}relaunch = None; {p}h = 0  # nothing of it to relaunch",
        "else:",
        *("    " + line for line in handle_now),
        f"        try: {p}h = {p}stream_handle({p}stream)",
        f"        except (TypeError, ValueError): return {p}c.launcher({p}grid, {p}views, {p}stream)  # it explains",
        # A failed launch may leave the private launcher's buffers holding this call (its stream, when only
        # that differed from the memo's): the memo must not make a later call relaunch them.
        f"    try: {p}o[0]({p}grid, {p}views, {p}h)",
        "    except BaseException:",
        f"        {p}memo_device = {p}NOKEEP",
        "        raise",
        f"    {p}relaunch = {p}o[1]",
        *remember(f"{p}relaunch", f"{p}h"),
    ]
    init = [f"{' = '.join(f'{p}last_{name}' for name in names)} = {p}NOKEEP"] if names else []
    if args:
        init += [f"{' = '.join(f'{p}{x}_{a}' for a in args)} = None" for x in _TENSOR_STATE]
    init += [f"{p}no_state = True", f"{p}memo_device = {p}NOKEEP",
             f"{p}memo_compiled = {p}memo_views = {p}memo_relaunch = None", f"{p}memo_handle = 0",
             f"{p}owns = {{}}  # specialization -> its launcher private to this function, and that one's now()",
             f"{p}threads = {{}}  # other threads' functions of this kernel[grid]"]
    return "\n".join([
        *bound_comment([p + name for name in _KERNEL_ENV], "tilejit.api.kernel for this kernel"),
        *make_header([p + name for name in _FUNCTION_ENV]),
        *("    " + line for line in init),
        "",
        f"    def launch({', '.join(params)}):",
        *("        " + line if line else "" for line in body),
        "",
        f"    launch.__name__ = launch.__qualname__ = {p}NAME",
        "    return launch",
        "",
    ])


def _check_num_threads(name: str, n: object) -> int:
    """``@tj.kernel(num_threads=n)``: a power of two from 32 to 1024 (the CUDA block limit)."""
    return check_num_threads(n, f"@tj.kernel(num_threads=...) of {name}")


class Kernel:
    """A tile kernel. Launch with ``kernel[grid](args...)``; compile ahead with ``tj.compile``."""

    def __init__(self, func: Callable[..., Any], *, num_threads: int | None = None,
                 backend: str | None = None, num_ctas: int | None = None, occupancy: int | None = None,
                 num_warps: int | None = None, num_stages: int | None = None) -> None:
        from tilejit.language.frontend.params import constant_params, signature_params

        if not callable(func) or isinstance(func, type):
            raise TypeError(f"tj.kernel: expected a Python function to compile as a tile kernel, got "
                            f"{type(func).__name__} {func!r}")
        self.func = func
        self.__name__ = func.__name__
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        if num_threads is not None:
            num_threads = _check_num_threads(func.__name__, num_threads)
        if num_warps is not None:
            num_threads = block_threads(num_threads, num_warps, f"@tj.kernel(num_warps=...) of {func.__name__}")
        self.num_threads = num_threads
        self.num_stages = None if num_stages is None else check_num_stages(
            num_stages, f"@tj.kernel(num_stages=...) of {func.__name__}")
        self.backend = check_backend(backend, f"@tj.kernel(backend=...) of {func.__name__}")  # None: TILEJIT_BACKEND
        self.num_ctas = None if num_ctas is None else check_num_ctas(num_ctas, f"@tj.kernel(num_ctas=...) of "
                                                                               f"{func.__name__}")
        self.occupancy = None if occupancy is None else check_occupancy(occupancy, f"@tj.kernel(occupancy=...) of "
                                                                                   f"{func.__name__}")
        self._params = signature_params(func)
        consts = set(constant_params(func))
        self._constants = [p for p in self._params if p in consts]
        self._args = [p for p in self._params if p not in consts]
        self._annotated = _scalar_annotations(func, self._args)
        self._specs: dict[tuple[Any, ...], _Compiled] = {}
        self._fast: dict[tuple[Any, ...], _Compiled] = {}
        self._options = [o for o in LAUNCH_OPTIONS if o not in self._params]  # those a launch takes by keyword
        self._bound: dict[object, Callable[..., None]] = {}
        self._lock = threading.Lock()
        self._fingerprint: str | None = None
        self._make: Callable[..., Callable[..., None]] | None = None
        self._prefix = ""  # that of the names in the generated launch functions' source
        self._facts: bool | None = None  # whether launch keys hold ``launch_facts`` (decided once)

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
        """The launch function for ``kernel[item]``, made for the calling thread (another thread's calls of it
        go on to functions of their own); memoized, since grids repeat."""
        from tilejit.runtime.launch import grid3  # the launcher's own grid rule (its module loads on launch)

        if isinstance(item, tuple) and len(item) == 2 and not hasattr(item[1], "__index__"):  # (grid, stream)
            grid, stream = grid3(item[0]), item[1]
        else:
            grid, stream = grid3(item), None
        bound = self._make_launch(threading.get_ident(), grid, stream)
        try:
            if len(self._bound) >= _MEMO_LIMIT:
                self._bound.clear()
            self._bound[item] = bound
        except TypeError:  # an unhashable stream object: no memo
            pass
        return bound

    def _make_launch(self, thread: int, grid: tuple[int, int, int], stream: Any) -> Callable[..., None]:
        """A launch function of ``kernel[grid, stream]`` for the calling thread ``thread``, bound to its state."""
        from tilejit.runtime.device import thread_state

        make = self._make
        if make is None:
            from tilejit.compiler.cache import cached_compile
            from tilejit.runtime.array import DeviceArray
            from tilejit.runtime.device import get_device
            from tilejit.runtime.dispatch import IMMUTABLE_ARGS, classify, function_maker, tensor_methods
            from tilejit.runtime.interop import torch_dtype_of, torch_view
            from tilejit.runtime.stream import stream_handle

            src = _dispatch_source(self._args, self._constants, list(self._annotated), self._keys_facts(),
                                   self.__name__, self._options)
            p = _dispatch_prefix([*self._args, *self._constants])
            env = {
                "fast": self._fast, "specialize": self._specialize, "slow": self._launch_given, "classify": classify,
                "own_of": _own_launch, "for_thread": self._for_thread, "DeviceArray": DeviceArray, "ArrayView": _AV,
                "VIEW": _VIEW_BY_TYPE, "MISSING": _MISSING, "NOKEEP": _NOKEEP, "KEEP": IMMUTABLE_ARGS,
                "KEEP_CONST": _KEEP_CONST, "get_device": get_device, "thread_id": threading.get_ident,
                "stream_handle": stream_handle, "NAME": self.__name__, "facts": launch_facts,
                "torch_view": torch_view, "torch_dtype_of": torch_dtype_of(), "tensor_methods": tensor_methods,
            }
            make = self._make = function_maker(src, f"<tilejit dispatch {self.__name__}>", cached_compile,
                                               {p + name: env[name] for name in _KERNEL_ENV})
            self._prefix = p
        state = thread_state()
        p = self._prefix
        return make(**{p + "owner": thread, p + "current_device": state.device,
                       p + "current_stream_handle": state.handle, p + "grid": grid, p + "stream": stream})

    def _keys_facts(self) -> bool:
        """Whether this kernel's launch keys hold ``signature.launch_facts`` (``ArrayHint.disjoint``/``extent16``):
        decided once, on the first launch, for a backend that compiles them in; a backend chosen differently
        later gets specializations without them (never wrong, only slower)."""
        if self._facts is None:
            from tilejit.backends.base import wants_launch_facts

            self._facts = len(self._args) > len(self._annotated) and wants_launch_facts(self.backend,
                                                                                        num_threads=self.num_threads)
        return self._facts

    def _for_thread(self, threads: dict[int, Callable[..., None]], thread: int, grid: tuple[int, int, int],
                    stream: Any) -> Callable[..., None]:
        """The calling thread's launch function of a ``kernel[grid, stream]`` another thread made, kept in
        that function's ``threads``."""
        launch = self._make_launch(thread, grid, stream)
        if len(threads) >= _THREADS_LIMIT:
            threads.clear()
        threads[thread] = launch
        return launch

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

    def _launch_given(self, grid: tuple[int, int, int], stream: Any, more: tuple[Any, ...],
                      values: tuple[Any, ...], num_warps: Any = None, num_stages: Any = None) -> None:
        """A call the generated launch function leaves to the checked path (arguments missing, extra
        positional ones, an unhashable constant, launch options): ``values`` holds every parameter, run-time ones
        first, ``_MISSING`` where not given; ``more`` the extra positional arguments."""
        n = len(self._args)
        if more:  # Python filled every positional parameter before collecting extras
            args: tuple[Any, ...] = (*values[:n], *more)
            kwargs = {c: v for c, v in zip(self._constants, values[n:]) if v is not _MISSING}
        else:
            args = ()
            kwargs = {p: v for p, v in zip([*self._args, *self._constants], values) if v is not _MISSING}
        options = None
        if num_warps is not None or num_stages is not None:
            options = self._launch_options(num_warps, num_stages)
        self._launch(grid, stream, args, kwargs, options)

    def _launch_options(self, num_warps: Any, num_stages: Any) -> tuple[int | None, int | None]:
        """(block threads, pipeline stages) of a launch given ``num_warps=`` or ``num_stages=``: each overrides the
        kernel's own (``@tj.kernel(num_warps=..., num_stages=...)``), the other stays the kernel's."""
        where = f"{self.__name__}[grid](..., num_warps=..., num_stages=...)"
        try:
            threads = self.num_threads if num_warps is None else block_threads(None, num_warps, where)
            stages = self.num_stages if num_stages is None else check_num_stages(num_stages, where)
        except (TypeError, ValueError) as exc:
            raise LaunchError(str(exc)) from None
        return threads, stages

    def _launch(self, grid: tuple[int, int, int], stream: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                options: tuple[int | None, int | None] | None = None) -> None:
        """The checked launch: every argument checked and classified, no remembered state; ``options``: the
        launch's (block threads, pipeline stages), when it gives ``num_warps=`` or ``num_stages=``."""
        from tilejit.runtime.device import get_device
        from tilejit.runtime.dispatch import classify

        run_args, consts = self._split(args, kwargs)
        # The fast key uses raw facts (dtype, strides, pointer alignment); _specialize maps it to the
        # canonical specialization, so an unseen stride pattern costs a dict insert, not a compile.
        # Constants are keyed with their type: 1, 1.0 and True compare equal but compile differently.
        key: list[Any] = [get_device(), tuple([(c.__class__, c) for c in consts])]
        views: list[Any] = []
        for name, a in zip(self._args, run_args):
            v, k = classify(name, a, name in self._annotated)
            views.append(v)
            key.append(k)
        if self._keys_facts():
            key.append(launch_facts(views))
        k = tuple(key)
        compiled = self._fast.get(k if options is None else (_OPTIONS, options, *k))
        if compiled is None:
            compiled = self._specialize(k, list(run_args), views, consts, options)
        compiled.launcher(grid, views, stream)

    def _specialize(
        self, fast_key: tuple[Any, ...], run_args: list[Any], views: list[Any], consts: tuple[Any, ...],
        options: tuple[int | None, int | None] | None = None,
    ) -> _Compiled:
        """The specialization for a launch whose fast key (device first) is new, compiled if need be; ``options``:
        the launch's (block threads, pipeline stages) in place of the kernel's (keyed apart)."""
        device = fast_key[0]
        arg_types, hints = self._types_of(run_args, views, fast_key[-1] if self._keys_facts() else None)
        typed = tuple((c.__class__, c) for c in consts)
        key = (device, typed, tuple(arg_types.values()), tuple(sorted(hints.items())), options)
        with self._lock:
            compiled = self._specs.get(key)
            if compiled is None:
                # options only when given: stand-ins of _build (tests) take the four others
                compiled = self._build(arg_types, hints, consts, device, *(() if options is None else (options,)))
                self._specs[key] = compiled
            if len(self._fast) >= _MEMO_LIMIT:
                self._fast.clear()
            self._fast[fast_key if options is None else (_OPTIONS, options, *fast_key)] = compiled
            return compiled

    def _types_of(
        self, run_args: list[Any], views: list[Any], facts: tuple[int | None, ...] | None = None
    ) -> tuple[dict[str, ArrayType | ArrayListType | TileType], dict[str, Any]]:
        """IR parameter types and backend layout hints of one launch's arguments; ``facts``: the launch facts of
        its fast key, when it holds them (a fact not in the key must not reach the hints)."""
        arg_types: dict[str, ArrayType | ArrayListType | TileType] = {}
        hints: dict[str, Any] = {}
        for i, (name, a, v) in enumerate(zip(self._args, run_args, views)):
            if v.__class__ is not _AV:
                arg_types[name] = self._annotated.get(name) or scalar_type_of(name, a)
            elif v[4].__class__ is ArrayTable:  # an array list: no layout facts of its arrays
                arg_types[name] = ArrayListType(BY_NAME[v[4].dtype], v[4].ndim)
            else:
                dtype, ndim, unit, aligned, index32 = array_key(v.dtype, v.shape, v.strides, v.ptr)
                if v.ptr % dtype.itemsize:  # the fast key holds ptr & 15, so every such address comes here
                    raise LaunchError(
                        f"{self.__name__}(): argument '{name}' starts at {v.ptr:#x}, which is not a multiple of "
                        f"{dtype.itemsize}: {dtype.name} elements must be {dtype.itemsize}-byte aligned on the GPU "
                        "(a view into a byte buffer at an odd offset? copy it first)"
                    )
                arg_types[name] = ArrayType(dtype, ndim)
                bits = 0 if facts is None else facts[i] or 0
                hints[name] = ArrayHint(unit_stride=unit, aligned16=aligned, index32=index32,
                                        disjoint=bool(bits & ALONE), extent16=bool(bits & EXTENT16))
        return arg_types, hints

    def _build(
        self, arg_types: dict[str, ArrayType | ArrayListType | TileType], hints: dict[str, Any],
        consts: tuple[Any, ...], device: Any, options: tuple[int | None, int | None] | None = None,
    ) -> _Compiled:
        """Compile (or fetch from the disk cache) one specialization and load it on ``device``, with the backend
        ``choose_backend`` picks; under ``auto``, a kernel the Tile IR backend refuses (``FALLBACK_ERRORS``), or a
        driver too old for Tile IR CUBINs, is loaded with the CUDA backend instead (logged at INFO level)."""
        from tilejit.backends.base import FALLBACK_ERRORS, choose_backend, get_backend, log_fallback, requested_backend
        from tilejit.compiler.targets import parse_target
        from tilejit.errors import DriverVersionError

        if self._fingerprint is None:
            self._fingerprint = _source_fingerprint(self.func)
        device_target = parse_target(device.arch)
        opts = options or (self.num_threads, self.num_stages)
        backend, _ = choose_backend(self.backend, device_target, num_threads=opts[0])
        constants = dict(zip(self._constants, consts))
        auto = requested_backend(self.backend) == "auto"
        if backend.name == "cuda" or not auto:
            return self._load(backend, device_target, arg_types, hints, constants, device, auto, opts)
        refusals: tuple[type[Exception], ...] = (*FALLBACK_ERRORS, DriverVersionError)
        try:
            return self._load(backend, device_target, arg_types, hints, constants, device, auto, opts)
        except refusals as exc:
            log_fallback(self.__name__, exc)
        return self._load(get_backend("cuda"), device_target, arg_types, hints, constants, device, auto, opts)

    def _load(self, backend: Backend, device_target: Target,
              arg_types: dict[str, ArrayType | ArrayListType | TileType], hints: dict[str, Any],
              constants: dict[str, Any], device: Any, auto: bool,
              opts: tuple[int | None, int | None] = (None, None)) -> _Compiled:
        """Load one specialization with ``backend``, trying each of its targets for the device in turn; ``opts``:
        its (block threads, pipeline stages)."""
        from tilejit.api.loader import load_artifact

        assert self._fingerprint is not None
        *first, last = backend.launch_targets(device_target)
        for target in first:
            try:
                return load_artifact(self._artifact(arg_types, hints, constants, target, backend.name, auto, opts),
                                     self._fingerprint, device)
            except TargetError:  # e.g. sm_90a, which an NVRTC older than 12.0 lacks
                pass
        return load_artifact(self._artifact(arg_types, hints, constants, last, backend.name, auto, opts),
                             self._fingerprint, device)

    def _artifact(self, arg_types: dict[str, ArrayType | ArrayListType | TileType], hints: dict[str, Any],
                  constants: dict[str, Any], target: Any, backend: str, auto: bool = False,
                  opts: tuple[int | None, int | None] | None = None) -> Artifact:
        """The artifact of one specialization for ``target`` with ``backend`` (``auto``: ``Artifact.auto``);
        ``opts``: (block threads, pipeline stages), by default the kernel's."""
        threads, stages = opts or (self.num_threads, self.num_stages)
        return Artifact(self.func, self.func.__name__, arg_types, constants, target, threads, hints, backend,
                        self.num_ctas, self.occupancy, auto, num_stages=stages)


def kernel(func: Callable[..., Any] | None = None, *, num_threads: int | None = None,
           backend: str | None = None, num_ctas: int | None = None, occupancy: int | None = None,
           num_warps: int | None = None, num_stages: int | None = None) -> Any:
    """Decorate a Python function as a tile kernel; ``num_threads`` (or Triton's ``num_warps``, 32 threads each)
    overrides the compiler's choice of block size, ``backend`` ("cuda", "tileir", "auto") the ``TILEJIT_BACKEND``
    setting. Performance hints: ``num_ctas``, CTAs per cluster (a power of two 1..16; Tile IR on sm_90+ only: a
    launch's grid x extent must then be a multiple of it), ``occupancy``, CTAs per SM the compiler should aim for
    (1..32), and ``num_stages``, the depth of the CUDA backend's cp.async pipelines (1: none)."""
    if func is None:
        # checked now, not when the decorator is applied
        if num_threads is not None:
            check_num_threads(num_threads, "@tj.kernel(num_threads=...)")
        if num_warps is not None:
            block_threads(num_threads, num_warps, "@tj.kernel(num_warps=...)")
        if num_stages is not None:
            check_num_stages(num_stages, "@tj.kernel(num_stages=...)")
        if num_ctas is not None:
            check_num_ctas(num_ctas, "@tj.kernel(num_ctas=...)")
        if occupancy is not None:
            check_occupancy(occupancy, "@tj.kernel(occupancy=...)")
        check_backend(backend, "@tj.kernel(backend=...)")
        return lambda f: Kernel(f, num_threads=num_threads, backend=backend, num_ctas=num_ctas, occupancy=occupancy,
                                num_warps=num_warps, num_stages=num_stages)
    return Kernel(func, num_threads=num_threads, backend=backend, num_ctas=num_ctas, occupancy=occupancy,
                  num_warps=num_warps, num_stages=num_stages)


__all__ = ["Kernel", "kernel"]
