"""The kernel-level disk cache across processes: an entry serves a new process only when every value the kernel
read from outside (globals, closure variables, attributes and items of them, helpers' globals and defaults) is
the same there; a value that cannot be written out deterministically keeps the kernel out of that cache.

Each process loads a specialization through ``load_artifact`` with the GPU parts replaced: the "compile" stores
the IR text as the image, so what a process gets from the cache shows which values it was compiled with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import tilejit as tj

# Loads each kernel of ``argv[2]`` (JSON: [[module, kernel name], ...], modules in folder ``argv[1]``) through the
# disk cache, with the compile and the module/launcher construction replaced by stand-ins that need no GPU and
# no NVRTC; prints {module: {compiled, image, now, imported}}.
CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import tilejit as tj
    import tilejit.runtime.launch as rt_launch
    import tilejit.runtime.module as rt_module
    from tilejit.api import loader
    from tilejit.api.kernel import _source_fingerprint

    compiled = []

    def compile_entry(artifact, ptx):
        compiled.append(artifact.name)
        return {"image": artifact.ir_text().encode(), "kind": "cubin", "symbol": artifact.name,
                "num_threads": 128, "shared_bytes": 0, "params": [], "cluster": 1}

    class Module:
        def __init__(self, image):
            self.image = image

        @classmethod
        def load(cls, image, kind=None, device=None):
            return cls(image)

        def get_function(self, name):
            return name

    class Launcher:
        def __init__(self, *args, **kwargs):
            pass

        def launch_any_thread(self, grid, args, stream=None):
            raise AssertionError("nothing launches here")

    loader._compile_entry = compile_entry
    rt_module.Module = Module
    rt_launch.Launcher = Launcher
    out = {}
    for name, kernel in json.loads(sys.argv[2]):
        k = getattr(__import__(name), kernel)
        compiled.clear()
        before = set(sys.modules)
        got = loader.load_artifact(tj.compile(k, (tj.float32[:],), target="sm_80"), _source_fingerprint(k.func))
        imported = sorted(set(sys.modules) - before)
        now = tj.compile(k, (tj.float32[:],), target="sm_80").ir_text()
        out[name] = {"compiled": len(compiled), "image": got.module.image.decode(), "now": now, "imported": imported}
    print(json.dumps(out))
    """
)


def _run(folder: Path, kernels: list[tuple[str, str]], value: float) -> dict[str, dict[str, Any]]:
    """One new process loading each (module, kernel name) of ``kernels`` with ``TJ_FP_VALUE=value``, caching in
    ``folder/cache``."""
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(folder / "cache"), "TJ_FP_VALUE": repr(value),
           "PYTHONDONTWRITEBYTECODE": "1"}  # a module rewritten within a second must not load from a stale .pyc
    env.pop("TILEJIT_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder), json.dumps(kernels)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _write(folder: Path, modules: dict[str, str]) -> None:
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(text)


_HEAD = "import enum, os\nimport numpy as np\nimport tilejit as tj\n\nV = float(os.environ['TJ_FP_VALUE'])\n"


def _kernel(expr: str, *setup: str) -> str:
    """A module whose kernel ``k`` stores ``expr`` (which reads ``V`` somehow) into its array; ``setup``: the
    module's other code (each part dedented)."""
    return (_HEAD + "".join(textwrap.dedent(part) for part in setup) +
            f"\n\n@tj.kernel\ndef k(x):\n    tj.store(x, index=(0,), tile=tj.full((16,), {expr}, tj.float32))\n")


_BOX = """
class Box:
    pass
"""

# name -> (kernel module source, other modules' sources)
CASES: dict[str, tuple[str, dict[str, str]]] = {
    "dict": (_kernel('CFG["add"]', "CFG = {'add': V}"), {}),
    "nested_dict": (_kernel('CFG["a"]["b"]', "CFG = {'a': {'b': V}, 'c': 1}"), {}),
    "object_attributes": (_kernel("OBJ.inner.deeper.add", _BOX, """
        OBJ = Box()
        OBJ.inner = Box()
        OBJ.inner.deeper = Box()
        OBJ.inner.deeper.add = V
        """), {}),
    "class_attribute": (_kernel("Cls.ADD", "class Cls:\n    ADD = V\n"), {}),
    "nested_class_attribute": (_kernel("Outer.Mid.Inner.ADD", """
        class Outer:
            class Mid:
                class Inner:
                    ADD = V
        """), {}),
    "enum_value": (_kernel("Mode.A.value", "class Mode(enum.Enum):\n    A = V\n    B = -1.0\n"), {}),
    "enum_member": (_kernel("1.0 if MODE is Mode.FAST else 2.0", """
        class Mode(enum.Enum):
            FAST = 1
            SLOW = 2
        MODE = Mode.FAST if V == 1.0 else Mode.SLOW
        """), {}),
    "enum_key": (_kernel("TABLE[MODE]", """
        class Mode(enum.Enum):
            FAST = 1
            SLOW = 2
        TABLE = {Mode.FAST: 1.0, Mode.SLOW: 2.0}
        MODE = Mode.FAST if V == 1.0 else Mode.SLOW
        """), {}),
    "helper_in_another_module": (_kernel("add_value()", "from fp_helpers import add_value"), {
        "fp_helpers": _HEAD + "CFG = {'add': V}\n\n\n@tj.function\ndef add_value():\n    return CFG['add']\n"}),
    "helper_through_a_module": (_kernel("H.add_value()", "import fp_helpers2 as H"), {
        "fp_helpers2": _HEAD + "class Cfg:\n    ADD = V\n\n\n@tj.function\ndef add_value():\n    return Cfg.ADD\n"}),
    "helper_default": (_kernel("scaled()", """
        CFG = {'add': V}


        @tj.function
        def scaled(s=CFG['add']):
            return s
        """), {}),
    "object_passed_to_a_helper": (_kernel("get(OBJ)", _BOX, """
        OBJ = Box()
        OBJ.inner = Box()
        OBJ.inner.add = V


        @tj.function
        def get(o):
            return o.inner.add
        """), {}),
    "closure_dict": (_kernel("2.0", """
        def make(cfg):
            @tj.kernel
            def k2(x):
                tj.store(x, index=(0,), tile=tj.full((16,), cfg["add"], tj.float32))

            return k2


        made = make({'add': V})
        """), {}),
    "numpy_item": (_kernel("W[0]", "W = np.array([V, 0.0])"), {}),
    "helper_closure_dict": (_kernel("H()", """
        def make_helper(cfg):
            @tj.function
            def h():
                return cfg["add"]

            return h


        H = make_helper({'add': V})
        """), {}),
    "identity": (_kernel("1.0 if A is B else 2.0", _BOX, """
        A = Box()
        B = A if V == 1.0 else Box()
        """), {}),
    "object_through_a_local": (_kernel("via_local()", _BOX, """
        OBJ = Box()
        OBJ.inner = Box()
        OBJ.inner.add = V


        @tj.function
        def via_local():
            c = OBJ
            d = (c, 1)[0].inner
            return d.add
        """), {}),
    "helpers_in_a_tuple": (_kernel("pick()", """
        @tj.function
        def one():
            return 1.0


        @tj.function
        def two():
            return 2.0


        CFG = {'helpers': (one, two), 'which': int(V) - 1}


        @tj.function
        def pick():
            for i, h in enumerate(CFG['helpers']):
                if i == CFG['which']:
                    return h()
            return 0.0
        """), {}),
    "a_path_that_leads_nowhere": (_kernel("CFG['x'] if CFG['use_x'] else CFG['y']", """
        CFG = {'use_x': V == 1.0, 'y': V}
        if V == 1.0:
            CFG['x'] = V
        """), {}),
}


def test_a_changed_outside_value_is_never_served_from_another_process(tmp_path: Path) -> None:
    """Values 1, 2, 1, 2 in four processes sharing one cache: each gets code with its own value (the last two
    from the cache, compiled by the first two), for every way of reading a value in CASES."""
    kernels = []
    for case, (source, others) in CASES.items():
        _write(tmp_path, {f"fp_{case}": source, **others})
        kernels.append((f"fp_{case}", "made" if case == "closure_dict" else "k"))
    runs = [_run(tmp_path, kernels, v) for v in (1.0, 2.0, 1.0, 2.0)]
    for case in CASES:
        got = [run[f"fp_{case}"] for run in runs]
        for value, run in zip((1.0, 2.0, 1.0, 2.0), got):
            assert run["image"] == run["now"], f"{case}, value {value}: got another process's code"
        assert [f"value={v}" in run["now"] for v, run in zip((1.0, 2.0), got)] == [True, True], case
        assert [run["compiled"] for run in got] == [1, 1, 0, 0], case


# name -> (kernel module source whose kernel reads a value that has no deterministic text, the value it stores
# when V is 2)
NO_TEXT: dict[str, tuple[str, float]] = {
    "a_huge_list_read_whole": (_kernel("float(len(BIG)) + V", "BIG = [V] * 20_000"), 20_002.0),
    "a_dict_that_holds_itself": (_kernel("float(len(LOOP)) + V", "LOOP = {'v': V}\nLOOP['self'] = LOOP"), 4.0),
    "an_object_of_a_c_type": (_kernel("1.0 if isinstance(LOCK, int) else V",
                                      "import threading\nLOCK = threading.Lock()"), 2.0),
    "an_object_whose_attributes_raise": (_kernel("1.0 if isinstance(ODD, int) else V", """
        class Odd:
            @property
            def __dict__(self):
                raise RuntimeError("no state here")


        ODD = Odd()
        """), 2.0),
    "a_large_numpy_array_read_whole": (_kernel("1.0 if isinstance(ARR, int) else V", "ARR = np.full(1 << 20, V)"), 2.0),
}


def test_an_edited_helper_reached_through_a_dict_is_compiled_again(tmp_path: Path) -> None:
    """A helper's source is part of its text: editing the helper's module (not the kernel's) is a miss."""
    (tmp_path / "fp_edit.py").write_text(_kernel("HELPERS['h']()", "from fp_edit_helpers import HELPERS"))
    helper = _HEAD + "\n\n@tj.function\ndef h():\n    return {}\n\n\nHELPERS = {{'h': h}}\n"
    runs = []
    for body in ("1.0", "2.0", "2.0"):
        (tmp_path / "fp_edit_helpers.py").write_text(helper.format(body))
        runs.append(_run(tmp_path, [("fp_edit", "k")], 1.0)["fp_edit"])
    assert [run["compiled"] for run in runs] == [1, 1, 0]
    assert all(run["image"] == run["now"] for run in runs)
    assert "value=2.0" in runs[1]["now"]


def test_a_value_without_text_keeps_the_kernel_out_of_the_cache(tmp_path: Path) -> None:
    """Too large, holding itself, of a C type, failing to read: each process compiles the kernel (right code,
    no crash) and stores no entry that another could take."""
    _write(tmp_path, {f"fp_{case}": source for case, (source, _) in NO_TEXT.items()})
    runs = [_run(tmp_path, [(f"fp_{case}", "k") for case in NO_TEXT], v) for v in (1.0, 1.0, 2.0)]
    for case, (_, stored) in NO_TEXT.items():
        got = [run[f"fp_{case}"] for run in runs]
        assert [run["compiled"] for run in got] == [1, 1, 1], case
        assert all(run["image"] == run["now"] for run in got), case
        assert f"value={stored}" in got[2]["now"], case
    assert not list((tmp_path / "cache").glob("*.tjc"))


def test_items_of_huge_or_odd_values_are_cached_by_their_own_value(tmp_path: Path) -> None:
    """Only what the kernel reads is recorded: an item of a huge list and an attribute of an object whose
    ``__getattr__`` raises (which the source scan used to trip over) keep the kernel cached."""
    (tmp_path / "fp_odd.py").write_text(_kernel("BIG[1] + ODD.add", """
        BIG = [0.0, V] * 10_000


        class Odd:
            def __getattr__(self, name):
                raise RuntimeError(f"no attribute {name}")


        ODD = Odd()
        ODD.add = V
        """))
    runs = [_run(tmp_path, [("fp_odd", "k")], v)["fp_odd"] for v in (1.0, 2.0, 1.0, 2.0)]
    assert [run["compiled"] for run in runs] == [1, 1, 0, 0]
    assert all(run["image"] == run["now"] for run in runs)
    assert "value=4.0" in runs[3]["now"]


def test_a_warm_hit_checks_the_reads_without_the_front_end(tmp_path: Path) -> None:
    """Taking the recorded paths again on a cache hit is plain getattr/getitem: no translator, no IR."""
    source, others = CASES["helper_in_another_module"]
    (tmp_path / "fp_warm.py").write_text(source.replace("add_value()", "add_value() + OBJ.inner.add + CFG['k']") +
                                         "\n\nclass Box:\n    pass\n\n\nOBJ = Box()\nOBJ.inner = Box()\n"
                                         "OBJ.inner.add = V\nCFG = {'k': V}\n")
    _write(tmp_path, others)
    cold, warm = (_run(tmp_path, [("fp_warm", "k")], 1.0)["fp_warm"] for _ in range(2))
    assert (cold["compiled"], warm["compiled"]) == (1, 0)
    assert "tilejit.language.frontend.translate" in cold["imported"]  # the check can fail
    front_end = [m for m in warm["imported"] if m.startswith("tilejit.language.frontend.") or
                 m in ("tilejit.language.ir.core", "tilejit.language.ir.ops")]
    assert front_end == []


def test_value_texts_show_every_difference_and_refuse_what_they_cannot_show() -> None:
    """``_read_text``: equal values give equal texts in any process (sets sorted, numpy scalars as Python
    ones); a difference in value, type or state shows; values with no deterministic text give None."""
    import enum
    import functools
    import threading
    import types

    import numpy as np

    from tilejit.api.kernel import _read_text

    class Box:
        pass

    class Slotted:
        __slots__ = ("a", "b")

    class Mode(enum.Enum):
        A = 1
        B = (2, "x")

    class Raises:
        @property
        def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
            raise RuntimeError("no state")

    def box(**attrs: Any) -> Box:
        b = Box()
        b.__dict__.update(attrs)
        return b

    def slotted(a: Any) -> Slotted:
        s = Slotted()
        s.a = a
        return s

    same = [({"a": (1, 2.0, "x")}, {"a": (1, 2.0, "x")}), (np.float32(2.5), 2.5), (np.int64(3), 3),
            (frozenset({3, 1, 2}), frozenset({2, 3, 1})), (box(x=1, y=[2]), box(x=1, y=[2])),
            (slotted(1), slotted(1)), (types.SimpleNamespace(k=1), types.SimpleNamespace(k=1)),
            (np.arange(4), np.arange(4)), (Mode.B, Mode.B), (np.dtype("float32"), np.dtype("float32"))]
    for a, b in same:
        assert _read_text(a) is not None and _read_text(a) == _read_text(b), (a, b)
    differ = [(1, True), (1, 1.0), ({"a": 1}, {"a": 2}), ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ((1, 2), [1, 2]),
              (box(x=1), box(x=2)), (box(x=1), types.SimpleNamespace(x=1)), (slotted(1), slotted(2)),
              (np.arange(4), np.arange(1, 5)), (np.arange(4), np.arange(4.0)), (Mode.A, Mode.B), (Mode.A, 1),
              (Mode, Box), (np.dtype("float32"), np.dtype("float64"))]
    for a, b in differ:
        assert _read_text(a) != _read_text(b), (a, b)
    loop: dict[str, Any] = {}
    loop["self"] = loop
    deep: list[Any] = []
    for _ in range(100):
        deep = [deep]
    for value in ([0] * 100_000, "x" * 100_000, loop, deep, threading.Lock(), functools.partial(print, 1),
                  Raises(), np.zeros(1 << 20), np.array([object()]), box(lock=threading.Lock())):
        assert _read_text(value) is None, type(value)


@tj.function
def _one() -> float:
    return 1.0


_CFG = {"add": 2.0}


@tj.kernel
def _reads_a_helper(x, H: tj.Constant[object]):  # type: ignore[no-untyped-def]
    tj.store(x, index=(0,), tile=tj.full((16,), H() + _CFG["add"], tj.float32))


@tj.kernel
def _reads_an_attribute(x, C: tj.Constant[object]):  # type: ignore[no-untyped-def]
    tj.store(x, index=(0,), tile=tj.full((16,), C.add, tj.float32))


@tj.kernel
def _reads_outside(x):  # type: ignore[no-untyped-def]
    tj.store(x, index=(0,), tile=tj.full((16,), _one() + _CFG["add"], tj.float32))


def test_what_the_kernel_reads_is_recorded_and_what_no_path_reaches_is_refused(monkeypatch: Any) -> None:
    """The record holds the paths and texts of the values read (``_CFG["add"]``, the helper); a helper or an
    object's attribute reached through a constant parameter has no path, so the kernel is not cached."""
    from tilejit.api import loader

    monkeypatch.setattr(loader, "_compile_entry", lambda artifact, ptx: {"ir": artifact.ir_text()})

    def recorded(kernel: Any, value: Any) -> tuple[dict[str, Any], Any]:
        name = "H" if kernel is _reads_a_helper else "C"
        art = tj.compile(kernel, (tj.float32[:],), constants={name: value}, target="sm_80")
        return loader._compile_recorded(art, False)

    entry, reads = recorded(_reads_a_helper, _one)
    assert "value=3.0" in entry["ir"] and reads is None  # _one has no path: its source is in no record

    class Cfg:
        add = 4.0

        def __hash__(self) -> int:
            return 0

    entry, reads = recorded(_reads_an_attribute, Cfg())
    assert "value=4.0" in entry["ir"] and reads is None

    entry, reads = loader._compile_recorded(tj.compile(_reads_outside, (tj.float32[:],), target="sm_80"), False)
    assert "value=3.0" in entry["ir"] and reads is not None
    texts = dict(reads)
    assert texts[(("env", "_CFG"), ("item", ("v", "add")))] == "float:2.0"
    assert texts[(("env", "_one"),)].startswith(f"TileFunction:{__name__}._one:")
    assert texts[(("env", "tj"), ("attr", "full"))] == "fn:tilejit.language.tile.full"
    assert (("env", "_CFG"),) not in texts  # read only to take an item of it


_GPU_CHILD = """
import json, sys
import numpy as np
import tilejit as tj
sys.path.insert(0, sys.argv[1])
from fp_gpu_kernel import add_cfg
n = 1000
x = tj.asarray(np.arange(n, dtype=np.float32))
out = tj.asarray(np.full(n, np.nan, np.float32))
add_cfg[tj.cdiv(n, 256)](x, out, TILE=256)
with open("/proc/self/maps") as f:
    nvrtc_loaded = "libnvrtc" in f.read()
print(json.dumps({"out": out.numpy()[:4].tolist(), "nvrtc_loaded": nvrtc_loaded}))
"""


@pytest.mark.gpu
@pytest.mark.cuda_only(reason="counts the processes that load NVRTC (the CUDA backend's compiler)")
def test_launches_in_new_processes_use_their_own_outside_values(tmp_path: Path) -> None:
    """On the GPU: processes sharing one cache, with CFG["add"], a helper's global and an Enum member that differ
    between them, each compute with their own values; a process with values seen before takes the cached CUBIN
    without loading NVRTC."""
    (tmp_path / "fp_gpu_helpers.py").write_text(
        "import os\nimport tilejit as tj\n\nSCALE = {'s': float(os.environ['TJ_FP_VALUE'])}\n\n\n"
        "@tj.function\ndef scale(t):\n    return t * SCALE['s']\n"
    )
    (tmp_path / "fp_gpu_kernel.py").write_text(
        "import enum, os\nimport tilejit as tj\nfrom fp_gpu_helpers import scale\n\n"
        "V = float(os.environ['TJ_FP_VALUE'])\nCFG = {'add': V * 10.0}\n\n\n"
        "class Mode(enum.Enum):\n    PLUS = 1\n    MINUS = 2\n\n\nMODE = Mode.PLUS if V == 1.0 else Mode.MINUS\n\n\n"
        "@tj.kernel\ndef add_cfg(x, out, TILE: tj.Constant[int]):\n    i = tj.bid(0)\n"
        "    t = scale(tj.load(x, index=(i,), shape=(TILE,)))\n"
        "    sign = 1.0 if MODE is Mode.PLUS else -1.0\n"
        "    tj.store(out, index=(i,), tile=sign * t + CFG['add'])\n"
    )
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TILEJIT_CACHE", None)
    runs = []
    for value in (1.0, 2.0, 1.0, 2.0):
        done = subprocess.run([sys.executable, "-c", _GPU_CHILD, str(tmp_path)],
                              env={**env, "TJ_FP_VALUE": repr(value)}, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    want = {1.0: [10.0, 11.0, 12.0, 13.0], 2.0: [20.0, 18.0, 16.0, 14.0]}
    assert [run["out"] for run in runs] == [want[1.0], want[2.0], want[1.0], want[2.0]]
    assert [run["nvrtc_loaded"] for run in runs] == [True, True, False, False]


def test_kernels_from_one_factory_with_dicts_have_keys_of_their_own() -> None:
    """The key's source scan writes out a dict or an object the code names, so many kernels made by one factory
    from different config dicts do not all share one key (and its few variants)."""
    from tilejit.api.kernel import _source_fingerprint

    def make(cfg: dict[str, float]) -> Any:
        @tj.kernel
        def k(x):  # type: ignore[no-untyped-def]
            tj.store(x, index=(0,), tile=tj.full((16,), cfg["add"], tj.float32))

        return k

    keys = {_source_fingerprint(make({"add": float(i)}).func) for i in range(20)}
    assert len(keys) == 20
    assert _source_fingerprint(make({"add": 1.0}).func) == _source_fingerprint(make({"add": 1.0}).func)
