// metrics.h: the engine's counters and histograms (vLLM V1 semantics and bucket choices,
// ECOSYSTEM.md §1.5). Written by the engine thread once per step, read by the front end as a
// snapshot; one mutex, held only for copies and a few additions.
#pragma once

#include <mutex>
#include <vector>

#include "dsv4/engine.h"

namespace dsv4::engine_detail {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  HistogramSnapshot snapshot() const { return h_; }

 private:
  HistogramSnapshot h_;
};

// Bucket sets.
std::vector<double> latency_buckets();      // TTFT, queue, prefill (seconds)
std::vector<double> itl_buckets();          // inter-token latency (seconds)
std::vector<double> request_buckets();      // E2E, decode, inference (seconds)
std::vector<double> token_count_buckets(int64_t max);  // 1, 2, 5, 10, 20, 50, ... up to max
std::vector<double> power_of_two_buckets(int64_t max); // 1, 2, 4, ... up to max

struct MetricsCollector {
  explicit MetricsCollector(int64_t max_model_len, int32_t max_batched_tokens, int32_t max_num_seqs);

  mutable std::mutex mu;
  EngineMetrics counters;  // gauges and counters; the histograms below are copied in snapshot()
  Histogram ttft, itl, e2e, queue_time, prefill_time, decode_time, inference_time;
  Histogram prompt_tokens, generation_tokens, iteration_tokens, iteration_decode_seqs, abort_latency, step_time;

  EngineMetrics snapshot() const;
};

}  // namespace dsv4::engine_detail
