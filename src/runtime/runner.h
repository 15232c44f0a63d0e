// runner.h: the model-runner interface, the same for the CPU reference, the scripted test runner
// and (later) the CUDA runners. The engine hands the runner one StepInput per step (decode tokens
// and prompt chunks of several sequences) and gets back the sampled tokens. The runner owns the
// per-sequence model state (CPU: SequenceState; CUDA: KV pages addressed by the block table and
// slot); the engine owns which blocks and slots a sequence has. Runners are driven by exactly one
// thread, the engine thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/logit_adjust.h"
#include "base/status.h"
#include "dsv4/engine.h"

namespace dsv4::runtime {

// One sequence's part of a step. tokens are fed at positions [pos0, pos0 + tokens.size()); pos0
// == 0 starts a new sequence in `slot` (after a preemption the engine restarts it from 0).
struct StepSequence {
  int64_t seq_id = 0;
  int32_t slot = 0;                       // [0, max_num_seqs): window ring + compressor state
  std::span<const int32_t> block_table;   // KV blocks, position order, covers pos0 + tokens
  int64_t pos0 = 0;
  std::span<const int32_t> tokens;
  int64_t n_prompt = 0;                   // the request's original prompt length
  bool sample = false;                    // draw a token after the last fed one
  const SamplingParams* sampling = nullptr;  // when sample
  uint64_t seed = 0;                      // the request's resolved seed
  int64_t sample_index = 0;               // tokens generated so far (the RNG counter)
  // Applied to the logits before sampling (base/logit_adjust.h): distinct tokens < vocab,
  // increasing; empty for most requests. Valid for the step.
  std::span<const LogitAdjust> logit_adjust;
};

struct StepInput {
  std::vector<StepSequence> seqs;
};

// A copy of one sequence's state after its first n_tokens tokens into a fresh sequence: the n
// choices of one request share their prompt's computation (the engine forks the others from the
// first). Block tables in position order, both covering n_tokens; the source keeps running. A
// block id in both tables at the same index is shared (full, never written again): nothing to
// copy there.
struct ForkSpec {
  int64_t src_seq = 0, dst_seq = 0;
  int32_t src_slot = 0, dst_slot = 0;
  std::span<const int32_t> src_blocks, dst_blocks;
  int64_t n_tokens = 0;  // the source's length: exactly what it has computed
};

struct SampledToken {
  int64_t seq_id = 0;
  TokenLogprob token;  // token id, its logprob, and the requested top-k
};

struct StepOutput {
  std::vector<SampledToken> sampled;                 // one per sequence with sample = true
  std::vector<std::pair<int64_t, Status>> failed;    // sequences the runner could not run
  void clear() {
    sampled.clear();
    failed.clear();
  }
};

struct RunnerInfo {
  std::string name;          // "cpu-reference", "scripted (diagnostic)", ...
  int32_t vocab_size = 0;
  int32_t eos_token_id = 1;
  int64_t max_positions = 0; // longest sequence the model supports
  std::string kv_layout;     // KvLayout::summary() ("" when the runner stores no KV)
  int64_t kv_block_bytes = 0;
  int64_t kv_slot_bytes = 0;
  int64_t max_kv_blocks = 0; // KV blocks the runner has room for (0: no limit of its own)
  std::vector<std::string> manifest;  // lines for the startup manifest (kernels, numerics, ...)
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const RunnerInfo& info() const = 0;
  // Called once on the engine thread before the first step (thread-local setup: OpenMP thread
  // count, CUDA context and streams).
  virtual Status on_engine_thread_start() { return Status::ok(); }
  // Runs one step. A failure that concerns one sequence goes into out->failed; the others still
  // run. A non-ok return fails every sequence of the step.
  virtual Status execute(const StepInput& in, StepOutput* out) = 0;
  // Forgets a sequence's state (finished, aborted or preempted); its slot may be reused next step.
  virtual void release(int64_t seq_id, int32_t slot) = 0;
  // Whether fork() is implemented: without it the engine computes every choice's prompt itself.
  virtual bool can_fork() const { return false; }
  // Makes dst_seq continue from src_seq's state after f.n_tokens tokens (ForkSpec). Called
  // between steps; on an error the destination holds nothing (the engine recomputes its prompt).
  virtual Status fork(const ForkSpec& f) {
    return unimplemented("runner {} cannot fork sequence {}", info().name, f.src_seq);
  }
};

}  // namespace dsv4::runtime
