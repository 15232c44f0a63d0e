// tokenizer_bench.cpp: encoding throughput of dsv4_tokenizer on one text file, single thread.
// Prints load time, wall and CPU seconds and MB/s (best of --repeat runs), the token count and an
// FNV-1a hash of the ids so scripts/tokenizer/bench_tokenizer.py can check HF's ids against ours.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  CLI::App app{"dsv4 tokenizer encode benchmark"};
  std::string tokenizer_path, text_path;
  int repeat = 3;
  bool special = true;
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json")->required();
  app.add_option("--text", text_path, "UTF-8 text file to encode as one string")->required();
  app.add_option("--repeat", repeat, "timed runs (the best one is reported)");
  app.add_flag("--special,!--no-special", special, "recognise special tokens (default on)");
  CLI11_PARSE(app, argc, argv);

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto tok = dsv4::tok::Tokenizer::load(tokenizer_path);
  if (!tok.is_ok()) {
    fmt::print(stderr, "{}\n", tok.status().to_string());
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();

  std::ifstream in(text_path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  double best_s = 1e30, best_cpu_s = 1e30;
  std::vector<dsv4::tok::TokenId> ids;
  for (int r = 0; r < repeat; ++r) {
    const auto t = Clock::now();
    const std::clock_t c = std::clock();
    auto result = tok->encode(text, special);
    const double s = std::chrono::duration<double>(Clock::now() - t).count();
    best_cpu_s = std::min(best_cpu_s, static_cast<double>(std::clock() - c) / CLOCKS_PER_SEC);
    if (!result.is_ok()) {
      fmt::print(stderr, "{}\n", result.status().to_string());
      return 1;
    }
    ids = std::move(result).value();
    best_s = std::min(best_s, s);
  }
  uint64_t hash = 1469598103934665603ull;
  for (auto id : ids) {
    hash ^= static_cast<uint32_t>(id);
    hash *= 1099511628211ull;
  }
  const double mb = text.size() / 1e6;
  fmt::print("{{\"bytes\": {}, \"tokens\": {}, \"load_s\": {:.3f}, \"encode_s\": {:.4f}, \"mb_per_s\": {:.2f}, "
             "\"encode_cpu_s\": {:.4f}, \"cpu_mb_per_s\": {:.2f}, \"ids_fnv1a\": \"{:016x}\"}}\n",
             text.size(), ids.size(), load_s, best_s, mb / best_s, best_cpu_s, mb / best_cpu_s, hash);
  return 0;
}
