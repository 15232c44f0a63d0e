// sampling.cu: SamplerWorkspace::create and sample_tokens, the validating launcher of the three
// sampling kernels (stats.cu, weights.cu, select.cu; the pipeline is described in
// sampling_internal.h). No allocation and no host synchronization here: graph-safe.
#include "cuda/sampling/sampling.h"

#include <cstdint>
#include <utility>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/sampling/sampling_internal.h"

namespace dsv4::cuda {

using sampling_detail::WorkspaceLayout;

static_assert(sampling_detail::kTopSlots == kMaxLogprobs, "the top-list slots are the logprobs outputs");
static_assert(sizeof(SampleParams) == 40, "SampleParams is read on the device with this layout");

Result<SamplerWorkspace> SamplerWorkspace::create(int max_rows, int vocab) {
  if (max_rows < 1 || vocab < 1)
    return invalid_argument("sampler workspace: need max_rows >= 1 and vocab >= 1 (got {}, {})", max_rows, vocab);
  const WorkspaceLayout l = sampling_detail::workspace_layout(max_rows, vocab);
  DSV4_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::create(l.bytes));
  SamplerWorkspace ws;
  ws.buf_ = std::move(buf);
  ws.max_rows_ = max_rows;
  ws.vocab_ = vocab;
  return Result<SamplerWorkspace>(std::move(ws));
}

Status sample_tokens(const float* logits, int64_t ld, int B, int V, const SampleParams* params,
                     const SampleOutputView& out, SamplerWorkspace& ws, cudaStream_t stream) {
  if (B < 0 || B > ws.max_rows())
    return invalid_argument("sample_tokens: B={} not in 0..{} (workspace rows)", B, ws.max_rows());
  if (B > 65535) return invalid_argument("sample_tokens: B={} exceeds the 65535 grid rows", B);
  if (V < 1 || V > ws.vocab()) return invalid_argument("sample_tokens: V={} not in 1..{} (workspace vocab)", V, ws.vocab());
  if (ld < V) return invalid_argument("sample_tokens: ld={} < V={}", ld, V);
  if (B == 0) return Status::ok();
  if (logits == nullptr || params == nullptr || out.token == nullptr || out.logprob == nullptr)
    return invalid_argument("sample_tokens: null pointer (logits {}, params {}, token {}, logprob {})", fmt::ptr(logits),
                            fmt::ptr(params), fmt::ptr(out.token), fmt::ptr(out.logprob));
  if ((out.top_ids == nullptr) != (out.top_logprobs == nullptr))
    return invalid_argument("sample_tokens: top_ids and top_logprobs must both be set or both be null");
  if (reinterpret_cast<uintptr_t>(params) % alignof(SampleParams) != 0)
    return invalid_argument("sample_tokens: params must be {}-byte aligned", alignof(SampleParams));

  const WorkspaceLayout l = sampling_detail::workspace_layout(ws.max_rows(), ws.vocab());
  auto* base = static_cast<unsigned char*>(ws.data());
  sampling_detail::SampleArgs a;
  a.logits = logits;
  a.ld = ld;
  a.B = B;
  a.V = V;
  a.split = sampling_detail::row_split(B, V);
  a.params = params;
  a.token = out.token;
  a.logprob = out.logprob;
  a.top_ids = out.top_ids;
  a.top_logprobs = out.top_logprobs;
  a.keys = reinterpret_cast<uint32_t*>(base + l.keys_off);
  a.key_stride = l.key_stride;
  a.tops = reinterpret_cast<unsigned long long*>(base + l.tops_off);
  a.lse_part = reinterpret_cast<double*>(base + l.lse_off);
  a.hist_cnt = reinterpret_cast<uint32_t*>(base + l.hist_cnt_off);
  a.hist_sum = reinterpret_cast<unsigned long long*>(base + l.hist_sum_off);
  a.max_slices = l.max_slices;
  a.max_chunks = l.max_chunks;
  // Never taken: row_split stays within the layout for any B and V <= vocab (host-tested).
  if (a.split.n_slices > a.max_slices || a.split.n_chunks > a.max_chunks)
    return internal_error("sample_tokens: split of B={} V={} exceeds the workspace layout", B, V);

  DSV4_ASSIGN_OR_RETURN(const bool pdl, pdl_on_current_device());
  DSV4_RETURN_IF_ERROR(sampling_detail::launch_sample_stats(a, stream, pdl));
  DSV4_RETURN_IF_ERROR(sampling_detail::launch_sample_weights(a, stream, pdl));
  return sampling_detail::launch_sample_select(a, stream, pdl);
}

}  // namespace dsv4::cuda
