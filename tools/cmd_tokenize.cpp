// cmd_tokenize.cpp: `dsv4 tokenize` and `dsv4 detokenize`, thin wrappers over dsv4_tokenizer for
// checking ids by hand and from scripts. tokenize prints one JSON array of ids per TEXT argument;
// detokenize prints the decoded text of all IDs followed by a newline.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace dsv4::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer_path;
  bool special = false;
  std::vector<std::string> texts;
};

struct DetokenizeArgs {
  std::string tokenizer_path;
  bool skip_special = false;
  std::vector<std::string> ids;
};

int run_tokenize(const TokenizeArgs& args) {
  auto tokenizer = tok::Tokenizer::load(args.tokenizer_path);
  if (!tokenizer.is_ok()) {
    fmt::print(stderr, "tokenize: {}\n", tokenizer.status().to_string());
    return 1;
  }
  for (const std::string& text : args.texts) {
    auto ids = tokenizer->encode(text, args.special);
    if (!ids.is_ok()) {
      fmt::print(stderr, "tokenize: {}\n", ids.status().to_string());
      return 1;
    }
    fmt::print("[{}]\n", fmt::join(ids.value(), ", "));
  }
  return 0;
}

int run_detokenize(const DetokenizeArgs& args) {
  std::vector<tok::TokenId> ids;
  for (const std::string& s : args.ids) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used != s.size() || v < 0 || v > INT32_MAX) {
      fmt::print(stderr, "detokenize: expected a non-negative integer token id, found '{}'\n", s);
      return 1;
    }
    ids.push_back(static_cast<tok::TokenId>(v));
  }
  auto tokenizer = tok::Tokenizer::load(args.tokenizer_path);
  if (!tokenizer.is_ok()) {
    fmt::print(stderr, "detokenize: {}\n", tokenizer.status().to_string());
    return 1;
  }
  auto text = tokenizer->decode(ids, args.skip_special);
  if (!text.is_ok()) {
    fmt::print(stderr, "detokenize: {}\n", text.status().to_string());
    return 1;
  }
  fmt::print("{}\n", text.value());
  return 0;
}

}  // namespace

void register_tokenizer_commands(CLI::App& app, int& exit_code) {
  auto tokenize_args = std::make_shared<TokenizeArgs>();
  CLI::App* tokenize = app.add_subcommand(
      "tokenize", "Print the token ids of each TEXT as a JSON array, one line per TEXT (no BOS added)");
  tokenize->add_option("--tokenizer", tokenize_args->tokenizer_path, "Path to tokenizer.json")->required();
  tokenize->add_flag("--special", tokenize_args->special,
                     "Recognise special tokens such as <｜end▁of▁sentence｜> written in TEXT (HF default); "
                     "without it they are tokenized as plain text");
  tokenize->add_option("TEXT", tokenize_args->texts, "Text to tokenize")->required();
  tokenize->callback([tokenize_args, &exit_code] { exit_code = run_tokenize(*tokenize_args); });

  auto detokenize_args = std::make_shared<DetokenizeArgs>();
  CLI::App* detokenize = app.add_subcommand("detokenize", "Print the text of a sequence of token ids");
  detokenize->add_option("--tokenizer", detokenize_args->tokenizer_path, "Path to tokenizer.json")->required();
  detokenize->add_flag("--skip-special", detokenize_args->skip_special, "Leave special tokens out of the text");
  detokenize->add_option("ID", detokenize_args->ids, "Token ids")->required();
  detokenize->callback([detokenize_args, &exit_code] { exit_code = run_detokenize(*detokenize_args); });
}

}  // namespace dsv4::cli
