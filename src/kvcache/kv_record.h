// kv_record.h: the byte records of the fp8 KV cache (ARCHITECTURE.md §4), defined once for the
// host and mirrored by the CUDA kernels:
//   main entry (window or compressed), `entry_bytes(nope, rope)` bytes:
//     [nope x e4m3][rope x bf16][ceil(nope/64) x ue8m0 scale, padded to a multiple of 8]
//     Flash: 448 + 128 + 7 + 1 pad = 584 bytes.
//   indexer key, `indexer_key_bytes(dim)` bytes:
//     [dim/2 bytes of e2m1 pairs, low nibble = even element][ceil(dim/32) x ue8m0 scale]
//     Flash: 64 + 4 = 68 bytes.
// The reference forward already rounds these values to exactly these grids (fp8sim with
// power-of-two scales per 64; Hadamard + fp4sim per 32), so packing its values is lossless; the
// packers verify that and refuse values that are not on the grid.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace dsv4::kv {

int64_t entry_bytes(int nope, int rope);
int64_t indexer_key_bytes(int dim);

// v: fp32 [nope + rope] holding bf16 values whose nope part is on an fp8 grid per 64 block.
Status pack_entry(const float* v, int nope, int rope, uint8_t* out);
void unpack_entry(const uint8_t* in, int nope, int rope, float* v);

// v: fp32 [dim] whose values are e2m1 codes times a power of two per 32 block.
Status pack_indexer_key(const float* v, int dim, uint8_t* out);
void unpack_indexer_key(const uint8_t* in, int dim, float* v);

}  // namespace dsv4::kv
