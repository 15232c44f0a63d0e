// stream.cpp: RequestStream (engine.h) over StreamState (stream.h).
#include "engine/stream.h"

namespace dsv4 {

using engine_detail::StreamState;

void engine_detail::StreamState::push(TokenEvent ev) {
  std::shared_ptr<engine_detail::Wakeup> r;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (ev.finish != FinishReason::kNone) final_pushed = true;
    events.push_back(std::move(ev));
    r = reader;
  }
  cv.notify_all();
  if (r) r->notify();
}

namespace {

// Moves s's pending events into *out, noting when the final one goes. The caller holds s.mu.
void take_locked(StreamState& s, std::vector<TokenEvent>* out) {
  while (!s.events.empty()) {
    if (s.events.front().finish != FinishReason::kNone) s.final_taken = true;
    out->push_back(std::move(s.events.front()));
    s.events.pop_front();
  }
}

}  // namespace

bool RequestStream::wait_any(std::span<RequestStream> streams, std::vector<std::vector<TokenEvent>>* out,
                             std::chrono::milliseconds timeout) {
  out->resize(streams.size());
  // One wake-up shared by the group, attached on the first call. Events pushed before it was
  // attached are found by the first pass below, so none is missed.
  std::shared_ptr<engine_detail::Wakeup> w;
  for (RequestStream& r : streams) {
    if (!r.s_) continue;
    std::lock_guard<std::mutex> lk(r.s_->mu);
    if (r.s_->reader) w = r.s_->reader;
  }
  if (!w) w = std::make_shared<engine_detail::Wakeup>();
  for (RequestStream& r : streams) {
    if (!r.s_) continue;
    std::lock_guard<std::mutex> lk(r.s_->mu);
    r.s_->reader = w;
  }
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    bool any = false, open = false;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (!streams[i].s_) continue;
      StreamState& st = *streams[i].s_;
      std::lock_guard<std::mutex> lk(st.mu);
      if (!st.final_taken && !st.events.empty()) {
        take_locked(st, &(*out)[i]);
        any = true;
      }
      open = open || !st.final_taken;
    }
    if (any) return true;
    if (!open) return false;
    // A push after the pass above sets pending, so this wait cannot miss it; a stale pending
    // (from events the pass already took) costs one more pass.
    std::unique_lock<std::mutex> lk(w->mu);
    if (!w->cv.wait_until(lk, deadline, [&] { return w->pending; })) return false;
    w->pending = false;
  }
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
  take_locked(*s_, out);
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
