"""The IR's text form: stable and readable, written once from the ops' tagged fields."""

from __future__ import annotations

from typing import Any

from tilejit.language.ir.core import Block, Op, Value
from tilejit.language.ir.ops import Function
from tilejit.language.ir.types import DType


class _Namer:
    """Gives each value a short stable name: parameters keep theirs, the rest are numbered."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.count = 0

    def bind(self, v: Value, hint: str = "") -> str:
        if hint and hint.isidentifier() and f"%{hint}" not in self.names.values():
            name = f"%{hint}"
        else:
            name = f"%{self.count}"
            self.count += 1
        self.names[v.id] = name
        return name

    def __getitem__(self, v: Value) -> str:
        return self.names.get(v.id, f"%?{v.id}")


def _attr(value: Any) -> str:
    if isinstance(value, DType):
        return value.short
    if isinstance(value, tuple):
        return "(" + ", ".join(_attr(x) for x in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def _operands(op: Op, names: _Namer) -> str:
    parts = []
    for fname in op._fields_of("operand"):
        v = getattr(op, fname)
        if isinstance(v, Value):
            parts.append(names[v])
        elif v:
            parts.append("[" + ", ".join(names[x] for x in v) + "]")
        elif v is not None:
            parts.append("[]")
    return ", ".join(parts)


def _print_block(block: Block, names: _Namer, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    for op in block.ops:
        res = [names.bind(r, r.name) for r in op.results]
        lhs = (", ".join(res) + " = ") if res else ""
        text = f"{pad}{lhs}{op.NAME}"
        ops_text = _operands(op, names)
        if ops_text:
            text += " " + ops_text
        attrs = op.shown_attributes()
        if attrs:
            text += " {" + ", ".join(f"{k}={_attr(v)}" for k, v in attrs.items()) + "}"
        if op.results:
            text += " : " + ", ".join(str(r.type) for r in op.results)
        regions = op.regions()
        if not regions:
            out.append(text)
            continue
        for i, (fname, body) in enumerate(zip(op._fields_of("region"), regions)):
            args = ", ".join(f"{names.bind(a, a.name)}: {a.type}" for a in body.args)
            label = fname if len(regions) > 1 else ""
            head = text if i == 0 else f"{pad}}}"
            head += f" {label}" if label else ""
            head += f" ({args})" if args else ""
            out.append(head + " {")
            _print_block(body, names, indent + 1, out)
        out.append(f"{pad}}}")


def print_function(fn: Function) -> str:
    """The text form of a whole kernel."""
    names = _Namer()
    params = ", ".join(
        f"{names.bind(v, n)}: {v.type}" for n, v in zip(fn.param_names, fn.params)
    )
    out = [f"func @{fn.name}({params}) {{"]
    _print_block(fn.body, names, 1, out)
    out.append("}")
    return "\n".join(out) + "\n"
