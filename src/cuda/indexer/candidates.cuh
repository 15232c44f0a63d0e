// candidates.cuh: block-wide top-k pieces over 64-bit candidate keys (topk_plan.h), which are
// unique (they carry the index) and never 0:
//  - a running candidate buffer in shared memory: keys at or above the threshold are appended in
//    any order; when it is nearly full it is cut to the best `keep` (radix select), whose
//    threshold then gates the appends;
//  - an MSB-first radix select (8-bit digits, one histogram pass per digit, early exit as soon
//    as the bin holding the k-th key is taken whole) over keys from any source;
//  - a descending bitonic sort for the final, small, selected set (registers, shuffles).
// The selected set is exact and never depends on the append order: results are deterministic.
#pragma once

#include <cstdint>

#include "cuda/indexer/topk_plan.h"

namespace dsv4::cuda::indexer_detail {

// One compare-exchange of a descending bitonic sort, seen from element i: its partner (i ^ j)
// holds p. In a block of k sorted descending ((i & k) == 0) the lower element of the pair keeps
// the larger key; in an ascending block, the smaller.
__device__ __forceinline__ uint64_t bitonic_keep(uint64_t v, uint64_t p, int i, int j, int k) {
  const bool lower = (i & j) == 0, desc = (i & k) == 0;
  return (lower == desc) == (v > p) ? v : p;
}

// Descending bitonic sort of s[0, n), n a power of two <= kSlots * blockDim.x (a power of two),
// by the whole block. Element i lives in a register of thread i % blockDim.x (slot
// i / blockDim.x) from the first stage to the last: partners fewer than 32 apart swap through
// warp shuffles, partners blockDim.x or more apart within the thread, and only the stages in
// between go through shared memory: s and `scratch` (n more keys, or null) in turn, one barrier
// each, or s alone, two. For 512 keys and 1024 threads that is 10 of the 45 stages; a stage of
// the plain shared-memory sort cost ~430 cycles on the H200, half the merge kernel's time
// (bench/results/NOTES.md). Not inlined: inlined, it raised the split kernel from 127 to 153
// registers (one block per SM instead of two). The caller has synchronized after writing s;
// returns synchronized.
template <int kSlots>
__device__ __noinline__ void bitonic_sort_desc(uint64_t* s, int n, uint64_t* scratch) {
  const int bd = int(blockDim.x), tid = int(threadIdx.x);
  uint64_t v[kSlots];
#pragma unroll
  for (int e = 0; e < kSlots; ++e) {
    const int i = tid + e * bd;
    v[e] = i < n ? s[i] : 0;
  }
  int exchanges = 0;  // shared-memory stages so far: the next one uses s when even, scratch when odd
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      if (j >= bd) {  // the partner is slot e ^ (j / bd) of this thread (block-uniform branch)
        const int de = j / bd;
#pragma unroll
        for (int e = 0; e < kSlots; ++e) {
#pragma unroll
          for (int f = e + 1; f < kSlots; ++f) {
            if ((e ^ f) != de) continue;
            const int i = tid + e * bd;  // the lower element of the pair (i, i + j)
            const uint64_t a = v[e], b = v[f];
            v[e] = bitonic_keep(a, b, i, j, k);
            v[f] = bitonic_keep(b, a, i + j, j, k);
          }
        }
      } else if (j >= 32) {  // another warp of the block: through shared memory
        // With two buffers a stage's stores cannot meet the previous stage's reads (other
        // buffer), nor those of the stage before (a barrier between): one barrier a stage.
        uint64_t* buf = scratch != nullptr && (exchanges & 1) ? scratch : s;
        ++exchanges;
#pragma unroll
        for (int e = 0; e < kSlots; ++e) {
          const int i = tid + e * bd;
          if (i < n) buf[i] = v[e];
        }
        __syncthreads();
#pragma unroll
        for (int e = 0; e < kSlots; ++e) {
          const int i = tid + e * bd;
          if (i < n) v[e] = bitonic_keep(v[e], buf[i ^ j], i, j, k);
        }
        if (scratch == nullptr) __syncthreads();
      } else {  // the same warp: every lane shuffles (slots past n pair among themselves)
#pragma unroll
        for (int e = 0; e < kSlots; ++e) {
          if (e * bd >= n) break;  // block-uniform: no element of this slot is sorted
          const uint64_t p = __shfl_xor_sync(0xffffffffu, v[e], j);
          v[e] = bitonic_keep(v[e], p, tid + e * bd, j, k);
        }
      }
    }
  }
  __syncthreads();  // the last shared stages' reads of s come before the stores below
#pragma unroll
  for (int e = 0; e < kSlots; ++e) {
    const int i = tid + e * bd;
    if (i < n) s[i] = v[e];
  }
  __syncthreads();
}

// Sorts the n_held keys of s descending; n_held <= kSlots * blockDim.x. Entries up to the next
// power of two become 0 (the caller's buffer must hold them; scratch, when not null, as many).
// Called by the whole block after a __syncthreads; returns synchronized.
template <int kSlots>
__device__ __forceinline__ void sort_keys_desc(uint64_t* s, int n_held, uint64_t* scratch = nullptr) {
  int n = 1;
  while (n < n_held) n <<= 1;
  for (int i = n_held + threadIdx.x; i < n; i += blockDim.x) s[i] = 0;
  __syncthreads();
  bitonic_sort_desc<kSlots>(s, n, scratch);
}

// ---- radix select ----

// Shared state of a select. A key is still in play while (key & mask) == prefix; every key with
// (key & mask) > prefix is taken. When the select ends, the taken keys are exactly those
// >= prefix (the low bits of prefix are 0).
struct SelectState {
  uint64_t prefix;
  uint64_t mask;
  int need;    // keys still to take among those in play
  int bucket;  // keys in play (after the last pass)
};

__device__ __forceinline__ void select_init(SelectState* st, int need) {
  st->prefix = 0;
  st->mask = 0;
  st->need = need;
  st->bucket = 0;
}

// Warp 0 only: picks the digit of the bin that holds the need-th largest key in play (hist has
// 256 bins) and narrows the state to it. Lane l sums the bins of group 31 - l (bins 8g .. 8g+7),
// so the inclusive scan over lanes counts keys from the top bin down.
__device__ __forceinline__ void choose_digit(const int* hist, int shift, SelectState* st) {
  const int lane = threadIdx.x & 31, group = 31 - lane;
  const int* h = hist + 8 * group;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += h[i];
  int incl = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  const int excl = incl - sum, need = st->need;  // every lane reads need before one writes it
  __syncwarp();
  if (excl < need && need <= incl) {  // exactly one lane
    int above = 0, bucket = 0;
    const int d = 8 * group + radix_digit(h, 8, need - excl, &above, &bucket);
    st->prefix |= uint64_t(d) << shift;
    st->mask |= uint64_t(0xffu) << shift;
    st->need = need - excl - above;
    st->bucket = bucket;
  }
}

// Warp-uniform appends: every lane of the warp calls this together; lanes with `pred` store v at
// consecutive places from one atomicAdd on *counter (stores past cap are dropped: they only guard
// the buffer).
__device__ __forceinline__ void warp_append(bool pred, uint64_t v, uint64_t* buf, int* counter, int cap) {
  const unsigned ballot = __ballot_sync(0xffffffffu, pred);
  if (ballot == 0) return;
  const int lane = threadIdx.x & 31, leader = __ffs(ballot) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(counter, __popc(ballot));
  base = __shfl_sync(0xffffffffu, base, leader);
  if (pred) {
    const int i = base + __popc(ballot & ((1u << lane) - 1u));
    if (i < cap) buf[i] = v;
  }
}

// Source iteration for the select: for_each(f) calls f(key) in warp-uniform code (all 32 lanes of
// a warp together), key 0 for "no key" (keys are never 0), so f may use warp collectives.

// One pass: histograms the digit at `shift` of the keys in play (lanes of a warp with the same
// digit add once: ties and hot bins do not serialize), then narrows the state. Called by the
// whole block (at least 256 threads, a multiple of 32) after a __syncthreads; returns
// synchronized, true when the select is finished (every key in play is taken).
template <class ForEach>
__device__ __forceinline__ bool radix_pass(const ForEach& for_each, int shift, int* hist, SelectState* st) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
  const uint64_t mask = st->mask, prefix = st->prefix;
  __syncthreads();
  for_each([&](uint64_t key) {
    const int bin = key != 0 && (key & mask) == prefix ? int(key >> shift) & 0xff : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (bin >= 0 && int(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
  });
  __syncthreads();
  if (threadIdx.x < 32) choose_digit(hist, shift, st);
  __syncthreads();
  return st->bucket == st->need;
}

// Runs passes from `shift` down until the select is finished (the keys are unique, so it is at
// the latest after the last digit). The state must have 1 <= need <= keys in play. Digits that
// every key in play shares are not histogrammed: one pass of AND / OR over the keys finds them
// and they join the prefix directly. Scores are bf16 and indices small, so 4 of the 8 digits
// (the low half of the score word; the high half of ~index) are usually such digits.
template <class ForEach>
__device__ __forceinline__ void radix_select(const ForEach& for_each, int shift, int* hist, SelectState* st) {
  __shared__ unsigned long long s_and, s_or;
  if (threadIdx.x == 0) {
    s_and = ~0ull;
    s_or = 0;
  }
  __syncthreads();
  {
    const uint64_t mask = st->mask, prefix = st->prefix;
    uint64_t a = ~uint64_t(0), o = 0;
    for_each([&](uint64_t key) {
      if (key != 0 && (key & mask) == prefix) {
        a &= key;
        o |= key;
      }
    });
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      a &= __shfl_xor_sync(0xffffffffu, a, off);
      o |= __shfl_xor_sync(0xffffffffu, o, off);
    }
    if ((threadIdx.x & 31) == 0) {
      atomicAnd(&s_and, (unsigned long long)a);
      atomicOr(&s_or, (unsigned long long)o);
    }
  }
  __syncthreads();
  const uint64_t common = s_and, varying = s_and ^ s_or;
  for (; shift >= 0; shift -= 8) {
    if (((varying >> shift) & 0xffu) == 0) {
      // Every key in play has this digit: the pass would take its bin whole.
      if (threadIdx.x == 0) {
        st->prefix |= common & (uint64_t(0xffu) << shift);
        st->mask |= uint64_t(0xffu) << shift;
      }
      __syncthreads();
      continue;
    }
    if (radix_pass(for_each, shift, hist, st)) break;
  }
}

// ---- running candidate buffer (one block) ----

struct CandidateBuffer {
  uint64_t* keys;  // u64 [capacity] in shared memory
  int* count;      // shared: keys held
  uint64_t* thr;   // shared: a key must be >= thr to enter (0 until a cut)
};

// Appends `key` if it is a key (not 0) and reaches the threshold. Warp-uniform (all lanes of a
// warp call it together); the caller guarantees room.
__device__ __forceinline__ void offer(const CandidateBuffer& c, uint64_t key) {
  warp_append(key != 0 && key >= *c.thr, key, c.keys, c.count, 1 << 30);
}

// Cuts the buffer to its best `keep` keys (unsorted) and raises the threshold to their select
// prefix (every later key below it is below all of them). kPerThread * blockDim.x must cover
// the capacity. Called by the whole block after a __syncthreads; returns synchronized. Nothing
// happens when at most `keep` keys are held.
template <int kPerThread>
__device__ __forceinline__ void cut_candidates(const CandidateBuffer& c, int keep, int* hist, SelectState* st) {
  const int n = *c.count;
  if (n <= keep) return;
  if (threadIdx.x == 0) select_init(st, keep);
  __syncthreads();
  const uint64_t* keys = c.keys;
  radix_select(
      [&](const auto& f) {
        for (int i0 = int(threadIdx.x & ~31u); i0 < n; i0 += blockDim.x) {
          const int i = i0 + int(threadIdx.x & 31);
          f(i < n ? keys[i] : uint64_t(0));
        }
      },
      56, hist, st);
  const uint64_t thr = st->prefix;
  uint64_t held[kPerThread];
#pragma unroll
  for (int p = 0; p < kPerThread; ++p) {
    const int i = threadIdx.x + p * int(blockDim.x);
    held[p] = i < n ? c.keys[i] : 0;
  }
  __syncthreads();  // everything read before the buffer is rewritten
  if (threadIdx.x == 0) {
    *c.count = 0;
    *c.thr = thr;
  }
  __syncthreads();
#pragma unroll
  for (int p = 0; p < kPerThread; ++p) warp_append(held[p] != 0 && held[p] >= thr, held[p], c.keys, c.count, 1 << 30);
  __syncthreads();
}

// The end of a split (both split kernels): cut the buffer to its best topk keys, sort them
// descending when the merge reads several lists per row (it bounds the row's k-th key from the
// lists' heads; a lone list is taken whole, in any order), write the list and its count.
// Block-wide, after a __syncthreads; kPerThread as for cut_candidates, kSortSlots * blockDim.x
// >= topk (the sort's registers per thread); sort_scratch: room for topk keys beside the buffer,
// or null (sort_keys_desc).
template <int kPerThread, int kSortSlots>
__device__ __forceinline__ void write_split_list(const CandidateBuffer& c, int topk, bool sorted, int* hist,
                                                 SelectState* st, uint64_t* out, int32_t* count,
                                                 uint64_t* sort_scratch) {
  cut_candidates<kPerThread>(c, topk, hist, st);  // no-op when <= topk held
  // c.keys has room for the padding to a power of two
  if (sorted) sort_keys_desc<kSortSlots>(c.keys, *c.count, sort_scratch);
  const int n_out = *c.count;
  for (int i = threadIdx.x; i < n_out; i += blockDim.x) out[i] = c.keys[i];
  if (threadIdx.x == 0) *count = n_out;
}

}  // namespace dsv4::cuda::indexer_detail
