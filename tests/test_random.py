"""Issue 20: random numbers in tile code, ``tj.rand``/``randn``/``randint``/``randint4x``/``philox`` with the bits
Triton's ``tl.*`` give (Philox-4x32-10, Philox-4x64-10 for 64-bit offsets), and ``tj.umulhi``.

CPU: a numpy Philox checked against Random123's published known-answer vectors; the front end's rounds checked
against it bit for bit through constant folding (constant seeds and offsets fold to constants); the IR, CUDA C++
and Tile IR text; NVRTC and tileiras compiles for sm_80 and sm_90; located errors. GPU: the bits, uniforms and
normals of both backends against the numpy reference for random seeds and offsets off the tile, outputs poisoned;
the README's dropout example.
"""

# ruff: noqa: F841  (kernels under test assign values only the front end looks at)

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kernels import poison
from source_lines import assert_located

import tilejit as tj
from tilejit.errors import TileCompileError
from tilejit.language.frontend.translate import translate
from tilejit.language.ir import ops
from tilejit.language.ir.types import ArrayType, float32, int32, scalar

LINES = Path(__file__).read_text(encoding="utf-8").splitlines()
README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")

# ---------------------------------------------------------------------------------------------- numpy reference

M32 = (1 << 32) - 1
#: width -> (round multipliers A, B; key increments), Salmon et al.'s Philox constants
PHILOX = {32: (0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85),
          64: (0xD2E7470EE14C6C93, 0xCA5A826395121157, 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)}
UNSIGNED = {32: np.uint32, 64: np.uint64}


def mulhilo(a: int, x: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The high and low ``width`` bits of ``a * x`` (uint64 arrays; 64-bit products from 32-bit halves)."""
    x = np.asarray(x, dtype=np.uint64)
    s, m = np.uint64(32), np.uint64(M32)
    if width == 32:
        p = np.uint64(a) * x
        return p >> s, p & m
    a0, a1, x0, x1 = np.uint64(a & M32), np.uint64(a >> 32), x & m, x >> s
    p00, p01, p10, p11 = a0 * x0, a0 * x1, a1 * x0, a1 * x1
    carry = ((p00 >> s) + (p01 & m) + (p10 & m)) >> s
    return p11 + (p01 >> s) + (p10 >> s) + carry, np.uint64(a) * x  # uint64 products wrap: the low half


def philox_ref(counter: list[Any], key: tuple[int, int], width: int, rounds: int = 10) -> list[np.ndarray]:
    """Philox-4x``width`` with ``rounds`` rounds: Random123's ``philox4x32_R``/``philox4x64_R``."""
    a, b, ka, kb = PHILOX[width]
    mask = (1 << width) - 1
    c0, c1, c2, c3 = (np.asarray(v, dtype=np.uint64) for v in counter)
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + ka) & mask, (k1 + kb) & mask
        hi_b, lo_b = mulhilo(b, c2, width)
        hi_a, lo_a = mulhilo(a, c0, width)
        c0, c1, c2, c3 = hi_b ^ c1 ^ np.uint64(k0), lo_b & np.uint64(mask), hi_a ^ c3 ^ np.uint64(k1), \
            lo_a & np.uint64(mask)
    return [v.astype(UNSIGNED[width]) for v in (c0, c1, c2, c3)]


def randint4x_ref(seed: int, offsets: np.ndarray) -> list[np.ndarray]:
    """Triton 3's ``tl.randint4x``: Philox-4x32 keyed by the seed as uint64 (its low and high words), the counter
    ``(offsets' low word, their high word (0 for 32-bit offsets), 0, 0)``; uint32 results."""
    s = seed % (1 << 64)
    bits = offsets.view(UNSIGNED[offsets.dtype.itemsize * 8]).astype(np.uint64)
    return philox_ref([bits & np.uint64(M32), bits >> np.uint64(32), 0, 0], (s & M32, s >> 32), 32)


def f32_of_int(v: int) -> float:
    """The float32 nearest ``v >= 0`` (ties to even), computed exactly (numpy may round 64-bit ints twice)."""
    if v < (1 << 24):
        return float(v)
    shift = v.bit_length() - 24
    q, r = divmod(v, 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return float(q << shift)


def uniform_ref(x: np.ndarray) -> np.ndarray:
    """Triton's ``uint_to_uniform_float``: the bits as a signed integer, negatives mirrored (-x - 1), to float32,
    times the float32 scale (4.6566127342e-10 for 32 bits, 1.0842020432385337e-19 for 64)."""
    width = x.dtype.itemsize * 8
    s = x.view(np.int32 if width == 32 else np.int64)
    m = np.where(s < 0, ~s, s)
    if width == 32:
        f = m.astype(np.float64).astype(np.float32)  # exact in float64, then rounded once
        return f * np.float32(4.6566127342e-10)
    f = np.array([f32_of_int(int(v)) for v in m.tolist()], dtype=np.float64).astype(np.float32)
    return f * np.float32(1.0842020432385337e-19)


def randn_ref(seed: int, offsets: np.ndarray) -> np.ndarray:
    """Triton's ``tl.randn`` in float32 numpy: Box-Muller's cosine branch of the first two words."""
    i1, i2 = randint4x_ref(seed, offsets)[:2]
    u1 = np.maximum(np.float32(1.0e-7), uniform_ref(i1))
    th = np.float32(6.283185307179586) * uniform_ref(i2)
    r = np.sqrt(np.float32(-2.0) * np.log(u1))
    return r * np.cos(th)


#: Random123's tests/kat_vectors: Philox-4x32 and 4x64 at 7 and 10 rounds (counter[4] key[2] -> output[4])
KAT = """
philox4x32 7 00000000 00000000 00000000 00000000 00000000 00000000   5f6fb709 0d893f64 4f121f81 4f730a48
philox4x32 7 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   5207ddc2 45165e59 4d8ee751 8c52f662
philox4x32 7 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   4dfccaba 190a87f0 c47362ba b6b5242a
philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
philox4x64 7 0000000000000000 0000000000000000 0000000000000000 0000000000000000 0000000000000000 0000000000000000   5dc8ee6268ec62cd 139bc570b6c125a0 84d6deb4fb65f49e aff7583376d378c2
philox4x64 7 ffffffffffffffff ffffffffffffffff ffffffffffffffff ffffffffffffffff ffffffffffffffff ffffffffffffffff   071dd84367903154 48e2bbdc722b37d1 6afa9890bb89f76c 9194c8d8ada56ac7
philox4x64 7 243f6a8885a308d3 13198a2e03707344 a4093822299f31d0 082efa98ec4e6c89 452821e638d01377 be5466cf34e90c6c   513a366704edf755 f05d9924c07044d3 bef2cb9cbea74c6c 8db948de4caa1f8a
philox4x64 10 0000000000000000 0000000000000000 0000000000000000 0000000000000000 0000000000000000 0000000000000000   16554d9eca36314c db20fe9d672d0fdc d7e772cee186176b 7e68b68aec7ba23b
philox4x64 10 ffffffffffffffff ffffffffffffffff ffffffffffffffff ffffffffffffffff ffffffffffffffff ffffffffffffffff   87b092c3013fe90b 438c3c67be8d0224 9cc7d7c69cd777b6 a09caebf594f0ba0
philox4x64 10 243f6a8885a308d3 13198a2e03707344 a4093822299f31d0 082efa98ec4e6c89 452821e638d01377 be5466cf34e90c6c   a528f45403e61d95 38c72dbd566e9788 a5a1610e72fd18b5 57bd43b5e52b7fe6
"""  # noqa: E501


def kat_vectors() -> list[tuple[int, int, list[int], list[int], list[int]]]:
    """(width, rounds, counter, key, output) of each known-answer line."""
    out = []
    for line in KAT.strip().splitlines():
        name, rounds, *words = line.split()
        v = [int(w, 16) for w in words]
        out.append((32 if name.endswith("32") else 64, int(rounds), v[:4], v[4:6], v[6:]))
    return out


@pytest.mark.parametrize(("width", "rounds", "counter", "key", "want"), kat_vectors())
def test_the_numpy_reference_gives_random123s_known_answers(width: int, rounds: int, counter: list[int],
                                                            key: list[int], want: list[int]) -> None:
    got = philox_ref([np.array([c], dtype=np.uint64) for c in counter], (key[0], key[1]), width, rounds)
    assert [int(g[0]) for g in got] == want


def test_the_uniform_mapping_stays_below_one_and_mirrors_negatives() -> None:
    bits32 = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE], dtype=np.uint32)
    u = uniform_ref(bits32)
    assert u.dtype == np.float32 and u[0] == 0.0 and u[4] == 0.0  # -1 mirrors onto 0
    assert u[2] == u[3] == np.float32(1) - np.float32(2.0**-24)  # the largest: just below 1
    assert u[1] == u[5] == np.float32(4.6566127342e-10)
    bits64 = np.array([0, 0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
    u = uniform_ref(bits64)
    assert u[0] == u[3] == 0.0 and u[1] == u[2] < 1.0
    assert f32_of_int((1 << 40) + (1 << 16)) == float(1 << 40)  # a tie rounds to even
    assert f32_of_int((1 << 40) + (3 << 16)) == float((1 << 40) + (1 << 18))


# ---------------------------------------------------------------------------------------------- CPU: folded bits


@tj.kernel
def folded_bits(o0, o1, o2, o3, SEED: tj.Constant[int], OFFS: tj.Constant[tuple], DT: tj.Constant[object]):
    for j in tj.static_range(len(OFFS)):
        a, b, c, d = tj.randint4x(SEED, DT(OFFS[j]))
        tj.store(o0, index=(j,), tile=a)
        tj.store(o1, index=(j,), tile=b)
        tj.store(o2, index=(j,), tile=c)
        tj.store(o3, index=(j,), tile=d)


@tj.kernel
def folded_floats(bits, u, g, SEED: tj.Constant[int], OFFS: tj.Constant[tuple], DT: tj.Constant[object]):
    for j in tj.static_range(len(OFFS)):
        tj.store(bits, index=(j,), tile=tj.randint(SEED, DT(OFFS[j])))
        tj.store(u, index=(j,), tile=tj.rand(SEED, DT(OFFS[j])))
        tj.store(g, index=(j,), tile=tj.randn(SEED, DT(OFFS[j])))


@tj.kernel
def folded_philox(o0, o1, o2, o3, SEED: tj.Constant[int], C: tj.Constant[tuple], DT: tj.Constant[object],
                  ROUNDS: tj.Constant[int]):
    a, b, c, d = tj.philox(SEED, DT(C[0]), DT(C[1]), DT(C[2]), DT(C[3]), n_rounds=ROUNDS)
    tj.store(o0, index=(0,), tile=a)
    tj.store(o1, index=(0,), tile=b)
    tj.store(o2, index=(0,), tile=c)
    tj.store(o3, index=(0,), tile=d)


def stored_constants(fn: ops.Function) -> dict[int, list[object]]:
    """Parameter index -> the constant values stored into that array, in order (every store must be constant)."""
    consts = {op.result: op.value for op in fn.body.walk() if isinstance(op, ops.ConstantOp)}
    out: dict[int, list[object]] = {}
    for op in fn.body.walk():
        if isinstance(op, ops.StoreOp):
            assert op.tile in consts, "a stored value did not fold to a constant"
            out.setdefault(fn.params.index(op.array), []).append(consts[op.tile])
    return out


def unsigned(dtype: str) -> str:
    """The unsigned dtype of ``dtype``'s width."""
    return dtype if dtype.startswith("u") else "u" + dtype


#: (seed, offsets dtype, offsets): negative, huge and int32-range seeds; offsets at the ends of each range
FOLD_CASES = [
    (1234, "int32", (0, 1, -1, 2**31 - 1, -(2**31))),
    (-7, "int32", (5, 1 << 20)),
    (0xDEADBEEFCAFEF00D, "uint32", (0, 2**32 - 1, 77)),
    (-(2**63), "int64", (0, -1, 2**40 + 3, -(2**63))),
    (2**64 - 1, "uint64", (2**64 - 1, 12345678901234567)),
    (2**31, "int64", (9,)),
]


@pytest.mark.parametrize(("seed", "dtype", "offsets"), FOLD_CASES)
def test_constant_seeds_and_offsets_fold_to_the_reference_bits(seed: int, dtype: str, offsets: tuple[int, ...]) -> None:
    """The front end's Philox rounds (key schedule, seed split, counter bits, both widths), folded by the IR passes
    with numpy's integer semantics, are the reference's to the bit."""
    out = tj.uint32[:]
    art = tj.compile(folded_bits, (out,) * 4, constants={"SEED": seed, "OFFS": offsets, "DT": getattr(tj, dtype)},
                     target="sm_90")
    got = stored_constants(art.ir())
    want = randint4x_ref(seed, np.array(offsets, dtype=dtype))
    assert [got[k] for k in range(4)] == [[int(v) for v in w] for w in want]


@pytest.mark.parametrize(("seed", "dtype", "offsets"), FOLD_CASES)
def test_rand_and_randn_of_constants_fold_to_the_reference(seed: int, dtype: str, offsets: tuple[int, ...]) -> None:
    sig = (tj.uint32[:], tj.float32[:], tj.float32[:])
    art = tj.compile(folded_floats, sig, constants={"SEED": seed, "OFFS": offsets, "DT": getattr(tj, dtype)},
                     target="sm_90")
    got = stored_constants(art.ir())
    offs = np.array(offsets, dtype=dtype)
    assert got[0] == [int(v) for v in randint4x_ref(seed, offs)[0]]
    assert np.array_equal(np.array(got[1], dtype=np.float32), uniform_ref(randint4x_ref(seed, offs)[0]))
    np.testing.assert_allclose(np.array(got[2], dtype=np.float32), randn_ref(seed, offs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("width", "rounds", "counter", "key", "want"),
                         [v for v in kat_vectors() if v[0] == 32 or v[3] == [0, 0]])
def test_tj_philox_gives_the_known_answers(width: int, rounds: int, counter: list[int], key: list[int],
                                           want: list[int]) -> None:
    """``tj.philox(seed, c0, c1, c2, c3, n_rounds)`` is Random123's Philox: a 32-bit key is the seed's two words
    (a 64-bit one is the seed and 0, so only the zero key of the 4x64 vectors is a seed)."""
    dtype = "uint32" if width == 32 else "uint64"
    seed = key[0] | (key[1] << 32) if width == 32 else key[0]
    art = tj.compile(folded_philox, (getattr(tj, dtype)[:],) * 4,
                     constants={"SEED": seed, "C": tuple(counter), "DT": getattr(tj, dtype), "ROUNDS": rounds},
                     target="sm_90")
    got = stored_constants(art.ir())
    assert [got[k][0] for k in range(4)] == want


@tj.kernel
def umulhi_const(out, X: tj.Constant[int], Y: tj.Constant[int], DT: tj.Constant[object]):
    tj.store(out, index=(0,), tile=tj.umulhi(DT(X), DT(Y)))


@pytest.mark.parametrize(("dtype", "x", "y"), [("uint8", 200, 255), ("int16", -1, -1), ("uint32", 2**31, 2),
                                               ("int32", -5, 7), ("uint64", 2**64 - 1, 2**64 - 1),
                                               ("int64", -(2**63), 3)])
def test_umulhi_folds_to_the_high_half_of_the_unsigned_product(dtype: str, x: int, y: int) -> None:
    bits = np.iinfo(dtype).bits
    art = tj.compile(umulhi_const, (getattr(tj, dtype)[:],), constants={"X": x, "Y": y, "DT": getattr(tj, dtype)},
                     target="sm_90")
    hi = (x % (1 << bits)) * (y % (1 << bits)) >> bits
    assert stored_constants(art.ir())[0] == [int(np.array(hi, dtype=np.uint64 if bits == 64 else np.int64)
                                                 .astype(dtype))]


# ---------------------------------------------------------------------------------------------- CPU: generated code


@tj.kernel
def rand_tiles(offs, o0, o1, o2, o3, u, g, seed, TILE: tj.Constant[int]):
    i = tj.bid(0)
    off = tj.load(offs, index=(i,), shape=(TILE,))
    a, b, c, d = tj.randint4x(seed, off)
    tj.store(o0, index=(i,), tile=a)
    tj.store(o1, index=(i,), tile=b)
    tj.store(o2, index=(i,), tile=c)
    tj.store(o3, index=(i,), tile=d)
    tj.store(u, index=(i,), tile=tj.rand(seed, off))
    tj.store(g, index=(i,), tile=tj.randn(seed, off))


@tj.kernel
def rand_arange(bits, u, g, seed, base, TILE: tj.Constant[int]):
    i = tj.bid(0)
    off = base + i * TILE + tj.arange(TILE)
    tj.store(bits, index=(i,), tile=tj.randint(seed, off))
    tj.store(u, index=(i,), tile=tj.rand(seed, off))
    tj.store(g, index=(i,), tile=tj.randn(seed, off))


def tiles_sig(dtype: str, seed: Any = tj.int32) -> tuple[Any, ...]:
    """``rand_tiles``' parameter types for offsets of ``dtype``."""
    bits = tj.uint32[:]
    return (getattr(tj, dtype)[:], bits, bits, bits, bits, tj.float32[:], tj.float32[:], seed)


def binaries(fn: ops.Function, name: str) -> list[ops.BinaryOp]:
    """The BinaryOps ``name`` of ``fn``."""
    return [op for op in fn.body.walk() if isinstance(op, ops.BinaryOp) and op.fn == name]


@pytest.mark.parametrize(("dtype", "word"), [("int32", "u32"), ("uint32", "u32"), ("int64", "u32"),
                                             ("uint64", "u32")])
def test_the_ir_is_unsigned_integer_arithmetic_of_the_offsets_width(dtype: str, word: str) -> None:
    """Ten rounds of mulhi/mul/xor on unsigned 32-bit words (64-bit offsets: their two words; shared by the three
    calls), no op of its own: the rounds' first mulhi multiplies a zero counter word and folds away, as does the
    last round's unused one (randint4x stores all four words)."""
    fn = tj.compile(rand_tiles, tiles_sig(dtype), constants={"TILE": 128}, target="sm_90").ir()
    mulhi = binaries(fn, "mulhi")
    assert {str(op.result.type) for op in mulhi} == {f"tile<128x{word}>"}
    assert len(mulhi) == 19
    assert len([op for op in binaries(fn, "mul") if word in str(op.result.type)]) == 19  # round 1's B * 0 folds
    assert all(str(op.result.type).endswith(f"x{word}>") for op in binaries(fn, "xor"))
    text = tj.compile(rand_tiles, tiles_sig(dtype), constants={"TILE": 128}, target="sm_90").ir_text()
    assert "philox" not in text


def test_a_constant_seed_folds_the_key_schedule() -> None:
    """With a constant seed every key word is a constant: no scalar add or shift is left, only tile ops."""
    sig = (tj.uint32[:], tj.float32[:], tj.float32[:], tj.int32, tj.int32)
    fn = tj.compile(rand_arange, sig, constants={"TILE": 64}, target="sm_90").ir()
    scalar_adds = [op for op in binaries(fn, "add") if str(op.result.type) == "u32"]
    # a run-time seed: k0 and k1 raised before rounds 2..10, but for k1's last (it feeds only the unused word 2)
    assert len(scalar_adds) == 17

    @tj.kernel
    def constant_seed(bits, base, TILE: tj.Constant[int]):
        i = tj.bid(0)
        tj.store(bits, index=(i,), tile=tj.randint(20240613, base + i * TILE + tj.arange(TILE)))

    fn = tj.compile(constant_seed, (tj.uint32[:], tj.int32), constants={"TILE": 64}, target="sm_90").ir()
    assert not [op for op in binaries(fn, "add") if str(op.result.type) == "u32"]
    assert not binaries(fn, "rshift")
    assert not [op for op in fn.body.walk() if isinstance(op, ops.CastOp) and "u64" in str(op.x.type)]


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_cuda_cpp_uses_unsigned_helpers_and_compiles(dtype: str, target: str) -> None:
    """The words are tj::u32 for 32- and 64-bit offsets alike (no signed overflow in C++): products through
    tj::mulhi (__umulhi) and tj::wmul of unsigned; NVRTC makes PTX with mul.hi and a CUBIN."""
    art = tj.compile(rand_tiles, tiles_sig(dtype), constants={"TILE": 256}, target=target, backend="cuda")
    src = art.cuda_source()
    word = "u32"
    assert src.count("tj::mulhi(") == 19 and f"tj::wmul<tj::{word}>(" in src
    assert "tj::wmul<tj::i32>" not in src and "tj::wmul<tj::i64>" not in src
    assert f"mul.hi.{word}" in art.ptx()
    assert art.cubin()[:4] == b"\x7fELF"


def test_the_device_header_multiplies_narrow_words_unsigned() -> None:
    from tilejit.backends.cuda.codegen import device_headers

    math_h = next(v for k, v in device_headers().items() if k.endswith("math.cuh"))
    assert "u32 mulhi(u32 a, u32 b) { return __umulhi(a, b); }" in math_h
    assert "u64 mulhi(u64 a, u64 b) { return __umul64hi(a, b); }" in math_h
    assert "(u16)(((unsigned int)a * (unsigned int)b) >> 16)" in math_h  # u16 * u16 as int could overflow


@pytest.mark.parametrize("dtype", ["int32", "uint64"])
def test_tile_ir_uses_mulhii_and_tileiras_compiles(dtype: str, tileir_env: Any) -> None:
    for target in ("sm_80", "sm_90"):
        art = tj.compile(rand_tiles, tiles_sig(dtype), constants={"TILE": 256}, target=target, backend="tileir")
        text = art.tileir_text()
        assert len(re.findall(r"= mulhii %\S+, %\S+ : tile<256xi32>", text)) == 19  # 64-bit offsets too
        assert art.cubin()[:4] == b"\x7fELF", target


def test_scalar_offsets_give_scalars() -> None:
    @tj.kernel
    def one(out, seed, k):
        tj.store(out, index=(0,), tile=tj.rand(seed, k) + tj.randn(seed, k * 2))

    fn = tj.compile(one, (tj.float32[:], tj.int64, tj.int32), target="sm_90").ir()
    assert {str(op.result.type) for op in binaries(fn, "mulhi")} == {"u32"}


# ---------------------------------------------------------------------------------------------- CPU: located errors


TYPES = {"x": ArrayType(float32, 1), "out": ArrayType(float32, 1), "n": scalar(int32), "f": scalar(float32)}


def check(kernel: Callable[..., Any], at: str, message: str) -> None:
    """Translating ``kernel`` raises the located error ``message`` at the first character of ``at``."""
    with pytest.raises(TileCompileError) as info:
        translate(kernel, TYPES, {})
    assert_located(info.value, __file__, LINES, at, message)


def k_float_seed(x, out, n, f):
    r = tj.rand(f, tj.arange(16))


def k_float_const_seed(x, out, n, f):
    r = tj.randn(1.5, tj.arange(16))


def k_tile_seed(x, out, n, f):
    r = tj.randint(tj.arange(16), tj.arange(16))


def k_bool_seed(x, out, n, f):
    r = tj.randint4x(n > 0, tj.arange(16))


def k_huge_seed(x, out, n, f):
    r = tj.rand(2**64, n)


def k_float_offsets(x, out, n, f):
    r = tj.rand(n, tj.load(x, index=(0,), shape=(16,)))


def k_float_number_offsets(x, out, n, f):
    r = tj.randint(n, 0.5)


def k_bool_offsets(x, out, n, f):
    r = tj.randn(n, tj.arange(16) > 3)


def k_narrow_offsets(x, out, n, f):
    r = tj.rand(n, tj.arange(16, tj.int16))


def k_one_argument(x, out, n, f):
    r = tj.rand(n)


def k_three_arguments(x, out, n, f):
    r = tj.randint(n, n, n, n)


def k_run_time_rounds(x, out, n, f):
    r = tj.randint4x(n, tj.arange(16), n_rounds=n)


def k_too_many_rounds(x, out, n, f):
    r = tj.rand(n, tj.arange(16), 65)


def k_mixed_widths(x, out, n, f):
    r = tj.philox(n, tj.arange(16), tj.arange(16, tj.int64), 0, 0)


def k_counter_too_wide(x, out, n, f):
    r = tj.philox(n, tj.arange(16), 2**33, 0, 0)


def k_float_umulhi(x, out, n, f):
    r = tj.umulhi(n, f)


#: (kernel, where its error points, what the message says)
ERRORS = [
    (k_float_seed, "tj.rand(f,", "tj.rand(): seed must be an integer scalar (an int parameter, a constant or an "
     "integer scalar value), got a scalar of type f32"),
    (k_float_const_seed, "tj.randn(1.5,", "tj.randn(): seed must be an integer scalar"),
    (k_tile_seed, "tj.randint(tj.arange(16),", "seed must be an integer scalar (an int parameter, a constant or an "
     "integer scalar value), got a tile of type tile<16xi32>"),
    (k_bool_seed, "tj.randint4x(n > 0,", "tj.randint4x(): seed must be an integer scalar"),
    (k_huge_seed, "tj.rand(2**64,", "tj.rand(): the seed 18446744073709551616 does not fit in 64 bits"),
    (k_float_offsets, "tj.rand(n, tj.load(", "tj.rand(): offsets must be an integer tile or int, got a tile of type "
     "tile<16xf32>"),
    (k_float_number_offsets, "tj.randint(n, 0.5)", "tj.randint(): offsets must be an integer tile or int, got the "
     "constant 0.5"),
    (k_bool_offsets, "tj.randn(n, tj.arange(16) > 3)", "tj.randn(): offsets must be an integer tile or int"),
    (k_narrow_offsets, "tj.rand(n, tj.arange(16, tj.int16))", "tj.rand(): offsets must be 32- or 64-bit integers "
     "(Philox-4x32 or Philox-4x64, as in Triton), got int16: convert with .astype(tj.int32)"),
    (k_one_argument, "tj.rand(n)", "tj.rand(): missing a required argument: 'offsets'"),
    (k_three_arguments, "tj.randint(n, n, n, n)", "tj.randint(): too many positional arguments"),
    (k_run_time_rounds, "tj.randint4x(n, tj.arange(16), n_rounds=n)", "tj.randint4x() n_rounds must be a "
     "compile-time int"),
    (k_too_many_rounds, "tj.rand(n, tj.arange(16), 65)", "tj.rand(): n_rounds must be from 0 to 64, got 65"),
    (k_mixed_widths, "tj.philox(n, tj.arange(16), tj.arange(16, tj.int64)", "tj.philox(): the counters c0..c3 must "
     "all be 32-bit or all 64-bit integers, got int32, int64"),
    (k_counter_too_wide, "tj.philox(n, tj.arange(16), 2**33", "tj.philox(): c1 8589934592 does not fit in a 32-bit "
     "counter"),
    (k_float_umulhi, "tj.umulhi(n, f)", "tj.umulhi() expects integer tiles or ints, got a scalar of type f32"),
]


@pytest.mark.parametrize(("kernel", "at", "message"), ERRORS, ids=[k.__name__ for k, _, _ in ERRORS])
def test_bad_arguments_are_located_errors(kernel: Callable[..., Any], at: str, message: str) -> None:
    """Seeds that are not integer scalars, offsets that are not 32- or 64-bit integers, wrong arity, run-time or
    too many rounds, counters of two widths, float umulhi operands."""
    check(kernel, at, message)


def test_random_functions_outside_kernels_say_where_they_work() -> None:
    with pytest.raises(TileCompileError, match=r"tj.rand\(\) can only be used inside a @tj.kernel"):
        tj.rand(1, 2)


# ---------------------------------------------------------------------------------------------- the README example


def readme_dropout(tmp_path: Path) -> tuple[Any, str]:
    """The README's dropout kernel (imported from a file: kernels need their source) and its launch line."""
    found = re.search(r"### Random numbers\n.*?```python\n(.*?)```", README, re.DOTALL)
    assert found is not None, "README.md has no random numbers example"
    kernel_src, launch = found.group(1).rstrip().rsplit("\n\n", 1)
    path = tmp_path / "readme_dropout.py"
    path.write_text("import tilejit as tj\n\n" + kernel_src + "\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("readme_dropout", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dropout, launch


def test_the_readme_dropout_example_compiles_for_both_backends(tmp_path: Path, tileir_env: Any) -> None:
    dropout, launch = readme_dropout(tmp_path)
    assert "dropout[" in launch
    sig = (tj.float32[:], tj.float32[:], tj.int32, tj.float32)
    art = tj.compile(dropout, sig, constants={"TILE": 1024}, target="sm_90", backend="cuda")
    assert "tj::mulhi(" in art.cuda_source() and art.cubin()[:4] == b"\x7fELF"
    art = tj.compile(dropout, sig, constants={"TILE": 1024}, target="sm_90", backend="tileir")
    assert "mulhii" in art.tileir_text() and art.cubin()[:4] == b"\x7fELF"


# ---------------------------------------------------------------------------------------------- GPU


def random_offsets(n: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """``n`` offsets over the whole range of ``dtype`` (random bits)."""
    return rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False).astype(unsigned(dtype)).view(dtype)


SEEDS = {"int32": lambda rng: int(rng.integers(-(2**31), 2**31)),
         "int64": lambda rng: int(rng.integers(2**32, 2**63)),
         "negative_int64": lambda rng: -int(rng.integers(2**32, 2**63))}


@pytest.mark.gpu
@pytest.mark.parametrize("seed_kind", list(SEEDS))
@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64", "uint64"])
def test_gpu_bits_uniforms_and_normals_match_the_reference(dtype: str, seed_kind: str,
                                                          rng: np.random.Generator) -> None:
    """randint4x's four words exactly, rand exactly (in [0, 1)), randn to float32 rounding, for random offsets of
    every value of ``dtype`` and a seed of each size; 1000 elements in tiles of 256."""
    n, tile = 1000, 256
    seed = SEEDS[seed_kind](rng)
    offs = random_offsets(n, dtype, rng)
    outs = [tj.asarray(poison((n,), "uint32")) for _ in range(4)]
    u, g = tj.asarray(poison((n,), "float32")), tj.asarray(poison((n,), "float32"))
    rand_tiles[tj.cdiv(n, tile)](tj.asarray(offs), *outs, u, g, seed, TILE=tile)
    want = randint4x_ref(seed, offs)
    for k in range(4):
        np.testing.assert_array_equal(outs[k].numpy(), want[k], err_msg=f"word {k}")
    got_u = u.numpy()
    np.testing.assert_array_equal(got_u, uniform_ref(want[0]))
    assert (got_u >= 0).all() and (got_u < 1).all()
    np.testing.assert_allclose(g.numpy(), randn_ref(seed, offs), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_arange_offsets_and_distributions(rng: np.random.Generator) -> None:
    """The usual form (a base plus the element's index) over 2**20 + 3 elements: the bits exactly, rand's mean
    about 1/2, randn's mean about 0 and standard deviation about 1."""
    n, tile = (1 << 20) + 3, 1024
    seed, base = int(rng.integers(0, 2**31)), int(rng.integers(-(2**30), 2**30))
    bits = tj.asarray(poison((n,), "uint32"))
    u, g = tj.asarray(poison((n,), "float32")), tj.asarray(poison((n,), "float32"))
    rand_arange[tj.cdiv(n, tile)](bits, u, g, seed, base, TILE=tile)
    offs = (base + np.arange(n, dtype=np.int64)).astype(np.int32)
    want = randint4x_ref(seed, offs)[0]
    np.testing.assert_array_equal(bits.numpy(), want)
    got_u, got_g = u.numpy(), g.numpy()
    np.testing.assert_array_equal(got_u, uniform_ref(want))
    assert abs(float(got_u.mean()) - 0.5) < 0.005 and abs(float(got_u.var()) - 1 / 12) < 0.003
    assert abs(float(got_g.mean())) < 0.01 and abs(float(got_g.std()) - 1.0) < 0.01
    assert np.isfinite(got_g).all()
    np.testing.assert_allclose(got_g[:4096], randn_ref(seed, offs[:4096]), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_readme_dropout_example(tmp_path: Path, rng: np.random.Generator) -> None:
    """The README's example as written: the kept elements are those whose rand(seed, index) exceeds p (exactly),
    scaled by 1 / (1 - p); the others are 0."""
    dropout, launch = readme_dropout(tmp_path)
    n, p, seed = 100_003, 0.5, 1234
    assert "(x, out, 1234, 0.5, TILE=1024)" in launch  # the seed and p this test checks the mask of
    hx = rng.standard_normal(n).astype(np.float32)
    out = tj.asarray(poison((n,), "float32"))
    namespace = {"tj": tj, "dropout": dropout, "n": n, "x": tj.asarray(hx), "out": out}
    exec(launch, namespace)
    keep = uniform_ref(randint4x_ref(seed, np.arange(n, dtype=np.int32))[0]) > np.float32(p)
    got = out.numpy()
    np.testing.assert_array_equal(got == 0, ~keep)
    np.testing.assert_allclose(got[keep], hx[keep] / np.float32(1 - p), rtol=1e-6)
