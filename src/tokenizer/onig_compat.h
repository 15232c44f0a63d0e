// onig_compat.h: rewrites a tokenizer.json regex (written for Oniguruma, which HF uses) so that
// PCRE2 10.42 matches the same code points. Two gaps exist: PCRE2 10.42 carries Unicode 14
// tables while HF's Oniguruma carries Unicode 16, and PCRE2's \s includes U+180E, which
// Oniguruma's (Unicode White_Space) does not. Anything we cannot rewrite exactly is an error.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4::tok {

// Returns the PCRE2 pattern for Oniguruma pattern `pattern`: \p{N|L|M|P|S} gain the code points
// Unicode 15.0-16.0 assigned to them, and \s / \S become the explicit White_Space set.
Result<std::string> onig_to_pcre2(std::string_view pattern);

}  // namespace dsv4::tok
