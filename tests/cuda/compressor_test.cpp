// compressor_test.cpp: the KV compressors on the GPU (compressor/compressor.h) against the CPU
// reference cpu::compressor_push driven token by token, at the Flash shapes: CSA main (m 4,
// overlap, Dc 512, fp8 entries of 584 B), CSA indexer (m 4, overlap, Dc 128, Hadamard + fp4 keys
// of 68 B) and HCA (m 128, Dc 512, fp8 entries). Several sequences run at different positions in
// one step batch (permuted row order, paged block tables, a padding row and a padding sequence):
// prefill chunks that cross window boundaries, then decode steps.
//
// Checks:
//  - every emitted entry, decoded from the pool (kv::unpack_entry / unpack_indexer_key), against
//    the CPU entry. Tolerance: one step of the record's grid (fp8: 2^-3 relative plus 2^-9 of the
//    block scale; bf16 rope dims: 2^-7 relative; fp4: half the larger value plus half the block
//    scale), and at least 99% of the values bit-identical. The GPU follows the reference operation
//    by operation; the only differences are expf (CUDA 2 ulp against glibc) and cos/sin in the
//    last ulp, which flip a bf16 rounding once in tens of thousands of values.
//  - records that must not exist (later entries, blocks nobody owns) still hold the poison;
//  - the ring state after the last step: the last coff * m rows of each sequence hold a and
//    z + ape bit-exactly; an unused slot keeps its poison;
//  - chunked prefill == one-shot prefill on the GPU, byte for byte (pool and state).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/compressor.h"
#include "cpu/rope.h"
#include "cuda/compressor/compressor.h"
#include "cuda/ops/ops.h"
#include "harness.h"
#include "kvcache/kv_record.h"

namespace dsv4::cuda::test {
namespace {

constexpr int kRopeDim = 64;
constexpr float kEps = 1e-6f;

struct Geometry {
  const char* name;
  int ratio;
  bool overlap;
  int dim;
  CompressedRecord record;
};

// rows of each sequence in each step: schedule[step][seq] (0 = not in this step)
using Schedule = std::vector<std::vector<int>>;

RopeConfig compress_rope() { return RopeConfig{160000.0, true, 16.0, 65536, 32.0, 1.0}; }

int record_bytes_of(const Geometry& g) {
  return g.record == CompressedRecord::kFp8Entry ? int(kv::entry_bytes(g.dim - kRopeDim, kRopeDim))
                                                 : int(kv::indexer_key_bytes(g.dim));
}

std::vector<uint8_t> download_bytes(const DeviceBuffer& b) {
  std::vector<uint8_t> v(b.bytes());
  DSV4_CHECK(cudaMemcpy(v.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost) == cudaSuccess, "download");
  return v;
}

// Host data of one geometry: weights, per-sequence projections, CPU entries, paging.
struct Fixture {
  Geometry geo;
  int coff = 0, width = 0, ring_rows = 0, record_bytes = 0, per_block = 0;
  int n_seqs = 0, max_blocks = 0, n_blocks = 0, n_slots = 0;
  CompressorWeights weights;
  cpu::Rope rope;
  std::vector<std::vector<float>> a, z;          // per sequence [n][width]
  std::vector<int64_t> length;                    // tokens per sequence
  std::vector<int> slot_of;                       // state slot per sequence
  std::vector<std::vector<int32_t>> blocks;       // block ids per sequence [max_blocks]
  std::vector<std::vector<float>> cpu_entries;    // per sequence [n_entries][dim]
  DeviceBuffer d_ape, d_norm, d_inv_freq;

  Fixture(const Geometry& g, const std::vector<int64_t>& lengths, uint64_t seed) : geo(g), length(lengths) {
    coff = g.overlap ? 2 : 1;
    width = coff * g.dim;
    ring_rows = coff * g.ratio;
    record_bytes = record_bytes_of(g);
    per_block = kKvBlockTokens / g.ratio;
    n_seqs = int(lengths.size());
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    weights.ape.resize(size_t(g.ratio) * width);
    for (float& v : weights.ape) v = 0.5f * nd(rng);
    weights.norm.resize(size_t(g.dim));
    for (float& v : weights.norm) v = 1.0f + 0.1f * nd(rng);
    rope = cpu::Rope(compress_rope(), kRopeDim);
    int64_t max_entries = 0;
    for (int s = 0; s < n_seqs; ++s) {
      a.emplace_back(size_t(lengths[s]) * width);
      z.emplace_back(size_t(lengths[s]) * width);
      for (float& v : a.back()) v = nd(rng);
      for (float& v : z.back()) v = 2.0f * nd(rng);
      max_entries = std::max(max_entries, lengths[s] / g.ratio);
    }
    max_blocks = int((max_entries + per_block - 1) / per_block) + 1;
    n_blocks = n_seqs * max_blocks + 3;  // 3 blocks nobody owns
    n_slots = n_seqs + 1;                // one slot nobody uses
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int s = 0; s < n_seqs; ++s) blocks.emplace_back(ids.begin() + s * max_blocks, ids.begin() + (s + 1) * max_blocks);
    slot_of.resize(size_t(n_seqs));
    for (int s = 0; s < n_seqs; ++s) slot_of[size_t(s)] = (s * 3 + 1) % n_slots;  // a permutation, one slot left

    // CPU reference: each sequence's tokens pushed one by one.
    const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
    const cpu::CompressorParams cp{&weights, &rope, kRopeDim, kEps,
                                   g.record == CompressedRecord::kFp8Entry ? cpu::EntryQuant::kFp8Nope
                                                                           : cpu::EntryQuant::kHadamardFp4};
    for (int s = 0; s < n_seqs; ++s) {
      cpu::CompressorState st;
      st.init(g.ratio, coff, g.dim);
      for (int64_t q = 0; q < lengths[s]; ++q)
        cpu::compressor_push(cp, st, q, &a[size_t(s)][size_t(q) * width], &z[size_t(s)][size_t(q) * width], rnd);
      cpu_entries.push_back(st.entries);
    }
    d_ape = upload_vector(weights.ape);
    d_norm = upload_vector(weights.norm);
    d_inv_freq = upload_vector(rope.inv_freq());
  }

  int64_t n_entries(int s) const { return int64_t(cpu_entries[size_t(s)].size()) / geo.dim; }
  int64_t record_offset(int s, int64_t e) const {
    return (int64_t(blocks[size_t(s)][size_t(e / per_block)]) * per_block + e % per_block) * record_bytes;
  }
  CompressorParamsView params() const {
    CompressorParamsView p;
    p.ratio = geo.ratio;
    p.overlap = geo.overlap;
    p.dim = geo.dim;
    p.rope_dim = kRopeDim;
    p.norm_eps = kEps;
    p.ape = d_ape.as<float>();
    p.norm_w = d_norm.as<float>();
    p.inv_freq = d_inv_freq.as<float>();
    p.record = geo.record;
    return p;
  }
};

struct GpuState {
  std::vector<uint8_t> pool;
  std::vector<float> state;
};

// Runs the schedule step by step on the GPU from poisoned pool and state, for each fixture of
// `data` (its projections, weights and records) in the slots and pages of `f`: one
// compressor_forward call per fixture and step, or with `pair` (two fixtures) one
// compressor_forward_pair call. one_launch_decode: steps whose sequences have at most one row
// each say so (StepBatchView::one_row_per_seq), as the forward pass does, so the emit kernel saves
// the rings itself. q_head_diff (not null, no pair): the first fixture's calls also take random
// attention query heads (64 x 512, rope 64) in their emit launch, and *q_head_diff counts the bf16
// values that differ from q_norm_rope's on a copy (unchanged heads count too).
std::vector<GpuState> run_gpu_each(const Fixture& f, const std::vector<const Fixture*>& data, const Schedule& sched,
                                   uint64_t seed, bool one_launch_decode, bool pair, int64_t* q_head_diff = nullptr) {
  DSV4_CHECK(!pair || data.size() == 2, "a pair run takes two fixtures");
  DSV4_CHECK(q_head_diff == nullptr || !pair, "query heads ride on single compressor calls");
  constexpr int kQHeads = 64, kQDim = 512;
  const DeviceBuffer d_q_inv = upload_vector(cpu::Rope(compress_rope(), kRopeDim).inv_freq());
  const size_t nf = data.size();
  std::vector<DeviceBuffer> pools, states;
  for (const Fixture* d : data) {
    DSV4_CHECK(d->n_blocks == f.n_blocks && d->n_slots == f.n_slots && d->per_block == f.per_block &&
                   d->length == f.length,
               "fixtures of one run share the paging");
    pools.push_back(device_alloc(size_t(f.n_blocks) * f.per_block * d->record_bytes));
    states.push_back(device_alloc(size_t(f.n_slots) * size_t(compressor_state_floats(d->params())) * 4));
    poison(pools.back());
    poison(states.back());
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<int64_t> pos(size_t(f.n_seqs), 0);
  for (size_t step = 0; step < sched.size(); ++step) {
    std::vector<int> order;  // sequences of this step, in a varying order
    for (int s = 0; s < f.n_seqs; ++s)
      if (sched[step][size_t(s)] > 0) order.push_back(s);
    if (step % 2 == 1) std::reverse(order.begin(), order.end());
    std::vector<int32_t> token_seq, token_pos, seq_slot, seq_pos0, seq_tok0, seq_ntok, block_table;
    std::vector<std::vector<float>> a(nf), z(nf);
    // Row q of sequence s of every fixture (s < 0: a padding row). Padding columns hold garbage
    // the kernels must not read.
    auto push_row = [&](int s, int64_t q) {
      for (size_t i = 0; i < nf; ++i) {
        const Fixture& d = *data[i];
        const float* ar = s < 0 ? nullptr : &d.a[size_t(s)][size_t(q) * d.width];
        const float* zr = s < 0 ? nullptr : &d.z[size_t(s)][size_t(q) * d.width];
        for (int64_t c = 0; c < d.width + 16; ++c) {
          a[i].push_back(c < d.width && ar ? ar[c] : nd(rng));
          z[i].push_back(c < d.width && zr ? zr[c] : nd(rng));
        }
      }
    };
    for (size_t i = 0; i < order.size(); ++i) {
      const int s = order[i], n = sched[step][size_t(s)];
      seq_slot.push_back(f.slot_of[size_t(s)]);
      seq_pos0.push_back(int32_t(pos[size_t(s)]));
      seq_tok0.push_back(int32_t(token_seq.size()));
      seq_ntok.push_back(n);
      block_table.insert(block_table.end(), f.blocks[size_t(s)].begin(), f.blocks[size_t(s)].end());
      for (int r = 0; r < n; ++r) {
        const int64_t q = pos[size_t(s)] + r;
        token_seq.push_back(int32_t(i));
        token_pos.push_back(int32_t(q));
        push_row(s, q);
      }
      pos[size_t(s)] += n;
    }
    // A padding row (garbage projections) and a padding sequence.
    token_seq.push_back(-1);
    token_pos.push_back(0);
    push_row(-1, 0);
    seq_slot.push_back(-1);
    seq_pos0.push_back(0);
    seq_tok0.push_back(int32_t(token_seq.size()));
    seq_ntok.push_back(0);
    block_table.insert(block_table.end(), size_t(f.max_blocks), -1);

    DeviceBuffer d_ts = upload_vector(token_seq), d_tp = upload_vector(token_pos), d_slot = upload_vector(seq_slot);
    DeviceBuffer d_p0 = upload_vector(seq_pos0), d_t0 = upload_vector(seq_tok0), d_nt = upload_vector(seq_ntok);
    DeviceBuffer d_bt = upload_vector(block_table);
    std::vector<DeviceBuffer> d_a, d_z;
    for (size_t i = 0; i < nf; ++i) {
      d_a.push_back(upload_vector(a[i]));
      d_z.push_back(upload_vector(z[i]));
    }
    std::vector<int32_t> ids(token_seq.size(), 0);
    DeviceBuffer d_ids = upload_vector(ids);
    StepBatchView b;
    b.n_tokens = int(token_seq.size());
    b.n_seqs = int(seq_slot.size());
    b.token_ids = d_ids.as<int32_t>();
    b.token_seq = d_ts.as<int32_t>();
    b.token_pos = d_tp.as<int32_t>();
    b.seq_slot = d_slot.as<int32_t>();
    b.seq_pos0 = d_p0.as<int32_t>();
    b.seq_tok0 = d_t0.as<int32_t>();
    b.seq_ntok = d_nt.as<int32_t>();
    b.block_table = d_bt.as<int32_t>();
    b.max_blocks = f.max_blocks;
    b.one_row_per_seq = one_launch_decode && std::all_of(sched[step].begin(), sched[step].end(), [](int n) { return n <= 1; });
    std::vector<CompressorCall> calls(nf);
    for (size_t i = 0; i < nf; ++i)
      calls[i] = CompressorCall{d_a[i].as<float>(), d_z[i].as<float>(), data[i]->width + 16, data[i]->params(),
                                states[i].as<float>(), pools[i].as<uint8_t>(), data[i]->record_bytes};
    if (pair) {
      const Status st = compressor_forward_pair(b, calls[0], calls[1], nullptr);
      DSV4_CHECK(st.is_ok(), "compressor_forward_pair: {}", st.to_string());
    } else {
      std::vector<float> q;
      DeviceBuffer d_q1, d_q2;
      QueryNormRope qn;
      if (q_head_diff != nullptr) {
        q = random_bf16_values(int64_t(b.n_tokens) * kQHeads * kQDim, seed + 1000 + step, 3.0f);
        d_q1 = upload_vector(to_bf16(q));
        d_q2 = upload_vector(to_bf16(q));
        qn = QueryNormRope{d_q1.as<__nv_bfloat16>(), kQHeads, kQDim, kRopeDim, d_q_inv.as<float>(), kEps};
      }
      for (const CompressorCall& c : calls) {
        const QueryNormRope* heads = q_head_diff != nullptr && &c == &calls[0] ? &qn : nullptr;
        const Status st =
            compressor_forward(b, c.a, c.z, c.ld, c.p, c.state, c.pool, c.record_bytes, nullptr, heads);
        DSV4_CHECK(st.is_ok(), "compressor_forward: {}", st.to_string());
      }
      if (q_head_diff != nullptr) {
        const Status st = q_norm_rope(d_q2.as<__nv_bfloat16>(), b.n_tokens, kQHeads, kQDim, kRopeDim, b.token_pos,
                                      d_q_inv.as<float>(), kEps, nullptr);
        DSV4_CHECK(st.is_ok(), "q_norm_rope: {}", st.to_string());
        const std::vector<uint16_t> got = download<uint16_t>(d_q1.get(), q.size());
        const std::vector<uint16_t> want = download<uint16_t>(d_q2.get(), q.size()), before = to_bf16(q);
        for (size_t i = 0; i < q.size(); ++i) *q_head_diff += got[i] != want[i];
        if (got == before) ++*q_head_diff;  // the heads were never normalized
      }
    }
    DSV4_CHECK(cudaDeviceSynchronize() == cudaSuccess, "step {}: {}", step, cudaGetErrorString(cudaGetLastError()));
  }
  for (int s = 0; s < f.n_seqs; ++s)
    DSV4_CHECK(pos[size_t(s)] == f.length[size_t(s)], "schedule of sequence {} covers {} of {} tokens", s, pos[size_t(s)],
               f.length[size_t(s)]);
  std::vector<GpuState> r(nf);
  for (size_t i = 0; i < nf; ++i) {
    r[i].pool = download_bytes(pools[i]);
    r[i].state = download<float>(states[i].get(), states[i].bytes() / 4);
  }
  return r;
}

GpuState run_gpu(const Fixture& f, const Schedule& sched, uint64_t seed, bool one_launch_decode = true) {
  return run_gpu_each(f, {&f}, sched, seed, one_launch_decode, /*pair=*/false)[0];
}

struct EntryStats {
  int64_t values = 0, exact = 0, bad = 0, nonfinite = 0;
  double worst_ratio = 0;
  std::string worst;
};

// Decoded GPU entries against the CPU's, and the poison of every record nobody wrote.
EntryStats check_entries(const Fixture& f, const GpuState& r) {
  EntryStats st;
  const int dim = f.geo.dim, nope = dim - kRopeDim;
  std::vector<float> v(static_cast<size_t>(dim));
  std::vector<bool> owned(size_t(f.n_blocks) * f.per_block, false);
  auto note = [&](bool ok_exact, double diff, double tol, int s, int64_t e, int i, float g, float c) {
    ++st.values;
    if (ok_exact) ++st.exact;
    if (!std::isfinite(g)) ++st.nonfinite;
    const double ratio = diff / tol;
    if (!(ratio <= 1.0)) ++st.bad;
    if (!(ratio <= st.worst_ratio)) {
      st.worst_ratio = std::isfinite(ratio) ? ratio : 1e30;
      st.worst = fmt::format("seq {} entry {} dim {}: gpu {} cpu {} (tol {})", s, e, i, g, c, tol);
    }
  };
  for (int s = 0; s < f.n_seqs; ++s) {
    const int64_t n = f.n_entries(s);
    for (int64_t e = 0; e < int64_t(f.max_blocks) * f.per_block; ++e) {
      const int64_t off = f.record_offset(s, e);
      owned[size_t(off / f.record_bytes)] = true;
      const uint8_t* rec = r.pool.data() + off;
      if (e >= n) {  // not emitted yet: untouched
        for (int i = 0; i < f.record_bytes; ++i)
          if (rec[i] != 0xFF) {
            ++st.bad;
            st.worst = fmt::format("seq {} entry {} (not emitted) was written", s, e);
            break;
          }
        continue;
      }
      const float* c = &f.cpu_entries[size_t(s)][size_t(e) * dim];
      if (f.geo.record == CompressedRecord::kFp8Entry) {
        kv::unpack_entry(rec, nope, kRopeDim, v.data());
        for (int b0 = 0; b0 < nope; b0 += 64) {
          float amax = 0.0f;
          for (int i = b0; i < b0 + 64; ++i) amax = std::max(amax, std::fabs(c[i]));
          const double scale = std::ldexp(1.0, ceil_log2_bits(std::max(amax, 1e-4f) * (1.0f / 448.0f)));
          for (int i = b0; i < b0 + 64; ++i) {
            const double diff = std::fabs(double(v[size_t(i)]) - c[i]);
            const double tol = std::ldexp(std::max(std::fabs(double(v[size_t(i)])), std::fabs(double(c[i]))), -3) +
                               std::ldexp(scale, -9);
            note(v[size_t(i)] == c[i], diff, tol, s, e, i, v[size_t(i)], c[i]);
          }
        }
        for (int i = nope; i < dim; ++i) {
          const double diff = std::fabs(double(v[size_t(i)]) - c[i]);
          const double tol = std::ldexp(std::max(std::fabs(double(v[size_t(i)])), std::fabs(double(c[i]))), -7) + 1e-30;
          note(v[size_t(i)] == c[i], diff, tol, s, e, i, v[size_t(i)], c[i]);
        }
      } else {
        kv::unpack_indexer_key(rec, dim, v.data());
        for (int b0 = 0; b0 < dim; b0 += 32) {
          float amax = 0.0f;
          for (int i = b0; i < b0 + 32; ++i) amax = std::max(amax, std::fabs(c[i]));
          const double scale = std::ldexp(1.0, ceil_log2_bits(std::max(amax, 6.0f * std::ldexp(1.0f, -126)) / 6.0f));
          for (int i = b0; i < b0 + 32; ++i) {
            const double diff = std::fabs(double(v[size_t(i)]) - c[i]);
            const double tol = 0.5 * std::max(std::fabs(double(v[size_t(i)])), std::fabs(double(c[i]))) + 0.5 * scale;
            note(v[size_t(i)] == c[i], diff, tol, s, e, i, v[size_t(i)], c[i]);
          }
        }
      }
    }
  }
  for (int64_t rec = 0; rec < int64_t(owned.size()); ++rec) {
    if (owned[size_t(rec)]) continue;
    const uint8_t* p = r.pool.data() + rec * f.record_bytes;
    for (int i = 0; i < f.record_bytes; ++i)
      if (p[i] != 0xFF) {
        ++st.bad;
        st.worst = fmt::format("record {} of a block nobody owns was written", rec);
        break;
      }
  }
  return st;
}

// Ring rows of the last coff * m positions of each sequence, bit-exact; the unused slot untouched.
int64_t check_ring(const Fixture& f, const GpuState& r, std::string* first) {
  int64_t bad = 0;
  const int64_t per_slot = 2 * int64_t(f.ring_rows) * f.width;
  std::vector<bool> used(size_t(f.n_slots), false);
  for (int s = 0; s < f.n_seqs; ++s) {
    const int slot = f.slot_of[size_t(s)];
    used[size_t(slot)] = true;
    const float* ring = r.state.data() + slot * per_slot;
    for (int64_t q = std::max<int64_t>(0, f.length[size_t(s)] - f.ring_rows); q < f.length[size_t(s)]; ++q) {
      const float* ra = ring + (q % f.ring_rows) * f.width;
      const float* rz = ra + int64_t(f.ring_rows) * f.width;
      for (int c = 0; c < f.width; ++c) {
        const float want_a = f.a[size_t(s)][size_t(q) * f.width + c];
        const float want_z = f.z[size_t(s)][size_t(q) * f.width + c] + f.weights.ape[size_t((q % f.geo.ratio) * f.width + c)];
        if (std::memcmp(&ra[c], &want_a, 4) != 0 || std::memcmp(&rz[c], &want_z, 4) != 0) {
          if (bad++ == 0)
            *first = fmt::format("seq {} position {} column {}: a {} (want {}), z {} (want {})", s, q, c, ra[c], want_a,
                                 rz[c], want_z);
        }
      }
    }
  }
  for (int slot = 0; slot < f.n_slots; ++slot) {
    if (used[size_t(slot)]) continue;
    const uint32_t* p = reinterpret_cast<const uint32_t*>(r.state.data() + slot * per_slot);
    for (int64_t i = 0; i < per_slot; ++i)
      if (p[i] != 0xFFFFFFFFu) {
        if (bad++ == 0) *first = fmt::format("unused slot {} was written", slot);
        break;
      }
  }
  return bad;
}

// Sums of a schedule's rows per sequence, and the one-shot schedule with the same decode tail.
Schedule one_shot(const Schedule& chunked, int n_decode) {
  const size_t n_seqs = chunked[0].size();
  std::vector<int> total(n_seqs, 0);
  for (const auto& step : chunked)
    for (size_t s = 0; s < n_seqs; ++s) total[s] += step[s];
  Schedule r;
  r.emplace_back();
  for (size_t s = 0; s < n_seqs; ++s) r[0].push_back(total[s] - n_decode);
  for (int i = 0; i < n_decode; ++i) r.emplace_back(n_seqs, 1);
  return r;
}

void run_case(const Geometry& g, const Schedule& chunked, int n_decode, uint64_t seed) {
  std::vector<int64_t> lengths(chunked[0].size(), 0);
  for (const auto& step : chunked)
    for (size_t s = 0; s < lengths.size(); ++s) lengths[s] += step[s];
  const Fixture f(g, lengths, seed);
  const GpuState chunk = run_gpu(f, chunked, seed + 1);
  const EntryStats st = check_entries(f, chunk);
  int64_t n_entries = 0;
  for (int s = 0; s < f.n_seqs; ++s) n_entries += f.n_entries(s);
  std::printf("[%s] %lld entries, %lld values: %.5f%% bit-identical, worst err/tol %.3f (%s)\n", g.name,
              (long long)n_entries, (long long)st.values, 100.0 * double(st.exact) / double(std::max<int64_t>(1, st.values)),
              st.worst_ratio, st.worst.c_str());
  EXPECT_GT(n_entries, 0);
  EXPECT_EQ(st.nonfinite, 0) << st.worst;
  EXPECT_EQ(st.bad, 0) << st.worst;
  EXPECT_GE(double(st.exact), 0.99 * double(st.values)) << "too few bit-identical values";

  std::string first;
  EXPECT_EQ(check_ring(f, chunk, &first), 0) << first;

  const GpuState whole = run_gpu(f, one_shot(chunked, n_decode), seed + 2);
  size_t pool_diff = 0, state_diff = 0;
  for (size_t i = 0; i < chunk.pool.size(); ++i) pool_diff += chunk.pool[i] != whole.pool[i];
  EXPECT_EQ(chunk.state.size(), whole.state.size());
  state_diff = size_t(std::memcmp(chunk.state.data(), whole.state.data(), chunk.state.size() * 4) != 0);
  EXPECT_EQ(pool_diff, 0u) << "chunked and one-shot prefill wrote different records";
  EXPECT_EQ(state_diff, 0u) << "chunked and one-shot prefill left different ring states";

  // Decode steps in one launch (emit saves) = emit then save.
  const GpuState two = run_gpu(f, one_shot(chunked, n_decode), seed + 2, /*one_launch_decode=*/false);
  pool_diff = 0;
  for (size_t i = 0; i < two.pool.size(); ++i) pool_diff += two.pool[i] != whole.pool[i];
  EXPECT_EQ(pool_diff, 0u) << "one-launch decode steps wrote different records";
  EXPECT_EQ(std::memcmp(two.state.data(), whole.state.data(), two.state.size() * 4), 0)
      << "one-launch decode steps left different ring states";
}

// CSA: 4 sequences; chunks of 37 / 50, tiny chunks from position 0, a 300-row chunk (longer than
// the ring, 2 pages of entries), a 3-row prompt whose window 0 completes in decode.
Schedule csa_schedule() {
  Schedule s = {{37, 1, 300, 3}, {50, 2, 0, 1}, {1, 3, 1, 1}, {1, 9, 1, 1}};
  for (int i = 0; i < 6; ++i) s.push_back({1, 1, 1, 1});
  return s;
}

TEST(CudaCompressor, CsaMainFp8) {
  DSV4_SKIP_WITHOUT_GPU();
  run_case({"csa main m4 Dc512 fp8", 4, true, 512, CompressedRecord::kFp8Entry}, csa_schedule(), 6, 11);
}

TEST(CudaCompressor, CsaIndexerFp4) {
  DSV4_SKIP_WITHOUT_GPU();
  run_case({"csa indexer m4 Dc128 fp4", 4, true, 128, CompressedRecord::kFp4IndexKey}, csa_schedule(), 6, 12);
}

// HCA: windows of 128; a prompt ending one row before a window so decode completes it, one that
// completes window 1 in decode, chunks longer than the ring.
TEST(CudaCompressor, HcaFp8) {
  DSV4_SKIP_WITHOUT_GPU();
  Schedule s = {{300, 100, 254, 129}, {200, 27, 0, 130}};
  for (int i = 0; i < 3; ++i) s.push_back({1, 1, 1, 1});
  run_case({"hca m128 Dc512 fp8", 128, false, 512, CompressedRecord::kFp8Entry}, s, 3, 13);
}

// A CSA layer's two compressors (fp8 entries, dim 512; fp4 keys, dim 128: the pair launch's
// blocks are 512 wide) in one compressor_forward_pair call per step = two compressor_forward
// calls, byte for byte, over chunked prefill and decode steps (one launch and emit + save).
TEST(CudaCompressor, CsaPairEqualsTwoCalls) {
  DSV4_SKIP_WITHOUT_GPU();
  const Schedule sched = csa_schedule();
  std::vector<int64_t> lengths(sched[0].size(), 0);
  for (const auto& step : sched)
    for (size_t s = 0; s < lengths.size(); ++s) lengths[s] += step[s];
  const Fixture main_f({"csa_main", 4, true, 512, CompressedRecord::kFp8Entry}, lengths, 41);
  const Fixture idx_f({"csa_idx", 4, true, 128, CompressedRecord::kFp4IndexKey}, lengths, 42);
  for (const bool one_launch : {true, false}) {
    const std::vector<GpuState> two = run_gpu_each(main_f, {&main_f, &idx_f}, sched, 43, one_launch, false);
    const std::vector<GpuState> pair = run_gpu_each(main_f, {&main_f, &idx_f}, sched, 43, one_launch, true);
    for (size_t i = 0; i < 2; ++i) {
      size_t pool_diff = 0;
      for (size_t k = 0; k < two[i].pool.size(); ++k) pool_diff += two[i].pool[k] != pair[i].pool[k];
      EXPECT_EQ(pool_diff, 0u) << "compressor " << i << " one_launch " << one_launch;
      EXPECT_EQ(std::memcmp(two[i].state.data(), pair[i].state.data(), two[i].state.size() * 4), 0)
          << "compressor " << i << " one_launch " << one_launch;
    }
    // The pair's records are the CPU's, too (the main fixture's paging is its own).
    const EntryStats st = check_entries(main_f, pair[0]);
    EXPECT_EQ(st.bad, 0) << st.worst;
  }
}

// HCA layers' emit launch takes the attention query heads' norm + RoPE in extra blocks: the heads
// equal q_norm_rope's bit for bit (the padding row's too), and the records and ring states equal a
// run without them, over chunked prefill and decode steps, with and without the one-launch decode.
TEST(CudaCompressor, HcaEmitTakesQueryHeads) {
  DSV4_SKIP_WITHOUT_GPU();
  Schedule sched = {{130, 127, 3, 129}};
  for (int i = 0; i < 3; ++i) sched.push_back({1, 1, 1, 1});
  std::vector<int64_t> lengths(sched[0].size(), 0);
  for (const auto& step : sched)
    for (size_t s = 0; s < lengths.size(); ++s) lengths[s] += step[s];
  const Fixture f({"hca m128 Dc512 fp8", 128, false, 512, CompressedRecord::kFp8Entry}, lengths, 61);
  for (const bool one_launch : {true, false}) {
    int64_t q_diff = 0;
    const GpuState plain = run_gpu(f, sched, 62, one_launch);
    const GpuState with_q = run_gpu_each(f, {&f}, sched, 62, one_launch, false, &q_diff)[0];
    EXPECT_EQ(q_diff, 0) << "query heads differ from q_norm_rope's (one_launch " << one_launch << ")";
    EXPECT_TRUE(plain.pool == with_q.pool) << "one_launch " << one_launch;
    EXPECT_EQ(std::memcmp(plain.state.data(), with_q.state.data(), plain.state.size() * 4), 0)
        << "one_launch " << one_launch;
  }
  // A query head wider than a warp holds is refused.
  CompressorParamsView p;
  p.ratio = 128;
  p.overlap = false;
  StepBatchView b;  // no rows: only the arguments are checked
  alignas(16) float x[4] = {};
  uint8_t pool[2] = {};
  p.ape = p.norm_w = p.inv_freq = x;
  alignas(16) __nv_bfloat16 q[8];
  const QueryNormRope good{q, 64, 512, 64, x, kEps};
  QueryNormRope bad = good;
  bad.head_dim = 1032;
  EXPECT_TRUE(compressor_forward(b, x, x, 1024, p, x, pool, 584, nullptr, &good).is_ok());
  EXPECT_FALSE(compressor_forward(b, x, x, 1024, p, x, pool, 584, nullptr, &bad).is_ok());
}

TEST(CudaCompressor, RejectsBadArguments) {
  DSV4_SKIP_WITHOUT_GPU();
  CompressorParamsView p;
  StepBatchView b;
  b.n_tokens = 1;
  float x = 0;
  uint8_t pool = 0;
  EXPECT_FALSE(compressor_forward(b, &x, &x, 1024, p, &x, &pool, 583, nullptr).is_ok());  // record size
  EXPECT_FALSE(compressor_forward(b, &x, &x, 1000, p, &x, &pool, 584, nullptr).is_ok());  // ld < width
  p.ratio = 3;
  EXPECT_FALSE(compressor_forward(b, &x, &x, 1024, p, &x, &pool, 584, nullptr).is_ok());  // ratio must divide 256
  p.ratio = 4;
  p.record = CompressedRecord::kFp4IndexKey;
  p.dim = 96;
  EXPECT_FALSE(compressor_forward(b, &x, &x, 1024, p, &x, &pool, 51, nullptr).is_ok());  // Hadamard needs 2^k
  p.dim = 512;
  p.record = CompressedRecord::kFp8Entry;
  EXPECT_FALSE(compressor_forward(b, &x, &x, 1024, p, &x, &pool, 584, nullptr).is_ok());  // incomplete batch
}

}  // namespace
}  // namespace dsv4::cuda::test
