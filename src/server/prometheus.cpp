// prometheus.cpp: see prometheus.h.
#include "server/prometheus.h"

#include <fmt/format.h>

namespace dsv4::server {
namespace {

std::string escape_label(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string num(double v) { return fmt::format("{}", v); }

class Writer {
 public:
  explicit Writer(std::string model) : model_(escape_label(model)) {}

  void header(const std::string& name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const std::string& name, double v, const std::string& extra_labels = "") {
    out_ += fmt::format("{}{{model_name=\"{}\"{}}} {}\n", name, model_, extra_labels, num(v));
  }
  void gauge(const std::string& name, const char* help, double v) {
    header(name, "gauge", help);
    sample(name, v);
  }
  void counter(const std::string& name, const char* help, double v) {
    header(name, "counter", help);
    sample(name, v);
  }
  void histogram(const std::string& name, const char* help, const HistogramSnapshot& h) {
    header(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      sample(name + "_bucket", double(cum), fmt::format(",le=\"{}\"", num(h.bounds[i])));
    }
    sample(name + "_bucket", double(h.count), ",le=\"+Inf\"");
    sample(name + "_sum", h.sum);
    sample(name + "_count", double(h.count));
  }
  std::string& out() { return out_; }
  const std::string& model() const { return model_; }

 private:
  std::string model_;
  std::string out_;
};

}  // namespace

std::string render_prometheus(const EngineMetrics& m, const EngineLimits& limits, const ServerCounters& server,
                              const std::string& model_name, const std::string& kv_dtype) {
  Writer w(model_name);
  w.gauge("vllm:num_requests_running", "Requests in the running batch.", double(m.n_running));
  w.gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", double(m.n_waiting));
  const double usage = m.kv_blocks_total > 0 ? 1.0 - double(m.kv_blocks_free) / double(m.kv_blocks_total) : 0.0;
  w.gauge("vllm:kv_cache_usage_perc", "Fraction of KV blocks in use (0-1).", usage);
  w.counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache (no prefix cache yet).",
            double(m.prompt_tokens_total));
  w.counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", 0.0);
  w.counter("vllm:prompt_tokens_total", "Prompt tokens of scheduled requests.", double(m.prompt_tokens_total));
  w.counter("vllm:generation_tokens_total", "Generated tokens.", double(m.generation_tokens_total));
  w.header("vllm:request_success_total", "counter", "Finished requests by finish reason.");
  w.sample("vllm:request_success_total", double(m.finished_stop), ",finished_reason=\"stop\"");
  w.sample("vllm:request_success_total", double(m.finished_length), ",finished_reason=\"length\"");
  w.sample("vllm:request_success_total", double(m.finished_abort), ",finished_reason=\"abort\"");
  w.sample("vllm:request_success_total", double(m.finished_error), ",finished_reason=\"error\"");
  w.counter("vllm:num_preemptions_total", "Preemptions (recompute).", double(m.preemptions_total));
  w.histogram("vllm:time_to_first_token_seconds", "Time to first token, from arrival.", m.ttft);
  w.histogram("vllm:inter_token_latency_seconds", "Time between consecutive tokens of a request.", m.itl);
  w.histogram("vllm:e2e_request_latency_seconds", "Arrival to finish.", m.e2e);
  w.histogram("vllm:request_queue_time_seconds", "Arrival to first scheduled.", m.queue_time);
  w.histogram("vllm:request_prefill_time_seconds", "First scheduled to first token.", m.prefill_time);
  w.histogram("vllm:request_decode_time_seconds", "First token to finish.", m.decode_time);
  w.histogram("vllm:request_inference_time_seconds", "First scheduled to finish.", m.inference_time);
  w.histogram("vllm:request_prompt_tokens", "Prompt length of finished requests.", m.prompt_tokens);
  w.histogram("vllm:request_generation_tokens", "Generated tokens of finished requests.", m.generation_tokens);
  w.histogram("vllm:iteration_tokens_total", "Tokens per engine step (decodes + prefill chunks).",
              m.iteration_tokens);
  w.header("vllm:cache_config_info", "gauge", "KV cache configuration.");
  w.sample("vllm:cache_config_info", 1.0,
           fmt::format(",block_size=\"{}\",num_gpu_blocks=\"{}\",cache_dtype=\"{}\"", limits.block_tokens,
                       limits.num_kv_blocks, escape_label(kv_dtype)));

  w.gauge("dsv4:kv_blocks_total", "KV blocks (256 tokens each) in the pool.", double(m.kv_blocks_total));
  w.gauge("dsv4:kv_blocks_free", "KV blocks free.", double(m.kv_blocks_free));
  w.gauge("dsv4:seq_slots_total", "Sequence slots (window ring + compressor state).", double(m.slots_total));
  w.gauge("dsv4:seq_slots_free", "Sequence slots free.", double(m.slots_free));
  w.counter("dsv4:engine_steps_total", "Engine steps run.", double(m.steps_total));
  w.counter("dsv4:computed_tokens_total", "Tokens run through the model, recomputation included.",
            double(m.computed_tokens_total));
  w.counter("dsv4:forked_prompt_tokens_total", "Prompt tokens copied between the choices of a request (n > 1), not computed.",
            double(m.forked_prompt_tokens_total));
  w.counter("dsv4:requests_refused_total", "Requests the engine refused at submission.", double(m.refused_total));
  w.histogram("dsv4:iteration_decode_sequences", "Decoding sequences per engine step (batch sharing).",
              m.iteration_decode_seqs);
  w.histogram("dsv4:request_abort_latency_seconds", "abort() to KV blocks freed.", m.abort_latency);
  w.histogram("dsv4:engine_step_seconds", "Duration of one engine step.", m.step_time);
  w.counter("dsv4:client_disconnects_total", "Requests aborted because the client went away.",
            double(server.client_disconnects));
  w.header("dsv4:http_errors_total", "counter", "Error answers by HTTP status.");
  for (const auto& [status, n] : server.http_errors)
    w.sample("dsv4:http_errors_total", double(n), fmt::format(",status=\"{}\"", status));
  return std::move(w.out());
}

}  // namespace dsv4::server
