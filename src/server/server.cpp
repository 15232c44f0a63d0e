// server.cpp: HttpServer (server.h): routing, authentication, readiness, error answers, and the
// response loops that move TokenEvents to the client. Streams go out through a chunked content
// provider, which asks DataSink::is_writable (it also peeks at the socket) whether the client is
// still there; a non-streaming answer is collected in the handler, so that its status can still
// be an error, and asks the connection's socket itself (connection.h). Both ask on every event and
// every 50 ms while they wait for the engine; a client gone aborts the request, which frees its
// KV blocks before the next engine step. Streams also get ": keep-alive" comments while nothing
// else is sent (long prefill).
#include "server/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "base/json_depth.h"
#include "server/api_error.h"
#include "server/connection.h"
#include "server/json_fields.h"
#include "server/openai_request.h"
#include "server/prometheus.h"
#include "server/responses.h"

namespace dsv4::server {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);
// How long stop() lets open streams write their last events (see HttpServer::stop).
constexpr auto kStreamDrain = std::chrono::seconds(10);
constexpr int kMaxHttpThreads = 4096;  // a thread per open connection

int64_t unix_now() { return int64_t(std::time(nullptr)); }

// Every stream of a request has given its final event.
bool all_done(const std::vector<RequestStream>& streams) {
  return std::all_of(streams.begin(), streams.end(), [](const RequestStream& s) { return s.done(); });
}

// The method a known path takes ("" for an unknown path): a known path asked for with another
// method is a 405 that names the right method, not a 404 that says the route does not exist.
const char* route_method(const std::string& path) {
  static constexpr std::pair<const char*, const char*> kRoutes[] = {
      {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/tokenize", "POST"},
      {"/detokenize", "POST"},          {"/v1/models", "GET"},       {"/health", "GET"},
      {"/metrics", "GET"}};
  for (const auto& [p, m] : kRoutes) {
    if (path == p) return m;
  }
  return path.size() > 11 && path.starts_with("/v1/models/") ? "GET" : "";
}

// What cpp-httplib's own error statuses mean (it answers these before any handler runs).
std::string http_error_message(int status) {
  switch (status) {
    case 400:
      return "the HTTP request could not be read (malformed request line, headers, Content-Length or chunked body)";
    case 414: return "the request URI is too long";
    default: return fmt::format("HTTP {}", status);
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ServerConfig::fields() const {
  std::string names;
  for (const std::string& n : served_model_names) names += (names.empty() ? "" : ",") + n;
  return {
      {"host", host},
      {"port", fmt::format("{}", port)},
      {"served_model_name", names},
      {"api_key", api_key.empty() ? "" : "(set)"},
      {"default_thinking", default_thinking ? "on" : "off"},
      {"max_request_body_bytes", fmt::format("{}", max_request_body_bytes)},
      {"http_threads", fmt::format("{}", http_threads)},
      {"sse_keepalive_seconds", fmt::format("{}", sse_keepalive_seconds)},
      {"retry_after_seconds", fmt::format("{}", retry_after_seconds)},
      {"log_requests", log_requests ? "on" : "off"},
  };
}

Status ServerConfig::check() const {
  if (host.empty()) return invalid_argument("--host must name an address, found ''");
  if (port < 0 || port > 65535) return invalid_argument("--port must be in 0..65535 (0: any free port), found {}", port);
  for (const std::string& n : served_model_names)
    if (n.empty()) return invalid_argument("--served-model-name must not be empty");
  if (max_request_body_bytes < 1)
    return invalid_argument("--max-request-body-bytes must be >= 1, found {}", max_request_body_bytes);
  if (http_threads < 1 || http_threads > kMaxHttpThreads)
    return invalid_argument("--http-threads must be in 1..{}, found {}", kMaxHttpThreads, http_threads);
  if (!(sse_keepalive_seconds > 0.0 && sse_keepalive_seconds <= 3600.0))
    return invalid_argument("--sse-keepalive-seconds must be in (0, 3600], found {}", sse_keepalive_seconds);
  if (retry_after_seconds < 0) return invalid_argument("retry_after_seconds must be >= 0, found {}", retry_after_seconds);
  return Status::ok();
}

struct HttpServer::Impl {
  explicit Impl(ServerConfig c) : config(std::move(c)) {}

  ServerConfig config;
  httplib::Server svr;
  std::thread listen_thread;
  int bound_port = 0;
  int64_t started_at = unix_now();
  std::atomic<Engine*> engine{nullptr};
  std::atomic<const tok::Tokenizer*> tokenizer{nullptr};
  std::atomic<int> open_streams{0};  // SSE responses not yet released (stop() drains them)
  std::mutex counters_mu;
  ServerCounters counters;

  const std::string& model_name() const {
    static const std::string kNone = "dsv4";
    return config.served_model_names.empty() ? kNone : config.served_model_names[0];
  }

  void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 503) res.set_header("Retry-After", fmt::format("{}", config.retry_after_seconds));
    res.set_content(e.body(), "application/json");
  }

  void count_error(int status) {
    std::lock_guard<std::mutex> lk(counters_mu);
    ++counters.http_errors[status];
  }

  // Before the engine is ready, API routes answer 503 (the client may retry).
  bool ready(httplib::Response& res) {
    if (engine.load() != nullptr && tokenizer.load() != nullptr) return true;
    send_error(res, unavailable("the model is still loading"));
    return false;
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (config.api_key.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    if (auth == "Bearer " + config.api_key) return true;
    send_error(res, ApiError{401, "authentication_error",
                             auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                                          : "invalid API key",
                             "", "invalid_api_key"});
    return false;
  }

  ApiError body_too_large() const {
    return ApiError{413, "invalid_request_error",
                    fmt::format("the request body exceeds {} bytes (--max-request-body-bytes)",
                                config.max_request_body_bytes),
                    "", "request_too_large"};
  }

  // A POST body, read through a receiver that keeps at most max_request_body_bytes whatever the
  // framing: httplib (0.11) applies its own limit to a Content-Length body only, and a chunked one
  // grew in memory without bound. A longer body is read to its end and dropped, so that the
  // connection stays in step for its next request, and answered 413 (as httplib answers a long
  // Content-Length). Null after an error response.
  std::optional<std::string> read_body(const httplib::ContentReader& read, httplib::Response& res) {
    std::string body;
    bool too_large = false;
    const size_t limit = size_t(config.max_request_body_bytes);
    const bool complete = read([&](const char* data, size_t n) {
      too_large = too_large || n > limit - body.size();
      if (!too_large) body.append(data, n);
      return true;
    });
    // httplib refuses a Content-Length past its own limit (set to the same bytes) by failing the
    // read with status 413.
    if (too_large || (!complete && res.status == 413)) {
      send_error(res, body_too_large());
      return std::nullopt;
    }
    if (!complete) {  // the client hung up or broke the framing
      send_error(res, bad_request(http_error_message(400)));
      return std::nullopt;
    }
    return body;
  }

  // Parses the body as JSON; the parser's message says where it failed. A scan of the text comes
  // first (json_depth.h): nesting deeper than kMaxJsonDepth is refused (using such a value would
  // overflow the stack; parsed, it also held ~70 bytes a level), and so are objects whose members
  // would make the ordered parse quadratic past kMaxJsonMemberPairs.
  bool parse_body(const std::string& body, httplib::Response& res, Json* j) {
    const JsonShape shape = json_shape(body);
    if (shape.depth > kMaxJsonDepth) {
      send_error(res, bad_request(fmt::format("the request body nests arrays and objects {} levels deep; at most {} "
                                              "are allowed",
                                              shape.depth, kMaxJsonDepth)));
      return false;
    }
    if (shape.member_pairs > kMaxJsonMemberPairs) {
      send_error(res, bad_request(fmt::format("the request body's JSON objects have too many members (the largest "
                                              "has {}): one object may have about 8000, fewer when there are "
                                              "several large ones",
                                              shape.largest)));
      return false;
    }
    try {
      *j = Json::parse(body);
    } catch (const nlohmann::json::exception& e) {
      send_error(res, bad_request(fmt::format("the request body is not valid JSON: {}", e.what())));
      return false;
    }
    return true;
  }

  void routes();
  void handle_generate(const httplib::Request& req, const std::string& body, httplib::Response& res, bool chat);
  void respond_stream(httplib::Response& res, std::vector<RequestStream> streams,
                      std::unique_ptr<Responder> responder);
  void respond_whole(httplib::Response& res, std::vector<RequestStream>& streams, Responder& responder,
                     int client_socket);
  void count_disconnect() {
    std::lock_guard<std::mutex> lk(counters_mu);
    ++counters.client_disconnects;
  }
  void handle_tokenize(const httplib::Request& req, const std::string& body, httplib::Response& res);
  void handle_detokenize(const httplib::Request& req, const std::string& body, httplib::Response& res);
  Json model_card(const std::string& name) const;
};

Json HttpServer::Impl::model_card(const std::string& name) const {
  Engine* e = engine.load();
  Json m;
  m["id"] = name;
  m["object"] = "model";
  m["created"] = started_at;
  m["owned_by"] = "dsv4";
  m["root"] = e != nullptr ? e->config().model_dir : "";
  m["parent"] = nullptr;
  if (e != nullptr) m["max_model_len"] = e->limits().max_model_len;
  return m;
}

void HttpServer::Impl::handle_generate(const httplib::Request& req, const std::string& body, httplib::Response& res,
                                       bool chat) {
  const auto arrival = Clock::now();
  if (!authorized(req, res) || !ready(res)) return;
  Engine& eng = *engine.load();
  const tok::Tokenizer& tok = *tokenizer.load();
  Json j;
  if (!parse_body(body, res, &j)) return;
  const RequestContext ctx{config, eng.limits(), tok};

  CommonRequest* common = nullptr;
  ChatRequest chat_req;
  CompletionRequest completion_req;
  ApiError err;
  if (chat) {
    err = parse_chat_request(j, ctx, &chat_req);
    common = &chat_req.common;
  } else {
    err = parse_completion_request(j, ctx, &completion_req);
    common = &completion_req.common;
  }
  if (!err.ok()) return send_error(res, err);

  ResponseMeta meta;
  meta.id = random_id(chat ? "chatcmpl-" : "cmpl-");
  meta.created = unix_now();
  meta.model = common->model.empty() ? model_name() : common->model;
  meta.stream = common->stream;
  meta.include_usage = common->include_usage;
  meta.logprobs = common->sampling.logprobs >= 0;

  meta.n = int(common->n);

  // A group that could never queue whole, refused before n copies of the prompt are made.
  if (meta.n > 1 && meta.n > eng.config().max_waiting)
    return send_error(res, bad_request(fmt::format("n = {} is more than the server queues at once ({})", meta.n,
                                                   eng.config().max_waiting),
                                       "n"));

  // One engine request per choice, queued all or none. With a seed, choice i samples with
  // seed + i (as vLLM does), so that the choices differ and each one is reproducible.
  std::vector<GenerationRequest> group(size_t(meta.n));
  for (int i = 0; i < meta.n; ++i) {
    GenerationRequest& g = group[size_t(i)];
    g.id = meta.n == 1 ? meta.id : fmt::format("{}-{}", meta.id, i);
    g.prompt = i + 1 == meta.n ? std::move(common->prompt) : common->prompt;
    g.sampling = common->sampling;
    if (g.sampling.has_seed) g.sampling.seed += uint64_t(i);
    g.stop = i + 1 == meta.n ? std::move(common->stop) : common->stop;
    g.arrival = arrival;
  }
  auto submitted = eng.submit_group(std::move(group));
  if (!submitted.is_ok()) return send_error(res, from_status(submitted.status(), chat ? "messages" : "prompt"));
  std::vector<RequestStream> streams = std::move(submitted).value();

  std::unique_ptr<Responder> responder =
      chat ? make_chat_responder(meta, chat_req.thinking, tok) : make_completion_responder(meta, tok);
  if (meta.stream) {
    respond_stream(res, std::move(streams), std::move(responder));
  } else {
    respond_whole(res, streams, *responder, connection_socket(req));
  }
}

// Non-streaming: waits here rather than in a content provider, so that the status line can
// still tell how the request ended (a shutdown or an engine failure is a 5xx error, not a 200
// whose body is an error object).
void HttpServer::Impl::respond_whole(httplib::Response& res, std::vector<RequestStream>& streams, Responder& responder,
                                     int client_socket) {
  std::vector<std::vector<TokenEvent>> events;
  std::string unused;
  while (!responder.finished()) {
    if (peer_hung_up(client_socket)) {
      for (RequestStream& s : streams) s.abort();
      count_disconnect();
      res.status = 499;  // nginx's "client closed request"; nobody reads it
      return;
    }
    for (auto& e : events) e.clear();
    if (RequestStream::wait_any(streams, &events, kPollInterval)) {
      for (size_t i = 0; i < events.size(); ++i)
        if (!events[i].empty()) responder.consume(i, events[i], &unused);
    } else if (all_done(streams)) {
      // Cannot happen (each final event finishes its choice), but would spin here.
      return send_error(res, server_error("the request's streams ended early"));
    }
  }
  // After an error, the choices still running stop here (a no-op for finished ones).
  for (RequestStream& s : streams) s.abort();
  if (!responder.error().is_ok()) return send_error(res, from_status(responder.error()));
  res.set_content(responder.final_body(), "application/json");
}

void HttpServer::Impl::respond_stream(httplib::Response& res, std::vector<RequestStream> streams,
                                      std::unique_ptr<Responder> responder) {
  struct Pending {
    std::vector<RequestStream> streams;
    std::unique_ptr<Responder> responder;
    Clock::time_point last_write = Clock::now();
    bool gone = false;
    void abort_all() {
      for (RequestStream& s : streams) s.abort();
    }
  };
  auto p = std::make_shared<Pending>(Pending{std::move(streams), std::move(responder)});
  const auto keepalive = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(config.sse_keepalive_seconds));
  auto client_gone = [this, p] {
    if (p->gone || p->responder->finished()) return;
    p->gone = true;
    p->abort_all();
    count_disconnect();
  };
  auto provider = [p, keepalive, client_gone](size_t, httplib::DataSink& sink) -> bool {
    // Asked on every call, not only when the wait below times out: while tokens keep coming it
    // never does.
    if (!sink.is_writable()) {
      client_gone();
      return false;
    }
    std::vector<std::vector<TokenEvent>> events;
    while (!RequestStream::wait_any(p->streams, &events, kPollInterval)) {
      // Every stream ended without finishing the response: cannot happen (each final event
      // finishes its choice), but would spin here; end the stream with an error instead.
      if (all_done(p->streams)) {
        p->gone = true;
        const std::string end = sse_data(server_error("the request's streams ended early").to_json()) + kSseDone;
        sink.write(end.data(), end.size());
        return false;
      }
      if (!sink.is_writable()) {
        client_gone();
        return false;
      }
      if (Clock::now() - p->last_write >= keepalive) {
        static constexpr char kKeepAlive[] = ": keep-alive\n\n";
        if (!sink.write(kKeepAlive, sizeof(kKeepAlive) - 1)) {
          client_gone();
          return false;
        }
        p->last_write = Clock::now();
      }
    }
    std::string out;
    // An exception here would leave through cpp-httplib's write loop, which does not catch it:
    // std::terminate, the whole server down. This stream ends with an error event instead.
    try {
      for (size_t i = 0; i < events.size(); ++i)
        if (!events[i].empty()) p->responder->consume(i, events[i], &out);
    } catch (const std::exception& e) {
      fmt::print(stderr, "server: exception while streaming: {}\n", e.what());
      p->gone = true;  // not a client disconnect
      p->abort_all();
      const std::string end =
          sse_data(server_error(fmt::format("internal error: {}", e.what())).to_json()) + kSseDone;
      sink.write(end.data(), end.size());
      return false;
    }
    if (!out.empty()) {
      if (!sink.write(out.data(), out.size())) {
        client_gone();
        return false;
      }
      p->last_write = Clock::now();
    }
    if (p->responder->finished()) {
      p->abort_all();  // after an error event, the choices still running stop
      sink.done();
    }
    return true;
  };
  // Runs when the response ends for any reason: a request still running has lost its client.
  ++open_streams;
  auto releaser = [this, client_gone](bool) {
    client_gone();
    --open_streams;
  };
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream", provider, releaser);
}

void HttpServer::Impl::handle_tokenize(const httplib::Request& req, const std::string& body, httplib::Response& res) {
  if (!authorized(req, res) || !ready(res)) return;
  Engine& eng = *engine.load();
  const tok::Tokenizer& tok = *tokenizer.load();
  Json j;
  if (!parse_body(body, res, &j)) return;
  if (!j.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
  ApiError err;
  FieldReader f(j, &err);
  std::string model;
  f.str("model", &model);
  bool want_strs = false;
  f.boolean("return_token_strs", &want_strs);
  if (!err.ok()) return send_error(res, err);
  if (ApiError e = check_model(model, config); !e.ok()) return send_error(res, e);
  const RequestContext ctx{config, eng.limits(), tok};
  std::vector<int32_t> ids;
  if (f.has("messages")) {
    tok::ThinkingMode mode;
    tok::ReasoningEffort effort;
    bool tools = false;
    if (ApiError e = render_chat_prompt(j, ctx, &ids, &mode, &effort, &tools); !e.ok()) return send_error(res, e);
  } else {
    std::string prompt;
    if (!f.has("prompt")) return send_error(res, bad_request("send 'prompt' (a string) or 'messages'", "prompt"));
    if (!f.str("prompt", &prompt)) return send_error(res, err);
    auto r = tok.encode(prompt, /*parse_special=*/true);
    if (!r.is_ok()) return send_error(res, bad_request(r.status().message(), "prompt"));
    ids = std::move(r).value();
  }
  Json out;
  out["count"] = ids.size();
  out["max_model_len"] = eng.limits().max_model_len;
  out["tokens"] = ids;
  if (want_strs) {
    Json strs = Json::array();
    for (const int32_t id : ids) strs.push_back(tok.token_text(id));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  res.set_content(dump_json(out), "application/json");
}

void HttpServer::Impl::handle_detokenize(const httplib::Request& req, const std::string& body,
                                         httplib::Response& res) {
  if (!authorized(req, res) || !ready(res)) return;
  const tok::Tokenizer& tok = *tokenizer.load();
  Json j;
  if (!parse_body(body, res, &j)) return;
  if (!j.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
  ApiError err;
  FieldReader f(j, &err);
  std::string model;
  f.str("model", &model);
  std::vector<int32_t> ids;
  if (!f.has("tokens")) return send_error(res, bad_request("'tokens' is required: an array of token ids", "tokens"));
  f.int_list("tokens", &ids, 0, tok.n_ids() - 1, size_t(1) << 24);
  if (!err.ok()) return send_error(res, err);
  if (ApiError e = check_model(model, config); !e.ok()) return send_error(res, e);
  auto text = tok.decode(ids, /*skip_special=*/false);
  if (!text.is_ok()) return send_error(res, bad_request(text.status().message(), "tokens"));
  Json out;
  out["prompt"] = text.value();
  res.set_content(dump_json(out), "application/json");
}

void HttpServer::Impl::routes() {
  // Every POST route takes its body from read_body.
  auto post = [this](const char* path, auto handle) {
    svr.Post(path, [this, handle, path](const httplib::Request& q, httplib::Response& r,
                                        const httplib::ContentReader& read) {
      // httplib reads a multipart body only through its multipart callbacks (the plain reader
      // below then throws bad_function_call: a 500); every route takes JSON. The parts are read
      // and dropped, so that the connection stays in step for its next request.
      if (q.is_multipart_form_data()) {
        read([](const httplib::MultipartFormData&) { return true; }, [](const char*, size_t) { return true; });
        return send_error(r, ApiError{415, "invalid_request_error",
                                      fmt::format("{} takes a JSON body (Content-Type: application/json), not "
                                                  "multipart/form-data",
                                                  path),
                                      "", "unsupported_media_type"});
      }
      if (std::optional<std::string> body = read_body(read, r)) handle(q, *body, r);
    });
  };
  post("/v1/chat/completions", [this](const httplib::Request& q, const std::string& b, httplib::Response& r) {
    handle_generate(q, b, r, /*chat=*/true);
  });
  post("/v1/completions", [this](const httplib::Request& q, const std::string& b, httplib::Response& r) {
    handle_generate(q, b, r, /*chat=*/false);
  });
  post("/tokenize",
       [this](const httplib::Request& q, const std::string& b, httplib::Response& r) { handle_tokenize(q, b, r); });
  post("/detokenize",
       [this](const httplib::Request& q, const std::string& b, httplib::Response& r) { handle_detokenize(q, b, r); });
  svr.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) {
    if (!authorized(q, r)) return;
    Json data = Json::array();
    for (const std::string& n : config.served_model_names) data.push_back(model_card(n));
    r.set_content(dump_json(Json{{"object", "list"}, {"data", data}}), "application/json");
  });
  svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& q, httplib::Response& r) {
    if (!authorized(q, r)) return;
    const std::string id = q.matches[1];
    if (ApiError e = check_model(id, config); !e.ok()) return send_error(r, e);
    r.set_content(dump_json(model_card(id)), "application/json");
  });
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    if (!ready(r)) return;
    r.set_content(R"({"status":"ok"})", "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
    if (!ready(r)) return;
    Engine& e = *engine.load();
    ServerCounters sc;
    {
      std::lock_guard<std::mutex> lk(counters_mu);
      sc = counters;
    }
    r.set_content(render_prometheus(e.metrics(), e.limits(), sc, model_name(), e.config().kv_dtype),
                  "text/plain; version=0.0.4; charset=utf-8");
  });

  // httplib's own answers (unknown route, body too large, bad HTTP) become OpenAI error objects.
  svr.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
    const char* method = route_method(q.path);
    if (r.status == 404 && r.body.empty() && *method != '\0' && q.method != method) {
      r.status = 405;
      r.set_header("Allow", method);
    }
    count_error(r.status);
    if (!r.body.empty()) return;
    switch (r.status) {
      case 404:
        send_error(r, not_found_error(fmt::format("no route for {} {}", q.method, q.path)));
        break;
      case 405:
        send_error(r, ApiError{405, "invalid_request_error",
                               fmt::format("{} {} is not allowed: this route takes {}", q.method, q.path, method), "",
                               "method_not_allowed"});
        break;
      case 413:
        send_error(r, body_too_large());
        break;
      default:
        send_error(r, ApiError{r.status, r.status >= 500 ? "server_error" : "invalid_request_error",
                               http_error_message(r.status), "", ""});
    }
  });
  svr.set_exception_handler([this](const httplib::Request& q, httplib::Response& r, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    fmt::print(stderr, "server: exception in {} {}: {}\n", q.method, q.path, what);
    send_error(r, server_error("internal error: " + what));
  });
  if (config.log_requests) {
    svr.set_logger([](const httplib::Request& q, const httplib::Response& r) {
      fmt::print(stderr, "http: {} {} -> {}\n", q.method, q.path, r.status);
    });
  }
}

HttpServer::HttpServer(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  Impl& m = *impl_;
  DSV4_RETURN_IF_ERROR(m.config.check());
  const int threads = std::max(4, m.config.http_threads);
  m.svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  m.svr.set_payload_max_length(size_t(m.config.max_request_body_bytes));
  m.svr.set_keep_alive_max_count(1000);
  m.svr.set_keep_alive_timeout(5);
  m.svr.set_read_timeout(30);
  m.svr.set_write_timeout(30);
  m.svr.set_tcp_nodelay(true);
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind the same port and
  // silently share its traffic; a port in use must be an error.
  m.svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });
  m.routes();
  if (m.config.port == 0) {
    m.bound_port = m.svr.bind_to_any_port(m.config.host);
    if (m.bound_port <= 0) return internal_error("cannot bind {} on any port", m.config.host);
  } else {
    if (!m.svr.bind_to_port(m.config.host, m.config.port))
      return internal_error("cannot bind {}:{} (in use, or not a local address?)", m.config.host, m.config.port);
    m.bound_port = m.config.port;
  }
  m.listen_thread = std::thread([&m] { m.svr.listen_after_bind(); });
  // stop() is a no-op until the listener runs: a caller that failed right after start() (a bad
  // tokenizer path) joined a thread that then accepted forever, with SIGTERM already blocked.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!m.svr.is_running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!m.svr.is_running()) {
    m.svr.stop();
    m.listen_thread.join();
    return internal_error("the HTTP listener on {}:{} did not start", m.config.host, m.bound_port);
  }
  return Status::ok();
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::set_ready(Engine* engine, const tok::Tokenizer* tokenizer) {
  impl_->tokenizer.store(tokenizer);
  impl_->engine.store(engine);
}

void HttpServer::stop() {
  if (!impl_) return;
  if (impl_->listen_thread.joinable()) {
    // Open streams first write what they hold (after Engine::shutdown, their error event and
    // [DONE]): once the server stops, httplib's write loop no longer calls a provider, and a
    // client reading slowly lost the end of its stream, framing included. Bounded, for a client
    // that reads nothing at all.
    const auto drain_end = Clock::now() + kStreamDrain;
    while (impl_->open_streams.load() > 0 && Clock::now() < drain_end) std::this_thread::sleep_for(kPollInterval);
    impl_->svr.stop();
    impl_->listen_thread.join();
  }
  impl_->engine.store(nullptr);
}

}  // namespace dsv4::server
