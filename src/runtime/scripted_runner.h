// scripted_runner.h: a diagnostic ModelRunner that replaces the model with a script, so tests can
// drive the whole engine and server deterministically (DSML tool calls, stop strings, reasoning)
// with the demo's random weights out of the picture. It honours the step protocol exactly like a
// model runner: prompt chunks produce nothing until the last, then one token per sample.
//
// Script file (JSON):
//   {"rules": [{"prompt_contains": "TEXT", "output": "TEXT", "eos": true}, ...],
//    "default": {"output": "TEXT", "eos": true},
//    "step_delay_ms": 0, "token_delay_us": 0}
// The first rule whose prompt_contains occurs in the decoded prompt wins, else the default. The
// output is tokenized with special tokens (so "</think>" and "｜DSML｜" are single tokens); after
// it comes EOS when "eos" is true (the default), otherwise the output repeats until max_tokens.
// step_delay_ms and token_delay_us (per fed token) make steps slow, for cancellation tests.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/runner.h"

namespace dsv4::runtime {

struct ScriptRule {
  std::string prompt_contains;  // "" for the default
  std::vector<int32_t> output;
  bool eos = true;
};

struct Script {
  std::vector<ScriptRule> rules;
  ScriptRule fallback;
  int step_delay_ms = 0;
  int token_delay_us = 0;
};

using EncodeFn = std::function<Result<std::vector<int32_t>>(std::string_view)>;
using DecodeFn = std::function<std::string(std::span<const int32_t>)>;

// Parses a script (JSON text); `origin` names it in errors.
Result<Script> parse_script(std::string_view json_text, const std::string& origin, const EncodeFn& encode);

class ScriptedRunner : public ModelRunner {
 public:
  ScriptedRunner(Script script, DecodeFn decode, int32_t vocab_size, int32_t eos_token_id, int64_t max_positions,
                 std::string origin);
  static Result<std::unique_ptr<ScriptedRunner>> from_file(const std::string& path, const EncodeFn& encode,
                                                           DecodeFn decode, int32_t vocab_size,
                                                           int32_t eos_token_id, int64_t max_positions);

  const RunnerInfo& info() const override { return info_; }
  Status execute(const StepInput& in, StepOutput* out) override;
  void release(int64_t seq_id, int32_t slot) override;
  bool can_fork() const override { return true; }
  Status fork(const ForkSpec& f) override;

 private:
  struct Slot {
    int64_t seq_id = -1;
    std::vector<int32_t> fed;            // every token fed so far
    const ScriptRule* rule = nullptr;    // chosen at the first sample
  };
  Script script_;
  DecodeFn decode_;
  RunnerInfo info_;
  std::vector<Slot> slots_;
};

}  // namespace dsv4::runtime
