// token_ids.cpp: parsing of `--token-ids`.
#include "tools/token_ids.h"

#include <algorithm>

#include "base/npy.h"

namespace dsv4::cli {

Result<std::vector<int32_t>> read_token_ids(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("0123456789, ") == std::string::npos) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < arg.size()) {
      const size_t j = std::min(arg.find(',', i), arg.size());
      const std::string tok = arg.substr(i, j - i);
      if (tok.find_first_not_of(' ') != std::string::npos) {
        if (tok.size() > 9) return invalid_argument("token id '{}' is too large", tok);
        ids.push_back(std::stoi(tok));
      }
      i = j + 1;
    }
    return ids;
  }
  DSV4_ASSIGN_OR_RETURN(NpyArray arr, read_npy(arg));
  if (arr.shape.size() != 1)
    return invalid_argument("token ids must be a 1-D array [T], found shape of rank {}", arr.shape.size());
  return arr.as_int32();
}

}  // namespace dsv4::cli
