// tokenizer_unit_test.cpp: the tokenizer pipeline on a tiny hand-made tokenizer.json (merge
// order, added-token matching in HF's two phases, special tokens left as text), and rejection
// of every tokenizer.json feature we do not implement. Expected ids were checked with HF
// tokenizers 0.23.3 on the same file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <span>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4::tok {
namespace {

nlohmann::json added(int id, const std::string& content, bool normalized, bool special) {
  return {{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},  {"normalized", normalized}, {"special", special}};
}

// 256 byte tokens (ids = byte values), then "bc" 256, "ab" 257, "aa" 258; merges b+c, a+b, a+a;
// added tokens xyz 259 (raw), wx 260 (normalized), <s> 261 (special), <s>x 262 (normalized).
nlohmann::json tiny_config() {
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string c;
    utf8_append(alphabet.byte_to_char[b], &c);
    vocab[c] = b;
  }
  vocab["bc"] = 256;
  vocab["ab"] = 257;
  vocab["aa"] = 258;
  nlohmann::json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {added(259, "xyz", false, false), added(260, "wx", true, false), added(261, "<s>", false, true),
                       added(262, "<s>x", true, false)};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}, {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"},         {"dropout", nullptr},     {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"vocab", vocab},        {"merges", {"b c", "a b", "a a"}}};
  return j;
}

std::vector<TokenId> enc(const Tokenizer& tok, const std::string& text, bool special = true) {
  auto ids = tok.encode(text, special);
  EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
  return ids.is_ok() ? ids.value() : std::vector<TokenId>{};
}

using Ids = std::vector<TokenId>;

TEST(TinyTokenizer, MatchesHf) {
  auto tok = Tokenizer::from_json_text(tiny_config().dump());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(enc(*tok, "abc"), (Ids{97, 256}));  // b+c has the lower rank
  EXPECT_EQ(enc(*tok, "aaa"), (Ids{258, 97}));  // ties: leftmost first
  EXPECT_EQ(enc(*tok, "aaaa"), (Ids{258, 258}));
  EXPECT_EQ(enc(*tok, "wxyz"), (Ids{119, 259}));  // raw tokens are found before normalized ones
  EXPECT_EQ(enc(*tok, "<s>xa"), (Ids{261, 120, 97}));
  EXPECT_EQ(enc(*tok, "a b  c"), (Ids{97, 32, 98, 32, 32, 99}));  // a literal String split
  EXPECT_EQ(enc(*tok, "<s>xa", false), (Ids{262, 97}));             // <s> stays text, then <s>x matches
  EXPECT_EQ(enc(*tok, "<s><s>x", false), (Ids{60, 115, 62, 262}));
  EXPECT_EQ(enc(*tok, ""), Ids{});
  EXPECT_EQ(tok->decode(Ids{261, 97, 256}).value(), "<s>abc");
  EXPECT_EQ(tok->decode(Ids{261, 97}, true).value(), "a");
  EXPECT_FALSE(tok->encode("bad \xC3(", true).is_ok());
  EXPECT_EQ(tok->token_text(32), "Ġ");
}

// An edit of the tiny tokenizer.json that loading must refuse with a message containing `message`.
struct Case {
  const char* name;
  std::function<void(nlohmann::json&)> edit;
  const char* message;
};

void expect_rejected(std::span<const Case> cases) {
  for (const Case& c : cases) {
    nlohmann::json j = tiny_config();
    c.edit(j);
    auto tok = Tokenizer::from_json_text(j.dump());
    ASSERT_FALSE(tok.is_ok()) << c.name;
    EXPECT_NE(tok.status().message().find(c.message), std::string::npos) << c.name << ": " << tok.status().to_string();
  }
}

// Each unsupported feature is rejected with a message naming it.
TEST(TinyTokenizer, RejectsUnsupportedFeatures) {
  const Case cases[] = {
      {"normalizer", [](auto& j) { j["normalizer"] = {{"type", "NFC"}}; }, "normalizer"},
      {"model", [](auto& j) { j["model"]["type"] = "WordPiece"; }, "model type 'WordPiece'"},
      {"dropout", [](auto& j) { j["model"]["dropout"] = 0.1; }, "dropout"},
      {"byte_fallback", [](auto& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {"unk", [](auto& j) { j["model"]["unk_token"] = "?"; }, "unk_token"},
      {"missing byte", [](auto& j) { j["model"]["vocab"].erase("a"); }, "single-byte token"},
      {"merge oov", [](auto& j) { j["model"]["merges"].push_back("x q"); }, "missing from the vocab"},
      {"pre_tokenizer", [](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "ByteLevel"},
      {"split behavior", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }, "Removed"},
      {"split invert", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; }, "invert"},
      {"byte-level regex", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; }, "use_regex"},
      {"prefix space", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       "add_prefix_space"},
      {"bad regex", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(["}}; },
       "cannot compile"},
      {"decoder", [](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder"},
      {"post_processor", [](auto& j) { j["post_processor"] = {{"type", "TemplateProcessing"}}; }, "TemplateProcessing"},
      {"lstrip", [](auto& j) { j["added_tokens"][0]["lstrip"] = true; }, "lstrip"},
      {"added id", [](auto& j) { j["added_tokens"][0]["id"] = 300; }, "would give it id 259"},
      {"truncation", [](auto& j) { j["truncation"] = {{"max_length", 8}}; }, "truncation"},
  };
  expect_rejected(cases);
  EXPECT_FALSE(Tokenizer::from_json_text("{not json").is_ok());
  auto missing = Tokenizer::load("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  // A directory was reported as "not valid JSON".
  auto dir = Tokenizer::load(::testing::TempDir());
  ASSERT_FALSE(dir.is_ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos) << dir.status().to_string();
}

// Fields of the wrong JSON type were read with nlohmann's value(), which throws type_error: the
// CLI aborted with an uncaught exception instead of naming the field. Huge ids wrapped (an added
// token id of 2^40 read as 0) or sized the per-id tables by gigabytes.
TEST(TinyTokenizer, MalformedFieldsAreErrorsNotExceptions) {
  const Case cases[] = {
      {"post_processor string", [](auto& j) { j["post_processor"] = "x"; }, "post_processor \"x\""},
      {"post_processor type", [](auto& j) { j["post_processor"] = {{"type", 5}}; }, "post_processor"},
      {"normalizer type", [](auto& j) { j["normalizer"] = {{"type", 5}}; }, "normalizer"},
      {"decoder type", [](auto& j) { j["decoder"]["type"] = 5; }, "decoder"},
      {"model type", [](auto& j) { j["model"]["type"] = 5; }, "model type '5'"},
      {"pre_tokenizer type", [](auto& j) { j["pre_tokenizer"]["type"] = 5; }, "ByteLevel"},
      {"stage type", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["type"] = 5; }, "stage type ''"},
      {"split behavior", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = 5; },
       "\"behavior\" must be a string, found 5"},
      {"split invert", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = "no"; },
       "\"invert\" must be a boolean, found \"no\""},
      {"byte-level use_regex", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = 0; },
       "\"use_regex\" must be a boolean"},
      {"byte-level prefix", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = "x"; },
       "\"add_prefix_space\" must be a boolean"},
      {"added special", [](auto& j) { j["added_tokens"][0]["special"] = "yes"; },
       "added token 'xyz' (id 259): \"special\" must be a boolean"},
      {"added normalized", [](auto& j) { j["added_tokens"][0]["normalized"] = 1; }, "\"normalized\" must be a boolean"},
      {"added lstrip", [](auto& j) { j["added_tokens"][0]["lstrip"] = "no"; }, "\"lstrip\" must be a boolean"},
      {"added id 2^40", [](auto& j) { j["added_tokens"][0]["id"] = int64_t(1) << 40; }, "id 1099511627776 is outside"},
      {"vocab id 2^24", [](auto& j) { j["model"]["vocab"]["zz"] = 1 << 24; }, "token 'zz' has invalid id 16777216"},
  };
  expect_rejected(cases);
  // Null is the same as absent, as before.
  nlohmann::json j = tiny_config();
  j["added_tokens"][0]["lstrip"] = nullptr;
  EXPECT_TRUE(Tokenizer::from_json_text(j.dump()).is_ok());
}

}  // namespace
}  // namespace dsv4::tok
