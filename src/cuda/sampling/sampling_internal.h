// sampling_internal.h: what the three sampling kernels share (internal to sampling/): launch
// constants, how a row is split into slices and chunks, the workspace layout, the kernel
// arguments, and the counter-based uniform draw, which is also compiled for the host so a test
// can check it against runtime::counter_uniform without a GPU. Host-only code may include this.
//
// The pipeline, three launches per step (every row independent, fixed shapes for a given B):
//   1. stats   (grid S x B): per slice, the top-K raw logits (K = max(1, logprobs)): max/argmax
//                            and the logprobs candidates.
//   2. weights (grid S x B): per 2048-logit chunk the log-softmax partial sum; per logit the
//                            sampling weight w = float(exp((l - max) / T)) as a sortable key;
//                            per slice an exponent histogram of the candidates (counts, exact sums).
//   3. select  (grid B):     per row, one block: logprobs, greedy, top-k, top-p and the draw.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "base/splitmix.h"
#include "base/status.h"

#if defined(__CUDACC__)
#define DSV4_SAMPLING_HD __host__ __device__ __forceinline__
#else
#define DSV4_SAMPLING_HD inline
#endif

namespace dsv4::cuda {
struct SampleParams;
}

namespace dsv4::cuda::sampling_detail {

inline constexpr int kStatsThreads = 256;   // stats and weights blocks
inline constexpr int kSelectThreads = 512;  // select block (one per row)
inline constexpr int kChunk = 2048;         // logits per log-softmax partial (= 8 per weights thread)
inline constexpr int kMaxSlices = 32;       // most blocks per row in the stats/weights launches
inline constexpr int kTargetBlocks = 512;   // aim for this many stats/weights blocks in a launch
inline constexpr int kExpBuckets = 128;     // w in [0, 1]: float exponent field 0..127
inline constexpr int kGather = 1024;        // a bucket this small is gathered and sorted in smem
inline constexpr uint32_t kNotCandidate = 0xFFFFFFFFu;  // key of a token min-p (or w = 0) drops

static_assert(kChunk == 8 * kStatsThreads, "each weights thread owns 8 logits of a chunk");

DSV4_SAMPLING_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How a row of V logits is split for the stats/weights launches, a function of (B, V) only.
// Slices are whole chunks, so the log-softmax partials (one per chunk, summed in chunk order)
// do not depend on B: a row's results are the same in any batch.
struct RowSplit {
  int n_chunks = 0;          // ceil(V / kChunk)
  int chunks_per_slice = 0;
  int n_slices = 0;          // S, every slice non-empty
};

DSV4_SAMPLING_HD RowSplit row_split(int B, int V) {
  RowSplit s;
  s.n_chunks = int(ceil_div(V, kChunk));
  int want = int(ceil_div(kTargetBlocks, B > 0 ? B : 1));
  if (want > kMaxSlices) want = kMaxSlices;
  if (want > s.n_chunks) want = s.n_chunks;
  if (want < 1) want = 1;
  s.chunks_per_slice = int(ceil_div(s.n_chunks, want));
  s.n_slices = int(ceil_div(s.n_chunks, s.chunks_per_slice));
  return s;
}

// Byte offsets of the workspace regions; every per-row stride is fixed by create()'s
// (max_rows, vocab), so any B <= max_rows and V <= vocab fit.
struct WorkspaceLayout {
  int64_t key_stride = 0;       // u32 keys per row: vocab rounded up to 8
  int max_slices = 0;           // the most slices any (B, V <= vocab) uses
  int max_chunks = 0;
  size_t keys_off = 0;          // u32 [rows][key_stride]: weight keys (select reads them)
  size_t tops_off = 0;          // u64 [rows][max_slices][20]: per-slice top raw logits
  size_t lse_off = 0;           // f64 [rows][max_chunks]: sum exp(l - max) per chunk
  size_t hist_cnt_off = 0;      // u32 [rows][max_slices][128]: candidates per w exponent
  size_t hist_sum_off = 0;      // u64 [rows][max_slices][128]: sum of their 24-bit mantissas
  size_t bytes = 0;
};

inline constexpr int kTopSlots = 20;  // = kMaxLogprobs (sampling.h)

inline WorkspaceLayout workspace_layout(int max_rows, int vocab) {
  WorkspaceLayout l;
  const auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  const size_t rows = size_t(max_rows);
  l.key_stride = ceil_div(vocab, 8) * 8;
  // row_split never gives more slices than min(kMaxSlices, chunks), for any B and V <= vocab.
  l.max_chunks = int(ceil_div(vocab, kChunk));
  l.max_slices = l.max_chunks < kMaxSlices ? l.max_chunks : kMaxSlices;
  size_t off = 0;
  l.keys_off = off;
  off = align(off + rows * size_t(l.key_stride) * 4);
  l.tops_off = off;
  off = align(off + rows * size_t(l.max_slices) * kTopSlots * 8);
  l.lse_off = off;
  off = align(off + rows * size_t(l.max_chunks) * 8);
  l.hist_cnt_off = off;
  off = align(off + rows * size_t(l.max_slices) * kExpBuckets * 4);
  l.hist_sum_off = off;
  off = align(off + rows * size_t(l.max_slices) * kExpBuckets * 8);
  l.bytes = off;
  return l;
}

// The draw of runtime::counter_uniform (one definition in base/splitmix.h).
DSV4_SAMPLING_HD double counter_uniform(uint64_t seed, int64_t index) { return counter_uniform_draw(seed, index); }

// Arguments of all three kernels (one struct: they share the row geometry and workspace).
struct SampleArgs {
  const float* logits = nullptr;  // f32 [B, ld], first V used
  int64_t ld = 0;
  int B = 0, V = 0;
  RowSplit split;                          // row_split(B, V)
  const SampleParams* params = nullptr;    // [B]
  int32_t* token = nullptr;                // i32 [B]
  float* logprob = nullptr;                // f32 [B]
  int32_t* top_ids = nullptr;              // i32 [B][20] or null (with top_logprobs)
  float* top_logprobs = nullptr;           // f32 [B][20] or null
  // Workspace views (strides from WorkspaceLayout).
  uint32_t* keys = nullptr;                // u32 [B][key_stride]
  int64_t key_stride = 0;
  unsigned long long* tops = nullptr;      // u64 [B][max_slices][20]
  double* lse_part = nullptr;              // f64 [B][max_chunks]
  uint32_t* hist_cnt = nullptr;            // u32 [B][max_slices][128]
  unsigned long long* hist_sum = nullptr;  // u64 [B][max_slices][128]
  int max_slices = 0, max_chunks = 0;
};

// The launches, in this order on one stream (sampling.cu validates the arguments first). pdl:
// launch as a programmatic dependent of the previous kernel (SM90, common/pdl.cuh); each kernel
// waits for it before reading or writing anything.
Status launch_sample_stats(const SampleArgs& a, cudaStream_t stream, bool pdl);    // stats.cu
Status launch_sample_weights(const SampleArgs& a, cudaStream_t stream, bool pdl);  // weights.cu
Status launch_sample_select(const SampleArgs& a, cudaStream_t stream, bool pdl);   // select.cu

}  // namespace dsv4::cuda::sampling_detail
