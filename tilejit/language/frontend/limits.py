"""Bounds on the work a kernel can make the front end do, so hostile code gets a located "too large"
error within a second instead of a hang, a ``MemoryError`` or an internal error.

Compile-time values are plain Python objects computed as they are met, and Python's integers,
strings and tuples grow without bound (``3 ** 10**8``, ``"a" * 10**10``), ranges iterate without
end (``tj.static_range(10**12)``) and unrolled loops multiply (two nested ``static_range(60000)``).
Each kind of growth has one bound here, checked *before* the work where it could be large:

- ``MAX_INT_BITS``: a compile-time integer has at most 4096 bits. Such integers are exact (Python's),
  not wrapped like a tile's: a value a tile can hold has at most 64 bits, and a float64 at most 1024,
  so larger ones could never reach the GPU anyway.
- ``MAX_CONST_SIZE``: a compile-time string, tuple or list has a text form of at most 2**20
  characters, nested items counted every time they appear (``(t, t)`` is twice ``t``), so ``str``,
  ``hash``, ``==`` and ``sorted`` on it stay fast.
- ``MAX_ITERATIONS``: iterating a compile-time sequence (an unrolled loop, ``*`` unpacking,
  ``sum``/``max``/``tuple``... of a range) takes at most 2**16 items.
- ``MAX_STEPS``: translating one kernel visits at most 2**19 AST nodes, counting each unrolled
  iteration and each inlined ``@tj.function`` call again; building a tuple counts one step per item
  and a string one per 1024 characters, so repeated concatenation cannot go quadratic for long.
"""

from __future__ import annotations

import math
import re

from tilejit.language.frontend.source import FrontendError
from tilejit.language.frontend.values import describe, shown

MAX_INT_BITS = 4096
MAX_CONST_SIZE = 1 << 20
MAX_ITERATIONS = 1 << 16
MAX_STEPS = 1 << 19

_SEQUENCES = (str, tuple, list)


def too_large(what: str, detail: str) -> FrontendError:
    """The one wording of every bound's error: what was too large, and the bound."""
    return FrontendError(f"{what} is too large: {detail}")


def int_too_large(what: str, bits: object) -> FrontendError:
    """``what`` (an integer) would have ``bits`` bits: more than MAX_INT_BITS."""
    return too_large(what, f"{bits} bits, and compile-time integers (exact, as in Python) are limited to "
                           f"{MAX_INT_BITS} bits; a tile's integers wrap at their dtype's width, so compute on a tile")


def _seq_too_large(what: str) -> FrontendError:
    return too_large(what, f"its text would have over {MAX_CONST_SIZE} (2**20) characters (nested items counted "
                           "each time they appear), and compile-time strings and tuples must stay below that")


def range_len(r: range) -> int:
    """``len(r)`` as an exact Python int (``len`` raises OverflowError past ``sys.maxsize``)."""
    try:
        return len(r)
    except OverflowError:
        if r.step > 0:
            return max(0, (r.stop - r.start + r.step - 1) // r.step)
        return max(0, (r.start - r.stop - r.step - 1) // -r.step)


def check_iterable(v: object, where: str = "") -> None:
    """A located error when iterating ``v`` at compile time would take more than MAX_ITERATIONS items
    (``where`` prefixes the message, e.g. ``"sum(): "``)."""
    n = range_len(v) if isinstance(v, range) else len(v) if isinstance(v, _SEQUENCES) else 0
    if n > MAX_ITERATIONS:
        raise FrontendError(
            f"{where}{describe(v)} is too large to iterate at compile time: it has {n} items, and compile-time "
            f"iteration (unrolled loops, * unpacking, builtins such as sum() and tuple()) takes at most "
            f"{MAX_ITERATIONS} (2**16); use a run-time range() loop"
        )


class Budget:
    """One kernel's translation budget: steps taken so far, and the text size of the compile-time
    sequences seen (memoized by identity, so a tuple nested many times is measured once)."""

    def __init__(self) -> None:
        self.steps = 0
        self._sizes: dict[int, tuple[object, int]] = {}

    def step(self, n: int = 1) -> None:
        """Count ``n`` steps of work; a located error past MAX_STEPS."""
        self.steps += n
        if self.steps > MAX_STEPS:
            raise too_large(
                "the kernel",
                f"translating it took more than {MAX_STEPS} (2**19) steps (AST nodes, counting every iteration "
                "of an unrolled loop and every inlined @tj.function call, and one per item of each compile-time "
                "tuple built); unroll less: use run-time range() loops instead of tj.static_range or loops over "
                "tuples",
            )

    def size(self, v: object) -> int:
        """About how many characters ``repr(v)`` has; stops counting a sequence past MAX_CONST_SIZE."""
        if isinstance(v, str):
            return len(v) + 2
        if isinstance(v, bool) or v is None:
            return 5
        if isinstance(v, int):
            return v.bit_length() * 30103 // 100000 + 2  # digits: bits * log10(2)
        if not isinstance(v, tuple | list):
            return 16  # floats, dtypes, ranges, functions, modules: short texts
        hit = self._sizes.get(id(v))
        if hit is not None and hit[0] is v:
            return hit[1]
        n, walked = 2, 0
        for x in v:
            n += self.size(x) + 2
            walked += 1
            if n > MAX_CONST_SIZE:
                break
        self._sizes[id(v)] = (v, n)
        self.step(walked)  # new tuples are walked here and elsewhere: repeated concatenation is quadratic
        return n

    def check(self, v: object, what: str) -> object:
        """``v`` itself, after checking that a compile-time value is within every bound (and counting
        the work of building it); a located error naming ``what`` otherwise."""
        if isinstance(v, complex):
            raise FrontendError(f"{what} is the complex number {v}, and tile code has no complex numbers")
        if isinstance(v, int) and not isinstance(v, bool):
            if v.bit_length() > MAX_INT_BITS:
                raise int_too_large(what, v.bit_length())
        elif isinstance(v, _SEQUENCES):
            n = self.size(v)
            if n > MAX_CONST_SIZE:
                raise _seq_too_large(what)
            if isinstance(v, str):
                self.step(n >> 10)
        return v

    # ------------------------------------------------------------------ checks before Python computes

    def check_binary(self, symbol: str, a: object, b: object) -> None:
        """Before ``a symbol b`` on compile-time values: a located error when the result would be too
        large, so that Python never starts computing it."""
        for v in (a, b):
            if isinstance(v, int) and v.bit_length() > MAX_INT_BITS:  # a huge global: never compute with it
                raise int_too_large(f"the operand {shown(v)} of {symbol}", v.bit_length())
        what = f"the compile-time result of {shown(a)} {symbol} {shown(b)}"
        if isinstance(a, int) and isinstance(b, int):
            if symbol == "**" and b > 0 and abs(a) > 1 and (abs(a).bit_length() - 1) * b >= MAX_INT_BITS:
                raise int_too_large(what, f"more than {MAX_INT_BITS}")
            if symbol == "<<" and a and b > 0 and a.bit_length() + b > MAX_INT_BITS:
                raise int_too_large(what, a.bit_length() + b)
            if symbol == "*" and a and b and a.bit_length() + b.bit_length() - 1 > MAX_INT_BITS:
                raise int_too_large(what, f"at least {a.bit_length() + b.bit_length() - 1}")
        elif symbol == "*":
            seq, n = (a, b) if isinstance(a, _SEQUENCES) else (b, a)
            if isinstance(seq, _SEQUENCES) and isinstance(n, int) and n > 0 \
                    and (self.size(seq) - 2) * n > MAX_CONST_SIZE:
                raise _seq_too_large(what)
        elif symbol == "%" and isinstance(a, str):
            check_percent_format(a, b)

    def check_pow_call(self, args: list[object]) -> None:
        """Before ``pow(base, exp)`` (with a modulus, Python reduces as it goes: nothing to check)."""
        if len(args) == 2:
            self.check_binary("**", args[0], args[1])


#: width and precision of a %-format: ``%5d``, ``%.3f``, ``%*d``
_PERCENT = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?[a-zA-Z%]")


def check_percent_format(fmt: str, args: object) -> None:
    """Before ``fmt % args``: a located error when a width or precision (``%999999999d``, or ``%*d``
    given a huge int) would make a string over MAX_CONST_SIZE."""
    star = False
    for m in _PERCENT.finditer(fmt):
        for g in m.groups():
            if g == "*":
                star = True
            elif g and (len(g) > 7 or int(g) > MAX_CONST_SIZE):
                raise too_large(f"the %-format {shown(fmt)}", f"width or precision {shown(g)} is over "
                                f"{MAX_CONST_SIZE} (2**20)")
    if star:
        for v in args if isinstance(args, tuple) else (args,):
            if isinstance(v, int) and abs(v) > MAX_CONST_SIZE:
                raise too_large(f"the %-format {shown(fmt)}", f"the * width or precision {shown(v)} is over "
                                f"{MAX_CONST_SIZE} (2**20)")


def check_format_spec(spec: str) -> None:
    """Before ``format(value, spec)``: a located error for a width or precision over MAX_CONST_SIZE
    (digits in a standard format spec are only the fill character, the width and the precision)."""
    for run in re.findall(r"\d+", spec):
        if len(run) > 7 or int(run) > MAX_CONST_SIZE:
            raise too_large(f"the format spec {shown(spec)}", f"width or precision {shown(run)} is over "
                            f"{MAX_CONST_SIZE} (2**20)")


def check_math_call(name: str, args: list[object]) -> None:
    """Before a ``math`` function whose integer result can be huge (factorial, comb, perm, prod, lcm)."""
    ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
    if name == "perm" and len(args) == 1:
        name = "factorial"  # perm(n) is n!
    if name == "factorial" and ints and ints[0] > MAX_INT_BITS:  # n! >= 2**n
        raise int_too_large(f"math.factorial({shown(ints[0])})", f"more than {MAX_INT_BITS}")
    if name in ("comb", "perm") and len(ints) == 2 and 0 <= ints[1] <= ints[0]:
        n, k = ints
        small = min(k, n - k) if name == "comb" else k
        # comb(n, k) >= 2**min(k, n - k), and >= 2**(k * (bits(n) - 13)) when k <= 4096; perm(n, k) >=
        # comb(n, k): past either bound the result has more than MAX_INT_BITS bits
        if small > MAX_INT_BITS or small * n.bit_length() > 16 * MAX_INT_BITS:
            raise int_too_large(f"math.{name}({shown(n)}, {shown(k)})", f"more than {MAX_INT_BITS}")
    if name in ("prod", "lcm"):
        items = args[0] if name == "prod" and len(args) == 1 else args
        if not isinstance(items, tuple | list | range):
            return  # math raises its own error
        check_iterable(items, f"math.{name}(): ")
        nums = [abs(v) for v in items if isinstance(v, int)]
        if 0 in nums:
            return
        if name == "prod" and sum(v.bit_length() - 1 for v in nums) >= MAX_INT_BITS:
            raise int_too_large("the result of math.prod()", f"more than {MAX_INT_BITS}")
        if name == "lcm":
            acc = 1
            for v in nums:  # the lcm grows one argument at a time: stop as soon as it is too large
                acc = math.lcm(acc, v)
                if acc.bit_length() > MAX_INT_BITS:
                    raise int_too_large("the result of math.lcm()", f"more than {MAX_INT_BITS}")


__all__ = [
    "MAX_CONST_SIZE", "MAX_INT_BITS", "MAX_ITERATIONS", "MAX_STEPS", "Budget", "check_format_spec", "check_iterable",
    "check_math_call", "check_percent_format", "range_len", "too_large",
]
