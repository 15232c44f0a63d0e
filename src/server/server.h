// server.h: the OpenAI-compatible HTTP server (cpp-httplib). It sees the engine only through
// include/dsv4/engine.h and text through the tokenizer: parse and validate the request, render
// and tokenize the prompt, submit, then stream TokenEvents back as SSE or one JSON body. Routes:
// POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize; GET /v1/models,
// /v1/models/{id}, /health, /metrics. Until set_ready() every API route answers 503.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "dsv4/engine.h"
#include "server/server_config.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0: any free port) and serves in a background thread.
  Status start();
  int port() const;
  // The engine is loaded: API routes start answering. Both must outlive stop().
  void set_ready(Engine* engine, const tok::Tokenizer* tokenizer);
  // Stops accepting and waits for the open requests to end (shut the engine down first, so
  // streams still open get their final event).
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server
