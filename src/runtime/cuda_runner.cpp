// cuda_runner.cpp: see cuda_runner.h.
#include "runtime/cuda_runner.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>

#include "base/check.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/sampling/sampling.h"
#include "gpu/gpu_model.h"
#include "kvcache/kv_layout.h"

namespace dsv4::runtime {

using cuda::DeviceBuffer;

// Logit adjustments (logit_bias, penalties) staged per upload: a step with more entries than this
// (all its rows together) uploads them in rounds, so the buffers never grow.
constexpr int kAdjustPerRow = 4096;

// Per-step sampling buffers: parameters and results for up to max_num_seqs rows, on the device and
// in pinned host memory (the only host copies of a step).
struct CudaRunner::Device {
  int max_rows = 0;
  DeviceBuffer params, token, logprob, top_ids, top_lp;
  cuda::SamplerWorkspace workspace;
  cuda::SampleParams* h_params = nullptr;
  int32_t* h_token = nullptr;
  float* h_logprob = nullptr;
  int32_t* h_top_ids = nullptr;
  float* h_top_lp = nullptr;
  // Steps with logit adjustments sample from a copy of the model's logits (the model owns its
  // buffer): f32 [max_rows, vocab], and the entries with their rows (capacity adjust_cap).
  DeviceBuffer adj_logits, adj, adj_rows;
  LogitAdjust* h_adj = nullptr;
  int32_t* h_adj_rows = nullptr;
  int adjust_cap = 0;
  // A step's sequences for the model and the rows it samples: kept, so that steps reuse the
  // capacity instead of allocating.
  std::vector<gpu::GpuStepSeq> step_seqs;
  std::vector<const StepSequence*> sampling;

  ~Device() {
    for (void* p : {static_cast<void*>(h_params), static_cast<void*>(h_token), static_cast<void*>(h_logprob),
                    static_cast<void*>(h_top_ids), static_cast<void*>(h_top_lp), static_cast<void*>(h_adj),
                    static_cast<void*>(h_adj_rows)})
      if (p) cudaFreeHost(p);
  }
  static Result<std::unique_ptr<Device>> create(int max_rows, int vocab) {
    auto d = std::make_unique<Device>();
    d->max_rows = max_rows;
    const size_t n = size_t(max_rows), nt = n * cuda::kMaxLogprobs;
    DSV4_ASSIGN_OR_RETURN(d->params, DeviceBuffer::create(n * sizeof(cuda::SampleParams)));
    DSV4_ASSIGN_OR_RETURN(d->token, DeviceBuffer::create(n * sizeof(int32_t)));
    DSV4_ASSIGN_OR_RETURN(d->logprob, DeviceBuffer::create(n * sizeof(float)));
    DSV4_ASSIGN_OR_RETURN(d->top_ids, DeviceBuffer::create(nt * sizeof(int32_t)));
    DSV4_ASSIGN_OR_RETURN(d->top_lp, DeviceBuffer::create(nt * sizeof(float)));
    DSV4_ASSIGN_OR_RETURN(d->workspace, cuda::SamplerWorkspace::create(max_rows, vocab));
    auto host = [](size_t bytes, auto** p) {
      return cuda::cuda_status(cudaMallocHost(reinterpret_cast<void**>(p), bytes), "cudaMallocHost (sampler)");
    };
    DSV4_RETURN_IF_ERROR(host(n * sizeof(cuda::SampleParams), &d->h_params));
    DSV4_RETURN_IF_ERROR(host(n * sizeof(int32_t), &d->h_token));
    DSV4_RETURN_IF_ERROR(host(n * sizeof(float), &d->h_logprob));
    DSV4_RETURN_IF_ERROR(host(nt * sizeof(int32_t), &d->h_top_ids));
    DSV4_RETURN_IF_ERROR(host(nt * sizeof(float), &d->h_top_lp));
    d->adjust_cap = max_rows * kAdjustPerRow;
    const size_t na = size_t(d->adjust_cap);
    DSV4_ASSIGN_OR_RETURN(d->adj_logits, DeviceBuffer::create(n * size_t(vocab) * sizeof(float)));
    DSV4_ASSIGN_OR_RETURN(d->adj, DeviceBuffer::create(na * sizeof(LogitAdjust)));
    DSV4_ASSIGN_OR_RETURN(d->adj_rows, DeviceBuffer::create(na * sizeof(int32_t)));
    DSV4_RETURN_IF_ERROR(host(na * sizeof(LogitAdjust), &d->h_adj));
    DSV4_RETURN_IF_ERROR(host(na * sizeof(int32_t), &d->h_adj_rows));
    return d;
  }
};

CudaRunner::CudaRunner() = default;
CudaRunner::~CudaRunner() = default;

Result<std::unique_ptr<CudaRunner>> CudaRunner::load(const EngineConfig& cfg) {
  // The scheduler settings size the graphs and buffers below: refused here, before the weights
  // are read, not by Engine::start after they are on the device.
  DSV4_RETURN_IF_ERROR(cfg.check());
  if (cfg.kv_dtype != "fp8") {
    return invalid_argument("--device cuda stores the KV cache as fp8_ds_mla records: --kv-dtype must be fp8, found "
                            "'{}'",
                            cfg.kv_dtype);
  }
  if (cfg.model_dir.empty()) return invalid_argument("--model DIR is required for --device cuda");
  if (cfg.wo_a != "bf16" && cfg.wo_a != "fp8") return invalid_argument("--wo-a must be bf16 or fp8, found '{}'", cfg.wo_a);
  int n_devices = 0;
  if (cudaGetDeviceCount(&n_devices) != cudaSuccess || n_devices == 0) {
    cudaGetLastError();
    return not_found("--device cuda: no CUDA device is visible to this process");
  }
  std::unique_ptr<CudaRunner> r(new CudaRunner());
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaGetDevice(&r->device_), "cudaGetDevice"));
  {
    DSV4_ASSIGN_OR_RETURN(ModelConfig mc, ModelConfig::load(cfg.model_dir));
    r->cfg_ = std::make_unique<ModelConfig>(std::move(mc));
  }
  // max_model_len sizes the step's block tables and the indexer's workspace.
  if (cfg.max_model_len > r->cfg_->max_position_embeddings) {
    return invalid_argument("--max-model-len {} exceeds the model's maximum of {} positions", cfg.max_model_len,
                            r->cfg_->max_position_embeddings);
  }
  DSV4_ASSIGN_OR_RETURN(r->weights_, ModelWeights::load(cfg.model_dir, *r->cfg_));

  gpu::GpuModelOptions o;
  o.max_seqs = cfg.max_num_seqs;
  o.max_tokens_per_step = cfg.max_num_batched_tokens;
  o.n_kv_blocks = cfg.num_kv_blocks;
  o.max_positions = cfg.max_model_len > 0 ? cfg.max_model_len : r->cfg_->max_position_embeddings;
  o.wo_a_fp8 = cfg.wo_a == "fp8";
  // Decode graphs for 1, 2, 4, ... and max_num_seqs itself (>= 1: checked above).
  for (int b = 1; b <= cfg.max_num_seqs; b *= 2) o.graph_batch_sizes.push_back(b);
  if (o.graph_batch_sizes.back() != cfg.max_num_seqs) o.graph_batch_sizes.push_back(cfg.max_num_seqs);
  // The sampler's buffers first: the model sizes its KV pool from the memory left after them.
  DSV4_ASSIGN_OR_RETURN(r->dev_, Device::create(cfg.max_num_seqs, r->cfg_->vocab_size));
  DSV4_ASSIGN_OR_RETURN(r->model_, gpu::GpuModel::load(*r->cfg_, *r->weights_, o));

  RunnerInfo& info = r->info_;
  info.name = "cuda";
  info.vocab_size = r->cfg_->vocab_size;
  info.eos_token_id = r->cfg_->eos_token_id;
  info.max_positions = r->cfg_->max_position_embeddings;
  info.max_kv_blocks = r->model_->options().n_kv_blocks;
  const kv::KvLayout layout = kv::make_kv_layout(*r->cfg_, kv::KvDtype::kFp8);
  info.kv_layout = layout.summary();
  info.kv_block_bytes = layout.block_bytes;
  info.kv_slot_bytes = layout.slot_bytes();
  info.manifest.push_back(fmt::format("runner: cuda (device {}), numerics bf16 (CPU reference: --device cpu "
                                      "--cpu-numerics bf16)",
                                      r->device_));
  for (const std::string& line : r->model_->manifest()) info.manifest.push_back(line);
  info.manifest.push_back("sampling: GPU (logit_bias and penalties, then greedy, temperature, min-p, top-k, top-p; counter-based RNG as the host "
                          "sampler)");
  return r;
}

Status CudaRunner::on_engine_thread_start() {
  // The CUDA runtime's current device is per host thread: the engine thread must select ours.
  return cuda::cuda_status(cudaSetDevice(device_), "cudaSetDevice (engine thread)");
}

// Rows with logit adjustments: the step's logits are copied to the runner's buffer and adjusted
// there, and *logits points at the copy; otherwise nothing happens. Entries go up in rounds of at
// most adjust_cap (a synchronization between rounds, since the pinned staging is reused).
Status CudaRunner::adjust(int B, int V, const float** logits) {
  Device& d = *dev_;
  size_t total = 0;
  for (int i = 0; i < B; ++i) total += d.sampling[size_t(i)]->logit_adjust.size();
  if (total == 0) return Status::ok();
  auto stream = static_cast<cudaStream_t>(model_->stream());
  float* copy = d.adj_logits.as<float>();
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(
      cudaMemcpyAsync(copy, *logits, size_t(B) * size_t(V) * sizeof(float), cudaMemcpyDeviceToDevice, stream),
      "copy logits for adjustment"));
  // One round: the staged entries up, then the kernel. The last round is not waited for: the
  // sampling launches follow it on the stream, and the step synchronizes before the staging is
  // written again.
  int n = 0;
  auto upload = [&](bool wait) -> Status {
    DSV4_RETURN_IF_ERROR(cuda::cuda_status(
        cudaMemcpyAsync(d.adj.get(), d.h_adj, size_t(n) * sizeof(LogitAdjust), cudaMemcpyHostToDevice, stream),
        "copy logit adjustments"));
    DSV4_RETURN_IF_ERROR(cuda::cuda_status(
        cudaMemcpyAsync(d.adj_rows.get(), d.h_adj_rows, size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
        "copy logit adjustment rows"));
    DSV4_RETURN_IF_ERROR(
        cuda::adjust_logits(copy, V, B, V, d.adj.as<LogitAdjust>(), d.adj_rows.as<int32_t>(), n, stream));
    n = 0;
    return wait ? cuda::cuda_status(cudaStreamSynchronize(stream), "logit adjustments") : Status::ok();
  };
  for (int i = 0; i < B; ++i) {
    for (const LogitAdjust& a : d.sampling[size_t(i)]->logit_adjust) {
      if (n == d.adjust_cap) DSV4_RETURN_IF_ERROR(upload(/*wait=*/true));
      d.h_adj[n] = a;
      d.h_adj_rows[n] = i;
      ++n;
    }
  }
  DSV4_RETURN_IF_ERROR(upload(/*wait=*/false));
  *logits = copy;
  return Status::ok();
}

Status CudaRunner::execute(const StepInput& in, StepOutput* out) {
  std::vector<gpu::GpuStepSeq>& seqs = dev_->step_seqs;
  std::vector<const StepSequence*>& sampling = dev_->sampling;
  seqs.clear();
  sampling.clear();
  for (const StepSequence& s : in.seqs) {
    gpu::GpuStepSeq g;
    g.slot = s.slot;
    g.block_table = s.block_table;
    g.pos0 = s.pos0;
    g.tokens = s.tokens;
    g.logits = s.sample;
    seqs.push_back(g);
    if (s.sample) sampling.push_back(&s);
  }
  // A validation error concerns the step as the engine built it: fail every sequence of it.
  DSV4_RETURN_IF_ERROR(model_->forward(seqs, nullptr));
  if (sampling.empty()) return Status::ok();

  Device& d = *dev_;
  const int B = int(sampling.size());
  DSV4_CHECK(B <= d.max_rows, "{} sampling rows exceed the runner's {}", B, d.max_rows);
  int max_logprobs = -1;
  for (int i = 0; i < B; ++i) {
    const StepSequence& s = *sampling[size_t(i)];
    DSV4_CHECK(s.sampling != nullptr, "sequence {}: sample without sampling parameters", s.seq_id);
    cuda::SampleParams& p = d.h_params[i];
    p = cuda::SampleParams{};
    p.temperature = s.sampling->temperature;
    p.top_p = s.sampling->top_p;
    p.min_p = s.sampling->min_p;
    p.top_k = s.sampling->top_k;
    p.logprobs = std::min(s.sampling->logprobs, cuda::kMaxLogprobs);
    p.seed = s.seed;
    p.index = s.sample_index;
    max_logprobs = std::max(max_logprobs, p.logprobs);
  }
  auto stream = static_cast<cudaStream_t>(model_->stream());
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(
      cudaMemcpyAsync(d.params.get(), d.h_params, size_t(B) * sizeof(cuda::SampleParams), cudaMemcpyHostToDevice, stream),
      "copy sampling parameters"));
  cuda::SampleOutputView o{d.token.as<int32_t>(), d.logprob.as<float>(), d.top_ids.as<int32_t>(),
                           d.top_lp.as<float>()};
  const int V = cfg_->vocab_size;
  const float* logits = model_->device_logits();
  DSV4_RETURN_IF_ERROR(adjust(B, V, &logits));
  DSV4_RETURN_IF_ERROR(cuda::sample_tokens(logits, V, B, V, d.params.as<cuda::SampleParams>(), o, d.workspace, stream));
  auto copy_back = [&](void* dst, const DeviceBuffer& src, size_t bytes) {
    return cuda::cuda_status(cudaMemcpyAsync(dst, src.get(), bytes, cudaMemcpyDeviceToHost, stream), "copy samples");
  };
  DSV4_RETURN_IF_ERROR(copy_back(d.h_token, d.token, size_t(B) * sizeof(int32_t)));
  DSV4_RETURN_IF_ERROR(copy_back(d.h_logprob, d.logprob, size_t(B) * sizeof(float)));
  if (max_logprobs > 0) {
    DSV4_RETURN_IF_ERROR(copy_back(d.h_top_ids, d.top_ids, size_t(B) * cuda::kMaxLogprobs * sizeof(int32_t)));
    DSV4_RETURN_IF_ERROR(copy_back(d.h_top_lp, d.top_lp, size_t(B) * cuda::kMaxLogprobs * sizeof(float)));
  }
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaStreamSynchronize(stream), "sampling step"));
  for (int i = 0; i < B; ++i) {
    const StepSequence& s = *sampling[size_t(i)];
    SampledToken t;
    t.seq_id = s.seq_id;
    t.token.token = d.h_token[i];
    t.token.logprob = d.h_logprob[i];
    for (int j = 0; j < d.h_params[i].logprobs; ++j) {
      t.token.top.emplace_back(d.h_top_ids[i * cuda::kMaxLogprobs + j], d.h_top_lp[i * cuda::kMaxLogprobs + j]);
    }
    out->sampled.push_back(std::move(t));
  }
  return Status::ok();
}

Status CudaRunner::fork(const ForkSpec& f) {
  return model_->fork_slot(f.src_slot, f.dst_slot, f.src_blocks, f.dst_blocks, f.n_tokens);
}

void CudaRunner::release(int64_t seq_id, int32_t slot) {
  // Nothing to free: a slot's window ring and compressor state are overwritten by the next
  // sequence that starts in it (pos0 == 0), and its KV blocks belong to the engine's pool. The
  // slot forgets its length, so only a new sequence may use it.
  model_->release_slot(slot);
}

}  // namespace dsv4::runtime
