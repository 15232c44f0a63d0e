// metrics.cpp: see metrics.h.
#include "engine/metrics.h"

#include <algorithm>

namespace dsv4::engine_detail {

Histogram::Histogram(std::vector<double> bounds) {
  h_.bounds = std::move(bounds);
  h_.counts.assign(h_.bounds.size() + 1, 0);
}

void Histogram::observe(double v) {
  const auto it = std::lower_bound(h_.bounds.begin(), h_.bounds.end(), v);  // first bound >= v
  ++h_.counts[size_t(it - h_.bounds.begin())];
  h_.sum += v;
  ++h_.count;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
          2.5,   5.0,   7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> request_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
          960.0, 1920.0, 7680.0};
}

std::vector<double> token_count_buckets(int64_t max) {
  std::vector<double> b;
  for (int64_t base = 1;; base *= 10) {
    for (const int64_t m : {1, 2, 5}) {
      if (base * m > max) return b;
      b.push_back(double(base * m));
    }
  }
}

std::vector<double> power_of_two_buckets(int64_t max) {
  std::vector<double> b;
  for (int64_t v = 1; v <= max; v *= 2) b.push_back(double(v));
  if (b.empty() || b.back() < double(max)) b.push_back(double(max));
  return b;
}

MetricsCollector::MetricsCollector(int64_t max_model_len, int32_t max_batched_tokens, int32_t max_num_seqs)
    : ttft(latency_buckets()),
      itl(itl_buckets()),
      e2e(request_buckets()),
      queue_time(request_buckets()),
      prefill_time(request_buckets()),
      decode_time(request_buckets()),
      inference_time(request_buckets()),
      prompt_tokens(token_count_buckets(max_model_len)),
      generation_tokens(token_count_buckets(max_model_len)),
      iteration_tokens(power_of_two_buckets(max_batched_tokens)),
      iteration_decode_seqs(power_of_two_buckets(max_num_seqs)),
      abort_latency(latency_buckets()),
      step_time(latency_buckets()) {}

EngineMetrics MetricsCollector::snapshot() const {
  std::lock_guard<std::mutex> lk(mu);
  EngineMetrics m = counters;
  m.ttft = ttft.snapshot();
  m.itl = itl.snapshot();
  m.e2e = e2e.snapshot();
  m.queue_time = queue_time.snapshot();
  m.prefill_time = prefill_time.snapshot();
  m.decode_time = decode_time.snapshot();
  m.inference_time = inference_time.snapshot();
  m.prompt_tokens = prompt_tokens.snapshot();
  m.generation_tokens = generation_tokens.snapshot();
  m.iteration_tokens = iteration_tokens.snapshot();
  m.iteration_decode_seqs = iteration_decode_seqs.snapshot();
  m.abort_latency = abort_latency.snapshot();
  m.step_time = step_time.snapshot();
  return m;
}

}  // namespace dsv4::engine_detail
