// weight_prefetch.h: asks L2 for weight bytes that a later kernel of the step will stream, from a
// launch of its own on a side stream (gpu/forward_pass.cpp), so that DRAM, idle while the step's
// latency-bound kernels run (the attention chain between wq_b and wo_a), reads them beforehand.
// A prefetch is only a hint: it changes no value, and the reader finds in L2 whatever is still
// there. SM90 only (cp.async.bulk.prefetch.L2; arch.h l2_prefetch_supported): elsewhere the call
// is refused, and the forward pass never makes it (an RTX 3090's 6 MB L2 would hold nothing useful).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"

namespace dsv4::cuda {

// The first prefix_bytes of each of `rows` rows of a row-major weight: row r starts at
// base + r * row_stride bytes. base, row_stride and prefix_bytes are multiples of 16 (the bulk
// prefetch's granule); prefix_bytes <= row_stride.
struct RowPrefixes {
  const void* base = nullptr;
  int64_t rows = 0;
  int64_t row_stride = 0;    // bytes between rows
  int64_t prefix_bytes = 0;  // bytes asked for at the start of each row (0: nothing)
};

// The prefix of each row whose sum over `rows` rows is at most budget_bytes: a multiple of 16,
// at most row_bytes (rounded down to 16). 0 when the budget is under 16 bytes a row.
int64_t prefix_for_budget(int64_t rows, int64_t row_bytes, int64_t budget_bytes);

// Issues the prefetches of `p` on `stream` (one launch; nothing when rows or prefix_bytes is 0).
// The launch's blocks end when their requests have landed in L2, so the stream should be one the
// step does not wait on until the reader is long done. Errors: not SM90, null base, misaligned or
// negative sizes, a prefix longer than the row stride.
Status l2_prefetch_rows(const RowPrefixes& p, cudaStream_t stream);

}  // namespace dsv4::cuda
