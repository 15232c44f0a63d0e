// select.cu: the third sampling launch, one block per row: merges the slices' top raw logits
// (max, argmax, logprobs top list), finishes the log-softmax normalizer, and draws the token.
//
// The host sampler ranks candidates "most likely first": by w = float(exp((l - max) / T))
// descending, ties to the lower id. Top-k keeps a prefix of that order, top-p keeps a prefix of
// it, and (top-p on) the draw walks it, so all three are one primitive here: select the element
// of a sorted position (count mode) or where the running sum of w first reaches x (weight mode)
// without sorting the row. It descends a radix tree over the key bits, one pass over the keys per
// level: level 0 is the exponent histogram from the weights launch; levels 1-3 split the 23
// mantissa bits (8 + 8 + 7). A bucket of at most kGather keys is gathered and sorted in smem
// instead. Sums inside one exponent bucket are exact integers (device.cuh), so the running sum at
// sorted position p is C(p) = A_e + I_p * 2^(e'-150), one rounding, the same at every level.
// With top-p off the draw walks the kept tokens in id order (tiles of 4096 keys, a block scan).
//
// Only the floating sums differ from the host sampler's (order), which can change a token only
// when a threshold lands within a few ulps of a running sum.
#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/pdl.cuh"
#include "cuda/sampling/device.cuh"
#include "cuda/sampling/sampling.h"

namespace dsv4::cuda::sampling_detail {
namespace {

constexpr int kThreads = kSelectThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 8 * kThreads;  // keys per pass step: 8 consecutive per thread
constexpr float kGreedyTemperature = 1e-5f;  // = runtime::kGreedyTemperature

static_assert(kGather <= 2 * kThreads, "the gather scan gives each thread two sorted entries");
static_assert(kExpBuckets <= kThreads, "one thread per exponent bucket");

// One selected element of the sorted candidate order.
struct Sel {
  uint32_t key = 0;  // weight key
  int32_t id = 0;    // token
  int32_t rank = 0;  // sorted position among the candidates
  double cum = 0;    // C(rank): the running sum of w through it
  bool found = false;
};

struct Smem {
  // Row exponent histogram, e = 0..127: candidates, candidates in higher buckets, running sums.
  int e_cnt[kExpBuckets];
  int e_above_cnt[kExpBuckets];
  double e_above[kExpBuckets];  // A_e: sum of the higher buckets
  double e_incl[kExpBuckets];   // A_e + bucket sum = C at the bucket's last element
  // One radix level.
  int h_cnt[256];
  u64 h_sum[256];
  // Gathered bucket: composite (wkey << 32 | ~id), sorted descending; mantissa prefix sums.
  u64 g_key[kGather];
  u64 g_pref[kGather];
  // Scan scratch and broadcasts.
  u64 scan_u[kWarps];
  int scan_i[kWarps];
  double scan_d[kWarps];
  u64 top[kTopSlots];
  int bi[4];
  u64 bu[2];
  double bd[2];
  Sel sel;
};

__device__ __forceinline__ bool crosses(double c, double x, bool strict) { return strict ? c > x : c >= x; }

// The 8 keys of thread tid in the tile at t0 (kNotCandidate past the row).
__device__ __forceinline__ void load8(const uint32_t* keys, int64_t n8, int64_t idx0, uint32_t (&k)[8]) {
  if (idx0 < n8) {
    const uint4 a = *reinterpret_cast<const uint4*>(keys + idx0);
    const uint4 b = *reinterpret_cast<const uint4*>(keys + idx0 + 4);
    k[0] = a.x, k[1] = a.y, k[2] = a.z, k[3] = a.w, k[4] = b.x, k[5] = b.y, k[6] = b.z, k[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) k[e] = kNotCandidate;
  }
}

struct Row {
  const uint32_t* keys;  // u32 [n8]
  int64_t n8;            // V rounded up to 8
};

// Id of the j-th (0-based, id order) key equal to t.
__device__ int32_t find_jth_equal(Smem& s, const Row& r, uint32_t t, int j) {
  const int tid = threadIdx.x;
  __syncthreads();
  if (tid == 0) s.bi[2] = -1;
  int carry = 0;
  for (int64_t t0 = 0; t0 < r.n8; t0 += kTile) {
    const int64_t idx0 = t0 + 8 * tid;
    uint32_t k[8];
    load8(r.keys, r.n8, idx0, k);
    int n = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) n += k[e] == t;
    int total;
    const int excl = block_exclusive_scan<kThreads>(n, s.scan_i, &total);
    if (carry + excl <= j && j < carry + excl + n) {
      int m = carry + excl;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (k[e] == t && m++ == j) s.bi[2] = int(idx0) + e;
    }
    __syncthreads();
    if (s.bi[2] >= 0) break;
    carry += total;
  }
  return s.bi[2];
}

// The sorted-order element of rank r (count mode) or the first whose C reaches x (weight mode;
// strict: C > x, else C >= x). All threads call it; the result is uniform.
__device__ Sel select_sorted(Smem& s, const Row& row, bool weight_mode, int r, double x, bool strict) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  __syncthreads();
  if (tid == 0) s.bi[0] = -1;
  __syncthreads();
  // Level 0: the exponent bucket.
  if (tid < kExpBuckets && s.e_cnt[tid] > 0) {
    const bool hit = weight_mode ? crosses(s.e_incl[tid], x, strict)
                                 : s.e_above_cnt[tid] <= r && r < s.e_above_cnt[tid] + s.e_cnt[tid];
    if (hit) atomicMax(&s.bi[0], tid);  // the highest exponent that crosses comes first
  }
  __syncthreads();
  const int e = s.bi[0];
  Sel out;
  if (e < 0) return out;  // weight mode only: x beyond the total
  const double A = s.e_above[e], unit = wkey_unit(e);
  int above_cnt = s.e_above_cnt[e], cnt = s.e_cnt[e];
  u64 I_above = 0;  // exact mantissa sum of the bucket's elements ranked before the current sub-bucket
  uint32_t prefix = uint32_t(e);
  int lowbit = 23;
  for (int level = 0; level < 3 && cnt > kGather; ++level) {
    const int nbits = level < 2 ? 8 : 7, nb = 1 << nbits, lb = lowbit - nbits;  // 23 = 8 + 8 + 7
    __syncthreads();
    for (int i = tid; i < 256; i += kThreads) {
      s.h_cnt[i] = 0;
      s.h_sum[i] = 0;
    }
    __syncthreads();
    for (int64_t t0 = 0; t0 < row.n8; t0 += kTile) {
      uint32_t k[8];
      load8(row.keys, row.n8, t0 + 8 * tid, k);
#pragma unroll
      for (int q = 0; q < 8; ++q)
        if ((k[q] >> lowbit) == prefix) {
          const int sub = int((k[q] >> lb) & uint32_t(nb - 1));
          atomicAdd(&s.h_cnt[sub], 1);
          atomicAdd(&s.h_sum[sub], u64(wkey_mant(k[q])));
        }
    }
    __syncthreads();
    if (warp == 0) {
      // Sub-buckets in sorted order q = 0..nb-1 (bucket nb-1-q); lane owns q = 8 lane .. 8 lane + 7.
      int c[8];
      u64 sm[8];
      int lc = 0;
      u64 ls = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int q = 8 * lane + j;
        c[j] = q < nb ? s.h_cnt[nb - 1 - q] : 0;
        sm[j] = q < nb ? s.h_sum[nb - 1 - q] : 0;
        lc += c[j];
        ls += sm[j];
      }
      int ce = lc;
      u64 se = ls;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int oc = __shfl_up_sync(kFullMask, ce, off);
        const u64 os = __shfl_up_sync(kFullMask, se, off);
        if (lane >= off) {
          ce += oc;
          se += os;
        }
      }
      ce -= lc;  // exclusive: integers, exact
      se -= ls;
      int hit_q = INT_MAX, last_q = -1, hit_c = 0, last_c = 0;
      u64 hit_s = 0, last_s = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int q = 8 * lane + j;
        if (c[j] > 0) {
          const bool hit = weight_mode ? crosses(A + double(I_above + se + sm[j]) * unit, x, strict)
                                       : above_cnt + ce + c[j] > r;
          if (hit && hit_q == INT_MAX) {
            hit_q = q;
            hit_c = ce;
            hit_s = se;
          }
          last_q = q;
          last_c = ce;
          last_s = se;
        }
        ce += c[j];
        se += sm[j];
      }
      // First crossing sub-bucket; none can only come from rounding (the bucket crossed at its
      // end, which is the same sum): then its last non-empty sub-bucket.
      int best = hit_q;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) best = min(best, __shfl_xor_sync(kFullMask, best, off));
      int lastmax = last_q;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) lastmax = max(lastmax, __shfl_xor_sync(kFullMask, lastmax, off));
      if (best != INT_MAX ? hit_q == best : last_q == lastmax) {
        const int q = best != INT_MAX ? best : lastmax;
        s.bi[1] = nb - 1 - q;
        s.bi[2] = best != INT_MAX ? hit_c : last_c;
        s.bu[0] = best != INT_MAX ? hit_s : last_s;
      }
    }
    __syncthreads();
    const int sub = s.bi[1];
    above_cnt += s.bi[2];
    I_above += s.bu[0];
    cnt = s.h_cnt[sub];
    prefix = (prefix << nbits) | uint32_t(sub);
    lowbit = lb;
  }

  if (cnt > kGather) {
    // A tie group larger than kGather: every key equals prefix. C grows by one mantissa per
    // element, in id order.
    const uint32_t t = prefix;
    const u64 m = wkey_mant(t);
    int j;
    if (weight_mode) {
      int lo = 0, hi = cnt - 1;  // smallest j whose C crosses; cnt - 1 if none (rounding)
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (crosses(A + double(I_above + u64(mid + 1) * m) * unit, x, strict)) hi = mid;
        else lo = mid + 1;
      }
      j = lo;
    } else {
      j = r - above_cnt;
    }
    out.key = t;
    out.id = find_jth_equal(s, row, t, j);
    out.rank = above_cnt + j;
    out.cum = A + double(I_above + u64(j + 1) * m) * unit;
    out.found = true;
    return out;
  }

  // Gather the bucket (prefix over bits >= lowbit), sort it by (w desc, id asc), scan.
  __syncthreads();
  if (tid == 0) {
    s.bi[0] = 0;
    s.bi[1] = INT_MAX;
  }
  __syncthreads();
  for (int64_t t0 = 0; t0 < row.n8; t0 += kTile) {
    const int64_t idx0 = t0 + 8 * tid;
    uint32_t k[8];
    load8(row.keys, row.n8, idx0, k);
#pragma unroll
    for (int q = 0; q < 8; ++q)
      if ((k[q] >> lowbit) == prefix) {
        const int slot = atomicAdd(&s.bi[0], 1);
        if (slot < kGather) s.g_key[slot] = (u64(k[q]) << 32) | u64(0xFFFFFFFFu - uint32_t(idx0 + q));
      }
  }
  int P = 1;
  while (P < cnt) P <<= 1;
  for (int i = cnt + tid; i < P; i += kThreads) s.g_key[i] = 0;  // pads sort last
  __syncthreads();
  for (int k = 2; k <= P; k <<= 1)
    for (int jj = k >> 1; jj > 0; jj >>= 1) {
      for (int i = tid; i < P; i += kThreads) {
        const int ixj = i ^ jj;
        if (ixj > i) {
          const u64 va = s.g_key[i], vb = s.g_key[ixj];
          if ((i & k) == 0 ? va < vb : va > vb) {  // descending overall
            s.g_key[i] = vb;
            s.g_key[ixj] = va;
          }
        }
      }
      __syncthreads();
    }
  const int i0 = 2 * tid, i1 = 2 * tid + 1;
  const u64 m0 = i0 < cnt ? wkey_mant(uint32_t(s.g_key[i0] >> 32)) : 0;
  const u64 m1 = i1 < cnt ? wkey_mant(uint32_t(s.g_key[i1] >> 32)) : 0;
  u64 tot;
  const u64 excl = block_exclusive_scan<kThreads>(m0 + m1, s.scan_u, &tot);
  if (i0 < cnt) s.g_pref[i0] = excl + m0;
  if (i1 < cnt) s.g_pref[i1] = excl + m0 + m1;
  int j;
  if (weight_mode) {
    if (i0 < cnt && crosses(A + double(I_above + excl + m0) * unit, x, strict)) atomicMin(&s.bi[1], i0);
    else if (i1 < cnt && crosses(A + double(I_above + excl + m0 + m1) * unit, x, strict)) atomicMin(&s.bi[1], i1);
    __syncthreads();
    j = s.bi[1] == INT_MAX ? cnt - 1 : s.bi[1];
  } else {
    __syncthreads();
    j = r - above_cnt;
  }
  out.key = uint32_t(s.g_key[j] >> 32);
  out.id = int32_t(0xFFFFFFFFu - uint32_t(s.g_key[j]));
  out.rank = above_cnt + j;
  out.cum = A + double(I_above + s.g_pref[j]) * unit;
  out.found = true;
  return out;
}

// The first kept token in id order whose running sum of w exceeds u (the host's walk when top-p
// is off); the last kept token if none does. Kept: a candidate, and (has_cut) not after cut in
// sorted order.
__device__ int32_t walk_id_order(Smem& s, const Row& row, double u, bool has_cut, uint32_t cut_key, int32_t cut_id) {
  const int tid = threadIdx.x;
  __syncthreads();
  if (tid == 0) {
    s.bi[1] = INT_MAX;
    s.bi[2] = -1;
  }
  __syncthreads();
  double carry = 0.0;
  int32_t last_kept = -1;
  for (int64_t t0 = 0; t0 < row.n8; t0 += kTile) {
    const int64_t idx0 = t0 + 8 * tid;
    uint32_t k[8];
    load8(row.keys, row.n8, idx0, k);
    float w[8];
    double local = 0.0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int32_t id = int32_t(idx0) + e;
      const bool kept = k[e] != kNotCandidate &&
                        (!has_cut || k[e] > cut_key || (k[e] == cut_key && id <= cut_id));
      w[e] = kept ? __uint_as_float(k[e]) : -1.0f;
      if (kept) {
        local += double(w[e]);
        last_kept = id;
      }
    }
    double total;
    const double excl = block_exclusive_scan<kThreads>(local, s.scan_d, &total);
    const double base = carry + excl;
    // The first thread whose segment carries weight and whose inclusive sum exceeds u holds the
    // token; it re-adds its weights in the same order, so the crossing is inside its segment.
    if (local > 0.0 && base + local > u) atomicMin(&s.bi[1], tid);
    __syncthreads();
    if (s.bi[1] != INT_MAX) {
      if (tid == s.bi[1]) {
        double c = 0.0;
        for (int e = 0; e < 8; ++e)
          if (w[e] >= 0.0f) {
            c += double(w[e]);
            if (w[e] > 0.0f && base + c > u) {
              s.bi[2] = int(idx0) + e;
              break;
            }
          }
      }
      break;
    }
    carry = carry + total;
  }
  __syncthreads();
  if (s.bi[2] >= 0) return s.bi[2];
  // Rounding guard (u reached the total): the last kept token, as on the host.
  atomicMax(&s.bi[3], last_kept);
  __syncthreads();
  return s.bi[3];
}

// Token of a non-greedy row (all threads; uniform result).
__device__ int32_t sample_row(Smem& s, const SampleArgs& a, const SampleParams& p, int row_idx, int32_t argmax) {
  const int tid = threadIdx.x;
  if (tid < kExpBuckets) {
    uint32_t c = 0;
    u64 sm = 0;
    for (int sl = 0; sl < a.split.n_slices; ++sl) {
      const int64_t o = (int64_t(row_idx) * a.max_slices + sl) * kExpBuckets + tid;
      c += a.hist_cnt[o];
      sm += a.hist_sum[o];
    }
    s.e_cnt[tid] = int(c);
    s.h_sum[tid] = sm;
  }
  __syncthreads();
  if (tid == 0) {
    // Higher exponents first: the sorted order. Sequential, so the sums have one fixed order.
    double A = 0.0;
    int above = 0;
    for (int e = kExpBuckets - 1; e >= 0; --e) {
      s.e_above[e] = A;
      s.e_above_cnt[e] = above;
      A = A + double(s.h_sum[e]) * wkey_unit(e);
      s.e_incl[e] = A;
      above += s.e_cnt[e];
    }
    s.bi[0] = above;
    s.bd[0] = A;
    s.bi[3] = -1;
  }
  __syncthreads();
  const int n = s.bi[0];
  const double total_all = s.bd[0];
  if (n == 0) return argmax;  // only when min_p > 1: the host's underflow guard keeps the argmax

  const Row row{a.keys + int64_t(row_idx) * a.key_stride, ceil_div(a.V, 8) * 8};
  const double cu = counter_uniform(p.seed, p.index);
  bool has_cut = false;
  Sel cut;
  int cut_rank = n - 1;
  double cut_cum = total_all;
  if (p.top_k > 0 && p.top_k < n) {
    cut = select_sorted(s, row, false, p.top_k - 1, 0.0, false);
    has_cut = true;
    cut_rank = cut.rank;
    cut_cum = cut.cum;
  }
  if (p.top_p < 1.0f) {
    // Nucleus: the shortest sorted prefix of the kept tokens whose sum reaches top_p * total.
    const Sel sp = select_sorted(s, row, true, 0, double(p.top_p) * cut_cum, false);
    if (sp.found && sp.rank <= cut_rank) {
      cut = sp;
      has_cut = true;
      cut_rank = sp.rank;
      cut_cum = sp.cum;
    }
    // The draw walks the same order.
    const Sel sd = select_sorted(s, row, true, 0, cu * cut_cum, true);
    if (sd.found && sd.rank <= cut_rank) return sd.id;
    if (!has_cut) cut = select_sorted(s, row, false, n - 1, 0.0, false);
    return cut.id;  // rounding guard: the last kept token
  }
  return walk_id_order(s, row, cu * cut_cum, has_cut, cut.key, cut.id);
}

// Two blocks per SM (64 registers): a batch of 256 rows runs in one wave on an H200.
__global__ void __launch_bounds__(kThreads, 2) sample_select_kernel(const SampleArgs a) {
  __shared__ Smem s;
  pdl_wait();  // the stats and weights launches' outputs
  const int row = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const SampleParams p = a.params[row];
  const int K = top_count(p.logprobs);
  if (warp == 0) {
    // Merge the slices' top-K lists.
    u64 list = 0;
    const int n = a.split.n_slices * K;
    for (int i0 = 0; i0 < n; i0 += 32) {
      const int i = i0 + lane;
      const bool valid = i < n;
      const u64 c = valid ? a.tops[(int64_t(row) * a.max_slices + i / K) * kTopSlots + i % K] : 0ull;
      warp_topk_insert(list, c, valid, K, lane);
    }
    if (lane < kTopSlots) s.top[lane] = lane < K ? list : 0ull;
  } else if (tid == 32) {
    // Log-softmax normalizer: chunk partials in chunk order.
    double sum = 0.0;
    for (int c = 0; c < a.split.n_chunks; ++c) sum += a.lse_part[int64_t(row) * a.max_chunks + c];
    s.bd[1] = sum;
  }
  __syncthreads();
  const u64 k0 = s.top[0];
  const float max_logit = key_logit(k0);
  const int32_t argmax = key_id(k0);
  const double lse = double(max_logit) + log(s.bd[1]);
  if (a.top_ids != nullptr && tid < kTopSlots) {
    // Entries past logprobs (or past V) are written as (-1, -inf).
    const u64 k = s.top[tid];
    const bool valid = tid < p.logprobs && k != 0ull;
    a.top_ids[int64_t(row) * kTopSlots + tid] = valid ? key_id(k) : -1;
    a.top_logprobs[int64_t(row) * kTopSlots + tid] = valid ? float(double(key_logit(k)) - lse) : -INFINITY;
  }
  int32_t token = argmax;
  if (p.temperature > kGreedyTemperature) token = sample_row(s, a, p, row, argmax);
  if (tid == 0) {
    a.token[row] = token;
    a.logprob[row] = float(double(a.logits[int64_t(row) * a.ld + token]) - lse);
  }
}

}  // namespace

Status launch_sample_select(const SampleArgs& a, cudaStream_t stream, bool pdl) {
  return launch_kernel(&sample_select_kernel, dim3(unsigned(a.B)), dim3(kThreads), 0, stream, pdl, a,
                       "sample_select_kernel");
}

}  // namespace dsv4::cuda::sampling_detail
