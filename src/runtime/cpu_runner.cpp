// cpu_runner.cpp: see cpu_runner.h.
#include "runtime/cpu_runner.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "base/check.h"
#include "kvcache/kv_layout.h"

namespace dsv4::runtime {

Result<std::unique_ptr<CpuRunner>> CpuRunner::load(const std::string& model_dir, const std::string& numerics,
                                                   const std::string& kv_dtype, int threads) {
  cpu::Numerics n;
  if (numerics == "bf16") {
    n = cpu::Numerics::bf16_gpu();
  } else if (numerics == "fp32") {
    n = cpu::Numerics::fp32();
  } else {
    return invalid_argument("--cpu-numerics must be bf16 or fp32, found '{}'", numerics);
  }
  if (kv_dtype == "fp8") {
    n.fp8_kv = true;
  } else if (kv_dtype == "bf16") {
    n.fp8_kv = false;
  } else {
    return invalid_argument("--kv-dtype must be fp8 or bf16, found '{}'", kv_dtype);
  }
  // More threads than the machine can create crashed inside the first parallel region (libgomp
  // cannot start them); far past the cores they only slow every step down.
  const int max_threads = std::max(256, 4 * int(std::thread::hardware_concurrency()));
  if (threads < 0 || threads > max_threads)
    return invalid_argument("--cpu-threads must be in 0..{} (0: OpenMP's default), found {}", max_threads, threads);

  std::unique_ptr<CpuRunner> r(new CpuRunner());
  {
    DSV4_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfig::load(model_dir));
    r->cfg_ = std::make_unique<ModelConfig>(std::move(cfg));
  }
  DSV4_ASSIGN_OR_RETURN(r->weights_, ModelWeights::load(model_dir, *r->cfg_));
  r->model_ = std::make_unique<cpu::CpuModel>(*r->cfg_, *r->weights_, n);
  r->threads_ = threads;
  r->logits_.resize(size_t(r->cfg_->vocab_size));
  RunnerInfo& info = r->info_;
  info.name = "cpu-reference";
  info.vocab_size = r->cfg_->vocab_size;
  info.eos_token_id = r->cfg_->eos_token_id;
  info.max_positions = r->cfg_->max_position_embeddings;
  info.manifest.push_back(fmt::format("runner: cpu-reference (exact CPU forward, one sequence per call), numerics {}",
                                      n.name()));
  info.manifest.push_back(fmt::format("cpu threads: {}", threads > 0 ? fmt::format("{}", threads)
                                                                      : fmt::format("OpenMP default ({})",
                                                                                    omp_get_max_threads())));
  const kv::KvLayout layout =
      kv::make_kv_layout(*r->cfg_, kv_dtype == "fp8" ? kv::KvDtype::kFp8 : kv::KvDtype::kBf16);
  info.kv_layout = layout.summary() + " (accounting: the CPU reference keeps its own fp32 state)";
  info.kv_block_bytes = layout.block_bytes;
  info.kv_slot_bytes = layout.slot_bytes();
  info.manifest.push_back("sampling: host (logit_bias and penalties, then greedy, temperature, min-p, top-k, top-p; counter-based RNG)");
  std::string summary = r->cfg_->summary();
  while (!summary.empty() && summary.back() == '\n') summary.pop_back();
  std::string indented;
  for (char c : summary) indented += c == '\n' ? std::string("\n  ") : std::string(1, c);
  info.manifest.push_back(fmt::format("model:\n  {}", indented));
  return r;
}

Status CpuRunner::on_engine_thread_start() {
  // omp_set_num_threads sets the calling thread's team size, so it must run on the engine thread.
  if (threads_ > 0) omp_set_num_threads(threads_);
  return Status::ok();
}

Status CpuRunner::execute(const StepInput& in, StepOutput* out) {
  for (const StepSequence& s : in.seqs) {
    DSV4_CHECK(s.slot >= 0, "negative slot {}", s.slot);
    if (size_t(s.slot) >= slots_.size()) {
      slots_.resize(size_t(s.slot) + 1);
      slot_seq_.resize(size_t(s.slot) + 1, -1);
    }
    auto& state = slots_[size_t(s.slot)];
    if (s.pos0 == 0) {
      state = model_->new_sequence();
      slot_seq_[size_t(s.slot)] = s.seq_id;
    }
    DSV4_CHECK(state != nullptr && slot_seq_[size_t(s.slot)] == s.seq_id,
               "slot {} does not hold sequence {}", s.slot, s.seq_id);
    DSV4_CHECK(state->pos == s.pos0, "sequence {} is at position {}, the step feeds from {}", s.seq_id, state->pos,
               s.pos0);
    const Status st = model_->forward(*state, s.tokens, s.sample ? cpu::LogitsRows::kLast : cpu::LogitsRows::kNone,
                                      s.sample ? logits_.data() : nullptr);
    if (!st.is_ok()) {
      // The state may be half-updated: drop it; the engine fails the request.
      state.reset();
      slot_seq_[size_t(s.slot)] = -1;
      out->failed.emplace_back(s.seq_id, st);
      continue;
    }
    if (s.sample) {
      // Non-finite weights in a checkpoint (or constants in its config) reach the logits as NaN. The
      // sampler treats a NaN as a runner bug and aborts the process; this request fails instead.
      const auto nan = std::find_if(logits_.begin(), logits_.end(), [](float v) { return std::isnan(v); });
      if (nan != logits_.end()) {
        state.reset();
        slot_seq_[size_t(s.slot)] = -1;
        out->failed.emplace_back(
            s.seq_id, invalid_argument("the model computed a NaN logit (token {}) at position {}; non-finite "
                                       "weights in the checkpoint are the usual cause",
                                       nan - logits_.begin(), s.pos0 + int64_t(s.tokens.size()) - 1));
        continue;
      }
      DSV4_CHECK(s.sampling != nullptr, "sequence {}: sample without sampling parameters", s.seq_id);
      SampledToken t;
      t.seq_id = s.seq_id;
      apply_logit_adjust(logits_, s.logit_adjust);  // logits_ is this step's scratch
      t.token = sampler_.sample(logits_, *s.sampling, s.seed, s.sample_index);
      out->sampled.push_back(std::move(t));
    }
  }
  return Status::ok();
}

Status CpuRunner::fork(const ForkSpec& f) {
  if (f.src_slot < 0 || size_t(f.src_slot) >= slots_.size() || slot_seq_[size_t(f.src_slot)] != f.src_seq ||
      slots_[size_t(f.src_slot)] == nullptr)
    return invalid_argument("fork: slot {} does not hold sequence {}", f.src_slot, f.src_seq);
  auto copy = std::make_unique<cpu::SequenceState>(*slots_[size_t(f.src_slot)]);
  if (copy->pos != f.n_tokens)
    return invalid_argument("fork: sequence {} is at position {}, not {}", f.src_seq, copy->pos, f.n_tokens);
  if (f.dst_slot < 0 || f.dst_slot == f.src_slot) return invalid_argument("fork: bad destination slot {}", f.dst_slot);
  if (size_t(f.dst_slot) >= slots_.size()) {
    slots_.resize(size_t(f.dst_slot) + 1);
    slot_seq_.resize(size_t(f.dst_slot) + 1, -1);
  }
  slots_[size_t(f.dst_slot)] = std::move(copy);
  slot_seq_[size_t(f.dst_slot)] = f.dst_seq;
  return Status::ok();
}

void CpuRunner::release(int64_t seq_id, int32_t slot) {
  if (slot < 0 || size_t(slot) >= slots_.size()) return;  // never ran (aborted while queued)
  if (slot_seq_[size_t(slot)] != seq_id) return;
  slots_[size_t(slot)].reset();
  slot_seq_[size_t(slot)] = -1;
}

}  // namespace dsv4::runtime
