// pre_tokenizer.cpp: parses and runs the Split/ByteLevel pre-tokenizer sequence. The splitting is
// depth-first (piece by piece through all stages) so no intermediate piece lists are built.
#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "tokenizer/json_fields.h"

namespace dsv4::tok {
namespace {

constexpr const char* kSupported =
    "supported: a Sequence of Split stages (behavior \"Isolated\", invert false) ending with "
    "ByteLevel (add_prefix_space false, use_regex false)";

Status check_byte_level(const nlohmann::json& stage) {
  DSV4_ASSIGN_OR_RETURN(const bool add_prefix_space,
                        bool_field(stage, "add_prefix_space", false, "pre_tokenizer ByteLevel"));
  if (add_prefix_space) {
    return unimplemented("pre_tokenizer ByteLevel with add_prefix_space=true is not supported ({})",
                         kSupported);
  }
  DSV4_ASSIGN_OR_RETURN(const bool use_regex, bool_field(stage, "use_regex", true, "pre_tokenizer ByteLevel"));
  if (use_regex) {
    return unimplemented("pre_tokenizer ByteLevel with use_regex=true is not supported ({})",
                         kSupported);
  }
  return Status::ok();
}

Result<Regex> parse_split(const nlohmann::json& stage) {
  DSV4_ASSIGN_OR_RETURN(const std::string behavior, string_field(stage, "behavior", "", "pre_tokenizer Split"));
  if (behavior != "Isolated") {
    return unimplemented("pre_tokenizer Split behavior '{}' is not supported ({})", behavior,
                         kSupported);
  }
  DSV4_ASSIGN_OR_RETURN(const bool invert, bool_field(stage, "invert", false, "pre_tokenizer Split"));
  if (invert) {
    return unimplemented("pre_tokenizer Split with invert=true is not supported ({})", kSupported);
  }
  const auto it = stage.find("pattern");
  if (it == stage.end() || !it->is_object()) {
    return invalid_argument("pre_tokenizer Split: expected a \"pattern\" object");
  }
  if (it->contains("Regex") && (*it)["Regex"].is_string()) {
    return Regex::compile((*it)["Regex"].get<std::string>(), /*literal=*/false);
  }
  if (it->contains("String") && (*it)["String"].is_string()) {
    return Regex::compile((*it)["String"].get<std::string>(), /*literal=*/true);
  }
  return invalid_argument("pre_tokenizer Split: pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}, found {}",
                          it->dump());
}

}  // namespace

Result<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& config) {
  if (!config.is_object()) {
    return unimplemented("tokenizer.json without a pre_tokenizer is not supported ({})", kSupported);
  }
  const std::string type = section_type(config);
  std::vector<nlohmann::json> stages;
  if (type == "Sequence") {
    const auto it = config.find("pretokenizers");
    if (it == config.end() || !it->is_array()) {
      return invalid_argument("pre_tokenizer Sequence: expected a \"pretokenizers\" array");
    }
    for (const auto& s : *it) stages.push_back(s);
  } else {
    stages.push_back(config);
  }
  if (stages.empty() || section_type(stages.back()) != "ByteLevel") {
    return unimplemented("pre_tokenizer must end with a ByteLevel stage ({})", kSupported);
  }
  PreTokenizer pre;
  for (size_t i = 0; i < stages.size(); ++i) {
    const auto& stage = stages[i];
    const std::string stage_type = section_type(stage);
    if (stage_type == "ByteLevel") {
      if (i + 1 != stages.size()) {
        return unimplemented("pre_tokenizer ByteLevel must be the last stage ({})", kSupported);
      }
      DSV4_RETURN_IF_ERROR(check_byte_level(stage));
    } else if (stage_type == "Split") {
      DSV4_ASSIGN_OR_RETURN(Regex regex, parse_split(stage));
      pre.stages_.push_back(std::move(regex));
    } else {
      return unimplemented("pre_tokenizer stage type '{}' is not supported ({})", stage_type,
                           kSupported);
    }
  }
  return pre;
}

Status PreTokenizer::split(std::string_view text, RegexScratch& scratch, std::vector<Span>* out) const {
  if (text.empty()) return Status::ok();
  return split_stage(text, Span{0, text.size()}, 0, scratch, out);
}

Status PreTokenizer::split_stage(std::string_view text, Span piece, size_t stage_idx,
                                 RegexScratch& scratch, std::vector<Span>* out) const {
  if (stage_idx == stages_.size()) {
    out->push_back(piece);
    return Status::ok();
  }
  const Regex& regex = stages_[stage_idx];
  const char* subject = text.data() + piece.begin;
  const size_t n = piece.end - piece.begin;
  size_t pos = 0;   // where the next search starts
  size_t prev = 0;  // end of the last emitted piece
  while (pos < n) {
    size_t mb = 0, me = 0;
    const int rc = regex.find(subject, n, pos, scratch, &mb, &me);
    if (rc < 0) {
      return internal_error("pre-tokenizer regex '{}' failed on a piece of {} bytes: {}",
                            regex.pattern(), n, Regex::error_message(rc));
    }
    if (rc == 0) break;
    if (me == mb) {
      // An empty match splits nothing; step over one character and search again.
      size_t i = mb;
      do ++i; while (i < n && (static_cast<unsigned char>(subject[i]) & 0xC0) == 0x80);
      pos = i;
      continue;
    }
    if (mb > prev) {
      DSV4_RETURN_IF_ERROR(split_stage(text, Span{piece.begin + prev, piece.begin + mb}, stage_idx + 1, scratch, out));
    }
    DSV4_RETURN_IF_ERROR(split_stage(text, Span{piece.begin + mb, piece.begin + me}, stage_idx + 1, scratch, out));
    prev = pos = me;
  }
  if (prev < n) {
    DSV4_RETURN_IF_ERROR(split_stage(text, Span{piece.begin + prev, piece.end}, stage_idx + 1, scratch, out));
  }
  return Status::ok();
}

}  // namespace dsv4::tok
