"""Lowering rules for control flow: ``for``, ``while`` (``loop``), ``if``, ``break``, ``continue`` and the end
of the kernel.

Memory ordering through control flow: the frame's state (``last_store``, ``loads_since``) is threaded as
token values. A loop or ``if`` whose ops only read memory carries one token (the loads so far, which a
later store waits on); one that writes carries two (the last store, and the loads since it). A loop body
starts from its token arguments, so a store in iteration i is ordered after the loads and stores of
iteration i-1, and every exit (``continue``, ``break``, ``yield``) passes the state reached on its path.
Code with no memory ops carries nothing extra.

``for`` follows the CUDA backend's loop: a signed 64-bit counter (no wrap past the int32 range; int32 where it
cannot wrap), a step that is not positive at run time runs no iterations; the loop variable is the counter
cast to its type.
Tile IR's ``for`` may not ``break``: a ``for`` that breaks becomes a ``loop`` that tests its counter.

A read-only ``for`` with tile loads is made twice (docs/tileir.md, "Read-only loops"): carrying a load token
makes tileiras add a producer/consumer handshake per stage to its TMA pipeline (3x slower matmul on an H100), so
``if`` the arrays the loop reads do not overlap (in bytes, checked at run time) any array the kernel writes, a
copy that carries no token runs (no later write can touch what it read); otherwise the token-carrying one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilejit.backends.tileir.lower.core import I1, I64, TOKEN, Lowerer, rule, unsupported
from tilejit.backends.tileir.module import Scalar, TBlock, Tile, TOp, TValue, constant_bytes
from tilejit.language.ir import ops as O
from tilejit.language.ir.core import Block, Op, Value
from tilejit.language.ir.types import ArrayType, TileType

#: Bounds whose every value lies in [-2**30, 2**30) let an int32 ``for`` count in int32 (no overflow).
_SMALL = 1 << 30


@dataclass
class _Loop:
    """An enclosing loop: its memory-token mode and what ``continue`` passes before the carried values
    (the next counter of a ``for`` lowered as ``loop``)."""

    mode: str | None
    prefix: list[TValue] = field(default_factory=list)
    known: bool | None = None  # a copy of a versioned loop: whether its arrays are known disjoint


@dataclass
class _If:
    """An enclosing ``if`` branch: its memory-token mode (what its ``yield`` adds)."""

    mode: str | None


def _mode(*blocks: Block) -> str | None:
    """``'stores'`` when ops in ``blocks`` (nested ones too) may write memory, ``'loads'`` when they only read
    it, ``None`` when they touch none: what token state a region must carry."""
    reads = False
    for block in blocks:
        for op in block.walk():
            if op.has_side_effects:
                return "stores"
            if not isinstance(op, O.ArrayDimOp) and any(isinstance(v.type, ArrayType) for v in op.operands()):
                reads = True
    return "loads" if reads else None


def _region_mode(lo: Lowerer, *blocks: Block) -> str | None:
    """``_mode`` of ``blocks``, but ``None`` for read-only ones inside the disjoint copy of a versioned loop
    (what they read, no write of the kernel touches)."""
    mode = _mode(*blocks)
    return None if mode == "loads" and _known(lo) else mode


def _known(lo: Lowerer) -> bool | None:
    """Inside a copy of a versioned loop: whether its arrays are disjoint; ``None`` outside any."""
    return next((c.known for c in reversed(lo.control) if isinstance(c, _Loop) and c.known is not None), None)


def _arrays(block: Block, written: bool) -> set[Value]:
    """The arrays ops in ``block`` (nested ones too) may write (``written``), or read (``not written``)."""
    found: set[Value] = set()
    for op in block.walk():
        if op.has_side_effects == written and not isinstance(op, O.ArrayDimOp):
            found.update(v for v in op.operands() if isinstance(v.type, ArrayType))
    return found


def _emit(lo: Lowerer, name: str, t: Tile, operands: list[TValue], op: Op, **attrs: object) -> TValue:
    """The result of one new op ``name`` of type ``t``."""
    r = TValue(t)
    lo.emit(name, [r], operands, op, **attrs)
    return r


def _span(lo: Lowerer, array: Value, op: Op) -> tuple[TValue, TValue]:
    """The bytes ``array``'s elements may occupy, as i64 addresses ``[start, end)`` (``start == end``, at its
    base, when it has no element). Exact for every array in memory (user addresses are below 2**47, so nothing
    wraps)."""
    base, shape, strides = lo.arrays[array]
    at = array.type
    assert isinstance(at, ArrayType)
    zero, one, size = (_integer(lo, n, I64, op) for n in (0, 1, at.dtype.itemsize))
    low, high = zero, zero
    empty: TValue | None = None
    for extent, stride in zip(shape, strides):
        last = _emit(lo, "muli", I64, [_emit(lo, "subi", I64, [extent, one], op, overflow="none"), stride], op,
                     overflow="none")
        low = _emit(lo, "addi", I64, [low, _emit(lo, "mini", I64, [last, zero], op, signedness="signed")], op,
                    overflow="none")
        high = _emit(lo, "addi", I64, [high, _emit(lo, "maxi", I64, [last, zero], op, signedness="signed")], op,
                     overflow="none")
        none = _emit(lo, "cmpi", I1, [extent, zero], op, predicate="equal", signedness="signed")
        empty = none if empty is None else _emit(lo, "ori", I1, [empty, none], op)
    assert empty is not None  # the front end has no 0-d arrays
    address = _emit(lo, "ptr_to_int", I64, [base], op)
    start = _emit(lo, "muli", I64, [low, size], op, overflow="none")
    end = _emit(lo, "muli", I64, [_emit(lo, "addi", I64, [high, one], op, overflow="none"), size], op,
                overflow="none")
    start, end = (_emit(lo, "select", I64, [empty, zero, x], op) for x in (start, end))
    return tuple(_emit(lo, "addi", I64, [address, x], op, overflow="none") for x in (start, end))  # type: ignore


def _unknown_pairs(lo: Lowerer, reads: set[Value], writes: set[Value]) -> list[tuple[Value, Value]]:
    """The (read, written) array pairs, in parameter order, that the launch's facts do not already say are
    disjoint (``ArrayHint.disjoint``: an array sharing no byte with any other argument)."""
    order = lo.fn.params.index

    def alone(a: Value) -> bool:
        hint = lo.array_hints.get(a)
        return hint is not None and hint.disjoint

    return [(r, w) for r in sorted(reads, key=order) for w in sorted(writes, key=order)
            if not (alone(r) or alone(w))]


def _disjoint(lo: Lowerer, pairs: list[tuple[Value, Value]], op: Op) -> TValue:
    """An i1 that is true when the arrays of each pair share no byte: the least gap ``max(starts) - min(ends)``
    over the pairs is not negative."""
    order = lo.fn.params.index
    spans = {a: _span(lo, a, op) for a in sorted({a for pair in pairs for a in pair}, key=order)}
    least: TValue | None = None
    for r, w in pairs:
        (r_start, r_end), (w_start, w_end) = spans[r], spans[w]
        starts = _emit(lo, "maxi", I64, [r_start, w_start], op, signedness="signed")
        ends = _emit(lo, "mini", I64, [r_end, w_end], op, signedness="signed")
        gap = _emit(lo, "subi", I64, [starts, ends], op, overflow="none")
        least = gap if least is None else _emit(lo, "mini", I64, [least, gap], op, signedness="signed")
    assert least is not None
    zero = _integer(lo, 0, I64, op)
    return _emit(lo, "cmpi", I1, [least, zero], op, predicate="greater_than_or_equal", signedness="signed")


def _breaks(block: Block) -> bool:
    """Whether a ``break`` in ``block`` (inside its ``if``s, not inner loops) leaves the loop of ``block``."""
    for op in block.ops:
        if isinstance(op, O.BreakOp):
            return True
        if isinstance(op, O.IfOp) and (_breaks(op.then_body) or _breaks(op.else_body)):
            return True
    return False


def _join(lo: Lowerer, tokens: list[TValue], op: Op) -> TValue:
    """One token that waits for all of ``tokens``."""
    if len(tokens) == 1:
        return tokens[0]
    t = TValue(TOKEN)
    lo.emit("join_tokens", [t], [list(tokens)], op)
    return t


def _anchor(lo: Lowerer, op: Op) -> None:
    """Give the state a last-store token (``make_token``, which orders nothing) when there is none yet, so that
    a region can carry it."""
    if lo.last_store is None:
        t = TValue(TOKEN, "start")
        lo.emit("make_token", [t], [], op)
        lo.last_store = t


def _state(lo: Lowerer, mode: str | None, op: Op) -> list[TValue]:
    """The tokens a region of ``mode`` passes on at this point: [loads] or [last store, loads since]."""
    if mode is None:
        return []
    assert lo.last_store is not None
    loads = _join(lo, lo.loads_since, op) if lo.loads_since else lo.last_store
    return [loads] if mode == "loads" else [lo.last_store, loads]


def _enter(lo: Lowerer, mode: str | None, tokens: list[TValue]) -> None:
    """Take the state from ``tokens`` (made by ``_state`` for ``mode``)."""
    if mode == "loads":
        lo.loads_since = [tokens[0]]
    elif mode == "stores":
        lo.last_store, lo.loads_since = tokens[0], [tokens[1]]


def _token_values(mode: str | None, names: tuple[str, str] = ("", "")) -> list[TValue]:
    """New token values for the state of ``mode``."""
    count = {None: 0, "loads": 1, "stores": 2}[mode]
    return [TValue(TOKEN, n) for n in (names[1:] if count == 1 else names[:count])]


def _like(lo: Lowerer, values: list[Value], op: Op) -> list[TValue]:
    """New Tile IR values typed and named after the IR values ``values``, recorded as their lowering."""
    return [lo.result(op, v) for v in values]


def _constant(lo: Lowerer, v: Value) -> int | None:
    """The integer ``v`` holds when a ``ConstantOp`` defines it, else ``None``."""
    for op in lo.fn.body.walk():
        if isinstance(op, O.ConstantOp) and op.result is v:
            return int(op.value)
    return None


def _counter(lo: Lowerer, v: Value, t: Tile, op: Op) -> TValue:
    """Bound ``v`` as counter type ``t`` (widened from its own type, by its signedness, when narrower)."""
    x = lo.value(v)
    if x.type == t:
        return x
    vt = v.type
    assert isinstance(vt, TileType)
    wide = TValue(t)
    lo.emit("exti", [wide], [x], op, signedness="signed" if vt.dtype.is_signed else "unsigned")
    return wide


def _integer(lo: Lowerer, value: int, t: Tile, op: Op) -> TValue:
    """A scalar integer constant of type ``t``."""
    assert isinstance(t.elem, Scalar)
    c = TValue(t)
    lo.emit("constant", [c], [], op, data=constant_bytes(value, t.elem), value=value)
    return c


def _bounds(lo: Lowerer, op: O.ForOp) -> tuple[TValue, TValue, TValue]:
    """``lower, upper, step`` as the loop's counter: int64, or int32 when the int32 bounds cannot overflow it
    (constants well inside the range, or a step of 1: the counter only grows while below ``upper``); a step
    not known positive gives ``upper = lower, step = 1`` when it is not (no iterations, as in the CUDA
    backend)."""
    iv_t = lo.tile_type(op.body.args[0].type, op)
    bounds = (op.lower, op.upper, op.step)
    known = [_constant(lo, v) for v in bounds]
    small = all(k is not None and -_SMALL <= k < _SMALL for k in known) and (known[2] or 0) > 0
    safe = small or known[2] == 1
    t = iv_t if safe and all(lo.value(v).type == iv_t == Tile(Scalar("i32")) for v in bounds) else I64
    lower, upper, step = (_counter(lo, v, t, op) for v in bounds)
    if known[2] is not None and known[2] > 0:
        return lower, upper, step
    zero, one = _integer(lo, 0, t, op), _integer(lo, 1, t, op)
    positive = TValue(I1)
    lo.emit("cmpi", [positive], [step, zero], op, predicate="greater_than", signedness="signed")
    upper2, step2 = TValue(t), TValue(t)
    lo.emit("select", [upper2], [positive, upper, lower], op)
    lo.emit("select", [step2], [positive, step, one], op)
    return lower, upper2, step2


def _bind_iv(lo: Lowerer, iv: Value, counter: TValue, op: Op) -> None:
    """The loop variable: the counter, cast to the variable's type when that is narrower."""
    t = lo.tile_type(iv.type, op)
    if counter.type == t:
        lo.vals[iv] = counter
    else:
        lo.emit("trunci", [lo.result(op, iv)], [counter], op, overflow="none")


@rule(O.ForOp)
def for_(lo: Lowerer, op: O.ForOp) -> None:
    """``for iv in range(lower, upper, step)``: Tile IR ``for``, or a ``loop`` testing its counter when the
    body may ``break`` (Tile IR's ``for`` cannot); a read-only one with tile loads is versioned (module doc)."""
    mode = _region_mode(lo, op.body)
    if mode is not None:
        _anchor(lo, op)
    if mode == "loads" and _known(lo) is None and not _breaks(op.body) and any(
        isinstance(o, O.LoadOp) for o in op.body.walk()
    ):
        writes, reads = _arrays(lo.fn.body, written=True), _arrays(op.body, written=False)
        # an array of an array list has no span before the loop that may define it: such a loop keeps its token
        if not reads & writes and all(a in lo.fn.params for a in reads | writes):
            pairs = _unknown_pairs(lo, reads, writes)
            if not pairs:  # nothing the kernel writes may share memory with what the loop reads
                _for(lo, op, None, True)
            else:
                _versions(lo, op, _disjoint(lo, pairs, op))
            return
    _enter(lo, mode, _for(lo, op, mode, None)[len(op.results):])


def _versions(lo: Lowerer, op: O.ForOp, disjoint: TValue) -> None:
    """``if disjoint`` the loop without tokens, else the loop carrying its loads' token (both read-only)."""
    bounds = _bounds(lo, op)
    saved = lo.last_store, list(lo.loads_since)
    branches = []
    for known in (True, False):
        with lo.in_block() as ops:
            mode = None if known else "loads"
            values = _for(lo, op, mode, known, bounds)
            _enter(lo, mode, values[len(op.results):])
            lo.emit("yield", [], [values[: len(op.results)] + _state(lo, "loads", op)], op)
        branches.append(TBlock([], ops))
        lo.last_store, lo.loads_since = saved[0], list(saved[1])
    results = _like(lo, op.results, op) + _token_values("loads")
    lo.emit("if", results, [disjoint], op).regions += branches
    _enter(lo, "loads", results[len(op.results):])


def _for(lo: Lowerer, op: O.ForOp, mode: str | None, known: bool | None,
         bounds: tuple[TValue, TValue, TValue] | None = None) -> list[TValue]:
    """Emit the loop of ``op`` carrying the memory state of ``mode``; ``known``: a copy of a versioned loop;
    ``bounds``: its counter's (made here when not given). Returns the loop's results (the IR results' values,
    then the tokens), the memory state left as before it."""
    iv, carried = op.body.args[0], op.body.args[1:]
    lower, upper, step = bounds or _bounds(lo, op)
    init = [lo.value(v) for v in op.init] + _state(lo, mode, op)
    counter = TValue(lower.type, iv.name if lower.type == lo.tile_type(iv.type, op) else f"{iv.name}_wide")
    args = _like(lo, carried, op) + _token_values(mode, ("stored", "loaded"))
    breaks = _breaks(op.body)
    saved = lo.last_store, list(lo.loads_since)
    with lo.in_block() as body:
        loop = _Loop(mode, known=known)
        if breaks:
            stop = TValue(I1)
            lo.emit("cmpi", [stop], [counter, upper], op, predicate="greater_than_or_equal", signedness="signed")
            leave = TOp("break", [], [args], {}, op.loc)
            stay = TOp("yield", [], [[]], {}, op.loc)
            lo.emit("if", [], [stop], op).regions += [TBlock([], [leave]), TBlock([], [stay])]
            following = TValue(counter.type)
            lo.emit("addi", [following], [counter, step], op, overflow="none")
            loop.prefix = [following]
        _bind_iv(lo, iv, counter, op)
        _enter(lo, mode, args[len(carried):])
        lo.control.append(loop)
        lo.lower_ops(op.body.ops)
        lo.control.pop()
    lo.last_store, lo.loads_since = saved[0], list(saved[1])
    results = _like(lo, op.results, op) + _token_values(mode)
    if breaks:
        top = lo.emit("loop", results, [[lower, *init]], op)
    else:
        top = lo.emit("for", results, [[lower, upper, step, *init]], op, unsigned_cmp=0)
    top.regions.append(TBlock([counter, *args], body))
    return results


@rule(O.LoopOp)
def loop(lo: Lowerer, op: O.LoopOp) -> None:
    """A ``while`` loop: Tile IR ``loop``, left by ``break``."""
    mode = _region_mode(lo, op.body)
    if mode is not None:
        _anchor(lo, op)
    init = [lo.value(v) for v in op.init] + _state(lo, mode, op)
    args = _like(lo, op.body.args, op) + _token_values(mode, ("stored", "loaded"))
    saved = lo.last_store, list(lo.loads_since)
    with lo.in_block() as body:
        _enter(lo, mode, args[len(op.body.args):])
        lo.control.append(_Loop(mode))
        lo.lower_ops(op.body.ops)
        lo.control.pop()
    lo.last_store, lo.loads_since = saved[0], list(saved[1])
    results = _like(lo, op.results, op) + _token_values(mode)
    lo.emit("loop", results, [init], op).regions.append(TBlock(args, body))
    _enter(lo, mode, results[len(op.results):])


@rule(O.IfOp)
def if_(lo: Lowerer, op: O.IfOp) -> None:
    """``if cond`` with both branches: Tile IR ``if``; its results are the yielded values and the memory state."""
    mode = _region_mode(lo, op.then_body, op.else_body)
    if mode is not None:
        _anchor(lo, op)
    saved = lo.last_store, list(lo.loads_since)
    branches = []
    for block in (op.then_body, op.else_body):
        with lo.in_block() as ops:
            lo.control.append(_If(mode))
            lo.lower_ops(block.ops)
            lo.control.pop()
        branches.append(TBlock([], ops))
        lo.last_store, lo.loads_since = saved[0], list(saved[1])
    yields = any(isinstance(b.terminator, O.YieldOp) for b in (op.then_body, op.else_body))
    results = _like(lo, op.results, op) + (_token_values(mode) if yields else [])
    lo.emit("if", results, [lo.value(op.cond)], op).regions += branches
    if yields:
        _enter(lo, mode, results[len(op.results):])


@rule(O.YieldOp)
def yield_(lo: Lowerer, op: O.YieldOp) -> None:
    """The end of an ``if`` branch: its values and the memory state reached."""
    branch = lo.control[-1]
    assert isinstance(branch, _If)
    lo.emit("yield", [], [[lo.value(v) for v in op.values] + _state(lo, branch.mode, op)], op)


def _innermost_loop(lo: Lowerer) -> _Loop:
    """The loop a ``break`` or ``continue`` leaves."""
    return next(c for c in reversed(lo.control) if isinstance(c, _Loop))


@rule(O.ContinueOp)
def continue_(lo: Lowerer, op: O.ContinueOp) -> None:
    """The next iteration: (the next counter,) the carried values and the memory state reached."""
    target = _innermost_loop(lo)
    values = [*target.prefix, *(lo.value(v) for v in op.values), *_state(lo, target.mode, op)]
    lo.emit("continue", [], [values], op)


@rule(O.BreakOp)
def break_(lo: Lowerer, op: O.BreakOp) -> None:
    """Leave the loop: its results and the memory state reached."""
    target = _innermost_loop(lo)
    lo.emit("break", [], [[lo.value(v) for v in op.values] + _state(lo, target.mode, op)], op)


@rule(O.ReturnOp)
def ret(lo: Lowerer, op: O.ReturnOp) -> None:
    """End of the kernel: ``return`` (at the top or in an ``if``; Tile IR's ``return`` may not leave a loop)."""
    if any(isinstance(c, _Loop) for c in lo.control):
        raise unsupported(op, "inside a loop: Tile IR cannot return from a loop body")
    lo.emit("return", [], [[]], op)
