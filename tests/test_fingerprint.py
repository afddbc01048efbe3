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

# Loads kernel ``argv[3]`` of module ``argv[2]`` (in folder ``argv[1]``) through the disk cache, with the
# compile and the module/launcher construction replaced by stand-ins that need no GPU and no NVRTC.
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
                "num_threads": 128, "shared_bytes": 0, "params": []}

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

    loader._compile_entry = compile_entry
    rt_module.Module = Module
    rt_launch.Launcher = Launcher
    mod = __import__(sys.argv[2])
    k = getattr(mod, sys.argv[3])
    before = set(sys.modules)
    got = loader.load_artifact(tj.compile(k, (tj.float32[:],), target="sm_80"), _source_fingerprint(k.func))
    imported = sorted(set(sys.modules) - before)
    now = tj.compile(k, (tj.float32[:],), target="sm_80").ir_text()
    print(json.dumps({"compiled": len(compiled), "image": got.module.image.decode(), "now": now,
                      "imported": imported}))
    """
)


def _run(folder: Path, module: str, value: float, kernel: str = "k") -> dict[str, Any]:
    """One new process loading ``module.kernel`` with ``TJ_FP_VALUE=value``, caching in ``folder/cache``."""
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(folder / "cache"), "TJ_FP_VALUE": repr(value)}
    env.pop("TILEJIT_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder), module, kernel], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


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
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_changed_outside_value_is_never_served_from_another_process(tmp_path: Path, case: str) -> None:
    """Values 1, 2, 1, 2 in four processes sharing one cache: each gets code with its own value (the last two
    from the cache, compiled by the first two)."""
    source, others = CASES[case]
    (tmp_path / "fp_kmod.py").write_text(source)
    for name, text in others.items():
        (tmp_path / f"{name}.py").write_text(text)
    kernel = "made" if case == "closure_dict" else "k"
    runs = [_run(tmp_path, "fp_kmod", v, kernel) for v in (1.0, 2.0, 1.0, 2.0)]
    for value, run in zip((1.0, 2.0, 1.0, 2.0), runs):
        assert run["image"] == run["now"], f"value {value}: got another process's code"
        assert "value=1.0" in run["now"] or "value=2.0" in run["now"]
    assert "value=1.0" in runs[0]["now"] and "value=2.0" in runs[1]["now"]  # the values do reach the code
    assert [run["compiled"] for run in runs] == [1, 1, 0, 0]
