// attention.cu: sparse_attention's workspace and launcher: validates the arguments, picks the key
// tile (shared memory), the head blocks and the split count from the launch shape only
// (attention_plan.h), then runs the split kernel and, with more than one split, the combine kernel.
#include <algorithm>
#include <cmath>

#include "cuda/attention/attention.h"
#include "cuda/attention/attention_internal.h"
#include "cuda/attention/attention_plan.h"
#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"

namespace dsv4::cuda {

using namespace attention_detail;

Result<AttentionWorkspace> AttentionWorkspace::create(int max_tokens, int n_heads, int head_dim) {
  if (max_tokens < 1 || n_heads < 1 || n_heads > kMaxHeads || head_dim != kHeadDim)
    return invalid_argument("AttentionWorkspace: bad sizes (tokens {}, heads {} of 1..{}, head dim {}; must be {})",
                            max_tokens, n_heads, kMaxHeads, head_dim, kHeadDim);
  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  const int64_t floats = max_partials(max_tokens, n_heads, dev->n_sms) * partial_floats(n_heads);
  AttentionWorkspace ws;
  DSV4_ASSIGN_OR_RETURN(ws.buf_, DeviceBuffer::create(size_t(std::max<int64_t>(floats, 64)) * sizeof(float)));
  ws.max_tokens_ = max_tokens;
  return Result<AttentionWorkspace>(std::move(ws));
}

Status sparse_attention(const StepBatchView& b, const __nv_bfloat16* q, const LayerKvView& kv, const int32_t* selected,
                        const AttentionParams& p, AttentionWorkspace& ws, __nv_bfloat16* o, cudaStream_t stream) {
  AttentionDiagnosticLaunch launch;
  launch.head_groups = p.head_groups;
  return sparse_attention_diagnostic(b, q, kv, selected, p, ws, o, stream, launch);
}

namespace attention_detail {

Status sparse_attention_diagnostic(const StepBatchView& b, const __nv_bfloat16* q, const LayerKvView& kv,
                                   const int32_t* selected, const AttentionParams& p, AttentionWorkspace& ws,
                                   __nv_bfloat16* o, cudaStream_t stream, const AttentionDiagnosticLaunch& diag,
                                   int* chosen_splits, int* chosen_head_groups) {
  auto aligned = [](const void* ptr, uintptr_t n) { return (reinterpret_cast<uintptr_t>(ptr) & (n - 1)) == 0; };
  const int n = b.n_tokens, H = p.n_heads;
  if (n < 0 || n > ws.max_tokens() || n > 65535)
    return invalid_argument("sparse_attention: {} rows; the workspace holds {} (and at most 65535)", n,
                            ws.max_tokens());
  if (H < 1 || H > kMaxHeads || p.head_dim != kHeadDim || p.rope_dim != kRopeDim)
    return invalid_argument("sparse_attention: {} heads x {} dims ({} rope); supported: 1..{} heads x {} ({} rope)", H,
                            p.head_dim, p.rope_dim, kMaxHeads, kHeadDim, kRopeDim);
  if (kv.nope != kNopeDim || kv.rope != kRopeDim || kv.entry_bytes != kEntryBytes)
    return invalid_argument(
        "sparse_attention: KV records of {} nope + {} rope dims in {} bytes; supported: {} + {} in {}", kv.nope,
        kv.rope, kv.entry_bytes, kNopeDim, kRopeDim, kEntryBytes);
  if (!(p.softmax_scale > 0.0f) || !std::isfinite(p.softmax_scale) || p.sink == nullptr || p.inv_freq == nullptr)
    return invalid_argument("sparse_attention: softmax scale {} must be positive and sink, inv_freq set",
                            p.softmax_scale);
  if (q == nullptr || o == nullptr || !aligned(q, 16) || !aligned(o, 16))
    return invalid_argument("sparse_attention: q and o must be 16-byte aligned device pointers");
  if (kv.window == nullptr || kv.chunk == nullptr || !aligned(kv.window, 8) || !aligned(kv.chunk, 8) ||
      kv.window_size < 1)
    return invalid_argument("sparse_attention: window ring and chunk records must be set and 8-byte aligned (W = {})",
                            kv.window_size);
  if (kv.ratio < 0 || (kv.ratio > 0 && (kKvBlockTokens % kv.ratio != 0 || kv.entries == nullptr ||
                                        !aligned(kv.entries, 8) || b.block_table == nullptr || b.max_blocks < 1)))
    return invalid_argument(
        "sparse_attention: ratio {} needs 256 % ratio == 0, 8-byte aligned entries and a block table", kv.ratio);
  if (selected != nullptr && (kv.ratio == 0 || p.topk < 1 || p.topk > kMaxTopk || !aligned(selected, 4)))
    return invalid_argument("sparse_attention: selected entries need a compressed layer and 1 <= topk {} <= {}", p.topk,
                            kMaxTopk);
  if (selected == nullptr && kv.index_keys != nullptr)
    return invalid_argument("sparse_attention: a CSA layer (index keys set) needs the indexer's selected entries");
  if (b.token_seq == nullptr || b.token_pos == nullptr || b.seq_slot == nullptr || b.seq_pos0 == nullptr ||
      b.seq_tok0 == nullptr)
    return invalid_argument("sparse_attention: step batch arrays (token_seq, token_pos, seq_slot/pos0/tok0) not set");
  if (n == 0) return Status::ok();

  DSV4_ASSIGN_OR_RETURN(const DeviceInfo* dev, current_device_info());
  if (diag.head_groups != 0 && diag.head_groups != 1 && diag.head_groups != 4)
    return invalid_argument("sparse_attention: diagnostic head groups per block {} (1 or 4)", diag.head_groups);
  const LaunchPlan plan = choose_plan(n, H, expected_keys(kv.window_size, kv.ratio, selected != nullptr, p.topk),
                                      dev->n_sms, diag.head_groups);
  const int topk_smem = selected != nullptr ? p.topk : 0;
  const int bh = block_heads(H, plan.head_groups);
  const int key_tile = diag.key_tile != 0 ? diag.key_tile : choose_key_tile(bh, topk_smem, dev->smem_optin_bytes);
  if (key_tile == 0 || smem_bytes(key_tile, bh, topk_smem) > dev->smem_optin_bytes)
    return invalid_argument("sparse_attention: {} heads per block (top-k {}) need {} bytes of shared memory; {} allows {}",
                            bh, topk_smem, smem_bytes(key_tile == 0 ? 16 : key_tile, bh, topk_smem), dev->name,
                            dev->smem_optin_bytes);
  const int64_t fit = int64_t(ws.bytes() / sizeof(float)) / (int64_t(n) * partial_floats(H));
  int splits = diag.splits;
  if (splits == 0) {
    splits = plan.splits;
    // A workspace made for another device (fewer SMs) may hold fewer partials: split less.
    splits = int(std::min<int64_t>(splits, fit));
    if (splits < 2) splits = 1;
  } else if (splits < 0 || splits > kMaxSplits || (splits > 1 && splits > fit)) {
    return invalid_argument("sparse_attention: diagnostic split count {} (at most {}; the workspace holds {} per row)",
                            splits, kMaxSplits, fit);
  }
  if (chosen_splits != nullptr) *chosen_splits = splits;
  if (chosen_head_groups != nullptr) *chosen_head_groups = plan.head_groups;

  SplitKernelArgs a;
  a.n_tokens = n;
  a.token_seq = b.token_seq;
  a.token_pos = b.token_pos;
  a.seq_slot = b.seq_slot;
  a.seq_pos0 = b.seq_pos0;
  a.seq_tok0 = b.seq_tok0;
  a.block_table = b.block_table;
  a.max_blocks = b.max_blocks;
  a.q = q;
  a.window = kv.window;
  a.window_size = kv.window_size;
  a.chunk = kv.chunk;
  a.entries = kv.ratio > 0 ? kv.entries : nullptr;
  a.ratio = kv.ratio;
  a.selected = selected;
  a.topk = p.topk;
  a.n_heads = H;
  a.scale = p.softmax_scale;
  a.sink = p.sink;
  a.inv_freq = p.inv_freq;
  a.n_splits = splits;
  a.partials = splits > 1 ? static_cast<float*>(ws.data()) : nullptr;
  a.o = o;
  const bool pdl = pdl_supported(*dev);
  DSV4_RETURN_IF_ERROR(launch_split_kernel(a, key_tile, plan.head_groups, plan.head_blocks,
                                           smem_bytes(key_tile, bh, topk_smem), stream, pdl));
  if (splits == 1) return Status::ok();

  CombineKernelArgs c;
  c.n_tokens = n;
  c.token_seq = b.token_seq;
  c.token_pos = b.token_pos;
  c.n_heads = H;
  c.n_splits = splits;
  c.partials = a.partials;
  c.sink = p.sink;
  c.inv_freq = p.inv_freq;
  c.o = o;
  return launch_combine_kernel(c, stream, pdl);
}

}  // namespace attention_detail
}  // namespace dsv4::cuda
