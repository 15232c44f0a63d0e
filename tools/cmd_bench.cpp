// cmd_bench.cpp: `dsv4 bench`, the GPU decode and prefill ladder (issue: single-GPU forward).
// Weights come from a checkpoint (--model) or are generated in GPU memory (--synthetic flash
// --layers L: the same packed layouts as loaded weights, for machines whose disk cannot hold a
// large random checkpoint; --layers max: the most layers of Flash's pattern, up to Flash's 43,
// whose estimated footprint fits the device's free memory, gpu/memory_estimate.h). For each
// context length every sequence of the largest batch is prefilled in chunks; the first one is timed (prompt tokens/s; its last chunk is profiled by
// category). Then for each batch size, decode steps run with graphs (replay) and without (eager); the median
// step time is compared with the roofline: bytes the step must read (weights of every layer,
// the experts the step actually selected, the LM head, the KV entries attention and the indexer
// read) over the copy bandwidth measured in the same run. Results print and go to JSON.
// --pdl off launches every kernel plainly (cuda::set_pdl_enabled), to measure what programmatic
// dependent launch gives on SM90; --weights-l2 first reads the dense weight streams (not the
// W4A16 GEMMs') with L2 evict-first priority (cuda::set_weights_evict_first); --attention-head-groups 1|4 forces one
// sparse attention kernel variant for every batch size (the plan switches at n_tokens x 4 head
// groups > n_sms).
// --kernel-trace N traces N more graph steps of each batch size with CUPTI (gpu/kernel_trace.h)
// and splits the median one by kernel: each kernel's exposed time, how far it moved the step's
// end (gpu/kernel_timeline.h). Tracing is on for the whole run (graphs are instrumented when
// they are built), so the run's own step times include CUPTI's cost: compare them with an
// untraced run.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/testing/bandwidth.h"
#include "cuda/w4a16/w4a16.h"
#include "gpu/gpu_model.h"
#include "gpu/kernel_timeline.h"
#include "gpu/memory_estimate.h"
#ifdef DSV4_HAVE_KERNEL_TRACE
#include "gpu/kernel_trace.h"
#endif
#include "model/make_model.h"
#include "tools/commands.h"

namespace dsv4::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct BenchArgs {
  std::string model, synthetic, out, commit = "unknown", command;
  std::string argv;                      // the process's command line, recorded as run
  std::vector<std::string> layer_types;  // synthetic: per-layer swa|csa|hca (default: Flash's pattern)
  std::string dense_decode = "woa,proj";  // GpuModelOptions::dense_decode
  std::string pdl = "on";                // on | off: cuda::set_pdl_enabled, before the model loads
  std::string weights_l2 = "normal";     // normal | first: cuda::set_weights_evict_first, likewise
  int attention_head_groups = 0;         // GpuModelOptions::attention_head_groups
  std::string compressor_branch = "on";  // on | off: GpuModelOptions::compressor_branch
  std::string query_branch = gpu::query_branch_name(gpu::GpuModelOptions{}.query_branch);  // GpuModelOptions::query_branch
  std::string wo_a = "bf16";             // bf16 | fp8: GpuModelOptions::wo_a_fp8
  // The model's defaults, so that the bench measures what a server runs.
  int l2_prefetch_mb = gpu::GpuModelOptions{}.l2_prefetch_mb;
  std::string l2_prefetch_from = gpu::GpuModelOptions{}.l2_prefetch_early ? "layer" : "wq_b";  // layer | wq_b
  std::string layers = "20";             // synthetic: a count, or "max" (the most that fit)
  std::vector<int> batches = {1, 32};
  std::vector<int64_t> contexts = {4096};
  int decode_steps = 20;
  int chunk = 4096;
  uint64_t seed = 1;
  int kernel_trace = 0;  // graph steps traced per batch size (0: no tracing)
};

constexpr int kMaxBenchBatch = 8192;                   // the step's row limit (GpuModel)
constexpr int64_t kMaxBenchContext = int64_t(1) << 20;  // Flash's max_position_embeddings

Status check_ladder(const BenchArgs& a) {
  if (a.batches.empty()) return invalid_argument("--batch needs at least one batch size");
  for (const int b : a.batches)
    if (b < 1 || b > kMaxBenchBatch) return invalid_argument("--batch sizes must be in 1..{}, found {}", kMaxBenchBatch, b);
  if (a.contexts.empty()) return invalid_argument("--context needs at least one length");
  for (const int64_t c : a.contexts)
    if (c < 1 || c > kMaxBenchContext)
      return invalid_argument("--context lengths must be in 1..{}, found {}", kMaxBenchContext, c);
  if (a.chunk < 1) return invalid_argument("--chunk must be >= 1 token a prefill step, found {}", a.chunk);
  if (a.decode_steps < 1) return invalid_argument("--decode-steps must be >= 1, found {}", a.decode_steps);
  if (a.attention_head_groups != 0 && a.attention_head_groups != 1 && a.attention_head_groups != 4)
    return invalid_argument("--attention-head-groups takes 0 (auto), 1 or 4, found {}", a.attention_head_groups);
  const std::set<std::string> dense = {"none", "woa", "proj", "woa,proj"};
  if (dense.count(a.dense_decode) == 0)
    return invalid_argument("--dense-decode takes none, woa, proj or woa,proj, found '{}'", a.dense_decode);
  // The result file is opened now, not after minutes of measuring (it is rewritten at the end).
  if (!a.out.empty() && !std::ofstream(a.out).good())
    return invalid_argument("--out: cannot write '{}': {}", a.out, std::strerror(errno));
  return Status::ok();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Copy bandwidth (read + write bytes / time) of a streaming kernel over 2 x 2 GiB, median of 10.
Result<double> copy_bandwidth(cudaStream_t s) {
  const size_t bytes = size_t(2) << 30;
  DSV4_ASSIGN_OR_RETURN(auto a, cuda::DeviceBuffer::create(bytes));
  DSV4_ASSIGN_OR_RETURN(auto b, cuda::DeviceBuffer::create(bytes));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> gbs;
  for (int i = 0; i < 12; ++i) {
    cudaEventRecord(e0, s);
    DSV4_RETURN_IF_ERROR(cuda::testing::stream_copy(b.get(), a.get(), bytes, s));
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 2) gbs.push_back(2.0 * double(bytes) / (double(ms) * 1e6));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(gbs);
}

// Flash's layer count: --layers max never builds more (MODEL_SPEC.md: n_layers 43).
constexpr int kFlashLayers = 43;

// Device memory --layers max leaves free besides the model: the copy-bandwidth buffers (2 x 2 GiB,
// allocated after the load) and what GpuModel's KV sizing keeps back (gpu::device_reserve_bytes).
int64_t bench_reserve_bytes(int64_t total) { return (int64_t(4) << 30) + gpu::device_reserve_bytes(total); }

size_t int4_bytes(int64_t n, int64_t k) { return cuda::w4a16_qweight_bytes(int(n), int(k)) + cuda::w4a16_scales_bytes(int(n), int(k)); }

// Weight bytes one decode step reads besides the routed experts (every layer's attention
// projections, compressors, indexer, router, shared expert; the LM head), and one routed expert.
// fp8_wo_a: layers whose wo_a the model holds in the fp8 form (1 byte a weight + 1 per 128).
struct WeightBytes {
  double fixed = 0, per_expert = 0, head = 0;
};
WeightBytes weight_bytes(const ModelConfig& c, int64_t fp8_wo_a) {
  WeightBytes w;
  const int64_t D = c.hidden;
  const double wo_a_n = double(int64_t(c.o_groups) * c.o_lora_rank * c.group_in_dim());
  w.fixed += double(fp8_wo_a) * wo_a_n * (1.0 + 1.0 / 128.0) + double(c.n_layers - fp8_wo_a) * 2.0 * wo_a_n;
  for (const LayerSpec& s : c.layers) {
    w.fixed += double(int4_bytes(c.q_lora_rank + c.head_dim, D) + int4_bytes(c.q_dim(), c.q_lora_rank) +
                      int4_bytes(D, int64_t(c.o_groups) * c.o_lora_rank));
    w.fixed += 2.0 * double(c.n_routed_experts * D);                                   // router bf16
    w.fixed += double(int4_bytes(2 * c.moe_inter, D) + int4_bytes(D, c.moe_inter));    // shared expert
    w.fixed += 4.0 * double(2 * c.hc_mix() * c.hc_dim());                              // mHC fn f32
    if (s.attn != AttnType::kSliding) {
      const int coff = s.attn == AttnType::kCsa ? 2 : 1;
      w.fixed += 2.0 * double(2 * coff * c.head_dim * D);
    }
    if (s.attn == AttnType::kCsa) {
      w.fixed += 2.0 * double((4 * c.index_head_dim + c.index_n_heads) * D);
      w.fixed += double(int4_bytes(int64_t(c.index_n_heads) * c.index_head_dim, c.q_lora_rank));
    }
  }
  w.per_expert = double(int4_bytes(2 * c.moe_inter, D) + int4_bytes(D, c.moe_inter));
  w.head = 2.0 * double(int64_t(c.vocab_size) * D);
  return w;
}

// KV bytes one decode token at position p reads over all layers (window records, selected or all
// compressed entries, the indexer keys it scores).
double kv_bytes(const ModelConfig& c, int64_t p) {
  const double entry = 584.0, key = 68.0;
  double b = 0;
  for (const LayerSpec& s : c.layers) {
    b += double(std::min<int64_t>(p + 1, c.sliding_window)) * entry;
    if (s.attn == AttnType::kCsa) {
      const int64_t n = (p + 1) / s.compress_ratio;
      b += double(n) * key + double(std::min<int64_t>(n, c.index_topk)) * entry;
    } else if (s.attn == AttnType::kHca) {
      b += double((p + 1) / s.compress_ratio) * entry;
    }
  }
  return b;
}

int fail(const Status& st) {
  fmt::print(stderr, "bench: {}\n", st.to_string());
  return 1;
}

// The traced steps of one batch size: the median step's rows and groups, every step's span; the
// largest groups print.
json trace_report(const std::vector<gpu::StepTimeline>& steps) {
  json j;
  const int mid = gpu::median_step(steps);
  if (mid < 0) return j;
  const gpu::StepTimeline& t = steps[size_t(mid)];
  for (const gpu::StepTimeline& s : steps) j["span_us"].push_back(s.span_us);
  j["median_span_us"] = t.span_us;
  j["kernels"] = t.rows.size();
  for (const gpu::KernelGroup& g : t.groups)
    j["groups"].push_back({{"kernel", g.key}, {"count", g.count}, {"exposed_us", g.exposed_us},
                           {"duration_us", g.duration_us}});
  for (const gpu::TimelineRow& r : t.rows)
    j["rows"].push_back({{"name", r.name}, {"grid", r.grid}, {"stream", r.stream}, {"start_us", r.start_us},
                         {"end_us", r.end_us}, {"exposed_us", r.exposed_us}, {"lead_us", r.lead_us}});
  fmt::print("    kernel trace (median of {} graph steps): span {:.1f} us over {} kernels; largest exposed:\n",
             steps.size(), t.span_us, t.rows.size());
  const size_t shown = std::min<size_t>(t.groups.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    const gpu::KernelGroup& g = t.groups[i];
    fmt::print("      {:8.1f} us exposed {:5.1f}%  {:4} x {:6.2f} us  {}\n", g.exposed_us,
               100.0 * g.exposed_us / t.span_us, g.count, g.duration_us / g.count, g.key);
  }
  return j;
}

int run_bench(const BenchArgs& a) {
  if (a.model.empty() == a.synthetic.empty()) {
    fmt::print(stderr, "bench: pass exactly one of --model DIR and --synthetic flash\n");
    return 2;
  }
  if (!a.synthetic.empty() && a.synthetic != "flash") {
    fmt::print(stderr, "bench: --synthetic knows only 'flash', found '{}'\n", a.synthetic);
    return 2;
  }
  if (a.pdl != "on" && a.pdl != "off") {
    fmt::print(stderr, "bench: --pdl takes on or off, found '{}'\n", a.pdl);
    return 2;
  }
  // The ladder's own numbers, before anything is built or loaded: --chunk 0 looped forever over
  // the prefill, a negative one sized a vector from it, --decode-steps 0 printed infinite rates.
  if (const Status st = check_ladder(a); !st.is_ok()) {
    fmt::print(stderr, "bench: {}\n", st.message());
    return 2;
  }
  // Before anything is planned, launched or captured (arch.h).
  cuda::set_pdl_enabled(a.pdl == "on");
  cuda::set_weights_evict_first(a.weights_l2 == "first");
  // The tracer starts before the model captures its graphs (kernel_trace.h).
#ifdef DSV4_HAVE_KERNEL_TRACE
  std::unique_ptr<gpu::KernelTracer> tracer;
  if (a.kernel_trace > 0) {
    auto t = gpu::KernelTracer::start();
    if (!t.is_ok()) return fail(t.status());
    tracer = std::move(t).value();
  }
#else
  if (a.kernel_trace > 0) {
    fmt::print(stderr, "bench: --kernel-trace: this build has no kernel tracer (CUPTI's headers were not found)\n");
    return 2;
  }
#endif
  // The buffers of the ladder (gpu::ladder_shape).
  const int max_b = *std::max_element(a.batches.begin(), a.batches.end());
  const int64_t max_ctx = *std::max_element(a.contexts.begin(), a.contexts.end());
  gpu::DeviceBytesShape shape =
      gpu::ladder_shape(max_b, int(a.batches.size()), max_ctx, a.chunk, a.decode_steps, a.kernel_trace);
  shape.wo_a_fp8 = a.wo_a == "fp8";
  const int64_t ctx_blocks = shape.max_positions / 256;  // a sequence's blocks

  std::unique_ptr<ModelConfig> cfg;
  std::unique_ptr<ModelWeights> weights;
  if (!a.model.empty()) {
    auto c = ModelConfig::load(a.model);
    if (!c.is_ok()) return fail(c.status());
    cfg = std::make_unique<ModelConfig>(std::move(c).value());
    auto w = ModelWeights::load(a.model, *cfg);
    if (!w.is_ok()) return fail(w.status());
    weights = std::move(w).value();
  } else {
    MakeModelOptions o;
    o.preset = "flash-shaped";
    o.layer_types = a.layer_types;
    if (!a.layer_types.empty()) {
      o.layers = int(a.layer_types.size());
    } else if (a.layers == "max") {
      // The most layers of Flash's pattern whose estimate fits: one 43-layer synthetic model's
      // prefixes stand for the shorter ones (gpu/memory_estimate.h).
      o.layers = kFlashLayers;
      auto c = make_model_config(o);
      if (!c.is_ok()) return fail(c.status());
      const auto w = ModelWeights::synthetic(*c, a.seed);
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        fmt::print(stderr, "bench: --layers max: cudaMemGetInfo failed (is a GPU visible?)\n");
        return 1;
      }
      const int64_t budget = int64_t(free_b) - bench_reserve_bytes(int64_t(total_b));
      o.layers = gpu::layers_that_fit(*c, *w, shape, budget);
      fmt::print("bench: --layers max: {} layers fit {:.1f} GiB ({:.1f} GiB free less {:.1f} GiB kept back)\n",
                 o.layers, double(budget) / 1073741824.0, double(free_b) / 1073741824.0,
                 double(bench_reserve_bytes(int64_t(total_b))) / 1073741824.0);
      if (o.layers < 1) {
        fmt::print(stderr, "bench: --layers max: not even one layer fits this ladder's buffers\n");
        return 1;
      }
    } else {
      char* end = nullptr;
      const long n = std::strtol(a.layers.c_str(), &end, 10);
      if (a.layers.empty() || *end != '\0' || n < 1 || n > kFlashLayers) {
        fmt::print(stderr, "bench: --layers takes a count in 1..{} or 'max', found '{}'\n", kFlashLayers, a.layers);
        return 2;
      }
      o.layers = int(n);
    }
    auto c = make_model_config(o);
    if (!c.is_ok()) return fail(c.status());
    cfg = std::make_unique<ModelConfig>(std::move(c).value());
    weights = ModelWeights::synthetic(*cfg, a.seed);
  }
  const gpu::DeviceBytesEstimate estimate = gpu::estimate_device_bytes(*cfg, *weights, shape);

  gpu::GpuModelOptions o;
  o.max_seqs = shape.max_seqs;
  o.max_tokens_per_step = shape.max_tokens_per_step;
  o.max_positions = shape.max_positions;
  o.n_kv_blocks = int(shape.n_kv_blocks);
  o.graph_batch_sizes = a.batches;
  o.dense_decode = a.dense_decode;
  o.attention_head_groups = a.attention_head_groups;
  o.compressor_branch = a.compressor_branch == "on";
  for (gpu::QueryBranch q : gpu::kQueryBranches)
    if (a.query_branch == gpu::query_branch_name(q)) o.query_branch = q;  // the option's check admits only these
  o.wo_a_fp8 = a.wo_a == "fp8";
  o.l2_prefetch_mb = a.l2_prefetch_mb;
  o.l2_prefetch_early = a.l2_prefetch_from == "layer";
  std::sort(o.graph_batch_sizes.begin(), o.graph_batch_sizes.end());
  const auto t_load = Clock::now();
  auto model = gpu::GpuModel::load(*cfg, *weights, o);
  if (!model.is_ok()) return fail(model.status());
  gpu::GpuModel& m = **model;
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  auto stream = static_cast<cudaStream_t>(m.stream());
  auto bw = copy_bandwidth(stream);
  if (!bw.is_ok()) return fail(bw.status());
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  // The peak from the memory clock and bus width (what dense_tc sizes its ring by; 0: unreported).
  auto dev = cuda::current_device_info();
  const double peak_gbs = dev.is_ok() ? (*dev)->mem_peak_bytes_per_s / 1e9 : 0.0;
  fmt::print("bench: {} ({} layers, vocab {}), {} on {}, load {:.1f} s, copy bandwidth {:.0f} GB/s (peak {:.0f}), pdl {}, weights L2 {}, attention head groups {}, compressor branch {}, query branch {}, wo_a {} ({} layers in fp8), l2 prefetch {} MB from {}\n",
             a.model.empty() ? "synthetic flash" : a.model, cfg->n_layers, cfg->vocab_size,
             fmt::format("{:.1f} GiB", double(m.device_bytes()) / 1073741824.0), prop.name, load_s, *bw, peak_gbs, a.pdl, a.weights_l2,
             a.attention_head_groups == 0 ? std::string("auto") : std::to_string(a.attention_head_groups),
             a.compressor_branch, a.query_branch, a.wo_a, m.fp8_linears(), a.l2_prefetch_mb, a.l2_prefetch_from);
  if (!m.fp8_refused().empty()) fmt::print("bench: {}\n", m.fp8_refused());
  fmt::print("bench: device bytes {:.2f} GB, estimated {:.2f} GB (weights {:.2f}, KV {:.2f}, activations {:.2f}; "
             "gpu/memory_estimate.h)\n",
             double(m.device_bytes()) / 1e9, double(estimate.total()) / 1e9, double(estimate.weights) / 1e9,
             double(estimate.kv) / 1e9, double(estimate.activations) / 1e9);

  json out;
  out["date"] = "";
  {
    std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
    out["date"] = buf;
  }
  out["gpu"] = prop.name;
  out["commit"] = a.commit;
  out["command"] = a.command;
  out["argv"] = a.argv;
  // The revision CMake saw when the build was configured: stale after later commits without a
  // reconfigure, so --commit stays the one to trust.
  out["configured_rev"] = DSV4_GIT_REV;
  out["model"] = a.model.empty() ? fmt::format("synthetic flash, {} layers", cfg->n_layers) : a.model;
  out["dense_decode"] = a.dense_decode;
  out["pdl"] = a.pdl;
  out["weights_l2"] = a.weights_l2;
  out["attention_head_groups"] = a.attention_head_groups;
  out["compressor_branch"] = a.compressor_branch;
  out["query_branch"] = a.query_branch;
  out["wo_a"] = a.wo_a;
  out["wo_a_fp8_layers"] = m.fp8_linears();
  out["l2_prefetch_mb"] = a.l2_prefetch_mb;
  out["l2_prefetch_from"] = a.l2_prefetch_from;
  out["copy_bandwidth_gbs"] = *bw;
  out["peak_bandwidth_gbs"] = peak_gbs;
  out["kernel_trace_steps"] = a.kernel_trace;
  out["device_bytes"] = m.device_bytes();
  out["device_bytes_estimate"] = {{"weights", estimate.weights}, {"kv", estimate.kv},
                                  {"activations", estimate.activations}, {"total", estimate.total()}};
  json& runs = out["runs"];
  const WeightBytes wb = weight_bytes(*cfg, m.fp8_linears());

  // Token ids: a fixed pseudo-random stream (the content does not matter for timing).
  auto token_at = [&](int64_t seq, int64_t p) { return int32_t((seq * 7919 + p * 104729) % cfg->vocab_size); };

  for (int64_t ctx : a.contexts) {
    // Block tables: sequence s owns blocks [s * ctx_blocks, (s + 1) * ctx_blocks).
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(max_b));
    for (int s = 0; s < max_b; ++s) {
      tables[size_t(s)].resize(size_t(ctx_blocks));
      std::iota(tables[size_t(s)].begin(), tables[size_t(s)].end(), int32_t(s * ctx_blocks));
    }
    // Prefill every sequence to ctx tokens; the first one is timed.
    double prefill_s = 0;
    std::vector<std::pair<std::string, double>> prefill_profile;
    for (int s = 0; s < max_b; ++s) {
      const auto t0 = Clock::now();
      for (int64_t p = 0; p < ctx; p += a.chunk) {
        const int64_t n = std::min<int64_t>(a.chunk, ctx - p);
        std::vector<int32_t> toks(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) toks[size_t(i)] = token_at(s, p + i);
        gpu::GpuStepSeq q{s, tables[size_t(s)], p, toks, false};
        const bool profile_this = s == 0 && p + a.chunk >= ctx;  // the last chunk: the longest context
        m.set_profiling(profile_this);
        const Status st = m.forward(std::span<const gpu::GpuStepSeq>(&q, 1), nullptr);
        if (!st.is_ok()) return fail(st.with_context(fmt::format("prefill of sequence {} at {}", s, p)));
        if (profile_this) prefill_profile = m.last_profile();
      }
      cudaStreamSynchronize(stream);
      if (s == 0) prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    m.set_profiling(false);
    fmt::print("context {}: prefill {:.0f} tok/s ({:.2f} s)\n", ctx, double(ctx) / prefill_s, prefill_s);
    json pj;
    pj["kind"] = "prefill";
    pj["context"] = ctx;
    pj["chunk"] = a.chunk;
    pj["seconds"] = prefill_s;
    pj["tokens_per_s"] = double(ctx) / prefill_s;
    for (auto& [k, v] : prefill_profile) pj["last_chunk_ms"][k] = v;
    runs.push_back(pj);

    // Each sequence continues from where its last step left it (decode points share the prefill).
    std::vector<int64_t> next_pos(static_cast<size_t>(max_b), ctx);
    // One decode step of sequences 0 .. B-1, each at its next position; waits for the device.
    auto decode_step = [&](int B, gpu::GpuStepTrace* trace) {
      std::vector<int32_t> toks(static_cast<size_t>(B));
      std::vector<gpu::GpuStepSeq> qs(static_cast<size_t>(B));
      for (int s = 0; s < B; ++s) {
        const int64_t p = next_pos[size_t(s)]++;
        toks[size_t(s)] = token_at(s, p);
        qs[size_t(s)] = gpu::GpuStepSeq{s, tables[size_t(s)], p, std::span<const int32_t>(&toks[size_t(s)], 1), true};
      }
      const Status st = m.forward(qs, nullptr, false, trace);
      cudaStreamSynchronize(stream);
      return st.with_context(fmt::format("decode batch {} at {}", B, next_pos[0] - 1));
    };
    for (int B : a.batches) {
      std::set<std::pair<int, int32_t>> experts;  // (layer, expert) selected in the traced step
      for (int graphs = 1; graphs >= 0; --graphs) {
        m.set_graph_replay(graphs == 1);
        std::vector<double> ms;
        std::vector<std::pair<std::string, double>> profile;
        for (int step = 0; step < a.decode_steps + 3; ++step) {
          gpu::GpuStepTrace trace;
          const bool traced = graphs == 1 && step == 0;
          const bool profiled = graphs == 0 && step == 1;
          m.set_profiling(profiled);
          const auto t0 = Clock::now();
          const Status st = decode_step(B, traced ? &trace : nullptr);
          const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          if (!st.is_ok()) return fail(st);
          if (traced)
            for (size_t l = 0; l < trace.experts.size(); ++l)
              for (int32_t e : trace.experts[l]) experts.insert({int(l), e});
          if (profiled) profile = m.last_profile();
          if (step >= 3 && !traced && !profiled) ms.push_back(dt);
        }
        m.set_profiling(false);
        const double step_ms = median(ms);
        double bytes = wb.fixed + wb.head + wb.per_expert * double(experts.size());
        for (int s = 0; s < B; ++s) bytes += kv_bytes(*cfg, next_pos[size_t(s)]);
        const double roofline_ms = bytes / (*bw * 1e6);
        fmt::print("  decode B={:<3} ctx {:<7} {}: {:.3f} ms/step, {:.0f} tok/s, {:.2f} GB read, roofline {:.3f} ms "
                   "({:.0f}%)\n",
                   B, ctx, graphs ? "graph" : "eager", step_ms, double(B) * 1e3 / step_ms, bytes / 1e9, roofline_ms,
                   100.0 * roofline_ms / step_ms);
        json dj;
        dj["kind"] = "decode";
        dj["batch"] = B;
        dj["context"] = ctx;
        dj["graphs"] = bool(graphs);
        dj["step_ms"] = step_ms;
        dj["tokens_per_s"] = double(B) * 1e3 / step_ms;
        dj["bytes"] = bytes;
        dj["distinct_experts"] = experts.size();
        dj["roofline_ms"] = roofline_ms;
        dj["roofline_ratio"] = roofline_ms / step_ms;
        for (auto& [k, v] : profile) dj["eager_profile_ms"][k] = v;
#ifdef DSV4_HAVE_KERNEL_TRACE
        if (tracer != nullptr && graphs == 1) {
          std::vector<gpu::StepTimeline> steps;
          for (int i = 0; i < a.kernel_trace; ++i) {
            auto before = tracer->take();  // whatever ran since the last take: not this step's
            if (!before.is_ok()) return fail(before.status());
            const Status st = decode_step(B, nullptr);
            if (!st.is_ok()) return fail(st);
            auto recs = tracer->take();
            if (!recs.is_ok()) return fail(recs.status());
            if (tracer->last_incomplete() > 0)
              fmt::print("    kernel trace: {} kernels of a traced step had no timestamps and are left out\n",
                         tracer->last_incomplete());
            steps.push_back(gpu::step_timeline(std::move(recs).value()));
          }
          dj["kernel_trace"] = trace_report(steps);
        }
#endif
        runs.push_back(dj);
        if (!profile.empty()) {
          std::string line = "    eager split:";
          for (auto& [k, v] : profile) line += fmt::format(" {} {:.3f}", k, v);
          fmt::print("{}\n", line);
        }
      }
      m.set_graph_replay(true);
    }
  }
  if (!a.out.empty()) {
    std::ofstream f(a.out);
    f << out.dump(2) << "\n";
    f.close();
    if (!f) {
      fmt::print(stderr, "bench: cannot write '{}': {}\n", a.out, std::strerror(errno));
      return 1;
    }
    fmt::print("bench: wrote {}\n", a.out);
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, int& exit_code, const std::string& argv) {
  auto* cmd = app.add_subcommand("bench", "GPU decode/prefill ladder: step times, category split, roofline ratio");
  auto a = std::make_shared<BenchArgs>();
  a->argv = argv;
  cmd->add_option("--model", a->model, "checkpoint directory (W4A16)");
  cmd->add_option("--synthetic", a->synthetic, "flash: random weights generated in GPU memory");
  cmd->add_option("--layers", a->layers,
                  "layers of the synthetic model: a count, or max (the most of Flash's 43 whose estimated "
                  "footprint fits the free device memory)")
      ->capture_default_str();
  cmd->add_option("--layer-types", a->layer_types, "synthetic: per-layer swa,csa,hca (sets --layers)")->delimiter(',');
  cmd->add_option("--batch", a->batches, "decode batch sizes")->delimiter(',')->capture_default_str();
  cmd->add_option("--context", a->contexts, "context lengths (prefilled first)")->delimiter(',')->capture_default_str();
  cmd->add_option("--decode-steps", a->decode_steps, "timed decode steps per point")->capture_default_str();
  cmd->add_option("--chunk", a->chunk, "prefill chunk (tokens per step)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "synthetic weights seed")->capture_default_str();
  cmd->add_option("--dense-decode", a->dense_decode, "none | woa | proj | woa,proj: dense linears of decode batches "
                  "on the project's dense decode kernels instead of cuBLAS (woa: 1 row; proj: 1..4 rows)")->capture_default_str();
  cmd->add_option("--pdl", a->pdl, "on | off: programmatic dependent launch of the step kernels (SM90; off: plain "
                  "launches, for A/B runs)")->capture_default_str();
  cmd->add_option("--weights-l2", a->weights_l2,
                  "normal | first: L2 priority of the decode GEMMs' and dense weight streams' weight reads "
                  "(first: evict-first, so the step's code and activations stay in L2; for A/B runs)")
      ->check(CLI::IsMember({"normal", "first"}))
      ->capture_default_str();
  cmd->add_option("--attention-head-groups", a->attention_head_groups,
                  "0 | 1 | 4: sparse attention blocks of 1 or 4 groups of 16 heads (0: the plan picks by batch size)")
      ->capture_default_str();
  cmd->add_option("--compressor-branch", a->compressor_branch,
                  "on | off: the compressor projections and emits on a second stream beside the query path "
                  "(off: one stream, for A/B runs)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--query-branch", a->query_branch,
                  "off | csa | csa-late: in decode steps without the compressor branch (1..4 rows), a CSA layer's "
                  "compress launches (from the layer's start, or after wqkv: csa-late), wq_b and the query heads' "
                  "norm + RoPE on the side stream beside the indexer chain")
      ->check(CLI::IsMember({"off", "csa", "csa-late"}))
      ->capture_default_str();
  cmd->add_option("--wo-a", a->wo_a,
                  "bf16 | fp8: each layer's wo_a as stored (bf16) or in the lossless fp8 form where its values "
                  "allow (half the bytes; synthetic weights: random fp8-form values). The roofline counts the "
                  "bytes of the form the model holds")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--l2-prefetch-mb", a->l2_prefetch_mb,
                  "MB of each layer's bf16 wo_a asked into L2 from a side stream while the layer's latency-bound "
                  "kernels run, in decode steps of 1..4 rows (0: off; SM90 only)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_option("--l2-prefetch-from", a->l2_prefetch_from,
                  "layer | wq_b: fork that prefetch at the layer's start, or after wq_b (for A/B runs)")
      ->check(CLI::IsMember({"layer", "wq_b"}))
      ->capture_default_str();
  cmd->add_option("--kernel-trace", a->kernel_trace,
                  "N: trace N more graph decode steps of each batch size with CUPTI and split the median one by "
                  "kernel (exposed time; needs libcupti on the library path; the run's step times then include "
                  "CUPTI's cost)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--out", a->out, "JSON result file");
  cmd->add_option("--commit", a->commit, "commit recorded in the JSON");
  cmd->add_option("--command", a->command, "command line recorded in the JSON");
  cmd->callback([a, &exit_code] { exit_code = run_bench(*a); });
}

}  // namespace dsv4::cli
