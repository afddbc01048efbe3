// tilejit device headers: how a tile's elements are spread over the threads of a block.
//
// Every tile shape is a power of two in each dim, so an element's row-major flat index f has
// log2(size) bits. A layout assigns each of those bits to either a bit of the register index i
// (0 <= i < E, the element's slot in the owning thread's array) or a bit of the thread index.
// Thread bits that map to no flat bit hold replicas (small tiles: every thread keeps a copy;
// only "owner" threads, whose replica bits are 0, write memory). This is a linear layout:
//     flat(tid, i) = tflat(tid) | iflat(i)
//
// Layouts the code generator uses:
//  * blocked (the default for every N-d tile): thread t holds VEC contiguous elements per chunk,
//    chunks strided by NT*VEC in flat order, so f = c*NT*VEC + t*VEC + v. VEC is 16 bytes of
//    the narrowest element type accessed with that shape (capped by the row length), which makes
//    loads and stores 16-byte vectors that a warp coalesces. Tiles smaller than NT elements put
//    one element on each of the first S threads and replicate it on the others.
//  * mma accumulator: the register layout of mma.sync m16n8 C/D fragments, warps tiled WM x WN
//    over the (M, N) tile (see mma.cuh). Values flowing into and out of MmaOp keep this layout
//    across loop iterations; any other op reads them through the same flat(tid, i) interface.
// A 0-d tile (a scalar) is a plain C++ value held by every thread.
// Elementwise ops on tiles of one layout are register loops (TJ_EACH); ops that move elements
// between threads go through warp shuffles or the block's one dynamic shared-memory scratch area.
#pragma once
#include <tilejit/types.cuh>

namespace tj {

// The block-wide barrier of tile code (around the scratch area). In a warp-specialized kernel the code
// generator defines TJ_SYNC_THREADS as its consumer threads: after the K loop only the consumer warpgroups
// run (the producer warpgroup has exited), so they meet at named barrier 1 instead of the whole block's.
__device__ __forceinline__ void block_sync() {
#ifdef TJ_SYNC_THREADS
  asm volatile("bar.sync 1, %0;" ::"n"(TJ_SYNC_THREADS) : "memory");
#else
  __syncthreads();
#endif
}

template <int... B>
struct Bits {
  static constexpr int n = sizeof...(B);
  __host__ __device__ static constexpr int get(int k) {
    const int a[] = {B..., -1};
    return a[k];
  }
};

template <int NT_, class IB, class TB>
struct Layout {
  static constexpr int NT = NT_;
  static constexpr int E = 1 << IB::n;
  __host__ __device__ static constexpr int replica_mask() {
    int m = 0;
    for (int k = 0; k < TB::n; ++k)
      if (TB::get(k) < 0) m |= 1 << k;
    return m;
  }
  __host__ __device__ static constexpr int iflat(int i) {
    int f = 0;
    for (int k = 0; k < IB::n; ++k) f |= ((i >> k) & 1) << IB::get(k);
    return f;
  }
  __device__ __forceinline__ static int tflat(int tid) {
    int f = 0;
#pragma unroll
    for (int k = 0; k < TB::n; ++k)
      if (TB::get(k) >= 0) f |= ((tid >> k) & 1) << TB::get(k);
    return f;
  }
  __device__ __forceinline__ static int flat(int tid, int i) { return tflat(tid) | iflat(i); }
  // The register that holds flat index f in the thread that holds it (iflat's inverse; f's thread bits ignored).
  __host__ __device__ static constexpr int reg(int f) {
    int i = 0;
    for (int k = 0; k < IB::n; ++k) i |= ((f >> IB::get(k)) & 1) << k;
    return i;
  }
  __device__ __forceinline__ static bool owner(int tid) { return (tid & replica_mask()) == 0; }
};

// Compile-time tile shape: dims and the shift of each dim's coordinate in the flat index.
template <int... D>
struct Shape {
  static constexpr int N = sizeof...(D);
  __host__ __device__ static constexpr int dim(int d) {
    const int a[] = {D...};
    return a[d];
  }
  __host__ __device__ static constexpr int log2(int x) {
    int r = 0;
    while ((1 << r) < x) ++r;
    return r;
  }
  __host__ __device__ static constexpr int shift(int d) {
    int s = 0;
    for (int k = d + 1; k < N; ++k) s += log2(dim(k));
    return s;
  }
  __host__ __device__ static constexpr int coord(int f, int d) { return (f >> shift(d)) & (dim(d) - 1); }
};

template <class T, class L>
struct Tile {
  T v[L::E];
};

}  // namespace tj

#define TJ_EACH(i, L) _Pragma("unroll") for (int i = 0; i < L::E; ++i)
#define TJ_PAIRS(i, L) _Pragma("unroll") for (int i = 0; i < L::E; i += 2)
