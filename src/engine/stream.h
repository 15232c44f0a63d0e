// stream.h: the shared state behind a RequestStream (engine.h). The engine thread appends events;
// one front-end thread takes them. An abort only sets a flag and wakes the engine, which acts on
// it before its next step, so the front end never waits for the engine.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "dsv4/engine.h"

namespace dsv4::engine_detail {

// Wakes the engine thread when it sleeps with nothing to do. Shared with streams, which may
// outlive the engine (then a wake-up does nothing).
struct Wakeup {
  std::mutex mu;
  std::condition_variable cv;
  bool pending = false;
  void notify() {
    {
      std::lock_guard<std::mutex> lk(mu);
      pending = true;
    }
    cv.notify_one();
  }
};

struct StreamState {
  int64_t seq_id = 0;
  std::weak_ptr<Wakeup> wakeup;
  std::atomic<bool> abort_requested{false};
  std::atomic<bool> started{false};  // the first prompt chunk has been scheduled

  std::mutex mu;
  std::condition_variable cv;
  std::deque<TokenEvent> events;     // guarded by mu
  bool final_pushed = false;         // guarded by mu
  bool final_taken = false;          // guarded by mu
  Clock::time_point abort_time;      // guarded by mu; when abort() was first called
  // Guarded by mu: set by RequestStream::wait_any, which reads several streams on one thread;
  // push() then wakes it as well as cv's waiters.
  std::shared_ptr<Wakeup> reader;

  // Engine side: appends an event and wakes the reader.
  void push(TokenEvent ev);
};

}  // namespace dsv4::engine_detail
