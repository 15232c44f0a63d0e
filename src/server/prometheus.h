// prometheus.h: the engine's metrics in Prometheus text format (version 0.0.4) under vLLM's V1
// names (ECOSYSTEM.md §1.5), so existing dashboards and autoscalers work, plus dsv4:* extras
// (KV blocks free, decode batch sizes, abort latency, HTTP errors). Every series carries
// model_name.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "dsv4/engine.h"

namespace dsv4::server {

struct ServerCounters {
  std::map<int, uint64_t> http_errors;  // status -> count of error answers
  uint64_t client_disconnects = 0;      // requests aborted because the client went away
};

std::string render_prometheus(const EngineMetrics& m, const EngineLimits& limits, const ServerCounters& server,
                              const std::string& model_name, const std::string& kv_dtype);

}  // namespace dsv4::server
