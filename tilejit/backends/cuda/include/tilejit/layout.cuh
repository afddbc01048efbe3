// tilejit device headers: moving tile elements between threads through shared memory.
//
// remap() serves reshape, permute, broadcast and any change of layout: owners write the source
// tile to the scratch area at its flat index, the block syncs, and each thread reads its
// destination elements from the source flat index given by a bit map (Bits<s0, s1, ...>: bit p of
// the destination flat index comes from source bit s_p, or is dropped when s_p < 0 — a broadcast).
// Every scratch user syncs before it writes, so consecutive users never race.
#pragma once
#include <tilejit/tile.cuh>

namespace tj {

template <class Map>
__device__ __forceinline__ int map_flat(int f) {
  int s = 0;
#pragma unroll
  for (int p = 0; p < Map::n; ++p)
    if (Map::get(p) >= 0) s |= ((f >> p) & 1) << Map::get(p);
  return s;
}

struct IdentityMap { static constexpr int n = 0; };
template <>
__device__ __forceinline__ int map_flat<IdentityMap>(int f) { return f; }

template <class Map, class Ld, class Ls, class T>
__device__ __forceinline__ void remap(Tile<T, Ld>& out, const Tile<T, Ls>& in, void* scratch) {
  T* s = reinterpret_cast<T*>(scratch);
  const int tid = threadIdx.x;
  __syncthreads();
  if (Ls::owner(tid)) {
    TJ_EACH(i, Ls) s[Ls::flat(tid, i)] = in.v[i];
  }
  __syncthreads();
  TJ_EACH(j, Ld) out.v[j] = s[map_flat<Map>(Ld::flat(tid, j))];
}

// A tile of one element is held by every thread: broadcasting it needs no communication.
template <class Ld, class Ls, class T>
__device__ __forceinline__ void splat(Tile<T, Ld>& out, const Tile<T, Ls>& in) {
  TJ_EACH(j, Ld) out.v[j] = in.v[0];
}

}  // namespace tj
