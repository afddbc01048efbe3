// tilejit device headers: reductions, arg-reductions and scans along one axis of a tile.
//
// The reduced axis is a range of flat-index bits [LO, HI). Under a layout each of those bits is
// a register-index bit (combined in registers), a lane bit (combined with __shfl_xor_sync) or a
// warp bit (partials go through shared memory, one slot per warp group, then every thread combines
// the slots of the outputs it holds). A result of one element (a full reduction) is left in every
// thread's registers; others are read back in the result's layout.
#pragma once
#include <tilejit/math.cuh>
#include <tilejit/tile.cuh>

namespace tj {

struct SumOp {
  template <class T> __device__ __forceinline__ static T apply(T a, T b) { return wadd<T>(a, b); }
};
struct ProdOp {
  template <class T> __device__ __forceinline__ static T apply(T a, T b) { return wmul<T>(a, b); }
};
struct MaxOp {
  template <class T> __device__ __forceinline__ static T apply(T a, T b) { return maximum(a, b); }
};
struct MinOp {
  template <class T> __device__ __forceinline__ static T apply(T a, T b) { return minimum(a, b); }
};

// (value, index) pairs for argmax/argmin: first index of the max (min); NaN wins, as in numpy.
template <class T>
struct ArgPair {
  T v;
  int i;
};
template <bool MAX>
struct ArgOp {
  template <class T>
  __device__ __forceinline__ static ArgPair<T> apply(ArgPair<T> a, ArgPair<T> b) {
    const bool an = a.v != a.v, bn = b.v != b.v;
    bool take_b;
    if (an || bn) take_b = bn && (!an || b.i < a.i);
    else if (a.v == b.v) take_b = b.i < a.i;
    else take_b = MAX ? (b.v > a.v) : (b.v < a.v);
    return take_b ? b : a;
  }
};

// Warp shuffle of any trivially copyable value, 32 bits at a time.
template <class T>
__device__ __forceinline__ T shfl_xor(T x, int mask) {
  union U {
    T t;
    int w[(sizeof(T) + 3) / 4];
  };
  U u;
  u.t = x;
#pragma unroll
  for (int k = 0; k < (int)((sizeof(T) + 3) / 4); ++k) u.w[k] = __shfl_xor_sync(0xffffffffu, u.w[k], mask);
  return u.t;
}

template <int LO, int HI>
__host__ __device__ constexpr bool in_axis(int b) { return b >= LO && b < HI; }

// Flat index with the axis bits [LO, HI) removed.
template <int LO, int HI>
__host__ __device__ constexpr int drop_axis(int f) {
  return (f & ((1 << LO) - 1)) | ((f >> HI) << LO);
}

__host__ __device__ constexpr int popc_c(int x) {
  int n = 0;
  for (; x; x &= x - 1) ++n;
  return n;
}

template <class TB, int LO, int HI>
__host__ __device__ constexpr int tmask_axis(int lo_bit, int hi_bit) {
  int m = 0;
  for (int k = lo_bit; k < hi_bit && k < TB::n; ++k)
    if (in_axis<LO, HI>(TB::get(k))) m |= 1 << k;
  return m;
}

template <class IB, int LO, int HI>
__host__ __device__ constexpr int imask_axis() {
  int m = 0;
  for (int k = 0; k < IB::n; ++k)
    if (in_axis<LO, HI>(IB::get(k))) m |= 1 << k;
  return m;
}

template <class L> struct LayoutBits;
template <int NT, class IB, class TB>
struct LayoutBits<Layout<NT, IB, TB>> {
  typedef IB I;
  typedef TB T;
};

// Combine the axis [LO, HI) within each warp: its register bits, then its lane bits by shuffles (every lane of the
// axis ends with the combined value in the registers whose axis bits are 0).
template <class Op, int LO, int HI, class L, class A>
__device__ __forceinline__ void combine_in_warp(Tile<A, L>& in) {
  typedef typename LayoutBits<L>::I IB;
  typedef typename LayoutBits<L>::T TB;
  constexpr int IM = imask_axis<IB, LO, HI>();
  constexpr int LM = tmask_axis<TB, LO, HI>(0, 5);
#pragma unroll
  for (int k = 0; k < IB::n; ++k) {
    if (IM & (1 << k)) {
      TJ_EACH(i, L) {
        if ((i & (IM & ((2 << k) - 1))) == 0) in.v[i] = Op::apply(in.v[i], in.v[i | (1 << k)]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    if (LM & (1 << k)) {
      TJ_EACH(i, L) {
        if ((i & IM) == 0) in.v[i] = Op::apply(in.v[i], shfl_xor(in.v[i], 1 << k));
      }
    }
  }
}

// Combine v[] over the axis; on return out holds the result in layout Lo. `scratch` needs
// (number of warp groups on the axis) * Lo size * sizeof(A) bytes when a warp bit is on the axis,
// Lo size * sizeof(A) otherwise (none when the result has one element).
template <class Op, int LO, int HI, class Lo, class L, class A>
__device__ __forceinline__ void reduce(Tile<A, Lo>& out, Tile<A, L>& in, void* scratch) {
  typedef typename LayoutBits<L>::I IB;
  typedef typename LayoutBits<L>::T TB;
  constexpr int IM = imask_axis<IB, LO, HI>();
  constexpr int LM = tmask_axis<TB, LO, HI>(0, 5);
  constexpr int WM = tmask_axis<TB, LO, HI>(5, 31);
  const int tid = threadIdx.x;
  combine_in_warp<Op, LO, HI>(in);  // 1. registers, 2. lanes
  constexpr bool one = Lo::E == 1 && Lo::replica_mask() == (1 << LayoutBits<Lo>::T::n) - 1;
  if (one && WM == 0) {
    out.v[0] = in.v[0];
    return;
  }
  // 3. warps: slot = the thread's warp bits on the axis, compressed
  constexpr int SO = 1 << (LayoutBits<Lo>::I::n + (LayoutBits<Lo>::T::n - popc_c(Lo::replica_mask())));
  A* s = reinterpret_cast<A*>(scratch);
  int slot = 0, nslot = 1;
#pragma unroll
  for (int k = 5; k < TB::n; ++k) {
    if (WM & (1 << k)) {
      slot |= ((tid >> k) & 1) * nslot;
      nslot <<= 1;
    }
  }
  block_sync();
  if ((tid & (LM | L::replica_mask())) == 0) {
    TJ_EACH(i, L) {
      if ((i & IM) == 0) s[slot * SO + drop_axis<LO, HI>(L::flat(tid, i))] = in.v[i];
    }
  }
  block_sync();
  constexpr int NS = 1 << popc_c(WM);
  TJ_EACH(j, Lo) {
    const int o = Lo::flat(tid, j);
    A r = s[o];
#pragma unroll
    for (int w = 1; w < NS; ++w) r = Op::apply(r, s[w * SO + o]);
    out.v[j] = r;
  }
}

// The reduction when no warp bit is on the axis and Lo is L with the axis dropped (lanes on it replicas, the slice
// layout of layouts.py): registers, then shuffles, which leave every lane of the axis the whole result; each output
// register reads the input register of its first element on the axis. No shared memory, no barrier.
template <class Op, int LO, int HI, class Lo, class L, class A>
__device__ __forceinline__ void reduce_local(Tile<A, Lo>& out, Tile<A, L>& in) {
  static_assert(tmask_axis<typename LayoutBits<L>::T, LO, HI>(5, 31) == 0, "a warp bit on the axis needs shared memory");
  combine_in_warp<Op, LO, HI>(in);
  TJ_EACH(j, Lo) {
    const int o = Lo::iflat(j);
    out.v[j] = in.v[L::reg((o & ((1 << LO) - 1)) | ((o >> LO) << HI))];
  }
}

// Inclusive prefix sum along the axis (Hillis-Steele over two scratch buffers of S elements).
template <int LO, int HI, int S, class L, class A>
__device__ __forceinline__ void scan_sum(Tile<A, L>& t, void* scratch) {
  A* buf = reinterpret_cast<A*>(scratch);
  const int tid = threadIdx.x;
  block_sync();
  if (L::owner(tid)) {
    TJ_EACH(i, L) buf[L::flat(tid, i)] = t.v[i];
  }
  int cur = 0;
#pragma unroll 1
  for (int d = 1; d < (1 << (HI - LO)); d <<= 1) {
    block_sync();
    const A* src = buf + cur * S;
    A* dst = buf + (1 - cur) * S;
    TJ_EACH(i, L) {
      const int f = L::flat(tid, i);
      const int r = (f >> LO) & ((1 << (HI - LO)) - 1);
      t.v[i] = r >= d ? wadd<A>(src[f], src[f - (d << LO)]) : src[f];
    }
    if (L::owner(tid)) {
      TJ_EACH(i, L) dst[L::flat(tid, i)] = t.v[i];
    }
    cur = 1 - cur;
  }
}

}  // namespace tj
