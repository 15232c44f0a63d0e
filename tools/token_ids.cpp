// token_ids.cpp: parsing of `--token-ids`.
#include "tools/token_ids.h"

#include <algorithm>
#include <filesystem>

#include "base/npy.h"

namespace dsv4::cli {

Result<std::vector<int32_t>> read_token_ids(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("0123456789, ") == std::string::npos) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < arg.size()) {
      const size_t j = std::min(arg.find(',', i), arg.size());
      const std::string item = arg.substr(i, j - i);
      const size_t b = item.find_first_not_of(' ');
      if (b != std::string::npos) {
        const std::string tok = item.substr(b, item.find_last_not_of(' ') - b + 1);
        // std::stoi stops at a space: "1 2" must not read as the single id 1.
        if (tok.find(' ') != std::string::npos)
          return invalid_argument("token ids '{}': '{}' is not one id (separate ids with commas)", arg, tok);
        if (tok.size() > 9) return invalid_argument("token id '{}' is too large", tok);
        ids.push_back(std::stoi(tok));
      }
      i = j + 1;
    }
    return ids;
  }
  // Anything else names a file; when there is none, say what a list looks like too, so that
  // "0,-1" is not answered with only "cannot open '0,-1'".
  std::error_code ec;
  if (!std::filesystem::exists(arg, ec))
    return not_found("token ids '{}' are neither a list of non-negative integers such as 0,5,17 nor an existing "
                     ".npy file",
                     arg);
  DSV4_ASSIGN_OR_RETURN(NpyArray arr, read_npy(arg));
  if (arr.shape.size() != 1)
    return invalid_argument("token ids must be a 1-D array [T], found shape of rank {}", arr.shape.size());
  return arr.as_int32();
}

}  // namespace dsv4::cli
