// token_ids.h: the `--token-ids` argument shared by logits and generate: an int32/int64 .npy [T],
// or the ids written out ("0,5,17").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::cli {

Result<std::vector<int32_t>> read_token_ids(const std::string& arg);

}  // namespace dsv4::cli
