// inventory.h: what a loaded checkpoint holds, counted three ways: tensors by dtype, linear
// weights by storage format, and linear weights by layer type and role. `dsv4 inspect` prints it;
// the memory planner and the tests read the byte counts.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/weights.h"

namespace dsv4 {

struct Tally {
  int64_t count = 0;
  size_t bytes = 0;
};

struct Inventory {
  std::map<std::string, Tally> by_dtype;   // every stored tensor
  std::map<std::string, Tally> by_format;  // linear weights: "dense", "gptq-int4", ...
  std::map<std::string, Tally> by_role;    // linear weights: "csa routed experts", "head", ...
  size_t total_bytes = 0;                  // all tensor data in the files
};

Inventory take_inventory(const ModelWeights& w);

}  // namespace dsv4
