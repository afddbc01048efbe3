// tilejit device headers: matrix multiply-accumulate of tiles.
//
// Operands go to shared memory as row-major matrices with rows padded by 16 bytes (A: M x (K+PA),
// B: K x (N+PB)), which keeps ldmatrix and the fragment loads free of bank conflicts.
//  * TensorCore (sm_80+, f16/bf16 inputs, f32 accumulate): each of the WM x WN warps owns a
//    (M/WM) x (N/WN) block of m16n8 accumulator fragments, loads A with ldmatrix.x4 and B with
//    ldmatrix.x4.trans and issues mma.sync.aligned.m16n8k16. The accumulator tile stays in the
//    fragment layout (tile.cuh), so a K loop never moves it. A cp.async stage of a transposed load
//    holds A as K x (M+PA) (read with ldmatrix.trans) or B as N x (K+PB) (plain ldmatrix).
//  * TensorCoreTF32 (sm_80+, f32 inputs with tf32 allowed): mma.sync.aligned.m16n8k8.tf32.
//  * TensorCoreFP8 (sm_89+, e4m3 or e5m2 inputs): mma.sync.aligned.m16n8k32, fragments read with plain loads.
//  * Wgmma (sm_90a, f16/bf16 inputs staged by a cp.async pipeline): each warpgroup issues
//    wgmma.mma_async m64nNk16 on swizzled shared-memory stages (memory.cuh's stage_offset) read
//    through matrix descriptors; A is K-major, B N-major (imm-trans-b), or for transposed loads A
//    M-major (imm-trans-a) and B K-major. The accumulator fragment
//    is TensorCore's layout with WM = M/16 warps along M, so both paths share one layout.
//    With TILEJIT_CUDA_WARP_SPECIALIZE=1 a producer warpgroup feeds those stages through a ring of
//    mbarriers instead (the helpers at the end of this file, mma_lower.py's lower_warp_specialized),
//    with TMA (tma_tile, host-encoded tensor maps) unless TILEJIT_CUDA_TMA=0 or the arrays do not allow it.
//  * mma_fma: any dtype, any target, any accumulator layout: each thread forms its own elements.
#pragma once
#include <tilejit/math.cuh>
#include <tilejit/memory.cuh>
#include <tilejit/tile.cuh>

namespace tj {

__device__ __forceinline__ u32 smem_addr(const void* p) {
  u32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// The first address at or after p (in shared memory) that is a multiple of A bytes.
template <int A>
__device__ __forceinline__ unsigned char* align_smem(unsigned char* p) {
  return p + ((A - (smem_addr(p) & (A - 1))) & (A - 1));
}

// Write a 2-D tile into shared memory with row stride LD elements (VEC-element groups at once).
template <int COLS, int LD, int VEC, class L, class T>
__device__ __forceinline__ void to_smem(T* s, const Tile<T, L>& t) {
  const int tid = threadIdx.x;
  if (!L::owner(tid)) return;
  constexpr int SH = Shape<COLS>::log2(COLS);
#pragma unroll
  for (int g = 0; g < L::E / VEC; ++g) {
    const int f = L::flat(tid, g * VEC);
    T* dst = s + (f >> SH) * LD + (f & (COLS - 1));
    typedef Pack<T, VEC> P;
    P p;
#pragma unroll
    for (int v = 0; v < VEC; ++v) p.e[v] = t.v[g * VEC + v];
#pragma unroll
    for (int w = 0; w < P::BYTES / P::WB; ++w) reinterpret_cast<typename P::W*>(dst)[w] = p.w[w];
  }
}

// acc[i] += sum_k A[row][k] * B[k][col] for each accumulator element the thread holds.
template <int K, int N, int LDA, int LDB, class L, class A, class T>
__device__ __forceinline__ void mma_fma(Tile<A, L>& acc, const T* As, const T* Bs) {
  const int tid = threadIdx.x;
  constexpr int SH = Shape<N>::log2(N);
#pragma unroll 4
  for (int k = 0; k < K; ++k) {
    TJ_EACH(i, L) {
      const int f = L::flat(tid, i);
      const A a = cast<A>(As[(f >> SH) * LDA + k]);
      const A b = cast<A>(Bs[k * LDB + (f & (N - 1))]);
      acc.v[i] = A(acc.v[i] + a * b);
    }
  }
}

__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_t(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

template <class T> struct MmaName;
template <> struct MmaName<half> {
  __device__ __forceinline__ static void mma(float* d, const u32 (&a)[4], const u32* b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct MmaName<bf16> {
  __device__ __forceinline__ static void mma(float* d, const u32 (&a)[4], const u32* b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// Accumulator element i of a warp: i = (mi * NTL + ni) * 4 + r (the m16n8 C fragment order).
// TA: A is stored transposed, K rows of M (row stride LDA); TB: B is stored transposed, N rows of K
// (row stride LDB), as a cp.async stage of a transposed load holds them.
template <class T, int M, int N, int K, int WM, int WN, int LDA, int LDB, bool TA = false, bool TB = false>
struct TensorCore {
  static constexpr int WTM = M / WM, WTN = N / WN, MT = WTM / 16, NTL = WTN / 8;
  // Fragments of k-step kk. A: ldmatrix.x4 (.trans when stored K-by-M: its 8x8 blocks are A^T's);
  // B: ldmatrix.x4.trans (plain when stored N-by-K, which is the "col" layout mma.sync reads).
  // x2 for an odd n8 tile.
  __device__ __forceinline__ static void frags(u32 (&af)[MT][4], u32 (&bfr)[NTL][2], u32 a_base, u32 b_base, int kk) {
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      if (TA) ldsm_x4_t(af[mi], a_base + (u32)((kk * 16 * LDA + mi * 16) * 2));
      else ldsm_x4(af[mi], a_base + (u32)((mi * 16 * LDA + kk * 16) * 2));
    }
    b_frags(bfr, b_base, kk);
  }
  __device__ __forceinline__ static void b_frags(u32 (&bfr)[NTL][2], u32 b_base, int kk) {
#pragma unroll
    for (int nj = 0; nj < NTL / 2; ++nj) {
      u32 r[4];
      b_pair(r, b_base, kk, nj);
      bfr[2 * nj][0] = r[0];
      bfr[2 * nj][1] = r[1];
      bfr[2 * nj + 1][0] = r[2];
      bfr[2 * nj + 1][1] = r[3];
    }
    if (NTL % 2) b_last(bfr[NTL - 1], b_base, kk);
  }
  // The fragments of n8 tiles 2nj and 2nj + 1 (r[0..1], r[2..3]) of k-step kk, and of the last n8 tile (odd NTL).
  __device__ __forceinline__ static void b_pair(u32 (&r)[4], u32 b_base, int kk, int nj) {
    if (TB) ldsm_x4(r, b_base + (u32)((nj * 16 * LDB + kk * 16) * 2));
    else ldsm_x4_t(r, b_base + (u32)((kk * 16 * LDB + nj * 16) * 2));
  }
  __device__ __forceinline__ static void b_last(u32 (&r)[2], u32 b_base, int kk) {
    if (TB) ldsm_x2(r, b_base + (u32)(((NTL - 1) * 8 * LDB + kk * 16) * 2));
    else ldsm_x2_t(r, b_base + (u32)((kk * 16 * LDB + (NTL - 1) * 8) * 2));
  }

  // This lane's ldmatrix address of B's first k-step for the warp's columns n0.. (see run).
  __device__ __forceinline__ static u32 b_addr(const T* Bs, int n0) {
    const int lane = threadIdx.x & 31, q = (lane >> 3) & 1, h = lane >> 4, r8 = lane & 7;
    return TB ? smem_addr(Bs + (n0 + h * 8 + r8) * LDB + q * 8) : smem_addr(Bs + (lane & 15) * LDB + n0 + h * 8);
  }

  // The k-steps are software-pipelined: fragments of step kk+1 load while step kk multiplies.
  template <class L>
  __device__ __forceinline__ static void run(Tile<float, L>& acc, const T* As, const T* Bs) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = (warp % WM) * WTM, n0 = (warp / WM) * WTN;
    // Lane l addresses row l % 8 of 8x8 block l / 8. Blocks in register order: A (m, k) offsets
    // (0,0) (8,0) (0,8) (8,8); B (k, n) offsets (0,0) (8,0) (0,8) (8,8) of two n8 tiles.
    const int q = (lane >> 3) & 1, h = lane >> 4, r8 = lane & 7;
    const u32 a_base = TA ? smem_addr(As + (h * 8 + r8) * LDA + m0 + q * 8)
                          : smem_addr(As + (m0 + (lane & 15)) * LDA + (lane >> 4) * 8);
    const u32 b_base = b_addr(Bs, n0);
    u32 af[2][MT][4];
    u32 bfr[2][NTL][2];
    frags(af[0], bfr[0], a_base, b_base, 0);
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      if (kk + 1 < K / 16) frags(af[(kk + 1) & 1], bfr[(kk + 1) & 1], a_base, b_base, kk + 1);
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < NTL; ++ni) MmaName<T>::mma(&acc.v[(mi * NTL + ni) * 4], af[kk & 1][mi], bfr[kk & 1][ni]);
    }
  }
};

// Two 16-bit elements as one 32-bit register (the first in the low half), as mma.sync's fragments hold them.
template <class T>
__device__ __forceinline__ u32 pack_b16(T lo, T hi) {
  return (u32)lo.bits | ((u32)hi.bits << 16);
}

// acc += A @ B with A in registers: the (M, K) tile in the m16n8 C-fragment layout of WM x 1 warps (layouts.py's
// mma_layout(M, K, NT, WarpGrid(WM, 1)), e.g. another mma's f32 result converted elementwise), B in shared memory
// as for run. Its n8 tiles 2kk and 2kk + 1 of row block mi are exactly the A fragment of k-step kk
// (a0..a3: rows g, g + 8 of columns 2t, 2t + 1; a4..a7: the same 8 columns on), so no data moves.
// STREAM: B's fragments are read pair by pair as the mmas use them, not a whole k-step ahead (2 * N / 4 registers
// fewer: a kernel whose accumulators crowd the registers, e.g. an attention backward's dK and dV at d128).
template <class T, int M, int N, int K, int WM, int LDB, bool TB = false, bool STREAM = false>
struct TensorCoreRA {
  static constexpr int MT = M / WM / 16, NTL = N / 8, KT = K / 8;
  typedef TensorCore<T, M, N, K, WM, 1, K + 8, LDB, false, TB> Base;

  template <class LA>
  __device__ __forceinline__ static void a_frags(u32 (&af)[MT][4], const Tile<T, LA>& a, int kk) {
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      const int e = (mi * KT + 2 * kk) * 4;
#pragma unroll
      for (int w = 0; w < 4; ++w) af[mi][w] = pack_b16(a.v[e + 2 * w], a.v[e + 2 * w + 1]);
    }
  }

  template <class L, class LA>
  __device__ __forceinline__ static void run(Tile<float, L>& acc, const Tile<T, LA>& a, const T* Bs) {
    static_assert(LA::E == MT * KT * 4 && L::E == MT * NTL * 4, "A is not in the fragment layout of these warps");
    const u32 b_base = Base::b_addr(Bs, 0);
    if (STREAM) {
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
        u32 af[MT][4];
        a_frags(af, a, kk);
#pragma unroll
        for (int nj = 0; nj < NTL / 2; ++nj) {
          u32 r[4];
          Base::b_pair(r, b_base, kk, nj);
#pragma unroll
          for (int mi = 0; mi < MT; ++mi) {
            MmaName<T>::mma(&acc.v[(mi * NTL + 2 * nj) * 4], af[mi], r);
            MmaName<T>::mma(&acc.v[(mi * NTL + 2 * nj + 1) * 4], af[mi], r + 2);
          }
        }
        if (NTL % 2) {
          u32 r[2];
          Base::b_last(r, b_base, kk);
#pragma unroll
          for (int mi = 0; mi < MT; ++mi) MmaName<T>::mma(&acc.v[(mi * NTL + NTL - 1) * 4], af[mi], r);
        }
      }
      return;
    }
    u32 af[MT][4];
    u32 bfr[2][NTL][2];
    Base::b_frags(bfr[0], b_base, 0);
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      if (kk + 1 < K / 16) Base::b_frags(bfr[(kk + 1) & 1], b_base, kk + 1);
      a_frags(af, a, kk);
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < NTL; ++ni) MmaName<T>::mma(&acc.v[(mi * NTL + ni) * 4], af[mi], bfr[kk & 1][ni]);
    }
  }
};

__device__ __forceinline__ u32 to_tf32(float x) {
  u32 r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

template <int M, int N, int K, int WM, int WN, int LDA, int LDB>
struct TensorCoreTF32 {
  static constexpr int WTM = M / WM, WTN = N / WN, MT = WTM / 16, NTL = WTN / 8;
  template <class L>
  __device__ __forceinline__ static void run(Tile<float, L>& acc, const float* As, const float* Bs) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = (warp % WM) * WTM, n0 = (warp / WM) * WTN;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int kk = 0; kk < K / 8; ++kk) {
      u32 af[MT][4];
      u32 bfr[NTL][2];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        const float* p = As + (m0 + mi * 16 + g) * LDA + kk * 8 + t;
        af[mi][0] = to_tf32(p[0]);
        af[mi][1] = to_tf32(p[8 * LDA]);
        af[mi][2] = to_tf32(p[4]);
        af[mi][3] = to_tf32(p[8 * LDA + 4]);
      }
#pragma unroll
      for (int ni = 0; ni < NTL; ++ni) {
        const float* p = Bs + (kk * 8 + t) * LDB + n0 + ni * 8 + g;
        bfr[ni][0] = to_tf32(p[0]);
        bfr[ni][1] = to_tf32(p[4 * LDB]);
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < NTL; ++ni) {
          float* d = &acc.v[(mi * NTL + ni) * 4];
          asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                       : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                       : "r"(af[mi][0]), "r"(af[mi][1]), "r"(af[mi][2]), "r"(af[mi][3]), "r"(bfr[ni][0]), "r"(bfr[ni][1]));
        }
    }
  }
};

// m16n8k32 with 8-bit float inputs (sm_89+): e4m3 or e5m2, f32 accumulators.
template <class T> struct MmaFp8;
#if __CUDA_ARCH__ >= 890
#define TJ_MMA_FP8_ASM(P)                                                                                          \
  asm("mma.sync.aligned.m16n8k32.row.col.f32." P "." P ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                            \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
#define TJ_MMA_FP8_ASM(P)
#endif
#define TJ_MMA_FP8(T, P)                                                                          \
  template <> struct MmaFp8<T> {                                                                  \
    __device__ __forceinline__ static void mma(float* d, const u32 (&a)[4], const u32 (&b)[2]) { \
      TJ_MMA_FP8_ASM(P)                                                                           \
    }                                                                                             \
  };
TJ_MMA_FP8(e4m3, "e4m3")
TJ_MMA_FP8(e5m2, "e5m2")
#undef TJ_MMA_FP8
#undef TJ_MMA_FP8_ASM

// TensorCore's warp tiling and accumulator fragments with 8-bit float operands (one byte each) and K steps of
// 32. A register of A holds four consecutive k of one row (one 32-bit shared-memory read); one of B four
// consecutive k of one column, gathered from four rows of the K x N stage.
template <class T, int M, int N, int K, int WM, int WN, int LDA, int LDB>
struct TensorCoreFP8 {
  static constexpr int WTM = M / WM, WTN = N / WN, MT = WTM / 16, NTL = WTN / 8;
  static_assert(sizeof(T) == 1 && K % 32 == 0 && LDA % 4 == 0, "not an fp8 mma tiling");
#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ * 100 + __CUDACC_VER_MINOR__ < 1204
  static_assert(K < 0, "8-bit float mma.sync needs NVRTC 12.4 or newer (PTX ISA 8.4): set TILEJIT_NVRTC to one");
#endif
  template <class L>
  __device__ __forceinline__ static void run(Tile<float, L>& acc, const T* As, const T* Bs) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = (warp % WM) * WTM, n0 = (warp / WM) * WTN;
    const int g = lane >> 2, t = lane & 3;
    const u8* a8 = reinterpret_cast<const u8*>(As);
    const u8* b8 = reinterpret_cast<const u8*>(Bs);
#pragma unroll
    for (int kk = 0; kk < K / 32; ++kk) {
      u32 af[MT][4];
      u32 bfr[NTL][2];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        const u8* p = a8 + (m0 + mi * 16 + g) * LDA + kk * 32 + t * 4;
        af[mi][0] = *reinterpret_cast<const u32*>(p);
        af[mi][1] = *reinterpret_cast<const u32*>(p + 8 * LDA);
        af[mi][2] = *reinterpret_cast<const u32*>(p + 16);
        af[mi][3] = *reinterpret_cast<const u32*>(p + 8 * LDA + 16);
      }
#pragma unroll
      for (int ni = 0; ni < NTL; ++ni) {
        const u8* p = b8 + (kk * 32 + t * 4) * LDB + n0 + ni * 8 + g;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const u8* q = p + h * 16 * LDB;
          bfr[ni][h] = (u32)q[0] | (u32)q[LDB] << 8 | (u32)q[2 * LDB] << 16 | (u32)q[3 * LDB] << 24;
        }
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < NTL; ++ni) MmaFp8<T>::mma(&acc.v[(mi * NTL + ni) * 4], af[mi], bfr[ni]);
    }
  }
};

// wgmma.mma_async m64nNk16 for input type T, one specialization per N the kernel uses: the
// backend writes them (the accumulator operand list is N/2 registers long).
// TA/TB: the instruction's imm-trans-a/imm-trans-b (A M-major, B N-major when 1).
template <class T, int N, int TA = 0, int TB = 1> struct WgmmaOp;

// A shared-memory matrix descriptor: start address, leading/stride byte offsets, swizzle mode.
__device__ __forceinline__ u64 wgmma_desc(u32 addr, u32 lbo, u32 sbo, int sw) {
  const u64 mode = sw == 128 ? 1 : sw == 64 ? 2 : sw == 32 ? 3 : 0;
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) | ((u64)((sbo >> 4) & 0x3FFF) << 32) |
         (mode << 62);
}

// acc += A @ B with A an (M, K) stage (K-major chunks of SWA bytes) and B a (K, N) stage (N-major
// chunks of SWB bytes). Warp w covers rows 16 * (w % WM); its warpgroup covers 64 rows and the
// columns [(w / WM) * N / WN, +N / WN). TA: A is a (K, M) stage (M-major chunks of SWA bytes);
// TB: B is an (N, K) stage (K-major chunks of SWB bytes): the wgmma reads them transposed.
template <class T, int M, int N, int K, int WM, int WN, int SWA, int SWB, bool TA = false, bool TB = false>
struct Wgmma {
  static constexpr int WTN = N / WN, CWA = SWA / (int)sizeof(T), CWB = SWB / (int)sizeof(T);
  static_assert(WM % 4 == 0 && M == WM * 16 && K % 16 == 0, "not a wgmma tiling");
  static_assert(TB ? K % CWB == 0 : WTN % CWB == 0, "not a wgmma tiling");
  static_assert(!TA || 64 % CWA == 0, "not a wgmma tiling");

  // cp.async wrote the stage through the generic proxy; wgmma reads it through the async proxy.
  __device__ __forceinline__ static void fence_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

  // Issue the K / 16 wgmmas of one stage as one batch, then wait until at most PENDING batches
  // are in flight (PENDING = 1 lets a K loop overlap this batch with the next stage's set-up).
  // K-major operands: rows of SW bytes, 8-row groups SBO = 8 * SW apart, k steps inside a row.
  // MN-major operands: chunks of SW bytes of K rows, LBO = K * SW apart, 8-k-row groups SBO apart.
  template <int PENDING, class L>
  __device__ __forceinline__ static void run(Tile<float, L>& acc, const T* As, const T* Bs) {
    const int warp = threadIdx.x >> 5;
    const int m0 = (warp % WM) / 4 * 64, n0 = (warp / WM) * WTN;
    const u32 a0 = smem_addr(As) + (u32)(TA ? m0 / CWA * K * SWA : m0 * SWA);
    const u32 b0 = smem_addr(Bs) + (u32)(TB ? n0 * SWB : n0 / CWB * K * SWB);
    pin(acc);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      const int k = kk * 16;
      const u64 da = TA ? wgmma_desc(a0 + (u32)(k * SWA), K * SWA, 8 * SWA, SWA)
                        : wgmma_desc(a0 + (u32)((k / CWA) * M * SWA + (k % CWA) * (int)sizeof(T)), 16, 8 * SWA, SWA);
      const u64 db = TB ? wgmma_desc(b0 + (u32)((k / CWB) * N * SWB + (k % CWB) * (int)sizeof(T)), 16, 8 * SWB, SWB)
                        : wgmma_desc(b0 + (u32)(k * SWB), K * SWB, 8 * SWB, SWB);
      WgmmaOp<T, WTN, TA ? 1 : 0, TB ? 0 : 1>::mma(acc.v, da, db);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    wait<PENDING>(acc);
  }

  template <int PENDING, class L>
  __device__ __forceinline__ static void wait(Tile<float, L>& acc) {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
    pin(acc);
  }

  // The wgmma asm writes the accumulator asynchronously: keep the compiler from moving its
  // registers' other reads and writes across the fence and the wait.
  template <class L>
  __device__ __forceinline__ static void pin(Tile<float, L>& acc) {
#pragma unroll
    for (int i = 0; i < L::E; ++i) asm volatile("" : "+f"(acc.v[i])::"memory");
  }
};


// ---- warp specialization (sm_90a): a producer warpgroup streams a ring of K stages into shared
// memory with cp.async while the consumer warpgroups multiply them with wgmma; no block barrier in
// the K loop. Stage s has two mbarriers: full[s] completes a phase when every producer thread's
// copies into s have landed (cp.async.mbarrier.arrive.noinc: one arrival per producer thread, made by
// the hardware when that thread's earlier cp.asyncs complete), empty[s] when every consumer thread's
// wgmmas that read s have completed (wgmma.wait_group, then mbarrier.arrive). The n-th use of a stage
// waits for phase n of full (parity n & 1) and, before refilling it, for phase n - 1 of empty (parity
// (n & 1) ^ 1: a fresh barrier counts the phase before its first as complete, so round 0 never waits).

// Initialize an mbarrier that completes a phase after `count` arrivals (one thread; sync before use).
__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
#endif
}

// Whether the phase of `bar` with this parity has completed (acquire: its arrivals' writes are seen).
__device__ __forceinline__ bool mbar_done(u64* bar, u32 parity) {
  u32 ok = 1;
#if __CUDA_ARCH__ >= 900
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok) : "r"(smem_addr(bar)), "r"(parity) : "memory");
#endif
  return ok != 0;
}

// Wait until the phase of `bar` with this parity has completed (try_wait suspends the thread a while per try).
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
  while (!mbar_done(bar, parity)) {
  }
}

// One arrival of this thread on `bar` (release: its earlier memory accesses happen before the phase completes).
__device__ __forceinline__ void mbar_arrive(u64* bar) {
#if __CUDA_ARCH__ >= 800
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared.b64 st, [%0]; }" ::"r"(smem_addr(bar)) : "memory");
#endif
}

// One arrival on `bar`, made when every cp.async this thread issued before has completed (counts
// among the barrier's expected arrivals: .noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(u64* bar) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
#endif
}

// Wait until every cp.async this thread issued has completed (a producer does before it exits).
__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// ---- TMA (sm_90a): the producer's elected thread copies whole tiles with cp.async.bulk.tensor, described by
// tensor maps the host encodes (runtime/tensormap.py) and passes as `const __grid_constant__ tj::TensorMap`
// parameters. A stage is filled in boxes of SW bytes x ROWS rows, each landing as stage_offset lays it out (TMA's
// 32/64/128-byte swizzle is memory.cuh's: 16-byte unit index XOR address bits 7..); elements outside the array
// are zero-filled. full[s] then completes on bytes (mbarrier expect_tx) instead of per-thread arrivals.

// A CUtensorMap: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
  u64 opaque[16];
};

// Whether the host encoded a map (a launch passes 128 zero bytes where none describes the array, e.g. an empty
// one: the kernel then copies with cp.async).
__device__ __forceinline__ bool tma_ready(const TensorMap& m) {
  u64 any = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) any |= m.opaque[i];
  return any != 0;
}

// Fetch a tensor map into the TMA unit's cache ahead of its first copy.
__device__ __forceinline__ void tma_prefetch(const TensorMap& m) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&m)) : "memory");
#endif
}

// One arrival of this thread on `bar` that also expects `bytes` more bytes of asynchronous copies in this phase.
__device__ __forceinline__ void mbar_expect_tx(u64* bar, u32 bytes) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }"
               ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}

// A TMA coordinate: int32, clamped so that a box starting there (at most 256 elements wide) stays representable;
// the host's maps have dimensions below 2**31 - 256, so a clamped coordinate is still out of range.
__device__ __forceinline__ int tma_coord(i64 x) {
  return (int)(x < -256 ? -256 : (x > 2147483391 ? 2147483391 : x));
}

// The box of `map` at coordinates (x innermost, y, z) into shared memory at dst, completing bytes on `bar`.
__device__ __forceinline__ void tma_load(void* dst, const TensorMap& map, u64* bar, int x, int y) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(smem_addr(bar))
               : "memory");
#endif
}
__device__ __forceinline__ void tma_load(void* dst, const TensorMap& map, u64* bar, int x, int y, int z) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
      : "memory");
#endif
}

// The (ROWS, COLS) tile at (r0, c0) of a 2-D array into a stage swizzled by SW bytes (stage_offset's layout):
// COLS / CW boxes of CW = SW / sizeof(T) columns by ROWS rows, box j at ROWS * SW * j bytes.
template <int ROWS, int COLS, int SW, class T>
__device__ __forceinline__ void tma_tile(T* dst, const TensorMap& map, u64* bar, i64 r0, i64 c0) {
  constexpr int CW = SW / (int)sizeof(T);
  static_assert(SW >= 32 && COLS % CW == 0 && ROWS <= 256, "tma_tile: not a swizzled stage of boxes");
#pragma unroll
  for (int j = 0; j < COLS / CW; ++j) tma_load(dst + j * ROWS * CW, map, bar, tma_coord(c0 + j * CW), tma_coord(r0));
}

// The (1, ROWS, COLS) tile at (z, r0, c0) of a 3-D array (a 3-D map: boxes of 1 x ROWS x CW).
template <int ROWS, int COLS, int SW, class T>
__device__ __forceinline__ void tma_tile(T* dst, const TensorMap& map, u64* bar, i64 z, i64 r0, i64 c0) {
  constexpr int CW = SW / (int)sizeof(T);
  static_assert(SW >= 32 && COLS % CW == 0 && ROWS <= 256, "tma_tile: not a swizzled stage of boxes");
#pragma unroll
  for (int j = 0; j < COLS / CW; ++j)
    tma_load(dst + j * ROWS * CW, map, bar, tma_coord(c0 + j * CW), tma_coord(r0), tma_coord(z));
}

// setmaxnreg (sm_90a; every warp of the warpgroup executes it): the producer gives registers back to
// the CTA's pool (DEC), the consumers take them (INC, which waits until the pool has them).
template <int R>
__device__ __forceinline__ void regs_dec() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
#endif
}
template <int R>
__device__ __forceinline__ void regs_inc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
#endif
}

}  // namespace tj
