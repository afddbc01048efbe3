// tilejit device headers: bounds-checked tile loads/stores, gather/scatter and atomics.
//
// A tile element is in range iff every array coordinate is in [0, shape). Out-of-range loads read
// the padding value; out-of-range stores are skipped. With VEC > 1 the innermost stride is 1 and
// rows are 16-byte aligned (the launcher checked), so each group of VEC contiguous elements of a
// thread is one vector access. VEC == 1: unit innermost stride; VEC == 0: any strides.
// Loads and stores decide once per tile (a block-uniform branch): a tile wholly inside the array
// whose offsets from its origin fit in 32 bits takes a fast path with no per-element checks;
// other tiles check each vector whole-in / whole-out, with one scalar loop for the ragged vector
// a row ends inside. NC reads through the
// non-coherent cache (only for arrays the kernel never writes; the code generator leaves it off
// because plain loads measured as fast or faster on H100).
#pragma once
#include <tilejit/tile.cuh>

namespace tj {

template <int BYTES> struct VecWord;
template <> struct VecWord<1> { typedef u8 type; };
template <> struct VecWord<2> { typedef u16 type; };
template <> struct VecWord<4> { typedef u32 type; };
template <> struct VecWord<8> { typedef uint2 type; };
template <> struct VecWord<16> { typedef uint4 type; };

// The unsigned integer type of an element's bits.
template <int BYTES> struct UWord;
template <> struct UWord<1> { typedef u8 type; };
template <> struct UWord<2> { typedef u16 type; };
template <> struct UWord<4> { typedef u32 type; };
template <> struct UWord<8> { typedef u64 type; };

// VEC elements of T as whole words of at most 16 bytes.
template <class T, int VEC>
union Pack {
  static constexpr int BYTES = VEC * (int)sizeof(T);
  static constexpr int WB = BYTES < 16 ? BYTES : 16;
  typedef typename VecWord<WB>::type W;
  T e[VEC];
  W w[BYTES / WB];
};

// Read-only loads through the non-coherent cache (the array is never written by the kernel).
// Inline PTX rather than __ldg: it keeps a tile's loads issued together, ahead of their uses.
template <class W> __device__ __forceinline__ W ld_nc(const W* p) { return *p; }
template <> __device__ __forceinline__ uint4 ld_nc<uint4>(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
template <> __device__ __forceinline__ uint2 ld_nc<uint2>(const uint2* p) {
  uint2 r;
  asm volatile("ld.global.nc.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}
template <> __device__ __forceinline__ u32 ld_nc<u32>(const u32* p) {
  u32 r;
  asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

// Whether the whole tile at org lies inside the array along every dim (block-uniform).
template <class Shp, class T, int N>
__device__ __forceinline__ bool tile_inside(const Array<T, N>& a, const i64 (&org)[N]) {
  bool in = true;
#pragma unroll
  for (int d = 0; d < N; ++d) in = in && org[d] >= 0 && org[d] + Shp::dim(d) <= a.shape[d];
  return in;
}

// Whether every element offset inside the tile, relative to its origin element, fits in an int;
// fills s32 with the strides as ints. With VEC > 0 the innermost stride is 1 by contract.
template <int VEC, class Shp, class T, int N>
__device__ __forceinline__ bool span_fits32(const Array<T, N>& a, int (&s32)[N]) {
  bool fits = true;
  u64 span = 0;
#pragma unroll
  for (int d = 0; d < N; ++d) {
    constexpr int MAXI = 0x7fffffff;
    const int ext = Shp::dim(d) - 1;
    if (ext == 0 || (VEC > 0 && d == N - 1)) {
      s32[d] = ext == 0 ? 0 : 1;
      span += (u64)ext;
      continue;
    }
    const i64 s = a.stride[d];
    const u64 m = s < 0 ? (u64)0 - (u64)s : (u64)s;
    const bool ok = m <= (u64)(MAXI / ext);
    fits = fits && ok;
    span += (ok ? m : 0) * (u64)ext;
    s32[d] = (int)s;
  }
  return fits && span <= (u64)0x7fffffff;
}

// Array offset (in elements) of the tile element at flat index f, and whether the element's
// leading coordinates (all but the innermost) are in range; `col` gets the innermost index.
template <class Shp, class T, int N>
__device__ __forceinline__ i64 outer_offset(const Array<T, N>& a, const i64 (&org)[N], int f, bool& ok, i64& col) {
  i64 off = 0;
  ok = true;
#pragma unroll
  for (int d = 0; d < N - 1; ++d) {
    i64 x = org[d] + Shp::coord(f, d);
    ok = ok && (u64)x < (u64)a.shape[d];
    off += x * a.stride[d];
  }
  col = org[N - 1] + Shp::coord(f, N - 1);
  return off;
}

// The V elements of one vector as raw bits in two 64-bit words (for a ragged edge vector of at most
// 16 bytes; wider ones go element by element).
template <class T, int V>
union RawVec {
  T e[V];
  u64 q[2];
};

template <int VEC, bool NC, class Shp, class L, class T, int N>
__device__ __forceinline__ void load(Tile<T, L>& out, const Array<T, N>& a, const i64 (&org)[N], T pad) {
  const int tid = threadIdx.x;
  constexpr int V = VEC > 0 ? VEC : 1;
  typedef Pack<T, V> P;
  // Every path fills whole words; elements are split out only after the paths join, so 16-bit
  // data stays packed in registers until it is used.
  P p[L::E / V > 0 ? L::E / V : 1];
  int s32[N];
  if (tile_inside<Shp>(a, org) && span_fits32<VEC, Shp>(a, s32)) {
    // Fast path: no per-element checks, 32-bit offsets from the tile's origin element.
    i64 o = 0;
#pragma unroll
    for (int d = 0; d < N; ++d) o += org[d] * a.stride[d];
    const T* base = a.ptr + o;
#pragma unroll
    for (int g = 0; g < L::E / V; ++g) {
      const int f = L::flat(tid, g * V);
      int rel = 0;
#pragma unroll
      for (int d = 0; d < N; ++d) rel += Shp::coord(f, d) * s32[d];
      if (VEC > 1) {
        const typename P::W* src = reinterpret_cast<const typename P::W*>(base + rel);
#pragma unroll
        for (int w = 0; w < P::BYTES / P::WB; ++w) p[g].w[w] = NC ? ld_nc(src + w) : src[w];
      } else {
        p[g].e[0] = base[rel];
      }
    }
  } else {
    // General path (edge tiles, huge arrays): whole vectors in or out, one scalar loop for the
    // vector a row ends inside.
#pragma unroll
    for (int g = 0; g < L::E / V; ++g) {
      const int f = L::flat(tid, g * V);
      bool ok;
      i64 col;
      const i64 off = outer_offset<Shp>(a, org, f, ok, col);
      const i64 n = a.shape[N - 1];
      ok = ok && col >= 0;
      if (ok && col + V <= n) {
        if (VEC > 1) {
          const typename P::W* src = reinterpret_cast<const typename P::W*>(a.ptr + off + col);
#pragma unroll
          for (int w = 0; w < P::BYTES / P::WB; ++w) p[g].w[w] = NC ? ld_nc(src + w) : src[w];
        } else {
          p[g].e[0] = a.ptr[off + col * (VEC > 0 ? 1 : a.stride[N - 1])];
        }
      } else if (VEC > 1 && ok && col < n && V * sizeof(T) > 16) {
        // A ragged vector wider than RawVec's two words: element by element, unrolled.
        const int k = (int)(n - col);
#pragma unroll
        for (int v = 0; v < V; ++v) p[g].e[v] = v < k ? a.ptr[off + col + v] : pad;
      } else if (VEC > 1 && ok && col < n) {
        typedef typename UWord<sizeof(T)>::type U;
        union { T t; U u; } x;
        const U* src = reinterpret_cast<const U*>(a.ptr + off + col);
        const int k = (int)(n - col);
        u64 lo = 0, hi = 0;
#pragma unroll 1
        for (int v = 0; v < V; ++v) {
          x.t = pad;
          if (v < k) x.u = src[v];
          const int sh = v * (int)sizeof(T) * 8;
          if (sh < 64) lo |= (u64)x.u << sh;
          else hi |= (u64)x.u << (sh - 64);
        }
        RawVec<T, V> r;
        r.q[0] = lo;
        r.q[1] = hi;
#pragma unroll
        for (int v = 0; v < V; ++v) p[g].e[v] = r.e[v];
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) p[g].e[v] = pad;
      }
    }
  }
#pragma unroll
  for (int g = 0; g < L::E / V; ++g) {
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[g * V + v] = p[g].e[v];
  }
}

template <int VEC, class Shp, class L, class T, int N>
__device__ __forceinline__ void store(const Array<T, N>& a, const i64 (&org)[N], const Tile<T, L>& t) {
  const int tid = threadIdx.x;
  if (!L::owner(tid)) return;
  constexpr int V = VEC > 0 ? VEC : 1;
  typedef Pack<T, V> P;
  int s32[N];
  if (tile_inside<Shp>(a, org) && span_fits32<VEC, Shp>(a, s32)) {
    i64 o = 0;
#pragma unroll
    for (int d = 0; d < N; ++d) o += org[d] * a.stride[d];
    T* base = a.ptr + o;
#pragma unroll
    for (int g = 0; g < L::E / V; ++g) {
      const int f = L::flat(tid, g * V);
      int rel = 0;
#pragma unroll
      for (int d = 0; d < N; ++d) rel += Shp::coord(f, d) * s32[d];
      if (VEC > 1) {
        P p;
#pragma unroll
        for (int v = 0; v < V; ++v) p.e[v] = t.v[g * V + v];
        typename P::W* dst = reinterpret_cast<typename P::W*>(base + rel);
#pragma unroll
        for (int w = 0; w < P::BYTES / P::WB; ++w) dst[w] = p.w[w];
      } else {
        base[rel] = t.v[g];
      }
    }
    return;
  }
#pragma unroll
  for (int g = 0; g < L::E / V; ++g) {
    const int f = L::flat(tid, g * V);
    bool ok;
    i64 col;
    const i64 off = outer_offset<Shp>(a, org, f, ok, col);
    const i64 n = a.shape[N - 1];
    ok = ok && col >= 0;
    if (ok && col + V <= n) {
      if (VEC > 1) {
        P p;
#pragma unroll
        for (int v = 0; v < V; ++v) p.e[v] = t.v[g * V + v];
        typename P::W* dst = reinterpret_cast<typename P::W*>(a.ptr + off + col);
#pragma unroll
        for (int w = 0; w < P::BYTES / P::WB; ++w) dst[w] = p.w[w];
      } else {
        a.ptr[off + col * (VEC > 0 ? 1 : a.stride[N - 1])] = t.v[g];
      }
    } else if (VEC > 1 && ok && col < n && V * sizeof(T) > 16) {
      const int k = (int)(n - col);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        if (v < k) a.ptr[off + col + v] = t.v[g * V + v];
      }
    } else if (VEC > 1 && ok && col < n) {
      typedef typename UWord<sizeof(T)>::type U;
      union { T t; U u; } x;
      RawVec<T, V> r;
      r.q[0] = 0;
      r.q[1] = 0;
#pragma unroll
      for (int v = 0; v < V; ++v) r.e[v] = t.v[g * V + v];
      const u64 lo = r.q[0], hi = r.q[1];
      U* dst = reinterpret_cast<U*>(a.ptr + off + col);
      const int k = (int)(n - col);
#pragma unroll 1
      for (int v = 0; v < k; ++v) {
        const int sh = v * (int)sizeof(T) * 8;
        x.u = (U)(sh < 64 ? lo >> sh : hi >> (sh - 64));
        dst[v] = x.u;
      }
    }
  }
}

// Element offset of array[idx...] and whether every index is in range.
template <class T, int N>
__device__ __forceinline__ i64 index_offset(const Array<T, N>& a, const i64 (&idx)[N], bool& ok) {
  i64 off = 0;
  ok = true;
#pragma unroll
  for (int d = 0; d < N; ++d) {
    ok = ok && (u64)idx[d] < (u64)a.shape[d];
    off += idx[d] * a.stride[d];
  }
  return off;
}

// Gather and scatter on a rank-1, unit-stride, 16-byte-aligned array whose index tile comes in runs (the
// kernel's tj.max_contiguous / tj.multiple_of promises): each group of VEC register slots holds VEC
// consecutive indices, the first a multiple of VEC, so a group wholly in range is one vector access; any
// other group goes element by element, each index checked.
template <int VEC, class T, class L, class I>
__device__ __forceinline__ void gather_runs(Tile<T, L>& out, const Array<T, 1>& a, const Tile<I, L>& ix, T pad) {
  typedef Pack<T, VEC> P;
  const i64 n = a.shape[0];
#pragma unroll
  for (int g = 0; g < L::E / VEC; ++g) {
    const i64 first = (i64)ix.v[g * VEC];
    P p;
    if (first >= 0 && first <= n - VEC) {
      const typename P::W* src = reinterpret_cast<const typename P::W*>(a.ptr + first);
#pragma unroll
      for (int w = 0; w < P::BYTES / P::WB; ++w) p.w[w] = src[w];
    } else {
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        const i64 k = (i64)ix.v[g * VEC + v];
        p.e[v] = (u64)k < (u64)n ? a.ptr[k] : pad;
      }
    }
#pragma unroll
    for (int v = 0; v < VEC; ++v) out.v[g * VEC + v] = p.e[v];
  }
}

template <int VEC, class T, class L, class I>
__device__ __forceinline__ void scatter_runs(const Array<T, 1>& a, const Tile<I, L>& ix, const Tile<T, L>& t) {
  if (!L::owner(threadIdx.x)) return;
  typedef Pack<T, VEC> P;
  const i64 n = a.shape[0];
#pragma unroll
  for (int g = 0; g < L::E / VEC; ++g) {
    const i64 first = (i64)ix.v[g * VEC];
    if (first >= 0 && first <= n - VEC) {
      P p;
#pragma unroll
      for (int v = 0; v < VEC; ++v) p.e[v] = t.v[g * VEC + v];
      typename P::W* dst = reinterpret_cast<typename P::W*>(a.ptr + first);
#pragma unroll
      for (int w = 0; w < P::BYTES / P::WB; ++w) dst[w] = p.w[w];
    } else {
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        const i64 k = (i64)ix.v[g * VEC + v];
        if ((u64)k < (u64)n) a.ptr[k] = t.v[g * VEC + v];
      }
    }
  }
}

// ---- atomics: add / max / min / xchg / cas, by element type, with a memory order and scope
//
// tj::atomic_KIND<SEM, SCOPE>(p, ...) returns the old value. SEM and SCOPE are PTX's .sem and .scope qualifiers
// (below). From sm_70 on each hardware atomic is one `atom.<sem>.<scope>.global` instruction; the types without
// one (float max/min, 16-bit max/min/xchg and integer add, bfloat16 add before sm_90, float16 add before
// sm_70) loop on a compare-and-swap that carries the order. Before sm_70 (no .sem or .scope on atom) the
// device-scope atomic runs between fences of the scope: one before it to release, one after it to acquire.
// The generated code adds the block barriers that make the order the whole block's (memory_lower.py).
enum { RELAXED = 0, ACQUIRE = 1, RELEASE = 2, ACQ_REL = 3 };  // bit 0: acquires, bit 1: releases
enum { CTA = 0, GPU = 1, SYS = 2 };

// A memory fence of SCOPE for the calling thread: fence.acq_rel (membar before sm_70).
template <int SCOPE>
__device__ __forceinline__ void fence() {
#if __CUDA_ARCH__ >= 700
  if (SCOPE == CTA) asm volatile("fence.acq_rel.cta;" ::: "memory");
  if (SCOPE == GPU) asm volatile("fence.acq_rel.gpu;" ::: "memory");
  if (SCOPE == SYS) asm volatile("fence.acq_rel.sys;" ::: "memory");
#else
  if (SCOPE == CTA) asm volatile("membar.cta;" ::: "memory");
  if (SCOPE == GPU) asm volatile("membar.gl;" ::: "memory");
  if (SCOPE == SYS) asm volatile("membar.sys;" ::: "memory");
#endif
}

// ASM(Q, ...) with Q the qualifier string of SEM and SCOPE (".acq_rel.gpu"); before sm_70 with none, between
// fences. The switch is on template constants: only the chosen instruction is compiled.
#if __CUDA_ARCH__ >= 700
#define TJ_ORDERED(ASM, ...)                                                                          \
  switch (SEM * 3 + SCOPE) {                                                                          \
    case 0: ASM(".relaxed.cta", __VA_ARGS__); break;                                                  \
    case 1: ASM(".relaxed.gpu", __VA_ARGS__); break;                                                  \
    case 2: ASM(".relaxed.sys", __VA_ARGS__); break;                                                  \
    case 3: ASM(".acquire.cta", __VA_ARGS__); break;                                                  \
    case 4: ASM(".acquire.gpu", __VA_ARGS__); break;                                                  \
    case 5: ASM(".acquire.sys", __VA_ARGS__); break;                                                  \
    case 6: ASM(".release.cta", __VA_ARGS__); break;                                                  \
    case 7: ASM(".release.gpu", __VA_ARGS__); break;                                                  \
    case 8: ASM(".release.sys", __VA_ARGS__); break;                                                  \
    case 9: ASM(".acq_rel.cta", __VA_ARGS__); break;                                                  \
    case 10: ASM(".acq_rel.gpu", __VA_ARGS__); break;                                                 \
    default: ASM(".acq_rel.sys", __VA_ARGS__); break;                                                 \
  }
#else
#define TJ_ORDERED(ASM, ...)                                                                          \
  if (SEM & RELEASE) fence<SCOPE>();                                                                  \
  ASM("", __VA_ARGS__);                                                                               \
  if (SEM & ACQUIRE) fence<SCOPE>();
#endif
#define TJ_RMW_ASM(Q, INSTR, C) \
  asm volatile("atom" Q ".global." INSTR " %0, [%1], %2;" : "=" C(old) : "l"(p), C(v) : "memory")
#define TJ_CAS_ASM(Q, INSTR, C) \
  asm volatile("atom" Q ".global." INSTR " %0, [%1], %2, %3;" : "=" C(old) : "l"(p), C(cmp), C(v) : "memory")
// Ordered one-instruction atomics on words: NAME<SEM, SCOPE>(p, v) (and cas: (p, cmp, v)).
#define TJ_RMW(NAME, W, INSTR, C)                                        \
  template <int SEM, int SCOPE>                                          \
  __device__ __forceinline__ W NAME(W* p, W v) {                         \
    W old;                                                               \
    TJ_ORDERED(TJ_RMW_ASM, INSTR, C)                                     \
    return old;                                                          \
  }
#define TJ_CAS(W, INSTR, C)                                              \
  template <int SEM, int SCOPE>                                          \
  __device__ __forceinline__ W atom_cas(W* p, W cmp, W v) {              \
    W old;                                                               \
    TJ_ORDERED(TJ_CAS_ASM, INSTR, C)                                     \
    return old;                                                          \
  }
TJ_RMW(atom_add, i32, "add.s32", "r")
TJ_RMW(atom_add, u32, "add.u32", "r")
TJ_RMW(atom_add, u64, "add.u64", "l")
TJ_RMW(atom_add, float, "add.f32", "f")
TJ_RMW(atom_add_f64, double, "add.f64", "d")   // sm_60+
TJ_RMW(atom_add_f16, u16, "add.noftz.f16", "h")   // sm_70+
TJ_RMW(atom_add_bf16, u16, "add.noftz.bf16", "h")   // sm_90+
TJ_RMW(atom_max, i32, "max.s32", "r")
TJ_RMW(atom_max, u32, "max.u32", "r")
TJ_RMW(atom_max, i64, "max.s64", "l")
TJ_RMW(atom_max, u64, "max.u64", "l")
TJ_RMW(atom_min, i32, "min.s32", "r")
TJ_RMW(atom_min, u32, "min.u32", "r")
TJ_RMW(atom_min, i64, "min.s64", "l")
TJ_RMW(atom_min, u64, "min.u64", "l")
TJ_RMW(atom_exch, u32, "exch.b32", "r")
TJ_RMW(atom_exch, u64, "exch.b64", "l")
TJ_CAS(u32, "cas.b32", "r")
TJ_CAS(u64, "cas.b64", "l")
#if __CUDA_ARCH__ >= 700
TJ_CAS(u16, "cas.b16", "h")
#endif
#undef TJ_RMW
#undef TJ_CAS
#undef TJ_RMW_ASM
#undef TJ_CAS_ASM
#undef TJ_ORDERED

// A 16-bit compare-and-swap: one instruction from sm_70 on, before it a CAS loop on the 32-bit word around it.
template <int SEM, int SCOPE>
__device__ __forceinline__ u16 cas_word(u16* p, u16 cmp, u16 val) {
#if __CUDA_ARCH__ >= 700
  return atom_cas<SEM, SCOPE>(p, cmp, val);
#else
  u32* w = (u32*)((u64)p & ~(u64)3);
  const int sh = ((u64)p & 2) ? 16 : 0;
  u32 cur = *w;
  for (;;) {
    const u16 have = (u16)(cur >> sh);
    if (have != cmp) return have;
    const u32 next = (cur & ~(0xffffu << sh)) | ((u32)val << sh);
    const u32 seen = atom_cas<SEM, SCOPE>(w, cur, next);
    if (seen == cur) return have;
    cur = seen;
  }
#endif
}
template <int SEM, int SCOPE>
__device__ __forceinline__ u32 cas_word(u32* p, u32 c, u32 v) { return atom_cas<SEM, SCOPE>(p, c, v); }
template <int SEM, int SCOPE>
__device__ __forceinline__ u64 cas_word(u64* p, u64 c, u64 v) { return atom_cas<SEM, SCOPE>(p, c, v); }

// Generic read-modify-write through compare-and-swap on the element's bits.
template <int SEM, int SCOPE, class T, class F>
__device__ __forceinline__ T atomic_cas_loop(T* p, T val, F fn) {
  typedef typename UWord<sizeof(T)>::type W;
  union U { T t; W w; };
  U cur, next;
  cur.t = *p;
  for (;;) {
    next.t = fn(cur.t, val);
    U seen;
    seen.w = cas_word<SEM, SCOPE>(reinterpret_cast<W*>(p), cur.w, next.w);
    if (seen.w == cur.w) return cur.t;
    cur = seen;
  }
}
struct AddFn { template <class T> __device__ T operator()(T a, T b) const { return cast<T>(static_cast<typename Compute<T>::type>(a) + static_cast<typename Compute<T>::type>(b)); } };
struct MaxFn { template <class T> __device__ T operator()(T a, T b) const { return cast<T>(maximum(static_cast<typename Compute<T>::type>(a), static_cast<typename Compute<T>::type>(b))); } };
struct MinFn { template <class T> __device__ T operator()(T a, T b) const { return cast<T>(minimum(static_cast<typename Compute<T>::type>(a), static_cast<typename Compute<T>::type>(b))); } };
struct XchgFn { template <class T> __device__ T operator()(T, T b) const { return b; } };

// atomic_add
template <int SEM, int SCOPE, class T>
__device__ __forceinline__ T atomic_add(T* p, T v) { return atomic_cas_loop<SEM, SCOPE>(p, v, AddFn()); }
template <int SEM, int SCOPE>
__device__ __forceinline__ i32 atomic_add(i32* p, i32 v) { return atom_add<SEM, SCOPE>(p, v); }
template <int SEM, int SCOPE>
__device__ __forceinline__ u32 atomic_add(u32* p, u32 v) { return atom_add<SEM, SCOPE>(p, v); }
template <int SEM, int SCOPE>
__device__ __forceinline__ u64 atomic_add(u64* p, u64 v) { return atom_add<SEM, SCOPE>(p, v); }
template <int SEM, int SCOPE>
__device__ __forceinline__ i64 atomic_add(i64* p, i64 v) { return (i64)atom_add<SEM, SCOPE>((u64*)p, (u64)v); }
template <int SEM, int SCOPE>
__device__ __forceinline__ float atomic_add(float* p, float v) { return atom_add<SEM, SCOPE>(p, v); }
template <int SEM, int SCOPE>
__device__ __forceinline__ double atomic_add(double* p, double v) {
#if __CUDA_ARCH__ >= 600
  return atom_add_f64<SEM, SCOPE>(p, v);
#else
  return atomic_cas_loop<SEM, SCOPE>(p, v, AddFn());
#endif
}
template <int SEM, int SCOPE>
__device__ __forceinline__ half atomic_add(half* p, half v) {
#if __CUDA_ARCH__ >= 700
  return half::from_bits(atom_add_f16<SEM, SCOPE>(&p->bits, v.bits));
#else
  return atomic_cas_loop<SEM, SCOPE>(p, v, AddFn());
#endif
}
template <int SEM, int SCOPE>
__device__ __forceinline__ bf16 atomic_add(bf16* p, bf16 v) {
#if __CUDA_ARCH__ >= 900
  bf16 old;
  old.bits = atom_add_bf16<SEM, SCOPE>(&p->bits, v.bits);
  return old;
#else
  return atomic_cas_loop<SEM, SCOPE>(p, v, AddFn());
#endif
}

// atomic_max / atomic_min: one instruction for 32/64-bit integers, CAS loops otherwise.
template <int SEM, int SCOPE, class T>
__device__ __forceinline__ T atomic_max(T* p, T v) { return atomic_cas_loop<SEM, SCOPE>(p, v, MaxFn()); }
template <int SEM, int SCOPE, class T>
__device__ __forceinline__ T atomic_min(T* p, T v) { return atomic_cas_loop<SEM, SCOPE>(p, v, MinFn()); }
#define TJ_MAX_MIN(W)                                                                                              \
  template <int SEM, int SCOPE>                                                                                    \
  __device__ __forceinline__ W atomic_max(W* p, W v) { return atom_max<SEM, SCOPE>(p, v); }                        \
  template <int SEM, int SCOPE>                                                                                    \
  __device__ __forceinline__ W atomic_min(W* p, W v) { return atom_min<SEM, SCOPE>(p, v); }
TJ_MAX_MIN(i32)
TJ_MAX_MIN(u32)
TJ_MAX_MIN(i64)
TJ_MAX_MIN(u64)
#undef TJ_MAX_MIN

// atomic_xchg / atomic_cas on the element's bits (16/32/64-bit types; 16-bit exchanges are CAS loops).
template <int SEM, int SCOPE>
__device__ __forceinline__ u16 exch_word(u16* p, u16 v) { return atomic_cas_loop<SEM, SCOPE>(p, v, XchgFn()); }
template <int SEM, int SCOPE>
__device__ __forceinline__ u32 exch_word(u32* p, u32 v) { return atom_exch<SEM, SCOPE>(p, v); }
template <int SEM, int SCOPE>
__device__ __forceinline__ u64 exch_word(u64* p, u64 v) { return atom_exch<SEM, SCOPE>(p, v); }
template <int SEM, int SCOPE, class T>
__device__ __forceinline__ T atomic_xchg(T* p, T v) {
  typedef typename UWord<sizeof(T)>::type W;
  union U { T t; W w; };
  U n, o;
  n.t = v;
  o.w = exch_word<SEM, SCOPE>(reinterpret_cast<W*>(p), n.w);
  return o.t;
}
template <int SEM, int SCOPE, class T>
__device__ __forceinline__ T atomic_cas(T* p, T cmp, T v) {
  typedef typename UWord<sizeof(T)>::type W;
  union U { T t; W w; };
  U c, n, o;
  c.t = cmp;
  n.t = v;
  o.w = cas_word<SEM, SCOPE>(reinterpret_cast<W*>(p), c.w, n.w);
  return o.t;
}

// ---- cp.async (sm_80+): global → shared copies that complete in commit groups
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
#if __CUDA_ARCH__ >= 800
  unsigned d;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(d) : "l"(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Where element (row, col) of a (ROWS, COLS) tile sits in a shared-memory stage, in elements.
// SW == 0: row-major with row stride LD. SW = 32/64/128: the swizzled layout wgmma reads: columns
// cut into chunks of SW bytes, each chunk ROWS rows of SW bytes, and the 16-byte unit index XORed
// with address bits 7.. (the hardware's 32/64/128-byte swizzle; the stage must be 1024-aligned).
template <int ROWS, int LD, int SW, class T>
__device__ __forceinline__ int stage_offset(int row, int col) {
  if (SW == 0) return row * LD + col;
  constexpr int CW = SW / (int)sizeof(T);
  int off = (col / CW) * ROWS * SW + row * SW + (col % CW) * (int)sizeof(T);
  off ^= ((off >> 7) & (SW / 16 - 1)) << 4;
  return off / (int)sizeof(T);
}

// Copy the (ROWS, COLS) tile at (r0, c0) of a row-major (rows, cols) matrix at ptr with row stride
// ld (unit inner stride, 16-byte aligned rows) into a shared-memory stage laid out as
// ``stage_offset`` says, 16 bytes per cp.async; bytes outside the matrix are zero-filled.
template <int ROWS, int COLS, int LD, int NT, int SW, class T>
__device__ __forceinline__ void cp_async_rows(T* dst, const T* ptr, i64 rows, i64 cols, i64 ld, i64 r0, i64 c0) {
  constexpr int V = 16 / (int)sizeof(T);
  constexpr int CPR = COLS / V;  // chunks per row
  constexpr int CHUNKS = ROWS * CPR;
  const int tid = threadIdx.x;
  const bool full = r0 >= 0 && c0 >= 0 && r0 + ROWS <= rows && c0 + COLS <= cols;
  const T* base = ptr + r0 * ld + c0;
#pragma unroll
  for (int j = 0; j < (CHUNKS + NT - 1) / NT; ++j) {
    const int c = tid + j * NT;
    if (CHUNKS % NT == 0 || c < CHUNKS) {
      const int row = c / CPR, col = (c % CPR) * V;
      if (full) {
        cp_async16(dst + stage_offset<ROWS, LD, SW, T>(row, col), base + row * ld + col, 16);
        continue;
      }
      const i64 r = r0 + row, cc = c0 + col;
      i64 left = (cols - cc) * (i64)sizeof(T);
      left = left < 0 ? 0 : (left > 16 ? 16 : left);
      const bool ok = (u64)r < (u64)rows && left > 0;
      const T* src = ok ? ptr + r * ld + cc : ptr;
      cp_async16(dst + stage_offset<ROWS, LD, SW, T>(row, col), src, ok ? (int)left : 0);
    }
  }
}

// The (ROWS, COLS) tile at (r0, c0) of a 2-D array (see cp_async_rows).
template <int ROWS, int COLS, int LD, int NT, int SW, class T>
__device__ __forceinline__ void cp_async_tile(T* dst, const Array<T, 2>& a, i64 r0, i64 c0) {
  cp_async_rows<ROWS, COLS, LD, NT, SW>(dst, a.ptr, a.shape[0], a.shape[1], a.stride[0], r0, c0);
}

// The (1, ROWS, COLS) tile at (z, r0, c0) of a 3-D array: matrix z, all zeros when z is out of range.
template <int ROWS, int COLS, int LD, int NT, int SW, class T>
__device__ __forceinline__ void cp_async_tile(T* dst, const Array<T, 3>& a, i64 z, i64 r0, i64 c0) {
  const bool in = (u64)z < (u64)a.shape[0];
  cp_async_rows<ROWS, COLS, LD, NT, SW>(dst, a.ptr + (in ? z * a.stride[0] : 0), in ? a.shape[1] : 0, a.shape[2],
                                        a.stride[1], r0, c0);
}

// A warp-specialized producer's cp_async_rows (same stage layout, same zero-fill): its NT threads, numbered
// by tid, each own one 16-byte column of the tile and copy it in every NT / CPR-th row, so a thread's
// column bounds and source pointer are computed once and its rows advance by a constant stride: few
// registers, as the producer keeps after setmaxnreg.dec. The chunk order (row-major) matches cp_async_rows'.
template <int ROWS, int COLS, int LD, int NT, int SW, class T>
__device__ __forceinline__ void cp_async_rows_by(T* dst, const T* ptr, i64 rows, i64 cols, i64 ld, i64 r0, i64 c0,
                                                 int tid) {
  constexpr int V = 16 / (int)sizeof(T);
  constexpr int CPR = COLS / V;   // chunks per row
  constexpr int RS = NT / CPR;    // rows between a thread's chunks
  static_assert(NT % CPR == 0 && ROWS % RS == 0, "cp_async_rows_by: the threads must tile the rows evenly");
  const int row = tid / CPR, col = (tid % CPR) * V;
  const i64 r = r0 + row, c = c0 + col;
  i64 left = (cols - c) * (i64)sizeof(T);  // bytes of this column inside the matrix (ragged edge: fewer)
  left = c < 0 ? 0 : (left < 0 ? 0 : (left > 16 ? 16 : left));
  const i64 below = rows - r;              // rows of the matrix from this thread's first row on
  const T* src = ptr + r * ld + c;
  const i64 step = (i64)RS * ld;
  // a swizzled stage's XOR pattern repeats every 8 rows: the offsets of P rows, then jumps of P * RS rows
  constexpr int P = SW == 0 || RS >= 8 ? 1 : 8 / RS;
  constexpr int JUMP = SW == 0 ? P * RS * LD : P * RS * SW / (int)sizeof(T);
  int off[P];
#pragma unroll
  for (int p = 0; p < P; ++p) off[p] = stage_offset<ROWS, LD, SW, T>(row + p * RS, col);
#pragma unroll
  for (int j = 0; j < ROWS / RS; ++j) {
    const bool ok = left > 0 && r + j * RS >= 0 && (i64)j * RS < below;
    cp_async16(dst + off[j % P] + (j / P) * JUMP, ok ? src : ptr, ok ? (int)left : 0);
    src += step;
  }
}

// The (ROWS, COLS) tile at (r0, c0) of a 2-D array, copied by a producer's thread tid of NT (cp_async_rows_by).
template <int ROWS, int COLS, int LD, int NT, int SW, class T>
__device__ __forceinline__ void cp_async_tile_by(T* dst, const Array<T, 2>& a, i64 r0, i64 c0, int tid) {
  cp_async_rows_by<ROWS, COLS, LD, NT, SW>(dst, a.ptr, a.shape[0], a.shape[1], a.stride[0], r0, c0, tid);
}

// The (1, ROWS, COLS) tile at (z, r0, c0) of a 3-D array, by a producer's thread (all zeros when z is out of range).
template <int ROWS, int COLS, int LD, int NT, int SW, class T>
__device__ __forceinline__ void cp_async_tile_by(T* dst, const Array<T, 3>& a, i64 z, i64 r0, i64 c0, int tid) {
  const bool in = (u64)z < (u64)a.shape[0];
  cp_async_rows_by<ROWS, COLS, LD, NT, SW>(dst, a.ptr + (in ? z * a.stride[0] : 0), in ? a.shape[1] : 0,
                                           a.shape[2], a.stride[1], r0, c0, tid);
}

}  // namespace tj
