// server_config.h: every runtime choice of the HTTP front end (the engine's are in EngineConfig).
// Printed in the startup manifest next to EngineConfig.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dsv4::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> served_model_names;  // the first is reported; all are accepted
  std::string api_key;                           // "" = no authentication
  bool default_thinking = true;                  // DeepSeek's default: thinking on
  int64_t max_request_body_bytes = 32ll << 20;   // larger bodies get 413
  int http_threads = 128;                        // one per open connection (streams hold one)
  double sse_keepalive_seconds = 5.0;            // ": keep-alive" comments while nothing else is sent
  int retry_after_seconds = 1;                   // Retry-After on 503
  bool log_requests = false;                     // one stderr line per HTTP request

  // Every setting as (name, value), in the CLI's spelling; the manifest marks non-defaults.
  std::vector<std::pair<std::string, std::string>> fields() const;
  // Each setting in its range, in the CLI's spelling (HttpServer::start refuses the rest): a port
  // past 65535 bound another one modulo 2^16, a million HTTP threads aborted the process, and a
  // negative body limit meant none.
  Status check() const;
};

}  // namespace dsv4::server
