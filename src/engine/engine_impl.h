// engine_impl.h: Engine::Impl, the engine thread and what it owns: the requests, the scheduler
// (with the KV pools), the runner, the metrics. Front-end threads only touch the inbox (under its
// mutex), the streams and the metrics snapshot.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dsv4/engine.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/stream.h"
#include "runtime/runner.h"

namespace dsv4 {

struct Engine::Impl {
  Impl(const EngineConfig& config, const EngineLimits& limits, std::unique_ptr<runtime::ModelRunner> runner,
       const tok::Tokenizer* tokenizer);
  ~Impl();

  Result<RequestStream> submit(GenerationRequest request);
  Result<std::vector<RequestStream>> submit_group(std::vector<GenerationRequest> group);
  void run();  // the engine thread
  void shutdown();

  // Engine thread only.
  void take_inbox(bool* stop);
  void reap_aborts();
  void step(const engine_detail::StepPlan& plan);
  // Has the runner copy the plan's forked choices' state (a failed fork recomputes instead).
  void make_forks(engine_detail::StepPlan* plan);
  // ev.stop_string: the text after the stop string is dropped, not flushed.
  void finish(engine_detail::Request* r, FinishReason reason, TokenEvent ev, Status error = Status::ok());
  void update_gauges();
  Status validate(const GenerationRequest& r) const;

  EngineConfig config;
  EngineLimits limits;
  std::unique_ptr<runtime::ModelRunner> runner;
  const tok::Tokenizer* tokenizer = nullptr;
  std::vector<std::string> manifest_lines;
  uint64_t sampling_seed = 0;

  std::shared_ptr<engine_detail::Wakeup> wakeup = std::make_shared<engine_detail::Wakeup>();
  std::mutex inbox_mu;
  std::vector<std::unique_ptr<engine_detail::Request>> inbox;  // guarded by inbox_mu
  int64_t next_seq_id = 1;                                     // guarded by inbox_mu
  int64_t n_queued_total = 0;  // the scheduler's waiting requests as of the engine thread's last
                               // count; submit adds the inbox (guarded by inbox_mu; the queue bound)
  bool stopping = false;       // guarded by inbox_mu

  // Engine thread state.
  std::unordered_map<int64_t, std::unique_ptr<engine_detail::Request>> requests;
  engine_detail::Scheduler scheduler;
  runtime::StepInput step_in;
  runtime::StepOutput step_out;

  engine_detail::MetricsCollector metrics;
  std::thread thread;
  std::atomic<bool> joined{false};
};

}  // namespace dsv4
