// http_test.cpp: the HTTP server on a loopback port, driven by cpp-httplib's client, with the
// scripted runner behind the real engine: routes, error objects for every kind of bad request
// (and the server stays healthy), wrong methods and unreadable HTTP, SSE framing, the API key, a
// client that hangs up mid-stream or while waiting for a non-streaming answer (its request is
// aborted and its blocks freed), and a non-streaming request ended by a shutdown (a 503).
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/test_tokenizer.h"
#include "runtime/scripted_runner.h"
#include "server/server.h"

namespace dsv4::server {
namespace {

using testing_util::v4_tokenizer;
using Json = nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kScript = R"({
  "rules": [{"prompt_contains": "forever", "output": " la", "eos": false}],
  "default": {"output": "Hello from the script."}
})";

class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const tok::Tokenizer* t = v4_tokenizer();
    if (t == nullptr) return;
    EngineConfig ec;
    ec.max_num_seqs = 8;
    engine_ = scripted_engine(ec).release();
    ASSERT_NE(engine_, nullptr);
    ServerConfig sc;
    sc.port = 0;
    sc.served_model_names = {"m"};
    sc.max_request_body_bytes = 100000;
    sc.http_threads = 8;
    server_ = new HttpServer(sc);
    ASSERT_TRUE(server_->start().is_ok());
    server_->set_ready(engine_, t);
  }
  // An engine of config ec (max_model_len 2048) on the scripted runner, 3 ms a step; null
  // without the tokenizer or if it does not start.
  static std::unique_ptr<Engine> scripted_engine(EngineConfig ec) {
    const tok::Tokenizer* t = v4_tokenizer();
    if (t == nullptr) return nullptr;
    auto s = runtime::parse_script(kScript, "test", [t](std::string_view x) { return t->encode(x, true); });
    if (!s.is_ok()) return nullptr;
    s->step_delay_ms = 3;
    auto runner = std::make_unique<runtime::ScriptedRunner>(
        std::move(s).value(),
        [t](std::span<const int32_t> ids) { return t->decode(ids, false).value(); }, t->n_ids(), 1, 1 << 16, "test");
    ec.max_model_len = 2048;
    auto e = Engine::start(ec, std::move(runner), t);
    return e.is_ok() ? std::move(e).value() : nullptr;
  }
  static void TearDownTestSuite() {
    if (engine_ != nullptr) engine_->shutdown();
    delete server_;
    delete engine_;
  }
  void SetUp() override { DSV4_REQUIRE_TOKENIZER(); }

  static httplib::Client client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(20, 0);
    return c;
  }
  // A plain TCP connection to the server, for requests httplib's client will not send (-1: failed).
  static int connect_raw() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }
  static httplib::Result post(const std::string& path, const std::string& body) {
    return client().Post(path.c_str(), body, "application/json");
  }
  static void expect_error(const httplib::Result& r, int status, const std::string& type) {
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, status) << r->body;
    const Json j = Json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_EQ(j["error"]["type"], type) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"].contains("param") && j["error"].contains("code"));
  }
  // Posts a streaming completion and hangs up after its third chunk; then waits until the
  // engine has counted `aborts` more aborted requests (or 2 s).
  static void stream_and_hang_up(const std::string& body, uint64_t aborts) {
    const uint64_t aborts_before = engine_->metrics().finished_abort;
    httplib::Client c = client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body;
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
    c.send(req);
    EXPECT_GE(chunks, 3);
    c.stop();
    // The engine notices within a step or two, long before the request's max_tokens.
    for (int i = 0; i < 200 && engine_->metrics().finished_abort < aborts_before + aborts; ++i)
      std::this_thread::sleep_for(10ms);
    EXPECT_EQ(engine_->metrics().finished_abort, aborts_before + aborts);
  }
  static void expect_idle() {
    EngineMetrics m;
    for (int i = 0; i < 200; ++i) {
      m = engine_->metrics();
      if (m.n_running == 0 && m.n_waiting == 0 && m.kv_blocks_free == m.kv_blocks_total) break;
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(m.n_running, 0);
    EXPECT_EQ(m.n_waiting, 0);
    EXPECT_EQ(m.kv_blocks_free, m.kv_blocks_total);
  }

  static Engine* engine_;
  static HttpServer* server_;
};
Engine* HttpTest::engine_ = nullptr;
HttpServer* HttpTest::server_ = nullptr;

TEST_F(HttpTest, HealthModelsMetrics) {
  auto h = client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = client().Get("/v1/models");
  ASSERT_TRUE(m);
  const Json j = Json::parse(m->body);
  EXPECT_EQ(j["data"][0]["id"], "m");
  EXPECT_EQ(j["data"][0]["max_model_len"], 2048);
  EXPECT_EQ(client().Get("/v1/models/m")->status, 200);
  expect_error(client().Get("/v1/models/other"), 404, "not_found_error");
  auto met = client().Get("/metrics");
  ASSERT_TRUE(met);
  EXPECT_NE(met->body.find("vllm:num_requests_running{model_name=\"m\"}"), std::string::npos);
}

TEST_F(HttpTest, ChatAndCompletions) {
  auto r = post("/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "disabled"}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello from the script.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());

  r = post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  // data: lines only, the last is [DONE], the one before carries usage with no choices.
  std::vector<std::string> data;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ASSERT_TRUE(line.starts_with("data: ")) << line;
    data.push_back(line.substr(6));
  }
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  const Json usage = Json::parse(data[data.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  std::string text;
  for (size_t i = 0; i + 2 < data.size(); ++i) {
    const Json c = Json::parse(data[i]);
    EXPECT_TRUE(c["usage"].is_null());
    text += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello from");
  EXPECT_EQ(Json::parse(data[data.size() - 3])["choices"][0]["finish_reason"], "length");
}

// n choices: one engine request each. The whole answer lists them by index; the stream
// interleaves their chunks, each under its index, and ends once with the summed usage.
TEST_F(HttpTest, SeveralChoices) {
  auto r = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "n": 3, "seed": 7,
                                            "thinking": {"type": "disabled"}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["message"]["content"], "Hello from the script.");
  }
  const int one = Json::parse(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
                                                               "thinking": {"type": "disabled"}})")
                                  ->body)["usage"]["completion_tokens"];
  EXPECT_EQ(j["usage"]["completion_tokens"], 3 * one);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 3 * one);

  r = post("/v1/completions",
           R"({"prompt": "hi", "n": 2, "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<std::string> data;
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) data.push_back(line.substr(6));
  ASSERT_GE(data.size(), 4u);
  EXPECT_EQ(std::count(data.begin(), data.end(), "[DONE]"), 1);
  EXPECT_EQ(data.back(), "[DONE]");
  const Json usage = Json::parse(data[data.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  std::string text[2];
  int finishes[2] = {0, 0};
  for (size_t i = 0; i + 2 < data.size(); ++i) {
    const Json c = Json::parse(data[i])["choices"][0];
    const int k = c["index"];
    ASSERT_TRUE(k == 0 || k == 1) << data[i];
    text[k] += c["text"].get<std::string>();
    finishes[k] += !c["finish_reason"].is_null();
  }
  EXPECT_EQ(text[0], "Hello from");
  EXPECT_EQ(text[1], "Hello from");
  EXPECT_EQ(finishes[0], 1);
  EXPECT_EQ(finishes[1], 1);
  expect_idle();
}

// A client that hangs up on a stream of several choices aborts all of them.
TEST_F(HttpTest, ClientHangingUpAbortsEveryChoice) {
  stream_and_hang_up(R"({"prompt": "sing forever", "max_tokens": 1500, "stream": true, "n": 3})", 3);
  expect_idle();
}

TEST_F(HttpTest, BadRequestsGetErrorObjectsAndTheServerStaysUp) {
  expect_error(post("/v1/chat/completions", "{\"messages\": ["), 400, "invalid_request_error");
  expect_error(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"})"),
               400, "invalid_request_error");
  expect_error(post("/v1/chat/completions", R"({"model": "m"})"), 400, "invalid_request_error");
  expect_error(post("/v1/chat/completions", R"({"model": "nope", "messages": [{"role": "user", "content": "x"}]})"),
               404, "not_found_error");
  expect_error(post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}"), 400,
               "invalid_request_error");
  expect_error(post("/v1/chat/completions", std::string(101000, ' ') + "{}"), 413, "invalid_request_error");
  expect_error(post("/v1/nothing", "{}"), 404, "not_found_error");
  std::string words;
  for (int i = 0; i < 2500; ++i) words += " word";
  auto r = post("/v1/completions", "{\"prompt\": \"" + words + "\"}");
  expect_error(r, 400, "invalid_request_error");
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "context_length_exceeded");
  expect_error(post("/detokenize", R"({"tokens": [1, -5]})"), 400, "invalid_request_error");
  EXPECT_EQ(client().Get("/health")->status, 200);
  expect_idle();
}

// JSON nested past kMaxJsonDepth is refused before anything copies or dumps it (at ~100k levels
// that recursion overflowed a handler thread's stack and killed the server).
TEST_F(HttpTest, DeeplyNestedJsonIsRefused) {
  const std::string deep = std::string(600, '[') + std::string(600, ']');
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x", "extra": )" + deep + "}]}"},
           {"/detokenize", R"({"tokens": [)" + deep + "]}"},
           {"/tokenize", R"({"prompt": "x", "extra": )" + deep + "}"}}) {
    auto r = post(path, body);
    expect_error(r, 400, "invalid_request_error");
    EXPECT_NE(r->body.find("levels deep"), std::string::npos) << r->body;
  }
  // Deep but within the limit is fine.
  const std::string ok = std::string(100, '[') + std::string(100, ']');
  EXPECT_EQ(post("/tokenize", R"({"prompt": "x", "extra": )" + ok + "}")->status, 200);
  EXPECT_EQ(client().Get("/health")->status, 200);
}

// Objects so large that the ordered parse would be quadratic (80k members took 15 s of a handler
// thread) are refused before parsing; a large but reasonable one (4000 members, as in a logit_bias
// of 4000 tokens) is parsed. A multipart body gets a 415 (was a 500 from httplib's reader) and
// the server goes on.
TEST_F(HttpTest, HugeObjectsAndMultipartBodiesAreRefused) {
  std::string keys;  // ~80 KB: within the fixture's 100000-byte body limit
  for (int i = 0; i < 9000; ++i) keys += fmt::format("{}\"k{}\":0", i == 0 ? "" : ",", i);
  for (const std::string path : {"/tokenize", "/v1/completions"}) {
    auto r = post(path, R"({"prompt": "x", "extra": {)" + keys + "}}");
    expect_error(r, 400, "invalid_request_error");
    EXPECT_NE(r->body.find("too many members (the largest has 9000)"), std::string::npos) << r->body;
  }
  std::string bias;
  for (int i = 0; i < 4000; ++i) bias += fmt::format("{}\"{}\":0", i == 0 ? "" : ",", i);
  auto ok = post("/tokenize", R"({"prompt": "x", "extra": {)" + bias + "}}");
  EXPECT_EQ(ok->status, 200) << ok->body;

  httplib::MultipartFormDataItems items = {{"a", R"({"prompt": "hi"})", "", ""}};
  for (const char* path : {"/tokenize", "/v1/chat/completions"}) {
    auto r = client().Post(path, items);
    expect_error(r, 415, "invalid_request_error");
    EXPECT_NE(r->body.find("multipart/form-data"), std::string::npos) << r->body;
  }
  EXPECT_EQ(post("/tokenize", R"({"prompt": "x"})")->status, 200);
  EXPECT_EQ(client().Get("/health")->status, 200);
  expect_idle();
}

// A known route asked for with the wrong method says which method it takes (405 + Allow), and
// a request httplib cannot read gets a message that says so, not just "HTTP 400".
TEST_F(HttpTest, WrongMethodAndUnreadableRequestSayWhatIsWrong) {
  auto r = client().Get("/v1/chat/completions");
  expect_error(r, 405, "invalid_request_error");
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  EXPECT_NE(Json::parse(r->body)["error"]["message"].get<std::string>().find("takes POST"), std::string::npos);
  r = post("/v1/models", "{}");
  expect_error(r, 405, "invalid_request_error");
  EXPECT_EQ(r->get_header_value("Allow"), "GET");
  expect_error(client().Delete("/v1/models/m"), 405, "invalid_request_error");
  expect_error(client().Get("/v1/nothing"), 404, "not_found_error");

  // A chunk size that is not hex: httplib answers 400 itself.
  const int fd = connect_raw();
  ASSERT_GE(fd, 0);
  const std::string raw =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
      "zz\r\nabc\r\n0\r\n\r\n";
  ASSERT_EQ(send(fd, raw.data(), raw.size(), 0), ssize_t(raw.size()));
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) answer.append(buf, size_t(n));
  close(fd);
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer;
  EXPECT_NE(answer.find("could not be read"), std::string::npos) << answer;
}

// httplib (0.11) limits a Content-Length body only: a chunked body of any size was read into
// memory (40 MB answered 200). The server's own receiver keeps at most the limit, drains the rest
// and answers 413, and the connection stays usable; a chunked body within the limit is served.
TEST_F(HttpTest, ChunkedBodiesHaveTheSameLimit) {
  const int fd = connect_raw();
  ASSERT_GE(fd, 0);
  auto send_all = [&](const std::string& x) { ASSERT_EQ(send(fd, x.data(), x.size(), 0), ssize_t(x.size())); };
  auto chunked = [](const std::string& path, const std::string& body, bool close) {
    std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                      (close ? "Connection: close\r\n" : "") + "Transfer-Encoding: chunked\r\n\r\n";
    for (size_t at = 0; at < body.size(); at += 1000) {
      const std::string part = body.substr(at, 1000);
      req += fmt::format("{:x}\r\n{}\r\n", part.size(), part);
    }
    return req + "0\r\n\r\n";
  };
  // 120 KB against the fixture's 100000-byte limit, then (after its answer: httplib does not
  // pipeline) a small one on the same connection.
  send_all(chunked("/tokenize", R"({"prompt": ")" + std::string(120000, 'a') + R"("})", false));
  std::string answer;
  char buf[4096];
  for (ssize_t n; answer.find("}}") == std::string::npos && (n = recv(fd, buf, sizeof(buf), 0)) > 0;)
    answer.append(buf, size_t(n));
  send_all(chunked("/tokenize", R"({"prompt": "Hello world"})", true));
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) answer.append(buf, size_t(n));
  close(fd);
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 413")) << answer.substr(0, 400);
  EXPECT_NE(answer.find("request_too_large"), std::string::npos) << answer.substr(0, 400);
  const size_t second = answer.find("HTTP/1.1 ", 10);
  ASSERT_NE(second, std::string::npos) << answer;
  EXPECT_TRUE(answer.compare(second, 12, "HTTP/1.1 200") == 0) << answer.substr(second);
  EXPECT_NE(answer.find(R"("count":2)", second), std::string::npos) << answer.substr(second);
  EXPECT_EQ(client().Get("/health")->status, 200);
}

TEST_F(HttpTest, TokenizeRoundTrip) {
  auto r = post("/tokenize", R"({"prompt": "Hello world", "return_token_strs": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json t = Json::parse(r->body);
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(t["token_strs"].size(), t["tokens"].size());
  auto d = post("/detokenize", Json{{"tokens", t["tokens"]}}.dump());
  EXPECT_EQ(Json::parse(d->body)["prompt"], "Hello world");
  auto c = post("/tokenize", R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_GT(Json::parse(c->body)["count"].get<int>(), 3);
}

TEST_F(HttpTest, ClientHangingUpMidStreamAbortsTheRequest) {
  stream_and_hang_up(R"({"prompt": "sing forever", "max_tokens": 1500, "stream": true})", 1);
  EXPECT_LT(engine_->metrics().generation_tokens_total, 1000u);
  expect_idle();
}

// A non-streaming client that gives up while tokens are being generated: nothing is written
// until the end and the engine's events keep coming, so only asking the socket on every event
// notices; the request must not run on for 1500 tokens.
TEST_F(HttpTest, ClientHangingUpOnANonStreamingRequestAbortsIt) {
  const uint64_t aborts_before = engine_->metrics().finished_abort;
  const uint64_t tokens_before = engine_->metrics().generation_tokens_total;
  httplib::Client c = client();
  c.set_read_timeout(0, 300000);  // gives up after 0.3 s and closes the connection
  auto r = c.Post("/v1/completions", R"({"prompt": "sing forever", "max_tokens": 1500})", "application/json");
  EXPECT_FALSE(r);
  c.stop();
  for (int i = 0; i < 200 && engine_->metrics().finished_abort == aborts_before; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(engine_->metrics().finished_abort, aborts_before + 1);
  EXPECT_LT(engine_->metrics().generation_tokens_total - tokens_before, 1000u);
  expect_idle();
}

// A non-streaming request cut short by a shutdown is answered 503 (retry elsewhere), not 200
// with an error object where the completion should be.
TEST_F(HttpTest, NonStreamingRequestEndedByShutdownIsA503) {
  const tok::Tokenizer* t = v4_tokenizer();
  std::unique_ptr<Engine> engine = scripted_engine(EngineConfig{});
  ASSERT_NE(engine, nullptr);
  ServerConfig sc;
  sc.port = 0;
  HttpServer s(sc);
  ASSERT_TRUE(s.start().is_ok());
  s.set_ready(engine.get(), t);
  std::optional<httplib::Result> r;
  std::thread client_thread([&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(20, 0);
    r.emplace(c.Post("/v1/completions", R"({"prompt": "sing forever", "max_tokens": 1500})", "application/json"));
  });
  for (int i = 0; i < 200 && engine->metrics().generation_tokens_total < 5; ++i) std::this_thread::sleep_for(10ms);
  engine->shutdown();
  client_thread.join();
  ASSERT_TRUE(r.has_value());
  expect_error(*r, 503, "service_unavailable_error");
  EXPECT_EQ((*r)->get_header_value("Retry-After"), "1");
  s.stop();
}

// n choices queue as one group: more than the wait queue ever holds is a 400 on n, and a group
// that fits runs whole.
TEST_F(HttpTest, ChoicesBeyondTheWaitQueueAreA400OnN) {
  EngineConfig ec;
  ec.max_num_seqs = 1;
  ec.max_waiting = 3;
  std::unique_ptr<Engine> engine = scripted_engine(ec);
  ASSERT_NE(engine, nullptr);
  ServerConfig sc;
  sc.port = 0;
  HttpServer s(sc);
  ASSERT_TRUE(s.start().is_ok());
  s.set_ready(engine.get(), v4_tokenizer());
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(20, 0);
  auto r = c.Post("/v1/completions", R"({"prompt": "hi", "n": 4, "max_tokens": 3})", "application/json");
  expect_error(r, 400, "invalid_request_error");
  EXPECT_EQ(Json::parse(r->body)["error"]["param"], "n") << r->body;
  EXPECT_EQ(engine->metrics().n_waiting + engine->metrics().n_running, 0);
  r = c.Post("/v1/completions", R"({"prompt": "hi", "n": 3, "max_tokens": 3})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["choices"].size(), 3u);
  engine->shutdown();
  s.stop();
}

TEST_F(HttpTest, ApiKey) {
  ServerConfig sc;
  sc.port = 0;
  sc.served_model_names = {"m"};
  sc.api_key = "sekret";
  HttpServer s(sc);
  ASSERT_TRUE(s.start().is_ok());
  httplib::Client c("127.0.0.1", s.port());
  expect_error(c.Get("/health"), 503, "service_unavailable_error");  // not ready yet
  expect_error(c.Post("/v1/completions", {{"Authorization", "Bearer sekret"}}, R"({"prompt": "x"})", "application/json"),
               503, "service_unavailable_error");
  EXPECT_EQ(c.Get("/health")->get_header_value("Retry-After"), "1");
  s.set_ready(engine_, v4_tokenizer());
  expect_error(c.Get("/v1/models"), 401, "authentication_error");
  expect_error(c.Get("/v1/models", {{"Authorization", "Bearer wrong"}}), 401, "authentication_error");
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer sekret"}})->status, 200);
  EXPECT_EQ(c.Get("/health")->status, 200);  // probes need no key
  s.stop();
}

}  // namespace
}  // namespace dsv4::server
