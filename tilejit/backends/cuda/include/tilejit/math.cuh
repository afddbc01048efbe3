// tilejit device headers: elementwise functions per dtype, with numpy/Python semantics.
//
// 16-bit floats never reach these: the generated code converts them to float first (tj::Compute), but for the
// packed pair arithmetic below (add2 ...).
#pragma once
#include <tilejit/types.cuh>

namespace tj {

// ---- conversions (static_cast semantics; to bool is != 0; 16- and 8-bit floats via float)
template <class To, class From> struct Cvt {
  __device__ __forceinline__ static To f(From x) { return static_cast<To>(x); }
};
template <class From> struct Cvt<bool, From> {
  __device__ __forceinline__ static bool f(From x) { return x != From(0); }
};
template <class From> struct Cvt<half, From> {
  __device__ __forceinline__ static half f(From x) { return half(static_cast<float>(x)); }
};
template <class From> struct Cvt<bf16, From> {
  __device__ __forceinline__ static bf16 f(From x) { return bf16(static_cast<float>(x)); }
};
template <class To> struct Cvt<To, half> {
  __device__ __forceinline__ static To f(half x) { return Cvt<To, float>::f(static_cast<float>(x)); }
};
template <class To> struct Cvt<To, bf16> {
  __device__ __forceinline__ static To f(bf16 x) { return Cvt<To, float>::f(static_cast<float>(x)); }
};
template <> struct Cvt<bool, half> {
  __device__ __forceinline__ static bool f(half x) { return static_cast<float>(x) != 0.0f; }
};
template <> struct Cvt<bool, bf16> {
  __device__ __forceinline__ static bool f(bf16 x) { return static_cast<float>(x) != 0.0f; }
};
template <> struct Cvt<half, half> {
  __device__ __forceinline__ static half f(half x) { return x; }
};
template <> struct Cvt<bf16, bf16> {
  __device__ __forceinline__ static bf16 f(bf16 x) { return x; }
};
template <> struct Cvt<half, bf16> {
  __device__ __forceinline__ static half f(bf16 x) { return half(static_cast<float>(x)); }
};
template <> struct Cvt<bf16, half> {
  __device__ __forceinline__ static bf16 f(half x) { return bf16(static_cast<float>(x)); }
};
// double to half in one rounding, as numpy's astype: through float it rounded twice
// (1 + 2**-11 + 2**-40 gave 1.0 instead of 1.0009765625).
template <> struct Cvt<half, double> {
  __device__ __forceinline__ static half f(double x) {
    half h;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h.bits) : "d"(x));
    return h;
  }
};
template <> struct Cvt<bool, bool> {
  __device__ __forceinline__ static bool f(bool x) { return x; }
};
// 8-bit floats convert through float both ways (to them: torch's rounding, types.cuh; double rounds to float
// first, as torch's conversion does).
#define TJ_FP8_CVT(F)                                                                              \
  template <class To> struct Cvt<To, F> {                                                           \
    __device__ __forceinline__ static To f(F x) { return Cvt<To, float>::f(static_cast<float>(x)); } \
  };                                                                                                \
  template <> struct Cvt<bool, F> {                                                                 \
    __device__ __forceinline__ static bool f(F x) { return static_cast<float>(x) != 0.0f; }         \
  };                                                                                                \
  template <> struct Cvt<half, F> {                                                                 \
    __device__ __forceinline__ static half f(F x) { return half(static_cast<float>(x)); }           \
  };                                                                                                \
  template <> struct Cvt<bf16, F> {                                                                 \
    __device__ __forceinline__ static bf16 f(F x) { return bf16(static_cast<float>(x)); }           \
  };
TJ_FP8_CVT(e4m3)
TJ_FP8_CVT(e5m2)
#undef TJ_FP8_CVT
// Float to integer truncates toward zero and saturates at the 32- or 64-bit range, and NaN gives 0
// (tile.py's cast rule); 8- and 16-bit results keep the low bits of the 32-bit value. The intrinsics
// saturate (a C++ cast of a value out of range is undefined behaviour), but only float -> int32 maps
// NaN to 0 in hardware: from double, and to 64 bits, NaN gives the lowest value (measured on sm_90).
#define TJ_F2I(T, ff, fd)                                                                        \
  template <> struct Cvt<T, float> {                                                               \
    __device__ __forceinline__ static T f(float x) { return x != x ? T(0) : static_cast<T>(ff(x)); } \
  };                                                                                               \
  template <> struct Cvt<T, double> {                                                              \
    __device__ __forceinline__ static T f(double x) { return x != x ? T(0) : static_cast<T>(fd(x)); } \
  };
TJ_F2I(i8, __float2int_rz, __double2int_rz)
TJ_F2I(i16, __float2int_rz, __double2int_rz)
TJ_F2I(i32, __float2int_rz, __double2int_rz)
TJ_F2I(u8, __float2uint_rz, __double2uint_rz)
TJ_F2I(u16, __float2uint_rz, __double2uint_rz)
TJ_F2I(u32, __float2uint_rz, __double2uint_rz)
TJ_F2I(i64, __float2ll_rz, __double2ll_rz)
TJ_F2I(u64, __float2ull_rz, __double2ull_rz)
#undef TJ_F2I
template <class To, class From>
__device__ __forceinline__ To cast(From x) { return Cvt<To, From>::f(x); }

// ---- float functions (float and double overloads)
#define TJ_FN1(name, ff, fd)                                                  \
  __device__ __forceinline__ float name(float x) { return ff(x); }           \
  __device__ __forceinline__ double name(double x) { return fd(x); }
TJ_FN1(exp, ::expf, ::exp)
TJ_FN1(exp2, ::exp2f, ::exp2)
TJ_FN1(log, ::logf, ::log)
TJ_FN1(log2, ::log2f, ::log2)
TJ_FN1(sqrt, ::sqrtf, ::sqrt)
TJ_FN1(rsqrt, ::rsqrtf, ::rsqrt)
TJ_FN1(sin, ::sinf, ::sin)
TJ_FN1(cos, ::cosf, ::cos)
TJ_FN1(tanh, ::tanhf, ::tanh)
TJ_FN1(floor, ::floorf, ::floor)
TJ_FN1(ceil, ::ceilf, ::ceil)
TJ_FN1(erf, ::erff, ::erf)
TJ_FN1(fabs, ::fabsf, ::fabs)
TJ_FN1(asin, ::asinf, ::asin)
TJ_FN1(acos, ::acosf, ::acos)
TJ_FN1(atan, ::atanf, ::atan)
TJ_FN1(sinh, ::sinhf, ::sinh)
TJ_FN1(cosh, ::coshf, ::cosh)
TJ_FN1(log1p, ::log1pf, ::log1p)
TJ_FN1(expm1, ::expm1f, ::expm1)
TJ_FN1(cbrt, ::cbrtf, ::cbrt)
TJ_FN1(erfinv, ::erfinvf, ::erfinv)
#undef TJ_FN1
__device__ __forceinline__ float atan2(float y, float x) { return ::atan2f(y, x); }
__device__ __forceinline__ double atan2(double y, double x) { return ::atan2(y, x); }
// x * y + z rounded once (tj.fma; the _rn intrinsics below keep x * y + z in tile code from fusing into this).
__device__ __forceinline__ float fma(float x, float y, float z) { return __fmaf_rn(x, y, z); }
__device__ __forceinline__ double fma(double x, double y, double z) { return __fma_rn(x, y, z); }
// Classification from the bits: NaN, +-inf, and the sign bit (set for -0.0 and for NaNs with it).
__device__ __forceinline__ bool isnan(float x) { return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u; }
__device__ __forceinline__ bool isnan(double x) {
  return ((u64)__double_as_longlong(x) & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL;
}
__device__ __forceinline__ bool isinf(float x) { return (__float_as_uint(x) & 0x7fffffffu) == 0x7f800000u; }
__device__ __forceinline__ bool isinf(double x) {
  return ((u64)__double_as_longlong(x) & 0x7fffffffffffffffULL) == 0x7ff0000000000000ULL;
}
__device__ __forceinline__ bool signbit(float x) { return (__float_as_uint(x) >> 31) != 0u; }
__device__ __forceinline__ bool signbit(double x) { return __double_as_longlong(x) < 0; }
// 16-bit floats from their own bits (a conversion to float need not keep a NaN's sign).
__device__ __forceinline__ bool isnan(half x) { return (x.bits & 0x7fffu) > 0x7c00u; }
__device__ __forceinline__ bool isinf(half x) { return (x.bits & 0x7fffu) == 0x7c00u; }
__device__ __forceinline__ bool signbit(half x) { return (x.bits >> 15) != 0u; }
__device__ __forceinline__ bool isnan(bf16 x) { return (x.bits & 0x7fffu) > 0x7f80u; }
__device__ __forceinline__ bool isinf(bf16 x) { return (x.bits & 0x7fffu) == 0x7f80u; }
__device__ __forceinline__ bool signbit(bf16 x) { return (x.bits >> 15) != 0u; }
// Bit counts of 32- and 64-bit integers as int32, as CUDA's __popc and __clz (clz(0) is the width).
__device__ __forceinline__ i32 popc(u32 x) { return __popc(x); }
__device__ __forceinline__ i32 popc(i32 x) { return __popc((u32)x); }
__device__ __forceinline__ i32 popc(u64 x) { return __popcll(x); }
__device__ __forceinline__ i32 popc(i64 x) { return __popcll((u64)x); }
__device__ __forceinline__ i32 clz(u32 x) { return __clz((i32)x); }
__device__ __forceinline__ i32 clz(i32 x) { return __clz(x); }
__device__ __forceinline__ i32 clz(u64 x) { return __clzll((i64)x); }
__device__ __forceinline__ i32 clz(i64 x) { return __clzll(x); }
// Float +, - and * round once each, as numpy's do: the _rn intrinsics are never fused into an FMA with a
// neighbouring op (x * y + z rounded once could differ from numpy in the last bit, and a cast to an
// integer or a comparison can turn that bit into a different answer).
__device__ __forceinline__ float fadd(float x, float y) { return __fadd_rn(x, y); }
__device__ __forceinline__ double fadd(double x, double y) { return __dadd_rn(x, y); }
__device__ __forceinline__ float fsub(float x, float y) { return __fsub_rn(x, y); }
__device__ __forceinline__ double fsub(double x, double y) { return __dsub_rn(x, y); }
__device__ __forceinline__ float fmul(float x, float y) { return __fmul_rn(x, y); }
__device__ __forceinline__ double fmul(double x, double y) { return __dmul_rn(x, y); }
// Float division with at most 2 ulp error over the full range (PTX div.full.f32), what GPU
// compilers use for "/" without -prec-div; double division stays IEEE.
__device__ __forceinline__ float truediv(float x, float y) {
  float r;
  asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
}
__device__ __forceinline__ double truediv(double x, double y) { return x / y; }
// sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) below, e = exp(-|x|): exp(-x) never overflows, so
// x < -88.7 gives exp(x)'s subnormal results (1 / (1 + exp(-x)) gave 0 there). One exp and one division, float /'s
// (truediv, div.full.f32): an IEEE division is a refinement with a slow-path branch (a one-element sigmoid kernel
// was 139 SASS instructions with it, 30 with div.full), and bought little, exp being within 2 ulp only. Measured on
// an H100 over every float32 input against a float64 sigmoid: at most 3.98 ulp (IEEE division: 3.45; tile.py
// promises 6), no subnormal result flushed (1 + e is 1 there, divided exactly); of the 16-bit inputs, no bfloat16
// result changed and 3 of the 63488 float16 ones did.
__device__ __forceinline__ float sigmoid(float x) {
  const float e = ::expf(-::fabsf(x));
  return truediv(x < 0.0f ? e : 1.0f, 1.0f + e);
}
__device__ __forceinline__ double sigmoid(double x) {
  const double e = ::exp(-::fabs(x));
  return (x < 0.0 ? e : 1.0) / (1.0 + e);
}
__device__ __forceinline__ float pow(float x, float y) { return ::powf(x, y); }
__device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }

// ---- fast-math options (tj.exp(x, rounding_mode="approx"), tj.sqrt(x, rounding_mode="rz", flush_to_zero=True),
// tj.truediv(...)): tj::<fn>_<rounding>[_ftz], one PTX instruction each; float only, but for the directed
// roundings of sqrt and division, which double has too. The plain functions above keep the defaults.
#define TJ_PTX1(name, T, c, ins)                                                     \
  __device__ __forceinline__ T name(T x) {                                           \
    T r;                                                                             \
    asm(ins " %0, %1;" : "=" c(r) : c(x));                                           \
    return r;                                                                        \
  }
#define TJ_PTX2(name, T, c, ins)                                                     \
  __device__ __forceinline__ T name(T x, T y) {                                      \
    T r;                                                                             \
    asm(ins " %0, %1, %2;" : "=" c(r) : c(x), c(y));                                 \
    return r;                                                                        \
  }
#define TJ_SQRT(r)                                                                   \
  TJ_PTX1(sqrt_##r, float, "f", "sqrt." #r ".f32")                                   \
  TJ_PTX1(sqrt_##r##_ftz, float, "f", "sqrt." #r ".ftz.f32")
#define TJ_DIV(r)                                                                    \
  TJ_PTX2(truediv_##r, float, "f", "div." #r ".f32")                                 \
  TJ_PTX2(truediv_##r##_ftz, float, "f", "div." #r ".ftz.f32")
#define TJ_DIRECTED_F64(r)                                                           \
  TJ_PTX1(sqrt_##r, double, "d", "sqrt." #r ".f64")                                  \
  TJ_PTX2(truediv_##r, double, "d", "div." #r ".f64")
TJ_SQRT(rz) TJ_SQRT(rm) TJ_SQRT(rp) TJ_SQRT(approx)
TJ_DIV(rn) TJ_DIV(rz) TJ_DIV(rm) TJ_DIV(rp) TJ_DIV(approx)
TJ_DIRECTED_F64(rz) TJ_DIRECTED_F64(rm) TJ_DIRECTED_F64(rp)
TJ_PTX1(sqrt_ftz, float, "f", "sqrt.rn.ftz.f32")
TJ_PTX2(truediv_ftz, float, "f", "div.full.ftz.f32")
TJ_PTX1(exp2_ftz, float, "f", "ex2.approx.ftz.f32")
TJ_PTX1(rsqrt_ftz, float, "f", "rsqrt.approx.ftz.f32")
#undef TJ_DIRECTED_F64
#undef TJ_DIV
#undef TJ_SQRT
#undef TJ_PTX2
__device__ __forceinline__ float exp_approx(float x) { return __expf(x); }
#if __CUDA_ARCH__ >= 750
TJ_PTX1(tanh_approx, float, "f", "tanh.approx.f32")
#else
__device__ __forceinline__ float tanh_approx(float x) { return ::tanhf(x); }  // no tanh.approx before sm_75
#endif
#undef TJ_PTX1

// ---- integer and generic helpers
// int64 saturated to int32: compares against values strictly inside the int32 range stay exact
__device__ __forceinline__ i32 clamp_i32(i64 x) {
  return x > 2147483647LL ? 2147483647 : (x < -2147483647LL - 1 ? -2147483647 - 1 : (i32)x);
}
// Wrapping integer arithmetic, as numpy's: computed in an unsigned type at least as wide as int,
// so neither signed overflow nor the promotion of 16-bit operands to int is undefined behaviour
// (the compiler would otherwise assume none happens: (x + 1) > x folded to true). Floats unchanged.
template <class T> struct WrapT { typedef T type; };
template <> struct WrapT<i8> { typedef unsigned int type; };
template <> struct WrapT<i16> { typedef unsigned int type; };
template <> struct WrapT<i32> { typedef unsigned int type; };
template <> struct WrapT<i64> { typedef unsigned long long type; };
template <> struct WrapT<u8> { typedef unsigned int type; };
template <> struct WrapT<u16> { typedef unsigned int type; };
template <> struct WrapT<u32> { typedef unsigned int type; };
template <> struct WrapT<u64> { typedef unsigned long long type; };
template <class T> __device__ __forceinline__ T wadd(T a, T b) {
  typedef typename WrapT<T>::type U;
  return T(U(a) + U(b));
}
template <class T> __device__ __forceinline__ T wsub(T a, T b) {
  typedef typename WrapT<T>::type U;
  return T(U(a) - U(b));
}
template <class T> __device__ __forceinline__ T wmul(T a, T b) {
  typedef typename WrapT<T>::type U;
  return T(U(a) * U(b));
}
template <class T> __device__ __forceinline__ T wneg(T a) {
  typedef typename WrapT<T>::type U;
  return T(U(0) - U(a));
}
template <class T> __device__ __forceinline__ T abs(T x) { return x < T(0) ? wneg<T>(x) : x; }
__device__ __forceinline__ float abs(float x) { return ::fabsf(x); }
__device__ __forceinline__ double abs(double x) { return ::fabs(x); }
__device__ __forceinline__ bool abs(bool x) { return x; }
#define TJ_UABS(T) __device__ __forceinline__ T abs(T x) { return x; }
TJ_UABS(u8) TJ_UABS(u16) TJ_UABS(u32) TJ_UABS(u64)
#undef TJ_UABS

// Python floor division and modulo; x // 0 and x % 0 give 0 for integers, as numpy does.
template <class T> struct IsSigned { static constexpr bool value = T(-1) < T(0); };
template <class T> __device__ __forceinline__ T floordiv(T a, T b) {
  if (b == T(0)) return T(0);
  if (IsSigned<T>::value && b == T(-1)) return wneg<T>(a);  // MIN // -1 wraps to MIN (C++: undefined)
  T q = T(a / b);
  if (IsSigned<T>::value && (a % b != T(0)) && ((a < T(0)) != (b < T(0)))) q = T(q - T(1));
  return q;
}
template <class T> __device__ __forceinline__ T mod(T a, T b) {
  if (b == T(0) || (IsSigned<T>::value && b == T(-1))) return T(0);  // MIN % -1 is undefined in C++
  T r = T(a % b);
  if (IsSigned<T>::value && r != T(0) && ((r < T(0)) != (b < T(0)))) r = T(r + b);
  return r;
}
__device__ __forceinline__ bool floordiv(bool a, bool b) { return b ? a : false; }
__device__ __forceinline__ bool mod(bool, bool) { return false; }
__device__ __forceinline__ float fmod_(float a, float b) { return ::fmodf(a, b); }
__device__ __forceinline__ double fmod_(double a, double b) { return ::fmod(a, b); }
__device__ __forceinline__ float copysign_(float a, float b) { return ::copysignf(a, b); }
__device__ __forceinline__ double copysign_(double a, double b) { return ::copysign(a, b); }
// numpy's npy_divmod for floats.
template <class F> __device__ __forceinline__ F fmod_py(F a, F b, F* div_out) {
  F m = fmod_(a, b);
  if (b == F(0)) {
    if (div_out) *div_out = a / b;
    return m;
  }
  F div = (a - m) / b;
  if (m != F(0)) {
    if ((b < F(0)) != (m < F(0))) {
      m += b;
      div -= F(1);
    }
  } else {
    m = copysign_(F(0), b);
  }
  F fd;
  if (div != F(0)) {
    fd = floor(div);
    if (div - fd > F(0.5)) fd += F(1);
  } else {
    fd = copysign_(F(0), a / b);
  }
  if (div_out) *div_out = fd;
  return m;
}
__device__ __forceinline__ float floordiv(float a, float b) { float d; fmod_py<float>(a, b, &d); return d; }
__device__ __forceinline__ double floordiv(double a, double b) { double d; fmod_py<double>(a, b, &d); return d; }
__device__ __forceinline__ float mod(float a, float b) { return fmod_py<float>(a, b, nullptr); }
__device__ __forceinline__ double mod(double a, double b) { return fmod_py<double>(a, b, nullptr); }

// Integer power by squaring; a negative exponent gives 1/a**-b truncated (0 unless |a| == 1).
template <class T> __device__ __forceinline__ T ipow(T a, T b) {
  if (IsSigned<T>::value && b < T(0)) {
    if (a == T(1)) return T(1);
    if (a == T(-1)) return (b % T(2) == T(0)) ? T(1) : T(-1);
    return T(0);
  }
  T r = T(1);
  while (b != T(0)) {
    if (b & T(1)) r = wmul<T>(r, a);
    a = wmul<T>(a, a);
    b = T(b >> 1);
  }
  return r;
}

// maximum/minimum propagate NaN (numpy), and are plain compares for integers.
template <class T> __device__ __forceinline__ T maximum(T a, T b) { return (a > b || a != a) ? a : b; }
template <class T> __device__ __forceinline__ T minimum(T a, T b) { return (a < b || a != a) ? a : b; }
#if __CUDA_ARCH__ >= 800
template <> __device__ __forceinline__ float maximum<float>(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
template <> __device__ __forceinline__ float minimum<float>(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
#endif

// Two floats to two 16-bit floats in one instruction (sm_80+).
__device__ __forceinline__ void cvt_pair(half& lo, half& hi, float a, float b) {
#if __CUDA_ARCH__ >= 800
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  lo.bits = (u16)(r & 0xffffu);
  hi.bits = (u16)(r >> 16);
#else
  lo = half(a);
  hi = half(b);
#endif
}
__device__ __forceinline__ void cvt_pair(bf16& lo, bf16& hi, float a, float b) {
#if __CUDA_ARCH__ >= 800
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  lo.bits = (u16)(r & 0xffffu);
  hi.bits = (u16)(r >> 16);
#else
  lo = bf16(a);
  hi = bf16(b);
#endif
}

// ---- packed 16-bit float arithmetic: two elements of a tile in one 32-bit register (the first in the low half).
// The generated code computes + - * maximum minimum of float16 or bfloat16 tiles (operands and result of one dtype)
// on element pairs with these, instead of widening to float, computing, and rounding back with cvt_pair, and gets
// the same bits:
//  * + - *: computing in float32 and rounding to p bits (p = 11 float16, 8 bfloat16) rounds twice, but float32's 24
//    bits are >= 2p + 2, which makes the double rounding innocuous: the result is the correctly rounded one, as the
//    .rn instructions give (products of two p-bit significands are exact in float32 anyway). Subnormals: float16
//    values, sums and products are float32 normals or exact; bfloat16 has float32's exponent range, and there an
//    exact sum below 2^-126 is a multiple of 2^-133 (exact in float32), while a product there could only round onto
//    a bfloat16 midpoint (an odd multiple of 2^-134) from 2^-150 away, which takes 17 significant bits (odd * 2^16
//    +- 1), and products of two 8-bit significands have 16 (255 * 255 < 2^16). Nothing
//    flushes: NVRTC compiles without -ftz, and these instructions keep subnormals. Overflow, infinities and the
//    signs of zeros follow IEEE rules in both paths (x - x is +0, -0 + -0 is -0).
//  * maximum, minimum (max.NaN/min.NaN): both paths pick one of the operands, which round-trips through float
//    exactly, and pick the same zero of +0 and -0.
//  * NaN: float32 arithmetic gives the canonical NaN 0x7fffffff, which cvt.rn turns into 0x7fff; the 16-bit
//    instructions give their canonical NaN, 0x7fff too.
// Measured on an H100: every one of the 2^32 operand pairs gives the same bits both ways, for the sm_90 and the
// sm_80 code (tests/test_packed_half.py).
// The .rn forms are never contracted into an FMA. bfloat16 add/sub/mul.rn need sm_90; sm_80 has fma.rn.bf16x2,
// which gives x + y as x * 1 + y, x - y as y * -1 + x and x * y as x * y + -0 (rounded once, a zero product keeps its
// sign). Before sm_80 (no max.NaN for 16 bits, and bfloat16 rounds in software there) pairs compute in float.
template <class T> struct Pair {
  u32 bits;
};
template <class T> __device__ __forceinline__ Pair<T> pack2(T lo, T hi) {
  return Pair<T>{(u32)lo.bits | ((u32)hi.bits << 16)};
}
template <class T> __device__ __forceinline__ Pair<T> splat2(T x) { return pack2(x, x); }
template <class T> __device__ __forceinline__ void unpack2(T& lo, T& hi, Pair<T> p) {
  lo.bits = (u16)(p.bits & 0xffffu);
  hi.bits = (u16)(p.bits >> 16);
}
#define TJ_PAIR_PTX(name, T, ins)                                                  \
  __device__ __forceinline__ Pair<T> name(Pair<T> a, Pair<T> b) {                  \
    Pair<T> r;                                                                     \
    asm(ins " %0, %1, %2;" : "=r"(r.bits) : "r"(a.bits), "r"(b.bits));             \
    return r;                                                                      \
  }
#define TJ_PAIR_FLOAT(name, T, f)                                                  \
  __device__ __forceinline__ Pair<T> name(Pair<T> a, Pair<T> b) {                  \
    T a0, a1, b0, b1, r0, r1;                                                      \
    unpack2(a0, a1, a);                                                            \
    unpack2(b0, b1, b);                                                            \
    cvt_pair(r0, r1, f((float)a0, (float)b0), f((float)a1, (float)b1));            \
    return pack2(r0, r1);                                                          \
  }
#if __CUDA_ARCH__ >= 800
TJ_PAIR_PTX(add2, half, "add.rn.f16x2")
TJ_PAIR_PTX(sub2, half, "sub.rn.f16x2")
TJ_PAIR_PTX(mul2, half, "mul.rn.f16x2")
TJ_PAIR_PTX(max2, half, "max.NaN.f16x2")
TJ_PAIR_PTX(min2, half, "min.NaN.f16x2")
TJ_PAIR_PTX(max2, bf16, "max.NaN.bf16x2")
TJ_PAIR_PTX(min2, bf16, "min.NaN.bf16x2")
#if __CUDA_ARCH__ >= 900
TJ_PAIR_PTX(add2, bf16, "add.rn.bf16x2")
TJ_PAIR_PTX(sub2, bf16, "sub.rn.bf16x2")
TJ_PAIR_PTX(mul2, bf16, "mul.rn.bf16x2")
#else
__device__ __forceinline__ Pair<bf16> fma2(u32 a, u32 b, u32 c) {
  Pair<bf16> r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r.bits) : "r"(a), "r"(b), "r"(c));
  return r;
}
__device__ __forceinline__ Pair<bf16> add2(Pair<bf16> a, Pair<bf16> b) { return fma2(a.bits, 0x3f803f80u, b.bits); }
__device__ __forceinline__ Pair<bf16> sub2(Pair<bf16> a, Pair<bf16> b) { return fma2(b.bits, 0xbf80bf80u, a.bits); }
__device__ __forceinline__ Pair<bf16> mul2(Pair<bf16> a, Pair<bf16> b) { return fma2(a.bits, b.bits, 0x80008000u); }
#endif
#else
TJ_PAIR_FLOAT(add2, half, fadd)
TJ_PAIR_FLOAT(sub2, half, fsub)
TJ_PAIR_FLOAT(mul2, half, fmul)
TJ_PAIR_FLOAT(max2, half, maximum<float>)
TJ_PAIR_FLOAT(min2, half, minimum<float>)
TJ_PAIR_FLOAT(add2, bf16, fadd)
TJ_PAIR_FLOAT(sub2, bf16, fsub)
TJ_PAIR_FLOAT(mul2, bf16, fmul)
TJ_PAIR_FLOAT(max2, bf16, maximum<float>)
TJ_PAIR_FLOAT(min2, bf16, minimum<float>)
#endif
#undef TJ_PAIR_FLOAT
#undef TJ_PAIR_PTX

// The high half of the double-width product of two unsigned integers (8- and 16-bit: in unsigned int, since
// their promotion to int could overflow).
__device__ __forceinline__ u8 mulhi(u8 a, u8 b) { return (u8)(((unsigned int)a * (unsigned int)b) >> 8); }
__device__ __forceinline__ u16 mulhi(u16 a, u16 b) { return (u16)(((unsigned int)a * (unsigned int)b) >> 16); }
__device__ __forceinline__ u32 mulhi(u32 a, u32 b) { return __umulhi(a, b); }
__device__ __forceinline__ u64 mulhi(u64 a, u64 b) { return __umul64hi(a, b); }

// Shifts by >= the bit width give 0 (or -1 for an arithmetic right shift of a negative number).
template <class T> __device__ __forceinline__ T lshift(T a, T b) {
  return (b < T(0) || (u64)b >= sizeof(T) * 8) ? T(0) : T(typename WrapT<T>::type(a) << b);
}
template <class T> __device__ __forceinline__ T rshift(T a, T b) {
  if (b < T(0) || (u64)b >= sizeof(T) * 8) return (a < T(0)) ? T(-1) : T(0);
  return T(a >> b);
}

}  // namespace tj
