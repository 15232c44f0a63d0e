// kv_write.cu: kv_finish and window_save (ops.h), the KV path from the wkv projection to the
// 584-byte records (cpu::attention_forward: kv_norm, bf16, RoPE, bf16, fp8sim of the nope dims;
// kv::pack_entry's layout [nope e4m3][rope bf16][ue8m0 scales, zero pad to 8]) and the copy of
// each sequence's newest records into its window ring. A record row fits one warp.
// qkv_norm_finish runs kv_finish's warps and rmsnorm_rows' blocks (the q_norm) in one launch and,
// in decode steps, makes window_save's ring copy too.
// All three launch as programmatic dependents (pdl.cuh); the norm weights and inverse
// frequencies, constant, and the rows' positions and ring slots, step arrays, are loaded before
// the wait.
#include <cstdint>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/kv_codec.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/ops/ops.h"
#include "cuda/ops/ops_util.cuh"

namespace dsv4::cuda {

namespace {

using namespace ops_detail;

constexpr int kRowWarps = 4;     // kv_finish rows per block
constexpr int kRowChunks = 4;    // head_dim <= 32 * 8 * 4 = 1024
constexpr int kSaveWarps = 8;    // window_save rows per block
constexpr int kFp8Block = 64;    // nope dims per ue8m0 scale
constexpr int kQNormThreads = 128;  // qkv_norm_finish's q_norm blocks, as rmsnorm_rows (norm_rope.cu)
constexpr int kQNormChunks = 4;     // n <= 128 * 8 * 4 = 4096, as rmsnorm_rows

struct KvFinishArgs {
  const __nv_bfloat16* kv;  // bf16 [T, ld], first nope + rope columns used
  int64_t ld;
  int T, nope, rope, entry_bytes;
  const float* norm_w;      // f32 [nope + rope]
  float eps;
  const int32_t* token_pos; // i32 [T]
  const float* inv_freq;    // f32 [rope / 2]
  uint8_t* records;         // u8 [T][entry_bytes]
  // Decode steps (qkv_norm_finish given a step): each real row's record also goes to its
  // sequence's window ring at pos % window_size. Null window: no ring copy.
  const int32_t* token_seq = nullptr;  // i32 [T], -1 for padding
  const int32_t* seq_slot = nullptr;   // i32 [n_seqs], -1 for padding
  uint8_t* window = nullptr;           // u8 [n_slots][window_size][entry_bytes]
  int window_size = 0;
};

// The constant inputs of a lane's chunks of any row (c = lane + 32 i): the norm weights and, for
// rope chunks, their 4 inverse frequencies (zeros elsewhere). Loaded before pdl_wait().
struct KvRowConsts {
  float w[kRowChunks][8];
  float inv_freq[kRowChunks][4];
};

__device__ __forceinline__ void load_kv_row_consts(const KvFinishArgs& a, int lane, KvRowConsts& k) {
  const int n_chunks = (a.nope + a.rope) / 8;
#pragma unroll
  for (int ci = 0; ci < kRowChunks; ++ci) {
    const int c = lane + 32 * ci;
    float4 w0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), w1 = w0, f = w0;
    if (c < n_chunks) {
      w0 = __ldg(reinterpret_cast<const float4*>(a.norm_w + 8 * c));
      w1 = __ldg(reinterpret_cast<const float4*>(a.norm_w + 8 * c + 4));
      if (8 * c >= a.nope) {  // 4-byte aligned only: four scalar loads
        const float* fp = a.inv_freq + (8 * c - a.nope) / 2;
        f = make_float4(__ldg(fp), __ldg(fp + 1), __ldg(fp + 2), __ldg(fp + 3));
      }
    }
    k.w[ci][0] = w0.x, k.w[ci][1] = w0.y, k.w[ci][2] = w0.z, k.w[ci][3] = w0.w;
    k.w[ci][4] = w1.x, k.w[ci][5] = w1.y, k.w[ci][6] = w1.z, k.w[ci][7] = w1.w;
    k.inv_freq[ci][0] = f.x, k.inv_freq[ci][1] = f.y, k.inv_freq[ci][2] = f.z, k.inv_freq[ci][3] = f.w;
  }
}

// Stores v at byte `at` of a record and, where the row has one (decode steps), of its ring copy.
template <typename T>
__device__ __forceinline__ void put_record(uint8_t* rec, uint8_t* ring, int at, T v) {
  *reinterpret_cast<T*>(rec + at) = v;
  if (ring != nullptr) *reinterpret_cast<T*>(ring + at) = v;
}

// grid ceil(T / 4), 4 warps; warp = one row, lane = chunks of 8 dims c = lane + 32 i. An fp8
// block (64 dims = 8 chunks) is held by 8 consecutive lanes of one i, since 32 % 8 == 0. A short
// last block (nope % 64 != 0: the small test models) shares its 8 lanes with rope chunks, which
// take no part in its amax (as in cpu::fp8sim, whose last block is shorter).
// Where row t's record goes besides the chunk: its position and, in decode steps, its window ring
// slot (null: none). Reads only the step's arrays, host copies that no kernel writes, so the
// kernels call it before their PDL wait (pdl.cuh). Each store of the record goes to the ring too,
// as window_save would copy it after attention (attention reads the row itself from the chunk
// and the ring only at earlier positions, whose slots differ from pos % W, so the copy may come
// first). Stored from registers rather than read back after the record: the launch ~1 us
// shorter a layer in the H200 kernel trace.
struct KvRowPlace {
  int64_t pos = 0;
  uint8_t* ring = nullptr;
};

__device__ __forceinline__ KvRowPlace kv_row_place(const KvFinishArgs& a, int t) {
  KvRowPlace p;
  if (t >= a.T) return p;
  p.pos = a.token_pos[t];
  if (a.window != nullptr) {
    const int s = a.token_seq[t];
    const int slot = s >= 0 ? a.seq_slot[s] : -1;
    if (slot >= 0) p.ring = a.window + (int64_t(slot) * a.window_size + p.pos % a.window_size) * a.entry_bytes;
  }
  return p;
}

// The warp's row t < a.T (kv_finish_kernel and qkv_norm_finish_kernel share it, so both give
// the same bits); place = kv_row_place(a, t).
__device__ __forceinline__ void kv_finish_row(const KvFinishArgs& a, const KvRowConsts& k, int t, int lane,
                                              const KvRowPlace& place) {
  const int d = a.nope + a.rope, n_chunks = d / 8;
  const __nv_bfloat16* src = a.kv + int64_t(t) * a.ld;
  uint8_t* rec = a.records + int64_t(t) * a.entry_bytes;

  float v[kRowChunks][8];
  float ss = 0.0f;
#pragma unroll
  for (int ci = 0; ci < kRowChunks; ++ci) {
    const int c = lane + 32 * ci;
#pragma unroll
    for (int e = 0; e < 8; ++e) v[ci][e] = 0.0f;
    if (c < n_chunks) {
      load_bf16x8(src + 8 * c, v[ci]);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss = __fmaf_rn(v[ci][e], v[ci][e], ss);
    }
  }
  uint8_t* ring = place.ring;
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / float(d) + a.eps);
  const float pos = float(place.pos);

#pragma unroll
  for (int ci = 0; ci < kRowChunks; ++ci) {
    if (32 * ci >= n_chunks) break;  // uniform: the shuffles below need the whole warp
    const int c = lane + 32 * ci;
    const bool active = c < n_chunks;
    float out[8];
    float amax = 0.0f;
    if (active) {
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] = round_bf16_dev(__fmul_rn(k.w[ci][e], __fmul_rn(v[ci][e], r)));
      if (8 * c >= a.nope) {
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          rope_pair(out[2 * p], out[2 * p + 1], __fmul_rn(pos, k.inv_freq[ci][p]));
          out[2 * p] = round_bf16_dev(out[2 * p]);
          out[2 * p + 1] = round_bf16_dev(out[2 * p + 1]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(out[e]));
      }
    }
    // Block amax over the 8 lanes of this fp8 block (rope and inactive lanes give 0, unused).
    amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, 2));
    amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, 4));
    if (!active) continue;
    if (8 * c < a.nope) {
      const int e = fp8_block_exponent(amax);
      uint32_t lo = 0, hi = 0;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        lo |= uint32_t(encode_e4m3(out[q], e)) << (8 * q);
        hi |= uint32_t(encode_e4m3(out[4 + q], e)) << (8 * q);
      }
      put_record(rec, ring, 8 * c, make_uint2(lo, hi));  // 8-byte aligned: entry_bytes % 8 == 0
      if ((lane & 7) == 0) put_record(rec, ring, a.nope + 2 * a.rope + (8 * c) / kFp8Block, encode_ue8m0(e));
    } else {
      uint32_t words[4];
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(out[2 * p], out[2 * p + 1]);
        words[p] = *reinterpret_cast<const uint32_t*>(&h);
      }
      // Record offsets nope + 16 k: only 8-byte alignment is guaranteed (584 = 8 x 73).
      const int at = a.nope + 2 * (8 * c - a.nope);
      put_record(rec, ring, at, make_uint2(words[0], words[1]));
      put_record(rec, ring, at + 8, make_uint2(words[2], words[3]));
    }
  }
  // Zero pad after the scales (kv::pack_entry clears it).
  const int scale0 = a.nope + 2 * a.rope, n_scales = (a.nope + kFp8Block - 1) / kFp8Block;
  if (lane < a.entry_bytes - scale0 - n_scales) put_record(rec, ring, scale0 + n_scales + lane, uint8_t(0));
}

__global__ void __launch_bounds__(kRowWarps * 32) kv_finish_kernel(const KvFinishArgs a) {
  const int lane = threadIdx.x & 31;
  KvRowConsts k;
  load_kv_row_consts(a, lane, k);
  const int t = blockIdx.x * kRowWarps + (threadIdx.x >> 5);
  const KvRowPlace place = kv_row_place(a, t);
  pdl_wait();  // kv: the previous kernel
  if (t >= a.T) return;  // whole warps leave together
  kv_finish_row(a, k, t, lane, place);
}

struct QNormArgs {
  __nv_bfloat16* x;  // bf16 rows of n values, row stride ld (the qa columns)
  int64_t ld;
  int n;
  const float* w;    // f32 [n]
  float eps;
};

struct QkvNormFinishArgs {
  QNormArgs q;
  KvFinishArgs kv;
};

// qkv_norm_finish: grid ceil(T / 4) + T, 128 threads. Blocks [0, ceil(T / 4)) are
// kv_finish_kernel's blocks, the next T are rmsnorm_rows_kernel's (one per row, the whole block:
// the branch is uniform per block, so block_sum's barriers are safe). They touch disjoint columns.
__global__ void __launch_bounds__(kRowWarps * 32) qkv_norm_finish_kernel(const QkvNormFinishArgs g) {
  static_assert(kRowWarps * 32 == kQNormThreads, "rmsnorm_rows' block size");
  const QNormArgs& q = g.q;
  const KvFinishArgs& a = g.kv;
  const int kv_blocks = (a.T + kRowWarps - 1) / kRowWarps;
  if (int(blockIdx.x) >= kv_blocks) {
    __shared__ float s_red[32];
    RowNormWeights<kQNormChunks> w;
    load_row_norm_weights(q.w, q.n, w);
    pdl_wait();  // qkv comes from the previous kernel
    rmsnorm_row_block(q.x + int64_t(int(blockIdx.x) - kv_blocks) * q.ld, q.n, w, q.eps, s_red);
    return;
  }
  const int lane = threadIdx.x & 31;
  KvRowConsts k;
  load_kv_row_consts(a, lane, k);
  const int t = blockIdx.x * kRowWarps + (threadIdx.x >> 5);
  const KvRowPlace place = kv_row_place(a, t);
  pdl_wait();  // qkv: the previous kernel
  if (t >= a.T) return;  // whole warps leave together
  kv_finish_row(a, k, t, lane, place);
}

struct WindowSaveArgs {
  StepBatchView b;
  LayerKvView kv;
};

// grid ceil(n_tokens / 8), 8 warps; warp = one token row of the step. The row is saved when its
// sequence is real and it is among the sequence's last W rows (older rows would share a ring
// slot with a newer one). Record copies in 8-byte words.
__global__ void __launch_bounds__(kSaveWarps * 32) window_save_kernel(const WindowSaveArgs g) {
  pdl_wait();  // the step batch is a host copy, the chunk a kernel's output, and attention read the ring
  const StepBatchView& b = g.b;
  const LayerKvView& kv = g.kv;
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kSaveWarps + (threadIdx.x >> 5);
  if (r >= b.n_tokens) return;
  const int s = b.token_seq[r];
  if (s < 0 || s >= b.n_seqs) return;
  const int slot = b.seq_slot[s], ntok = b.seq_ntok[s];
  if (slot < 0 || ntok <= 0) return;
  const int j = r - b.seq_tok0[s];  // row within the sequence's rows of this step
  if (j < 0 || j >= ntok || j < ntok - kv.window_size) return;
  const int64_t pos = int64_t(b.seq_pos0[s]) + j;
  const int64_t words = kv.entry_bytes / 8;
  const uint2* src = reinterpret_cast<const uint2*>(kv.chunk + int64_t(r) * kv.entry_bytes);
  uint2* dst = reinterpret_cast<uint2*>(kv.window +
                                        (int64_t(slot) * kv.window_size + pos % kv.window_size) * kv.entry_bytes);
  for (int64_t i = lane; i < words; i += 32) dst[i] = src[i];
}

bool aligned(const void* p, uintptr_t n) { return (reinterpret_cast<uintptr_t>(p) & (n - 1)) == 0; }

// Bytes of a main record: [nope e4m3][rope bf16][ceil(nope / 64) ue8m0], padded to a multiple of
// 8 (kv::entry_bytes).
int main_record_bytes(int nope, int rope) {
  return (nope + 2 * rope + (nope + kFp8Block - 1) / kFp8Block + 7) / 8 * 8;
}

// kv_finish's checks (name: the entry point, for the messages).
Status check_kv_finish(const char* name, const __nv_bfloat16* kv, int64_t ld, int T, const float* norm_w,
                       const int32_t* token_pos, const float* inv_freq, const LayerKvView& layout,
                       const uint8_t* records) {
  if (kv == nullptr || norm_w == nullptr || token_pos == nullptr || records == nullptr ||
      (layout.rope > 0 && inv_freq == nullptr))
    return invalid_argument("{}: null pointer", name);
  const int nope = layout.nope, rope = layout.rope, d = nope + rope;
  if (nope < 8 || nope % 8 != 0 || rope < 0 || rope % 8 != 0 || d > 8 * 32 * kRowChunks)
    return invalid_argument("{}: nope {} and rope {} must be multiples of 8, nope + rope <= {}", name, nope, rope,
                            8 * 32 * kRowChunks);
  if (layout.entry_bytes != main_record_bytes(nope, rope))
    return invalid_argument("{}: entry_bytes {} (expected {} for nope {}, rope {})", name, layout.entry_bytes,
                            main_record_bytes(nope, rope), nope, rope);
  if (ld < d || ld % 8 != 0 || T < 0)
    return invalid_argument("{}: ld {} (>= {}, a multiple of 8), T {}", name, ld, d, T);
  if (!aligned(kv, 16) || !aligned(norm_w, 16) || !aligned(records, 8))
    return invalid_argument("{}: kv and norm_w must be 16-byte aligned, records 8-byte aligned", name);
  return Status::ok();
}

}  // namespace

Status kv_finish(const __nv_bfloat16* kv, int64_t ld, int T, const float* norm_w, float eps, const int32_t* token_pos,
                 const float* inv_freq, const LayerKvView& layout, uint8_t* records, cudaStream_t stream) {
  DSV4_RETURN_IF_ERROR(check_kv_finish("kv_finish", kv, ld, T, norm_w, token_pos, inv_freq, layout, records));
  if (T == 0) return Status::ok();
  const KvFinishArgs a{kv, ld, T, layout.nope, layout.rope, layout.entry_bytes, norm_w, eps, token_pos, inv_freq,
                       records};
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  return launch_kernel(&kv_finish_kernel, dim3((T + kRowWarps - 1) / kRowWarps), dim3(kRowWarps * 32), 0, stream, pdl,
                       a, "kv_finish");
}

Status qkv_norm_finish(__nv_bfloat16* qkv, int64_t ld, int T, int q_n, const float* q_norm_w, float q_eps,
                       int64_t kv_col, const float* kv_norm_w, float kv_eps, const int32_t* token_pos,
                       const float* inv_freq, const LayerKvView& layout, uint8_t* records, cudaStream_t stream,
                       const StepBatchView* ring_step) {
  if (qkv == nullptr || q_norm_w == nullptr) return invalid_argument("qkv_norm_finish: null pointer");
  const int d = layout.nope + layout.rope;
  if (q_n < 8 || q_n % 8 != 0 || q_n > 8 * kQNormThreads * kQNormChunks || kv_col < q_n || kv_col % 8 != 0 ||
      kv_col + d > ld)
    return invalid_argument("qkv_norm_finish: q_n {} must be a multiple of 8 up to {}, kv_col {} a multiple of 8 in "
                            "[q_n, ld - {}] (ld {})",
                            q_n, 8 * kQNormThreads * kQNormChunks, kv_col, d, ld);
  if (!aligned(qkv, 16) || !aligned(q_norm_w, 16))
    return invalid_argument("qkv_norm_finish: qkv and q_norm_w must be 16-byte aligned");
  DSV4_RETURN_IF_ERROR(
      check_kv_finish("qkv_norm_finish", qkv + kv_col, ld, T, kv_norm_w, token_pos, inv_freq, layout, records));
  if (T == 0) return Status::ok();
  KvFinishArgs a{qkv + kv_col, ld, T, layout.nope, layout.rope, layout.entry_bytes, kv_norm_w, kv_eps,
                 token_pos, inv_freq, records};
  if (ring_step != nullptr) {
    const StepBatchView& b = *ring_step;
    if (!b.one_row_per_seq)
      return invalid_argument("qkv_norm_finish: the ring copy needs a step of one row per sequence (window_save "
                              "orders longer chunks)");
    if (b.n_tokens != T || b.token_seq == nullptr || b.seq_slot == nullptr || b.token_pos != token_pos)
      return invalid_argument("qkv_norm_finish: ring step of {} rows for T {} (or null arrays, or other positions)",
                              b.n_tokens, T);
    if (layout.window == nullptr || layout.window_size < 1 || !aligned(layout.window, 8))
      return invalid_argument("qkv_norm_finish: the ring copy needs an 8-byte aligned window of >= 1 rows");
    a.token_seq = b.token_seq;
    a.seq_slot = b.seq_slot;
    a.window = layout.window;
    a.window_size = layout.window_size;
  }
  const QNormArgs q{qkv, ld, q_n, q_norm_w, q_eps};
  const int blocks = (T + kRowWarps - 1) / kRowWarps + T;
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  return launch_kernel(&qkv_norm_finish_kernel, dim3(blocks), dim3(kRowWarps * 32), 0, stream, pdl,
                       QkvNormFinishArgs{q, a}, "qkv_norm_finish");
}

Status window_save(const StepBatchView& b, const LayerKvView& kv, cudaStream_t stream) {
  if (b.n_tokens < 0 || b.n_seqs < 0) return invalid_argument("window_save: n_tokens {}, n_seqs {}", b.n_tokens, b.n_seqs);
  if (b.n_tokens == 0) return Status::ok();
  if (b.token_seq == nullptr || b.seq_slot == nullptr || b.seq_pos0 == nullptr || b.seq_tok0 == nullptr ||
      b.seq_ntok == nullptr || kv.window == nullptr || kv.chunk == nullptr)
    return invalid_argument("window_save: null pointer");
  if (kv.window_size < 1 || kv.entry_bytes < 8 || kv.entry_bytes % 8 != 0)
    return invalid_argument("window_save: window_size {} >= 1, entry_bytes {} a multiple of 8", kv.window_size,
                            kv.entry_bytes);
  if (!aligned(kv.window, 8) || !aligned(kv.chunk, 8))
    return invalid_argument("window_save: window and chunk must be 8-byte aligned");
  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  return launch_kernel(&window_save_kernel, dim3((b.n_tokens + kSaveWarps - 1) / kSaveWarps), dim3(kSaveWarps * 32), 0,
                       stream, pdl, WindowSaveArgs{b, kv}, "window_save");
}

}  // namespace dsv4::cuda
