// tilejit device headers: scalar types and the kernel array ABI.
//
// Self-contained on purpose: NVRTC ships no standard headers (and 11.x has no built-in
// <cuda_fp16.h>), so the fixed-width integers and the 16- and 8-bit float types are defined here.
// tj::half and tj::bf16 have the size, alignment and bit layout of __half / __nv_bfloat16.
#pragma once

namespace tj {

typedef signed char i8;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// IEEE binary16; arithmetic happens in float (correctly rounded for + - * / sqrt).
struct __align__(2) half {
  u16 bits;
  half() = default;
  __device__ __forceinline__ half(float f) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f)); }
  __device__ __forceinline__ operator float() const {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
  __device__ static __forceinline__ half from_bits(u16 b) { half h; h.bits = b; return h; }
};

// bfloat16 (8-bit mantissa); round-to-nearest-even from float, in software before sm_80.
struct __align__(2) bf16 {
  u16 bits;
  bf16() = default;
  __device__ __forceinline__ bf16(float f) {
#if __CUDA_ARCH__ >= 800
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f));
#else
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) bits = (u16)((u >> 16) | 0x40u);
    else bits = (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
  }
  __device__ __forceinline__ operator float() const { return __uint_as_float((u32)bits << 16); }
  __device__ static __forceinline__ bf16 from_bits(u16 b) { bf16 h; h.bits = b; return h; }
};

// 8-bit floats with torch's conversion from float: round to nearest-even, not saturating (past the largest
// finite value after rounding: NaN for e4m3, which has no inf; inf for e5m2), NaN stays NaN (0x7f with
// the sign). In integer ops, so every target converts alike (PTX's cvt to e4m3x2/e5m2x2 saturates).
// MB: mantissa bits, BIAS: exponent bias, TOP: largest finite pattern, OVER: the pattern of an overflow.
template <int MB, int BIAS, int TOP, int OVER>
struct __align__(1) fp8 {
  u8 bits;
  fp8() = default;
  __device__ __forceinline__ fp8(float f) {
    const u32 u = __float_as_uint(f), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
    u32 r;
    if (a > 0x7f800000u) r = 0x7fu;
    else if (a < (u32)(128 - BIAS) << 23) {  // below the smallest normal: multiples of 2^(1 - BIAS - MB)
      r = __float2uint_rn(__uint_as_float(a) * __uint_as_float((u32)(126 + BIAS + MB) << 23));
    } else {  // round the 23 mantissa bits to MB, then rebias the exponent (a carry lands in it)
      r = (a + (1u << (22 - MB)) - 1u + ((a >> (23 - MB)) & 1u)) >> (23 - MB);
      r -= (u32)(127 - BIAS) << MB;
      if (r > (u32)TOP) r = OVER;
    }
    bits = (u8)(r | s);
  }
  __device__ __forceinline__ operator float() const {
    const u32 s = (u32)(bits & 0x80u) << 24, m = bits & 0x7fu;
    if (OVER == 0x7f ? m == 0x7fu : m > (u32)OVER) return __uint_as_float(s | 0x7fc00000u);
    if (m == (u32)OVER) return __uint_as_float(s | 0x7f800000u);
    if (m < (1u << MB)) return __uint_as_float(s | __float_as_uint((float)m * __uint_as_float((u32)(128 - BIAS - MB) << 23)));
    return __uint_as_float(s | ((m + ((u32)(127 - BIAS) << MB)) << (23 - MB)));
  }
  __device__ static __forceinline__ fp8 from_bits(u8 b) { fp8 h; h.bits = b; return h; }
};
typedef fp8<3, 7, 0x7e, 0x7f> e4m3;   // float8_e4m3fn
typedef fp8<2, 15, 0x7b, 0x7c> e5m2;  // float8_e5m2

// The kernel ABI of an array parameter: strides in elements, all fields 8 bytes.
template <class T, int N>
struct Array {
  T* ptr;
  i64 shape[N];
  i64 stride[N];
};
template <class T>
struct Array<T, 0> {
  T* ptr;
};

// One array of an array-list parameter, whose launch passes a table of shape (count, 1 + 2 * N): row i holds
// array i's pointer, shape and strides as int64, and row `count` (past the shape) is all zeros, an empty array,
// which an index outside [0, count) reads: its loads read the padding, its stores write nothing.
template <class T, int N>
__device__ __forceinline__ Array<T, N> array_item(const Array<i64, 2>& table, i64 i) {
  const i64 count = table.shape[0];
  const i64* rec = table.ptr + (i >= 0 && i < count ? i : count) * table.stride[0];
  Array<T, N> a;
  a.ptr = reinterpret_cast<T*>(rec[0]);
#pragma unroll
  for (int d = 0; d < N; ++d) {
    a.shape[d] = rec[1 + d];
    a.stride[d] = rec[1 + N + d];
  }
  return a;
}

// Arithmetic type of an element type: 16-bit floats compute in float.
template <class T> struct Compute { typedef T type; };
template <> struct Compute<half> { typedef float type; };
template <> struct Compute<bf16> { typedef float type; };
template <> struct Compute<e4m3> { typedef float type; };
template <> struct Compute<e5m2> { typedef float type; };

__device__ __forceinline__ float inf_f() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float nan_f() { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double inf_d() { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ double nan_d() { return __longlong_as_double(0x7ff8000000000000LL); }

}  // namespace tj
