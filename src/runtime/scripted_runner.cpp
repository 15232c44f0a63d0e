// scripted_runner.cpp: see scripted_runner.h.
#include "runtime/scripted_runner.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "base/check.h"

namespace dsv4::runtime {
namespace {

Result<ScriptRule> parse_rule(const nlohmann::json& j, bool is_default, const EncodeFn& encode) {
  if (!j.is_object()) return invalid_argument("expected an object");
  ScriptRule r;
  for (const auto& [key, value] : j.items()) {
    if (key == "prompt_contains" && !is_default) {
      if (!value.is_string() || value.get_ref<const std::string&>().empty())
        return invalid_argument("\"prompt_contains\" must be a non-empty string");
      r.prompt_contains = value.get<std::string>();
    } else if (key == "output") {
      if (!value.is_string()) return invalid_argument("\"output\" must be a string");
      DSV4_ASSIGN_OR_RETURN(r.output, encode(value.get_ref<const std::string&>()));
    } else if (key == "eos") {
      if (!value.is_boolean()) return invalid_argument("\"eos\" must be true or false");
      r.eos = value.get<bool>();
    } else {
      return invalid_argument("unknown key \"{}\" (expected {}output, eos)", key,
                              is_default ? "" : "prompt_contains, ");
    }
  }
  if (!is_default && r.prompt_contains.empty()) return invalid_argument("a rule needs \"prompt_contains\"");
  if (r.output.empty() && !r.eos) return invalid_argument("an empty output needs \"eos\": true");
  return r;
}

}  // namespace

Result<Script> parse_script(std::string_view json_text, const std::string& origin, const EncodeFn& encode) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("{}: not valid JSON", origin);
  if (!j.is_object()) return invalid_argument("{}: expected a JSON object", origin);
  Script s;
  s.fallback.eos = true;
  for (const auto& [key, value] : j.items()) {
    if (key == "rules") {
      if (!value.is_array()) return invalid_argument("{}: \"rules\" must be an array", origin);
      for (size_t i = 0; i < value.size(); ++i) {
        auto r = parse_rule(value[i], false, encode);
        if (!r.is_ok()) return r.status().with_context(fmt::format("{}: rules[{}]", origin, i));
        s.rules.push_back(std::move(r).value());
      }
    } else if (key == "default") {
      auto r = parse_rule(value, true, encode);
      if (!r.is_ok()) return r.status().with_context(fmt::format("{}: default", origin));
      s.fallback = std::move(r).value();
    } else if (key == "step_delay_ms" || key == "token_delay_us") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 60000)
        return invalid_argument("{}: \"{}\" must be an integer in [0, 60000]", origin, key);
      (key == "step_delay_ms" ? s.step_delay_ms : s.token_delay_us) = value.get<int>();
    } else {
      return invalid_argument("{}: unknown key \"{}\" (expected rules, default, step_delay_ms, token_delay_us)",
                              origin, key);
    }
  }
  return s;
}

ScriptedRunner::ScriptedRunner(Script script, DecodeFn decode, int32_t vocab_size, int32_t eos_token_id,
                               int64_t max_positions, std::string origin)
    : script_(std::move(script)), decode_(std::move(decode)) {
  info_.name = "scripted (diagnostic)";
  info_.vocab_size = vocab_size;
  info_.eos_token_id = eos_token_id;
  info_.max_positions = max_positions;
  info_.manifest.push_back(fmt::format(
      "runner: scripted (DIAGNOSTIC: outputs come from {}, not from a model; {} rules, step delay {} ms, "
      "token delay {} us)",
      origin, script_.rules.size(), script_.step_delay_ms, script_.token_delay_us));
}

Result<std::unique_ptr<ScriptedRunner>> ScriptedRunner::from_file(const std::string& path, const EncodeFn& encode,
                                                                  DecodeFn decode, int32_t vocab_size,
                                                                  int32_t eos_token_id, int64_t max_positions) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open the diagnostic script {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  DSV4_ASSIGN_OR_RETURN(Script s, parse_script(ss.str(), path, encode));
  std::vector<const ScriptRule*> all{&s.fallback};
  for (const ScriptRule& r : s.rules) all.push_back(&r);
  for (const ScriptRule* r : all) {
    for (const int32_t t : r->output)
      if (t < 0 || t >= vocab_size) return invalid_argument("{}: token {} outside the vocabulary", path, t);
  }
  return std::make_unique<ScriptedRunner>(std::move(s), std::move(decode), vocab_size, eos_token_id, max_positions,
                                          path);
}

Status ScriptedRunner::execute(const StepInput& in, StepOutput* out) {
  int64_t n_fed = 0;
  for (const StepSequence& s : in.seqs) {
    if (size_t(s.slot) >= slots_.size()) slots_.resize(size_t(s.slot) + 1);
    Slot& slot = slots_[size_t(s.slot)];
    if (s.pos0 == 0) slot = Slot{s.seq_id, {}, nullptr};
    DSV4_CHECK(slot.seq_id == s.seq_id, "slot {} does not hold sequence {}", s.slot, s.seq_id);
    DSV4_CHECK(int64_t(slot.fed.size()) == s.pos0, "sequence {} is at position {}, the step feeds from {}",
               s.seq_id, slot.fed.size(), s.pos0);
    slot.fed.insert(slot.fed.end(), s.tokens.begin(), s.tokens.end());
    n_fed += int64_t(s.tokens.size());
    if (!s.sample) continue;
    if (slot.rule == nullptr) {
      const std::string prompt =
          decode_(std::span<const int32_t>(slot.fed.data(), size_t(std::min<int64_t>(s.n_prompt, slot.fed.size()))));
      slot.rule = &script_.fallback;
      for (const ScriptRule& r : script_.rules) {
        if (prompt.find(r.prompt_contains) != std::string::npos) {
          slot.rule = &r;
          break;
        }
      }
    }
    const ScriptRule& r = *slot.rule;
    const size_t i = size_t(s.sample_index);
    int32_t token;
    if (i < r.output.size()) {
      token = r.output[i];
    } else if (r.eos) {
      token = info_.eos_token_id;
    } else {
      token = r.output[i % r.output.size()];
    }
    SampledToken t;
    t.seq_id = s.seq_id;
    t.token.token = token;
    t.token.logprob = 0.0f;
    if (s.sampling != nullptr && s.sampling->logprobs > 0) {
      // The script is certain of its token; the alternatives are filler with tiny probability.
      t.token.top.emplace_back(token, 0.0f);
      for (int32_t k = 1; k < s.sampling->logprobs; ++k)
        t.token.top.emplace_back((token + k) % info_.vocab_size, -100.0f);
    }
    out->sampled.push_back(std::move(t));
  }
  const int64_t delay_us = int64_t(script_.step_delay_ms) * 1000 + n_fed * script_.token_delay_us;
  if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  return Status::ok();
}

Status ScriptedRunner::fork(const ForkSpec& f) {
  if (f.src_slot < 0 || size_t(f.src_slot) >= slots_.size() || slots_[size_t(f.src_slot)].seq_id != f.src_seq)
    return invalid_argument("fork: slot {} does not hold sequence {}", f.src_slot, f.src_seq);
  Slot copy = slots_[size_t(f.src_slot)];  // the rule is chosen again at the copy's first sample
  if (int64_t(copy.fed.size()) != f.n_tokens)
    return invalid_argument("fork: sequence {} is at position {}, not {}", f.src_seq, copy.fed.size(), f.n_tokens);
  if (f.dst_slot < 0 || f.dst_slot == f.src_slot) return invalid_argument("fork: bad destination slot {}", f.dst_slot);
  if (size_t(f.dst_slot) >= slots_.size()) slots_.resize(size_t(f.dst_slot) + 1);
  copy.seq_id = f.dst_seq;
  copy.rule = nullptr;
  slots_[size_t(f.dst_slot)] = std::move(copy);
  return Status::ok();
}

void ScriptedRunner::release(int64_t seq_id, int32_t slot) {
  if (slot >= 0 && size_t(slot) < slots_.size() && slots_[size_t(slot)].seq_id == seq_id)
    slots_[size_t(slot)] = Slot{};
}

}  // namespace dsv4::runtime
