// request.h: one request as the engine thread sees it: its tokens (prompt, then generated), its
// place in the scheduler, its KV blocks and slot, its output text state and its timestamps. Only
// the engine thread touches a Request; the front end sees it through its StreamState.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "engine/penalties.h"
#include "engine/stream.h"
#include "engine/text_output.h"
#include "kvcache/block_pool.h"

namespace dsv4::engine_detail {

enum class RequestState { kWaiting, kRunning, kFinished };

struct Request {
  int64_t seq_id = 0;
  std::string external_id;
  std::vector<int32_t> tokens;  // prompt followed by the generated tokens
  int64_t n_prompt = 0;
  SamplingParams sampling;
  StopParams stop;
  uint64_t seed = 0;            // resolved: the request's or one derived from the engine seed
  std::shared_ptr<StreamState> stream;
  std::unique_ptr<TextOutput> text;
  PenaltyState penalties;       // logit_bias and penalties as logit adjustments (empty: none)

  // The n choices of one request share their prompt (runtime::ForkSpec): the first computes it
  // and the others wait on it, then continue from a copy of its state after the prompt's
  // last-but-one token (each feeds the last one itself, so each samples its own first token).
  Request* fork_parent = nullptr;       // set while this choice waits for that one
  std::vector<Request*> fork_children;  // choices waiting for this one, in choice order
  int64_t n_forked = 0;                 // prompt tokens copied from the first choice (0: none)

  RequestState state = RequestState::kWaiting;
  int64_t n_computed = 0;       // tokens whose KV state exists (reset to 0 by a preemption)
  kv::BlockTable blocks;
  int32_t slot = -1;
  int32_t n_preemptions = 0;

  Clock::time_point arrival, first_scheduled, first_token, last_token;
  bool scheduled_once = false;

  int64_t n_output() const { return int64_t(tokens.size()) - n_prompt; }
  // Tokens still to feed before the next sample (1 for a decode).
  int64_t n_pending() const { return int64_t(tokens.size()) - n_computed; }
};

}  // namespace dsv4::engine_detail
