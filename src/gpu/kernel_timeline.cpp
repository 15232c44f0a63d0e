// kernel_timeline.cpp: short kernel names and the exposed-time split of a traced step
// (kernel_timeline.h).
#include "gpu/kernel_timeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include <fmt/format.h>

namespace dsv4::gpu {
namespace {

std::string demangle(std::string_view name) {
  if (name.substr(0, 2) != "_Z") return std::string(name);
  int status = 0;
  const std::string mangled(name);
  char* out = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return mangled;
  std::string s(out);
  std::free(out);
  return s;
}

// Drops every namespace or class qualifier: "ns::" where ns is an identifier or
// "(anonymous namespace)".
std::string drop_qualifiers(const std::string& s) {
  static constexpr std::string_view kAnon = "(anonymous namespace)::";
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, kAnon.size(), kAnon) == 0) {
      i += kAnon.size();
      continue;
    }
    const char c = s[i];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      if (s.compare(j, 2, "::") == 0) {
        i = j + 2;  // a qualifier: skip it and its "::"
        continue;
      }
      out.append(s, i, j - i);
      i = j;
      continue;
    }
    out.push_back(c);
    ++i;
  }
  return out;
}

}  // namespace

std::string short_kernel_name(std::string_view name) {
  const std::string s = drop_qualifiers(demangle(name));
  // "void kernel<1, 2>(Args)": the parameter list starts at the first '(' outside the template
  // arguments, the name after the last space outside them.
  int depth = 0;
  size_t open = s.size(), last_space = std::string::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (depth != 0) continue;
    if (c == '(') {
      open = i;
      break;
    }
    if (c == ' ') last_space = i;
  }
  const size_t begin = last_space == std::string::npos ? 0 : last_space + 1;
  return s.substr(begin, open - begin);
}

StepTimeline step_timeline(std::vector<KernelRecord> records) {
  StepTimeline t;
  if (records.empty()) return t;
  // Start order; equal starts keep the order of their ends (a stable tie-break).
  std::sort(records.begin(), records.end(), [](const KernelRecord& a, const KernelRecord& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });
  const uint64_t t0 = records.front().start_ns;
  auto us = [t0](uint64_t ns) { return double(int64_t(ns - t0)) * 1e-3; };
  uint64_t latest_end = t0;  // max end of the kernels before this one (t0 for the first)
  std::map<std::string, KernelGroup> groups;
  for (size_t i = 0; i < records.size(); ++i) {
    const KernelRecord& r = records[i];
    TimelineRow row;
    row.index = int(i);
    row.name = short_kernel_name(r.name);
    row.grid = r.grid;
    row.stream = r.stream;
    row.start_us = us(r.start_ns);
    row.end_us = us(r.end_ns);
    row.duration_us = row.end_us - row.start_us;
    row.lead_us = i == 0 ? 0.0 : row.start_us - us(latest_end);
    row.exposed_us = r.end_ns > latest_end ? us(r.end_ns) - us(latest_end) : 0.0;
    latest_end = std::max(latest_end, r.end_ns);
    const std::string key = fmt::format("{} ({},{},{})", row.name, r.grid[0], r.grid[1], r.grid[2]);
    KernelGroup& g = groups[key];
    g.key = key;
    g.count += 1;
    g.exposed_us += row.exposed_us;
    g.duration_us += row.duration_us;
    t.rows.push_back(std::move(row));
  }
  t.span_us = us(latest_end);
  for (auto& [key, g] : groups) t.groups.push_back(g);
  std::stable_sort(t.groups.begin(), t.groups.end(),
                   [](const KernelGroup& a, const KernelGroup& b) { return a.exposed_us > b.exposed_us; });
  return t;
}

int median_step(const std::vector<StepTimeline>& steps) {
  if (steps.empty()) return -1;
  std::vector<int> order(steps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return steps[size_t(a)].span_us < steps[size_t(b)].span_us; });
  return order[(order.size() - 1) / 2];
}

}  // namespace dsv4::gpu
