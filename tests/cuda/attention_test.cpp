// attention_test.cpp: sparse_attention (cuda/attention/attention.h) against the core attention of
// the CPU reference (cpu::attention_forward, "core attention, per token", and attend_head) at
// Flash shapes: d = 448 fp8 nope + 64 bf16 rope in 584-byte records, window 128, CSA ratio 4 with
// top-k 512, HCA ratio 128, H = 64 (one rank) and H = 8 (a TP8 rank).
//
// The KV state is built as the engine stores it: the window ring of the step's sequences (ring
// slots outside the window are 0xFF, which decodes to Inf/NaN, so reading a wrong slot shows),
// this step's chunk records, paged compressed entries behind shuffled block ids (unused blocks
// 0xFF as well), and per-row selected lists with -1 tails. Values are on the reference's grids
// (cpu::fp8sim per 64 for nope, bf16 rope) and packed with kv::pack_entry; the reference decodes
// the same bytes with kv::unpack_entry, assembles each row's keys as attention_forward does
// (window max(0, p-W+1)..p, then the selected / visible entries) and runs attend_head and
// cpu::Rope's inverse rotation.
//
// Tolerance per element: |gpu - ref| <= 2^-7 |ref| + 2^-8 A, where A = sum_j bf16(e_j) |k_j[i]| /
// den is the absolute scale of the weighted sum. The GPU rounds the same quantities at the same
// points but with an online softmax: bf16(e) is taken against a running (or split-local) maximum
// and rescaled later, so each probability may differ from the reference's by one bf16 rounding
// (< 2^-8 relative: at most 2^-8 A over the sum); the fp32 sums differ in order, so the rounded
// output can land one bf16 ulp (<= 2^-7 relative) away. A rope pair is rotated after that
// rounding and rounded again: 2^-8 (A0 + A1) + 3 2^-7 (|ref0| + |ref1|). These are worst-case
// bounds; typical errors are far smaller, which the nmse bounds check: <= 1e-5 over the batch
// and <= 1e-4 for every row (one wrong key of a 128-key window alone gives ~1e-3). Padding rows
// must be exactly zero.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "base/numeric.h"
#include "cpu/linalg.h"
#include "cpu/numerics.h"
#include "cpu/quant.h"
#include "cpu/rope.h"
#include "cuda/attention/attention.h"
#include "cuda/attention/attention_internal.h"
#include "cuda/attention/attention_plan.h"
#include "cuda/attention/fp8_decode.h"
#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "harness.h"
#include "kvcache/kv_record.h"

namespace dsv4::cuda::test {
namespace {

namespace ad = attention_detail;

constexpr int kD = 512, kNope = 448, kRope = 64, kW = 128, kTopk = 512, kEntry = 584;

enum class Layer { kSwa, kCsa, kHca };
int ratio_of(Layer l) { return l == Layer::kSwa ? 0 : l == Layer::kCsa ? 4 : 128; }
const char* name_of(Layer l) { return l == Layer::kSwa ? "SWA" : l == Layer::kCsa ? "CSA" : "HCA"; }

// The layer's rope (MODEL_SPEC.md §6.3): plain theta 10000 for SWA layers, YaRN for compressed.
cpu::Rope rope_of(Layer l) {
  RopeConfig c;
  if (l != Layer::kSwa) {
    c.theta = 160000.0;
    c.yarn = true;
    c.factor = 16.0;
    c.original_max_position = 65536;
  }
  return cpu::Rope(c, kRope);
}

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(g); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  int index(int n) { return int(std::uniform_int_distribution<int>(0, n - 1)(g)); }
};

// A KV record as the reference stores it: nope through fp8sim (ue8m0 scale per 64), rope bf16,
// with a per-record magnitude so that logits spread over a few units.
void random_record(Rng& rng, uint8_t* out) {
  float v[kD];
  const float sigma = rng.uniform(0.3f, 2.5f);
  for (int i = 0; i < kD; ++i) v[i] = round_bf16(rng.normal() * sigma);
  cpu::fp8sim(v, kNope, 64);
  const Status st = kv::pack_entry(v, kNope, kRope, out);
  DSV4_CHECK(st.is_ok(), "pack_entry: {}", st.to_string());
}

struct SeqSpec {
  int pos0 = 0;
  int ntok = 1;
};

// One step of a layer: the step batch, every KV buffer, queries and the layer's parameters.
struct Scenario {
  Layer layer = Layer::kSwa;
  int H = 64;
  int n_tokens = 0, n_seqs = 0, max_blocks = 1;
  std::vector<int32_t> token_seq, token_pos, seq_slot, seq_pos0, seq_tok0, seq_ntok, block_table;
  std::vector<uint8_t> window;    // [n_slots][W][584]
  std::vector<uint8_t> chunk;     // [n_tokens][584]
  std::vector<uint8_t> entries;   // [n_blocks][256 / ratio][584] (ratio > 0)
  std::vector<int32_t> selected;  // [n_tokens][topk] (CSA)
  std::vector<uint16_t> q;        // bf16 [n_tokens, H, 512]
  std::vector<float> sink, inv_freq;
  float scale = float(1.0 / std::sqrt(double(kD)));
  int ratio() const { return ratio_of(layer); }
};

// The row's selection: a random duplicate-free pick of min(topk, n_vis) visible entries in random
// order, then -1. `holes` also punches -1s inside the list (they must count as absent too).
std::vector<int32_t> random_selection(Rng& rng, int n_vis, bool holes) {
  std::vector<int32_t> sel;
  if (n_vis <= kTopk) {
    sel.resize(size_t(n_vis));
    std::iota(sel.begin(), sel.end(), 0);
    std::shuffle(sel.begin(), sel.end(), rng.g);
  } else {
    std::set<int32_t> seen;
    while (int(sel.size()) < kTopk) {
      const int e = rng.index(n_vis);
      if (seen.insert(e).second) sel.push_back(e);
    }
  }
  if (holes)
    for (size_t i = 1; i < sel.size(); i += 7) sel[i] = -1;
  sel.resize(kTopk, -1);
  return sel;
}

// Sequences (rows contiguous, in order) followed by `n_pad` padding rows and one padding
// sequence.
Scenario build(Layer layer, int H, const std::vector<SeqSpec>& seqs, int n_pad, uint64_t seed) {
  Rng rng(seed);
  Scenario s;
  s.layer = layer;
  s.H = H;
  const int ratio = s.ratio();
  const int n_real = int(seqs.size());
  s.n_seqs = n_real + 1;
  for (const SeqSpec& q : seqs) s.n_tokens += q.ntok;
  s.n_tokens += n_pad;

  // Step batch; ring slots shuffled (n_seqs + 2 slots, two never used).
  const int n_slots = s.n_seqs + 2;
  std::vector<int32_t> slots(static_cast<size_t>(n_slots));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng.g);
  int row = 0;
  for (int i = 0; i < n_real; ++i) {
    s.seq_slot.push_back(slots[size_t(i)]);
    s.seq_pos0.push_back(seqs[size_t(i)].pos0);
    s.seq_tok0.push_back(row);
    s.seq_ntok.push_back(seqs[size_t(i)].ntok);
    for (int k = 0; k < seqs[size_t(i)].ntok; ++k, ++row) {
      s.token_seq.push_back(i);
      s.token_pos.push_back(seqs[size_t(i)].pos0 + k);
    }
  }
  s.seq_slot.push_back(-1);  // the padding sequence
  s.seq_pos0.push_back(0);
  s.seq_tok0.push_back(row);
  s.seq_ntok.push_back(0);
  for (int k = 0; k < n_pad; ++k) {
    s.token_seq.push_back(-1);
    s.token_pos.push_back(0);
  }

  // Window ring: positions pos0 - W .. pos0 - 1 of each sequence; chunk: each real row's record.
  s.window.assign(size_t(n_slots) * kW * kEntry, 0xFF);
  for (int i = 0; i < n_real; ++i)
    for (int pos = std::max(0, seqs[size_t(i)].pos0 - kW); pos < seqs[size_t(i)].pos0; ++pos)
      random_record(rng, &s.window[(size_t(s.seq_slot[size_t(i)]) * kW + size_t(pos % kW)) * kEntry]);
  s.chunk.assign(size_t(s.n_tokens) * kEntry, 0xFF);
  for (int t = 0; t < s.n_tokens; ++t)
    if (s.token_seq[size_t(t)] >= 0) random_record(rng, &s.chunk[size_t(t) * kEntry]);

  // Selections (CSA), then the compressed entries any row reads, in shuffled physical blocks.
  if (layer == Layer::kCsa) {
    s.selected.assign(size_t(s.n_tokens) * kTopk, -1);
    for (int t = 0; t < s.n_tokens; ++t) {
      if (s.token_seq[size_t(t)] < 0) continue;
      const int n_vis = (s.token_pos[size_t(t)] + 1) / ratio;
      const std::vector<int32_t> sel = random_selection(rng, n_vis, /*holes=*/s.token_pos[size_t(t)] == 4095);
      std::copy(sel.begin(), sel.end(), s.selected.begin() + int64_t(t) * kTopk);
    }
  }
  int max_pos = 0;
  for (int p : s.token_pos) max_pos = std::max(max_pos, p);
  s.max_blocks = (max_pos + 1) / kKvBlockTokens + 1;
  s.block_table.assign(size_t(s.n_seqs) * s.max_blocks, 0);  // block 0: the 0xFF block
  if (ratio > 0) {
    const int per_block = kKvBlockTokens / ratio;
    std::vector<std::set<int>> needed(static_cast<size_t>(n_real));  // entries per sequence
    for (int t = 0; t < s.n_tokens; ++t) {
      const int seq = s.token_seq[size_t(t)];
      if (seq < 0) continue;
      const int n_vis = (s.token_pos[size_t(t)] + 1) / ratio;
      if (layer == Layer::kCsa) {
        for (int k = 0; k < kTopk; ++k)
          if (const int e = s.selected[size_t(t) * kTopk + size_t(k)]; e >= 0) needed[size_t(seq)].insert(e);
      } else {
        for (int e = 0; e < n_vis; ++e) needed[size_t(seq)].insert(e);
      }
    }
    std::vector<std::pair<int, int>> logical;  // (sequence, logical block)
    for (int i = 0; i < n_real; ++i) {
      std::set<int> blocks;
      for (int e : needed[size_t(i)]) blocks.insert(e / per_block);
      for (int b : blocks) logical.emplace_back(i, b);
    }
    std::vector<int32_t> ids(logical.size());
    std::iota(ids.begin(), ids.end(), 1);
    std::shuffle(ids.begin(), ids.end(), rng.g);
    for (size_t k = 0; k < logical.size(); ++k)
      s.block_table[size_t(logical[k].first) * s.max_blocks + size_t(logical[k].second)] = ids[k];
    s.entries.assign((logical.size() + 1) * size_t(per_block) * kEntry, 0xFF);
    for (int i = 0; i < n_real; ++i)
      for (int e : needed[size_t(i)])
        random_record(
            rng, &s.entries[size_t(paged_record_offset(&s.block_table[size_t(i) * s.max_blocks], e, ratio, kEntry))]);
  }

  std::vector<float> qf(size_t(s.n_tokens) * H * kD);
  for (float& v : qf) v = rng.normal();
  s.q = to_bf16(qf);
  s.sink.resize(size_t(H));
  for (float& v : s.sink) v = 1.5f * rng.normal();
  s.inv_freq = rope_of(layer).inv_freq();
  return s;
}

// The scenario of row t alone (a batch of one): same KV state, queries and selection.
Scenario single_row(const Scenario& s, int t) {
  Scenario r = s;
  const int seq = s.token_seq[size_t(t)];
  r.n_tokens = 1;
  r.token_seq = {seq};
  r.token_pos = {s.token_pos[size_t(t)]};
  r.seq_pos0[size_t(seq)] = s.token_pos[size_t(t)];
  r.seq_tok0[size_t(seq)] = 0;
  r.seq_ntok[size_t(seq)] = 1;
  // Its earlier chunk rows would now be ring positions: only decode rows qualify.
  DSV4_CHECK(s.seq_ntok[size_t(seq)] == 1, "single_row: row {} is part of a chunk", t);
  r.chunk.assign(s.chunk.begin() + int64_t(t) * kEntry, s.chunk.begin() + int64_t(t + 1) * kEntry);
  r.q.assign(s.q.begin() + int64_t(t) * s.H * kD, s.q.begin() + int64_t(t + 1) * s.H * kD);
  if (!s.selected.empty())
    r.selected.assign(s.selected.begin() + int64_t(t) * kTopk, s.selected.begin() + int64_t(t + 1) * kTopk);
  return r;
}

// ---- CPU reference ----

// Replicates attend_head of src/cpu/attention.cpp (in an anonymous namespace there); also returns
// absnum[i] = sum_j bf16(e_j) |k_j[i]| / den, the scale of the tolerance.
void attend_head_ref(const float* q, const float* const* keys, int64_t n, int d, float scale, float sink,
                     const cpu::Rounder& rnd, float* logits, float* out, float* absnum) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    logits[j] = cpu::dot(q, keys[j], d) * scale;
    mx = std::fmax(mx, logits[j]);
  }
  float den = 0.0f;
  std::fill(out, out + d, 0.0f);
  std::fill(absnum, absnum + d, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float e = std::exp(logits[j] - mx);
    den += e;
    const float pv = rnd(e);
    const float* k = keys[j];
    for (int i = 0; i < d; ++i) {
      out[i] += pv * k[i];
      absnum[i] += pv * std::fabs(k[i]);
    }
  }
  den += std::exp(sink - mx);
  for (int i = 0; i < d; ++i) {
    out[i] = rnd(out[i] / den);
    absnum[i] /= den;
  }
}

// Reference output of every row (bf16 values as float) and the per-element tolerance.
void reference(const Scenario& s, std::vector<double>& ref, std::vector<double>& tol) {
  const int H = s.H, ratio = s.ratio();
  ref.assign(size_t(s.n_tokens) * H * kD, 0.0);
  tol.assign(ref.size(), 1e-30);  // padding rows: exactly zero
  const cpu::Rope rope = rope_of(s.layer);
  const cpu::Rounder rnd(cpu::Numerics::bf16_gpu());
  const std::vector<float> qf = from_bf16(s.q);
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < s.n_tokens; ++t) {
    const int seq = s.token_seq[size_t(t)];
    if (seq < 0) continue;
    const int p = s.token_pos[size_t(t)], pos0 = s.seq_pos0[size_t(seq)];
    // Keys exactly as attention_forward lists them: the window, then the compressed entries.
    std::vector<std::vector<float>> keys;
    auto add = [&](const uint8_t* rec) {
      keys.emplace_back(kD);
      kv::unpack_entry(rec, kNope, kRope, keys.back().data());
    };
    for (int pos = std::max(0, p - kW + 1); pos <= p; ++pos) {
      if (pos >= pos0)
        add(&s.chunk[size_t(s.seq_tok0[size_t(seq)] + pos - pos0) * kEntry]);
      else
        add(&s.window[(size_t(s.seq_slot[size_t(seq)]) * kW + size_t(pos % kW)) * kEntry]);
    }
    if (ratio > 0) {
      const int32_t* bt = &s.block_table[size_t(seq) * s.max_blocks];
      const int n_vis = (p + 1) / ratio;
      if (s.layer == Layer::kCsa) {
        for (int k = 0; k < kTopk; ++k)
          if (const int e = s.selected[size_t(t) * kTopk + size_t(k)]; e >= 0)
            add(&s.entries[size_t(paged_record_offset(bt, e, ratio, kEntry))]);
      } else {
        for (int e = 0; e < n_vis; ++e) add(&s.entries[size_t(paged_record_offset(bt, e, ratio, kEntry))]);
      }
    }
    std::vector<const float*> kp;
    for (const auto& k : keys) kp.push_back(k.data());
    std::vector<float> logits(keys.size()), out(kD), absnum(kD);
    for (int h = 0; h < H; ++h) {
      const size_t base = (size_t(t) * H + size_t(h)) * kD;
      attend_head_ref(&qf[base], kp.data(), int64_t(kp.size()), kD, s.scale, s.sink[size_t(h)], rnd, logits.data(),
                      out.data(), absnum.data());
      rope.rotate(out.data() + kNope, long(p), /*inverse=*/true);
      rnd.apply(out.data() + kNope, kRope);
      for (int i = 0; i < kD; ++i) {
        ref[base + size_t(i)] = out[size_t(i)];
        tol[base + size_t(i)] = 0x1p-7 * std::fabs(out[size_t(i)]) + 0x1p-8 * absnum[size_t(i)];
      }
      for (int i = kNope; i < kD; i += 2) {  // a rotated pair mixes both dims' errors
        const double pair = 3 * 0x1p-7 * (std::fabs(out[size_t(i)]) + std::fabs(out[size_t(i) + 1])) +
                            0x1p-8 * (absnum[size_t(i)] + absnum[size_t(i) + 1]);
        tol[base + size_t(i)] = tol[base + size_t(i) + 1] = pair;
      }
    }
  }
}

// ---- GPU ----

template <typename T>
DeviceBuffer upload_or_empty(const std::vector<T>& v) {
  return v.empty() ? DeviceBuffer() : upload_vector(v);
}

struct GpuRun {
  std::vector<float> o;  // bf16 values [n_tokens, H, 512]
  int splits = 0;
  int head_groups = 0;  // 16-head groups per block (4 or 1)
};

GpuRun run_gpu(const Scenario& s, const ad::AttentionDiagnosticLaunch& diag = {}) {
  GpuRun r;
  DeviceBuffer token_seq = upload_vector(s.token_seq), token_pos = upload_vector(s.token_pos);
  DeviceBuffer seq_slot = upload_vector(s.seq_slot), seq_pos0 = upload_vector(s.seq_pos0);
  DeviceBuffer seq_tok0 = upload_vector(s.seq_tok0), seq_ntok = upload_vector(s.seq_ntok);
  DeviceBuffer block_table = upload_vector(s.block_table);
  DeviceBuffer window = upload_vector(s.window), chunk = upload_vector(s.chunk);
  DeviceBuffer entries = upload_or_empty(s.entries), selected = upload_or_empty(s.selected);
  DeviceBuffer q = upload_vector(s.q), sink = upload_vector(s.sink), inv_freq = upload_vector(s.inv_freq);
  DeviceBuffer o = device_alloc(size_t(s.n_tokens) * s.H * kD * 2);
  poison(o);

  StepBatchView b;
  b.n_tokens = s.n_tokens;
  b.n_seqs = s.n_seqs;
  b.token_seq = token_seq.as<int32_t>();
  b.token_pos = token_pos.as<int32_t>();
  b.seq_slot = seq_slot.as<int32_t>();
  b.seq_pos0 = seq_pos0.as<int32_t>();
  b.seq_tok0 = seq_tok0.as<int32_t>();
  b.seq_ntok = seq_ntok.as<int32_t>();
  b.block_table = block_table.as<int32_t>();
  b.max_blocks = s.max_blocks;
  LayerKvView kv;
  kv.window = window.as<uint8_t>();
  kv.window_size = kW;
  kv.chunk = chunk.as<uint8_t>();
  kv.entries = s.ratio() > 0 ? entries.as<uint8_t>() : nullptr;
  kv.ratio = s.ratio();
  AttentionParams p;
  p.n_heads = s.H;
  p.softmax_scale = s.scale;
  p.sink = sink.as<float>();
  p.inv_freq = inv_freq.as<float>();
  p.topk = kTopk;
  // Sized for 256 rows: room for the forced split counts of the tests on any GPU.
  Result<AttentionWorkspace> ws = AttentionWorkspace::create(std::max(s.n_tokens, 256), s.H);
  DSV4_CHECK(ws.is_ok(), "AttentionWorkspace::create: {}", ws.status().to_string());
  const Status st = ad::sparse_attention_diagnostic(b, q.as<__nv_bfloat16>(), kv,
                                                    s.layer == Layer::kCsa ? selected.as<int32_t>() : nullptr, p,
                                                    ws.value(), o.as<__nv_bfloat16>(), nullptr, diag, &r.splits,
                                                    &r.head_groups);
  DSV4_CHECK(st.is_ok(), "sparse_attention: {}", st.to_string());
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  r.o = from_bf16(download<uint16_t>(o.get(), size_t(s.n_tokens) * s.H * kD));
  return r;
}

// Whole-batch comparison (elements, nmse <= 1e-5), then every row's nmse <= 1e-4.
void expect_matches(const std::vector<float>& gpu, int splits, const std::vector<double>& ref,
                    const std::vector<double>& tol, int row_size, const char* what) {
  const CompareResult c = compare(gpu.data(), ref.data(), tol.data(), int64_t(ref.size()));
  std::printf("  %s (%d splits): %s\n", what, splits, c.summary().c_str());
  EXPECT_TRUE(c.ok(1e-5)) << what << ": " << c.summary();
  for (size_t r0 = 0; r0 < ref.size(); r0 += size_t(row_size)) {
    const CompareResult cr = compare(gpu.data() + r0, ref.data() + r0, tol.data() + r0, row_size);
    EXPECT_LE(cr.nmse, 1e-4) << what << ", row " << r0 / size_t(row_size) << ": " << cr.summary();
  }
}
void expect_matches(const GpuRun& g, const std::vector<double>& ref, const std::vector<double>& tol, int row_size,
                    const char* what) {
  char label[160];
  std::snprintf(label, sizeof(label), "%s [%d head groups per block]", what, g.head_groups);
  expect_matches(g.o, g.splits, ref, tol, row_size, label);
}

// ---- CPU-only tests: host plan, record decode, argument validation ----

TEST(AttentionPlan, SplitsFillTheGpuWithinBounds) {
  const int csa = ad::expected_keys(kW, 4, true, kTopk), hca = ad::expected_keys(kW, 128, false, kTopk);
  EXPECT_EQ(csa, kW + kTopk);
  EXPECT_EQ(ad::expected_keys(kW, 0, false, kTopk), kW);
  auto plan_is = [](const ad::LaunchPlan& p, int head_groups, int head_blocks, int splits) {
    EXPECT_EQ(p.head_groups, head_groups);
    EXPECT_EQ(p.head_blocks, head_blocks);
    EXPECT_EQ(p.splits, splits);
  };
  // Batch 1, 64 heads: one block per 16 heads, splits of one 32-key tile (20 x 4 = 80 blocks).
  plan_is(ad::choose_plan(1, 64, csa, 132), 1, 4, csa / ad::kMinKeysPerSplitGroup);
  plan_is(ad::choose_plan(1, 64, hca, 132), 1, 4, ad::kMaxSplits);
  plan_is(ad::choose_plan(1, 64, kW, 132), 1, 4, kW / ad::kMinKeysPerSplitGroup);
  plan_is(ad::choose_plan(8, 64, csa, 132), 1, 4, 8);   // 2 x 132 blocks / (8 rows x 4 head blocks)
  plan_is(ad::choose_plan(9, 64, csa, 132), 4, 1, csa / ad::kMinKeysPerSplit);  // 4 x 9 x 4 > 132
  plan_is(ad::choose_plan(32, 64, csa, 132), 4, 1, 5);  // all heads per block, ceil(132 / 32)
  plan_is(ad::choose_plan(34, 64, csa, 132), 4, 1, 4);  // 136 > 132: all heads per block, ceil(132 / 34)
  plan_is(ad::choose_plan(132, 64, csa, 132), 4, 1, 1);
  plan_is(ad::choose_plan(4096, 64, hca, 132), 4, 1, 1);
  plan_is(ad::choose_plan(1, 64, csa, 132, 4), 4, 1, csa / ad::kMinKeysPerSplit);  // forced: the old plan
  plan_is(ad::choose_plan(1, 8, csa, 132), 1, 1, csa / ad::kMinKeysPerSplitGroup);  // a TP8 rank
  plan_is(ad::choose_plan(32, 8, csa, 132), 1, 1, 8);
  plan_is(ad::choose_plan(4096, 8, csa, 132), 1, 1, 1);
  plan_is(ad::choose_plan(1, 48, csa, 132), 1, 3, 20);
  plan_is(ad::choose_plan(100, 48, csa, 132), 4, 1, 2);
  for (const int H : {64, 48, 8})
    for (int n = 1; n <= 300; ++n) {
      const int s = ad::choose_splits(n, H, hca, 82);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, ad::kMaxSplits);
      if (s > 1) {
        EXPECT_LE(int64_t(n) * s, ad::max_partials(300, H, 82)) << n;
      }
      const int s4 = ad::choose_plan(n, H, hca, 82, 4).splits;  // forced variants fit too
      if (s4 > 1) {
        EXPECT_LE(int64_t(n) * s4, ad::max_partials(300, H, 82)) << n;
      }
    }
  EXPECT_EQ(ad::max_partials(1, 64, 132), ad::kMaxSplits);
  EXPECT_EQ(ad::max_partials(200, 64, 132), 262);  // 131 rows x 2 splits
  EXPECT_EQ(ad::max_partials(200, 8, 132), 264);   // 132 rows x 2 splits (one group per block)
}

TEST(AttentionPlan, SharedMemoryFitsBothArchitectures) {
  constexpr size_t kSm86 = 101376, kSm90 = 232448;
  EXPECT_EQ(ad::choose_key_tile(64, kTopk, kSm90), 32);
  EXPECT_EQ(ad::choose_key_tile(64, kTopk, kSm86), 16);  // 64 KB of queries leave room for 16 keys
  EXPECT_EQ(ad::choose_key_tile(8, kTopk, kSm86), 32);
  EXPECT_EQ(ad::choose_key_tile(ad::block_heads(64, 1), kTopk, kSm86), 32);  // one group per block
  EXPECT_EQ(ad::block_heads(64, 1), 16);
  EXPECT_EQ(ad::block_heads(64, 4), 64);
  EXPECT_EQ(ad::block_heads(8, 4), 8);
  EXPECT_LE(ad::smem_bytes(32, 16, ad::kMaxTopk), kSm86);
  EXPECT_EQ(ad::choose_key_tile(64, 0, kSm86), 16);
  EXPECT_LE(ad::smem_bytes(16, 64, ad::kMaxTopk), kSm86);
  EXPECT_EQ(ad::partial_floats(64) % 4, 0);
  EXPECT_EQ(ad::partial_floats(7) % 4, 0);
}

TEST(AttentionFp8, DecodeMatchesKvRecord) {
  // Every code under every scale a record can hold (1..254 and the 0 edge) decodes as
  // kv::unpack_entry does, bit for bit.
  for (uint32_t sb = 0; sb < 255; ++sb) {
    const float scale = ad::ue8m0_value(sb);
    EXPECT_EQ(scale, e8m0_to_f32(uint8_t(sb))) << sb;
    for (uint32_t c = 0; c < 256; ++c) {
      if ((c & 0x7f) == 0x7f) continue;  // NaN: never stored
      const float want = e4m3_to_f32(uint8_t(c)) * e8m0_to_f32(uint8_t(sb));
      const float got = ad::decode_nope(c, scale);
      EXPECT_EQ(std::memcmp(&want, &got, 4), 0)
          << "code " << c << " scale byte " << sb << ": " << got << " vs " << want;
    }
  }
}

TEST(AttentionValidation, RefusesUnsupportedShapes) {
  // n_tokens = 0 with a default workspace: every check runs, nothing launches (no GPU needed).
  AttentionWorkspace ws;
  std::vector<uint8_t> dummy(64);
  const int32_t ints[4] = {0, 0, 0, 0};
  alignas(16) static uint16_t qo[16];
  const float f[64] = {};
  StepBatchView b;
  b.token_seq = b.token_pos = b.seq_slot = b.seq_pos0 = b.seq_tok0 = b.block_table = ints;
  b.max_blocks = 1;
  LayerKvView kv;
  kv.window = kv.chunk = dummy.data();
  AttentionParams p;
  p.softmax_scale = 0.044f;
  p.sink = p.inv_freq = f;
  auto* q = reinterpret_cast<const __nv_bfloat16*>(qo);
  auto* o = reinterpret_cast<__nv_bfloat16*>(qo);
  EXPECT_TRUE(sparse_attention(b, q, kv, nullptr, p, ws, o, nullptr).is_ok());
  auto refused = [&](auto mutate) {
    StepBatchView b2 = b;
    LayerKvView kv2 = kv;
    AttentionParams p2 = p;
    const int32_t* sel = nullptr;
    mutate(b2, kv2, p2, sel);
    return !sparse_attention(b2, q, kv2, sel, p2, ws, o, nullptr).is_ok();
  };
  EXPECT_TRUE(refused([](StepBatchView&, LayerKvView&, AttentionParams& p2, const int32_t*&) { p2.head_dim = 576; }));
  EXPECT_TRUE(refused([](StepBatchView&, LayerKvView&, AttentionParams& p2, const int32_t*&) { p2.rope_dim = 32; }));
  EXPECT_TRUE(refused([](StepBatchView&, LayerKvView&, AttentionParams& p2, const int32_t*&) { p2.n_heads = 65; }));
  EXPECT_TRUE(refused([](StepBatchView&, LayerKvView&, AttentionParams& p2, const int32_t*&) { p2.sink = nullptr; }));
  EXPECT_TRUE(refused([](StepBatchView&, LayerKvView& k, AttentionParams&, const int32_t*&) { k.entry_bytes = 656; }));
  EXPECT_TRUE(refused([](StepBatchView&, LayerKvView& k, AttentionParams&, const int32_t*&) { k.ratio = 4; }));
  EXPECT_TRUE(refused([&](StepBatchView&, LayerKvView& k, AttentionParams&, const int32_t*& s) {
    s = ints;  // selected entries on a window-only layer
    (void)k;
  }));
  EXPECT_TRUE(refused([&](StepBatchView&, LayerKvView& k, AttentionParams&, const int32_t*&) {
    k.ratio = 4;  // a CSA layer without the indexer's selection
    k.entries = dummy.data();
    k.index_keys = dummy.data();
  }));
  EXPECT_TRUE(refused([](StepBatchView& b2, LayerKvView&, AttentionParams&, const int32_t*&) { b2.n_tokens = 1; }));
}

// ---- GPU tests ----

class AttentionGpu : public ::testing::TestWithParam<std::tuple<Layer, int>> {};

// Decode rows at 0, 5, 127, 128, 4095 and 262143 (CSA 0 and 5, HCA 0..127: no or one
// compressed entry), a prefill chunk of 160 rows over positions 100..259 (window keys from the
// ring and from the chunk, across the 128 and 256 boundaries) and two padding rows: 168 rows, so
// one split per row (the split kernel finishes rows itself).
TEST_P(AttentionGpu, MixedBatchMatchesReference) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [layer, H] = GetParam();
  const std::vector<SeqSpec> seqs = {{0, 1}, {5, 1}, {127, 1}, {128, 1}, {4095, 1}, {262143, 1}, {100, 160}};
  const Scenario s = build(layer, H, seqs, 2, 1000 + uint64_t(layer) * 10 + uint64_t(H));
  std::vector<double> ref, tol;
  reference(s, ref, tol);
  std::printf("%s H=%d, %d rows\n", name_of(layer), H, s.n_tokens);
  expect_matches(run_gpu(s), ref, tol, H * kD, "mixed batch");
  // sm_86's 16-key tile (chosen there when 64 heads leave no room for 32) on this GPU.
  expect_matches(run_gpu(s, {16, 0}), ref, tol, H * kD, "mixed batch, 16-key tiles");
  // One block per 16 heads (the small-batch variant; H = 8 picks it anyway) and all heads per
  // block, one split each: padding rows zeroed per head block.
  expect_matches(run_gpu(s, {0, 1, 1}), ref, tol, H * kD, "mixed batch, one group per block");
  expect_matches(run_gpu(s, {16, 0, 1}), ref, tol, H * kD, "mixed batch, one group per block, 16-key tiles");
  expect_matches(run_gpu(s, {0, 1, 4}), ref, tol, H * kD, "mixed batch, all heads per block");
}

// One long decode row alone (batch 1: the most splits) and inside a batch of 32 decode rows at
// scattered positions plus 2 padding rows (fewer splits; the combine kernel zeroes padding), with forced split counts
// 1, 2, 3, 4, 5 and 32, both key tiles and both head-group variants (all heads per block, one block per 16 heads):
// every result matches the reference, so none depends on how the keys or heads were split.
TEST_P(AttentionGpu, ResultsDoNotDependOnSplits) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [layer, H] = GetParam();
  std::vector<SeqSpec> seqs;
  Rng rng(77);
  for (int i = 0; i < 32; ++i) seqs.push_back({i == 7 ? 262143 : i == 9 ? 0 : rng.index(6000), 1});
  const Scenario s = build(layer, H, seqs, 2, 2000 + uint64_t(layer) * 10 + uint64_t(H));  // + 2 padding rows
  std::vector<double> ref, tol;
  reference(s, ref, tol);
  std::printf("%s H=%d, batch of 32\n", name_of(layer), H);
  const GpuRun batch = run_gpu(s);
  expect_matches(batch, ref, tol, H * kD, "batch of 32");
  for (const ad::AttentionDiagnosticLaunch d :
       {ad::AttentionDiagnosticLaunch{0, 1}, ad::AttentionDiagnosticLaunch{16, 3},
        ad::AttentionDiagnosticLaunch{32, 4}, ad::AttentionDiagnosticLaunch{0, 2, 1},
        ad::AttentionDiagnosticLaunch{16, 5, 1}, ad::AttentionDiagnosticLaunch{32, 1, 1},
        ad::AttentionDiagnosticLaunch{0, 3, 4}}) {
    char what[96];
    std::snprintf(what, sizeof(what), "batch of 32, key tile %d (0: auto), head groups %d (0: auto)", d.key_tile,
                  d.head_groups);
    expect_matches(run_gpu(s, d), ref, tol, H * kD, what);
  }

  const Scenario one = single_row(s, 7);
  std::vector<double> ref1, tol1;
  reference(one, ref1, tol1);
  // The reference of the row alone is the same computation as inside the batch.
  const size_t row = size_t(s.H) * kD;
  ASSERT_TRUE(std::equal(ref1.begin(), ref1.end(), ref.begin() + 7 * int64_t(row)));
  const GpuRun alone = run_gpu(one);
  expect_matches(alone, ref1, tol1, H * kD, "row 7 alone");
  // The other variants of the row alone: all heads per block, and the most splits (32: most of
  // them empty below 32 x 32 keys) with one group per block and 16-key tiles.
  expect_matches(run_gpu(one, {0, 0, 4}), ref1, tol1, H * kD, "row 7 alone, all heads per block");
  expect_matches(run_gpu(one, {16, ad::kMaxSplits, 1}), ref1, tol1, H * kD, "row 7 alone, 32 splits");
  expect_matches(run_gpu(one, {32, ad::kMaxSplits, 4}), ref1, tol1, H * kD, "row 7 alone, 32 splits, all heads");
  // And the two GPU results of that row agree with each other (each is within tol of the same
  // reference, so within 2 tol of each other).
  const std::vector<double> batch_row(batch.o.begin() + 7 * int64_t(row), batch.o.begin() + 8 * int64_t(row));
  std::vector<double> tol2(tol1);
  for (double& v : tol2) v *= 2;
  expect_matches(alone.o, alone.splits, batch_row, tol2, H * kD, "row 7 alone vs in the batch");
}

INSTANTIATE_TEST_SUITE_P(Flash, AttentionGpu,
                         ::testing::Combine(::testing::Values(Layer::kSwa, Layer::kCsa, Layer::kHca),
                                            ::testing::Values(64, 8)),
                         [](const ::testing::TestParamInfo<std::tuple<Layer, int>>& info) {
                           return std::string(name_of(std::get<0>(info.param))) + "_H" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace dsv4::cuda::test
