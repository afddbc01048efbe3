// tilejit device headers: moving tile elements between threads through shared memory.
//
// remap() serves reshape, permute, broadcast, extract and any change of layout: owners write the
// source tile to the scratch area at its flat index (to_scratch), the block syncs, and each thread
// reads its destination elements (from_scratch) from the source flat index a bit map gives
// (Bits<s0, s1, ...>: bit p of the destination flat index comes from source bit s_p, or is dropped
// when s_p < 0 — a broadcast; Offset<B, Map> also sets the bits of B — one block of a larger tile).
// cat and join write two tiles one after the other (remap2: the second's flat indices start at N)
// and read their result through one map; split writes one tile and reads two (split2); an extract
// whose elements each thread already holds copies registers (remap_local). Every scratch user syncs
// before it writes, so consecutive users never race.
#pragma once
#include <tilejit/tile.cuh>

namespace tj {

struct IdentityMap { static constexpr int n = 0; };
template <int B, class Map>
struct Offset {};

template <class Map>
struct MapOf {
  __host__ __device__ static constexpr int at(int f) {
    int s = 0;
#pragma unroll
    for (int p = 0; p < Map::n; ++p)
      if (Map::get(p) >= 0) s |= ((f >> p) & 1) << Map::get(p);
    return s;
  }
};
template <>
struct MapOf<IdentityMap> {
  __host__ __device__ static constexpr int at(int f) { return f; }
};
template <int B, class Map>
struct MapOf<Offset<B, Map>> {
  __host__ __device__ static constexpr int at(int f) { return B | MapOf<Map>::at(f); }
};

template <class Map>
__host__ __device__ constexpr int map_flat(int f) { return MapOf<Map>::at(f); }

// The owners of `in` write it to s[at + flat index] (no sync: callers sync around these writes).
template <class L, class T>
__device__ __forceinline__ void to_scratch(T* s, int at, const Tile<T, L>& in) {
  const int tid = threadIdx.x;
  if (L::owner(tid)) {
    TJ_EACH(i, L) s[at + L::flat(tid, i)] = in.v[i];
  }
}

// Each thread reads its elements of `out` from s at the source flat index Map gives.
template <class Map, class L, class T>
__device__ __forceinline__ void from_scratch(Tile<T, L>& out, const T* s) {
  const int tid = threadIdx.x;
  TJ_EACH(j, L) out.v[j] = s[map_flat<Map>(L::flat(tid, j))];
}

template <class Map, class Ld, class Ls, class T>
__device__ __forceinline__ void remap(Tile<T, Ld>& out, const Tile<T, Ls>& in, void* scratch) {
  T* s = reinterpret_cast<T*>(scratch);
  block_sync();
  to_scratch(s, 0, in);
  block_sync();
  from_scratch<Map>(out, s);
}

// `a` at source flat indices [0, N), `b` at [N, 2N), read through Map (cat, join).
template <class Map, int N, class Ld, class La, class Lb, class T>
__device__ __forceinline__ void remap2(Tile<T, Ld>& out, const Tile<T, La>& a, const Tile<T, Lb>& b,
                                       void* scratch) {
  T* s = reinterpret_cast<T*>(scratch);
  block_sync();
  to_scratch(s, 0, a);
  to_scratch(s, N, b);
  block_sync();
  from_scratch<Map>(out, s);
}

// When each thread already holds the source elements of its result elements, in registers whose index depends
// only on the result register's (the code generator checks it: e.g. a block of rows of a large tile), a copy
// between registers: no scratch, no sync.
template <class Map, class Ld, class Ls, class T>
__device__ __forceinline__ void remap_local(Tile<T, Ld>& out, const Tile<T, Ls>& in) {
  TJ_EACH(j, Ld) out.v[j] = in.v[Ls::reg(map_flat<Map>(Ld::iflat(j)))];
}

// Two tiles read from one written tile, each through its map (split).
template <class MapA, class MapB, class La, class Lb, class Ls, class T>
__device__ __forceinline__ void split2(Tile<T, La>& a, Tile<T, Lb>& b, const Tile<T, Ls>& in, void* scratch) {
  T* s = reinterpret_cast<T*>(scratch);
  block_sync();
  to_scratch(s, 0, in);
  block_sync();
  from_scratch<MapA>(a, s);
  from_scratch<MapB>(b, s);
}

// A tile of one element is held by every thread: broadcasting it needs no communication.
template <class Ld, class Ls, class T>
__device__ __forceinline__ void splat(Tile<T, Ld>& out, const Tile<T, Ls>& in) {
  TJ_EACH(j, Ld) out.v[j] = in.v[0];
}

}  // namespace tj
