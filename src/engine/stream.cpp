// stream.cpp: RequestStream (engine.h) over StreamState (stream.h).
#include "engine/stream.h"

namespace dsv4 {

using engine_detail::StreamState;

void engine_detail::StreamState::push(TokenEvent ev) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (ev.finish != FinishReason::kNone) final_pushed = true;
    events.push_back(std::move(ev));
  }
  cv.notify_all();
}

RequestStream& RequestStream::operator=(RequestStream&& o) noexcept {
  if (this != &o) {
    if (s_ && !done()) abort();
    s_ = std::move(o.s_);
  }
  return *this;
}

RequestStream::~RequestStream() {
  if (s_ && !done()) abort();
}

bool RequestStream::wait(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout) {
  if (!s_) return false;
  std::unique_lock<std::mutex> lk(s_->mu);
  if (s_->final_taken) return false;
  if (!s_->cv.wait_for(lk, timeout, [&] { return !s_->events.empty(); })) return false;
  while (!s_->events.empty()) {
    if (s_->events.front().finish != FinishReason::kNone) s_->final_taken = true;
    out->push_back(std::move(s_->events.front()));
    s_->events.pop_front();
  }
  return true;
}

void RequestStream::abort() {
  if (!s_) return;
  {
    std::lock_guard<std::mutex> lk(s_->mu);
    if (s_->final_pushed) return;  // already finished: nothing to free
    if (!s_->abort_requested.load()) s_->abort_time = Clock::now();
  }
  s_->abort_requested.store(true);
  if (auto w = s_->wakeup.lock()) w->notify();
}

bool RequestStream::done() const {
  if (!s_) return true;
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->final_taken;
}

bool RequestStream::queued() const { return s_ && !s_->started.load(); }

int64_t RequestStream::seq_id() const { return s_ ? s_->seq_id : -1; }

}  // namespace dsv4
