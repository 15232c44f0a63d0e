// fp8_groups.h: a lossless 8-bit form of a dense weight whose values came from FP8: e4m3fn codes
// with one power-of-two scale per (row, 128-column group), W[n, k] = e4m3(code[n, k]) *
// 2^exp[n, k / 128]. DeepSeek-V4-Flash ships wo_a (8 x 1024 x 4096, the largest dense weight of
// a layer) as FP8 with ue8m0 scales per 128 x 128 block; Intel's W4A16 export dequantizes it to
// BF16 (CHECKPOINTS.md §4), so every one of those BF16 values is such a product and this form
// halves the bytes a decode step streams for it (67 -> 34 MB a layer) without changing a bit.
//
// encode_fp8_groups finds each group's exponent from its largest magnitude (the smallest exp
// with max |w| / 2^exp <= 448: at most the source block's own, so every source code scales to a
// representable one) and checks that every value round-trips exactly, signed zeros included; a
// weight with any value that does not (a BF16 weight of another origin) is reported, and the
// caller keeps it in BF16. Exponents are limited to [kFp8GroupMinExp, kFp8GroupMaxExp] so that
// the kernels' 2^(exp + 120) factor is a normal fp32 (cuda/dense/dense.h).
#pragma once

#include <cstdint>
#include <string>

namespace dsv4 {

inline constexpr int kFp8GroupSize = 128;   // columns per exponent
inline constexpr int kFp8GroupMinExp = -128;
inline constexpr int kFp8GroupMaxExp = 7;

// Why a weight has no exact fp8 form: the first value (row, column) that does not round-trip.
struct Fp8GroupsMiss {
  int64_t row = -1, col = -1;
  float value = 0.0f;
  std::string why;
};

// Encodes rows x k values (row-major, k a multiple of kFp8GroupSize) into codes [rows][k] and
// exps [rows][k / kFp8GroupSize]. Returns false (outputs partly written, *miss filled when given)
// if some value has no exact form: not finite, too many significant bits for e4m3 under its
// group's exponent, or a group exponent outside the limits.
bool encode_fp8_groups(const float* w, int64_t rows, int64_t k, uint8_t* codes, int8_t* exps,
                       Fp8GroupsMiss* miss = nullptr);

// The exact value of element (row, col) of an encoded weight.
float fp8_groups_value(const uint8_t* codes, const int8_t* exps, int64_t k, int64_t row, int64_t col);

}  // namespace dsv4
