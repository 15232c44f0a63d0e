// device_weights.cpp: upload_weights() (see device_weights.h).
#include "gpu/device_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/numeric.h"
#include "cpu/rope.h"
#include "cuda/common/cuda_check.h"
#include "cuda/testing/random_gptq.h"
#include "model/fp8_groups.h"

namespace dsv4::gpu {

ProjColumns proj_columns(const ModelConfig& cfg, const LayerSpec& spec) {
  ProjColumns p;
  if (spec.attn == AttnType::kSliding) return p;
  const int coff = spec.attn == AttnType::kCsa ? 2 : 1;
  const int wc = coff * cfg.head_dim;
  p.comp_a = 0;
  p.comp_z = wc;
  p.n = 2 * wc;
  if (spec.attn == AttnType::kCsa) {
    const int wi = 2 * cfg.index_head_dim;
    p.idx_a = p.n;
    p.idx_z = p.n + wi;
    p.idx_w = p.n + 2 * wi;
    p.n += 2 * wi + cfg.index_n_heads;
  }
  return p;
}

namespace {

using bf16 = __nv_bfloat16;

class Uploader {
 public:
  // synthetic: the weights have shapes only (ModelWeights::synthetic); every linear and the
  // embedding are generated on the device (hash-based, per tensor seed) in the same layouts.
  Uploader(const ModelConfig& cfg, DeviceArena& arena, cudaStream_t stream, DeviceModelWeights& out, bool synthetic)
      : cfg_(cfg), arena_(arena), stream_(stream), out_(out), synthetic_(synthetic) {}

  // One device staging pair sized for the largest GPTQ tensor; every tensor passes through it.
  Status init_staging(const ModelWeights& w) {
    size_t q = 0, s = 0;
    auto visit = [&](const LinearWeight& lw) {
      if (lw.format != WeightFormat::kGptqInt4) return;
      if (synthetic_) {
        q = std::max(q, size_t(lw.n * lw.k / 2));
        s = std::max(s, size_t(lw.n * (lw.k / 128) * 2));
        return;
      }
      if (lw.qweight == nullptr || lw.scales == nullptr) return;
      q = std::max(q, lw.qweight->n_bytes);
      s = std::max(s, lw.scales->n_bytes);
    };
    for (const LayerWeights& l : w.layers) {
      for (const LinearWeight* lw : {&l.attn.wq_a, &l.attn.wq_b, &l.attn.wkv, &l.attn.wo_b, &l.attn.indexer.wq_b,
                                     &l.moe.shared.w1, &l.moe.shared.w2, &l.moe.shared.w3})
        visit(*lw);
      for (const ExpertWeights& e : l.moe.experts)
        for (const LinearWeight* lw : {&e.w1, &e.w2, &e.w3}) visit(*lw);
    }
    if (q == 0) return Status::ok();  // nothing quantized: the first INT4 check will say so
    DSV4_ASSIGN_OR_RETURN(staging_q_, arena_.alloc_n<int32_t>(int64_t(q / 4), MemCategory::kWorkspaces,
                                                              "the GPTQ staging buffer (qweight)"));
    DSV4_ASSIGN_OR_RETURN(staging_s_, arena_.alloc_n<__half>(int64_t(s / 2), MemCategory::kWorkspaces,
                                                             "the GPTQ staging buffer (scales)"));
    staging_q_bytes_ = q;
    staging_s_bytes_ = s;
    return Status::ok();
  }

  Result<const float*> f32(const Vec& v, const std::string& what, size_t want) {
    if (v.size() != want) return invalid_argument("'{}': {} values, expected {}", what, v.size(), want);
    DSV4_ASSIGN_OR_RETURN(float* d, arena_.alloc_n<float>(int64_t(v.size()), MemCategory::kWeights, what));
    DSV4_RETURN_IF_ERROR(copy(d, v.data(), v.size() * sizeof(float)));
    out_.f32_bytes += v.size() * sizeof(float);
    return static_cast<const float*>(d);
  }

  Result<cuda::HcParamsView> hc(const HcParams& p, const std::string& what, int n_mix, int n_scale) {
    cuda::HcParamsView v;
    v.n_mix = n_mix;
    DSV4_ASSIGN_OR_RETURN(v.fn, f32(p.fn, what + "_fn", size_t(n_mix) * size_t(cfg_.hc_dim())));
    DSV4_ASSIGN_OR_RETURN(v.base, f32(p.base, what + "_base", size_t(n_mix)));
    DSV4_ASSIGN_OR_RETURN(v.scale, f32(p.scale, what + "_scale", size_t(n_scale)));
    return v;
  }

  // The packed weight of several GPTQ tensors of the same K placed side by side (wq_a | wkv), or
  // of one tensor.
  Result<cuda::W4A16Weight> int4(std::initializer_list<const LinearWeight*> parts) {
    int n = 0;
    const int k = int((*parts.begin())->k);
    for (const LinearWeight* p : parts) {
      DSV4_RETURN_IF_ERROR(check_int4(*p));
      if (p->k != k) return invalid_argument("'{}': in-features {} differ from {}", p->name, p->k, k);
      n += int(p->n);
    }
    DSV4_ASSIGN_OR_RETURN(uint32_t* q, arena_.alloc_n<uint32_t>(int64_t(cuda::w4a16_qweight_bytes(n, k) / 4),
                                                                MemCategory::kWeights, (*parts.begin())->name));
    DSV4_ASSIGN_OR_RETURN(__half* s, arena_.alloc_n<__half>(int64_t(cuda::w4a16_scales_bytes(n, k) / 2),
                                                            MemCategory::kWeights, (*parts.begin())->name + " scales"));
    int n_base = 0;
    for (const LinearWeight* p : parts) {
      DSV4_RETURN_IF_ERROR(repack(*p, q, s, n, cuda::RepackPlacement::concat(n_base)));
      n_base += int(p->n);
    }
    return cuda::W4A16Weight{q, s, n, k};
  }

  // `n_experts` packed weights of shape [n, k] back to back (moe.h W4A16ExpertStack); `fill(e, q,
  // s)` repacks expert e into its storage.
  template <typename Fill>
  Result<cuda::W4A16ExpertStack> stack(int n, int k, int n_experts, const std::string& what, Fill fill) {
    const size_t qb = cuda::w4a16_qweight_bytes(n, k), sb = cuda::w4a16_scales_bytes(n, k);
    DSV4_ASSIGN_OR_RETURN(uint32_t* q, arena_.alloc_n<uint32_t>(int64_t(qb / 4 * size_t(n_experts)),
                                                                MemCategory::kWeights, what));
    DSV4_ASSIGN_OR_RETURN(__half* s, arena_.alloc_n<__half>(int64_t(sb / 2 * size_t(n_experts)),
                                                            MemCategory::kWeights, what + " scales"));
    for (int e = 0; e < n_experts; ++e) DSV4_RETURN_IF_ERROR(fill(e, q + qb / 4 * size_t(e), s + sb / 2 * size_t(e)));
    return cuda::W4A16ExpertStack{q, s, n, k, n_experts};
  }

  Status check_int4(const LinearWeight& lw) const {
    if (lw.format != WeightFormat::kGptqInt4)
      return unimplemented("'{}' is stored as {}; the GPU path runs W4A16 checkpoints, where it is GPTQ INT4 "
                           "(make-model --format w4a16, or Intel's AutoRound export)",
                           lw.name, weight_format_name(lw.format));
    if (lw.group_size != cuda::kW4Group)
      return unimplemented("'{}': INT4 group size {}, the GPU kernels take {}", lw.name, lw.group_size, cuda::kW4Group);
    if (!lw.zeros_uniform)
      return unimplemented("'{}': asymmetric INT4 zero points; the GPU kernels take symmetric weights (zero 8)", lw.name);
    if (!synthetic_ && lw.scales->dtype != DType::kF16)
      return unimplemented("'{}.scales' is {}; the GPU kernels take F16 scales", lw.name, dtype_name(lw.scales->dtype));
    if (lw.n % 16 != 0 || lw.k % cuda::kW4Group != 0)
      return unimplemented("'{}': shape [{}, {}] is not a multiple of [16, {}]", lw.name, lw.n, lw.k, cuda::kW4Group);
    return Status::ok();
  }

  // Copies one GPTQ tensor into the staging pair and repacks it into its columns of a packed
  // weight with dst_n columns. The next tensor's copy is ordered after this repack on the stream.
  Status repack(const LinearWeight& lw, uint32_t* dst_q, __half* dst_s, int dst_n, const cuda::RepackPlacement& place) {
    DSV4_RETURN_IF_ERROR(check_int4(lw));
    if (synthetic_) {
      // Scales ~ 1.5 * 2^(e - 15) with e chosen so that W has a standard deviation near 1/sqrt(K)
      // (codes - 8 have one near 4.6), as make-model's random checkpoints do.
      const int e = int(std::floor(15.0 + std::log2(1.0 / (4.6 * std::sqrt(double(lw.k)))) - 0.58));
      const cuda::testing::ScaleSpec spec{e, e, false};
      DSV4_RETURN_IF_ERROR(cuda::testing::fill_random_gptq(staging_q_, staging_s_, int(lw.n), int(lw.k), next_seed(),
                                                           spec, stream_));
    } else {
      if (lw.qweight->n_bytes > staging_q_bytes_ || lw.scales->n_bytes > staging_s_bytes_)
        return internal_error("'{}' is larger than the GPTQ staging buffer", lw.name);
      DSV4_RETURN_IF_ERROR(copy_async(staging_q_, lw.qweight->data, lw.qweight->n_bytes));
      DSV4_RETURN_IF_ERROR(copy_async(staging_s_, lw.scales->data, lw.scales->n_bytes));
    }
    const cuda::GptqInt4Tensor src{staging_q_, staging_s_, int(lw.n), int(lw.k)};
    DSV4_RETURN_IF_ERROR(cuda::repack_gptq_int4(src, dst_q, dst_s, dst_n, place, stream_).with_context(lw.name));
    ++out_.n_int4_linears;
    out_.int4_bytes += cuda::w4a16_qweight_bytes(int(lw.n), int(lw.k)) + cuda::w4a16_scales_bytes(int(lw.n), int(lw.k));
    return Status::ok();
  }

  // Writes bf16(W) [n, k] of a linear stored in any format to dst (rows of a larger array allowed).
  Status dense_into(const LinearWeight& lw, bf16* dst) {
    const int64_t n = lw.n, k = lw.k;
    if (synthetic_) {
      // Uniform in +-2 * 2^-ceil(log2 sqrt(K)): a standard deviation near 1/sqrt(K).
      const float scale = std::ldexp(1.0f, -int(std::ceil(std::log2(std::sqrt(double(k))))));
      DSV4_RETURN_IF_ERROR(cuda::testing::fill_random_bf16(dst, n * k, next_seed(), scale, stream_));
    } else if (lw.format == WeightFormat::kDense && lw.weight->dtype == DType::kBF16 && lw.expert < 0 && lw.row_offset == 0) {
      DSV4_RETURN_IF_ERROR(copy(dst, lw.weight->data, size_t(n * k) * 2));  // already bf16: as stored
    } else {
      // NOTE: other formats become bf16 here, so an fp32 or int4 dense weight is rounded once
      // (the CPU reference keeps it exact); Intel's W4A16 export stores these as BF16.
      const int64_t rows = std::max<int64_t>(1, (int64_t(4) << 20) / k);
      std::vector<float> f(size_t(rows * k));
      std::vector<uint16_t> h(size_t(rows * k));
      for (int64_t r0 = 0; r0 < n; r0 += rows) {
        const int64_t r1 = std::min(n, r0 + rows);
        lw.dequant_rows(r0, r1, f.data());
        for (int64_t i = 0; i < (r1 - r0) * k; ++i) h[size_t(i)] = f32_to_bf16(f[size_t(i)]);
        DSV4_RETURN_IF_ERROR(copy(dst + r0 * k, h.data(), size_t((r1 - r0) * k) * 2));
      }
    }
    out_.bf16_bytes += size_t(n * k) * 2;
    return Status::ok();
  }

  // The fp8 form of a dense linear (model/fp8_groups.h), into *out; false (nothing allocated, the
  // reason in fp8_refused when it is the first) when some bf16 value of it is not FP8-derived.
  // Encoded whole on the host first, so that a refused weight costs no device memory.
  Result<bool> fp8_groups(const LinearWeight& lw, cuda::Fp8WeightView* out) {
    const int64_t n = lw.n, k = lw.k;
    if (k % kFp8GroupSize != 0) return refuse_fp8(lw, fmt::format("k = {} is not a multiple of {}", k, kFp8GroupSize));
    const int64_t n_exps = n * (k / kFp8GroupSize);
    if (synthetic_) {
      DSV4_ASSIGN_OR_RETURN(uint8_t* c, arena_.alloc_n<uint8_t>(n * k, MemCategory::kWeights, lw.name + " (fp8 codes)"));
      DSV4_ASSIGN_OR_RETURN(int8_t* e, arena_.alloc_n<int8_t>(n_exps, MemCategory::kWeights, lw.name + " (fp8 exps)"));
      // The bf16 draw's range (dense_into: +-2 x 2^-s): the largest code, 448 = 1.75 x 2^8, under
      // 2^(-8 - s); half the groups one binade lower.
      const int e_hi = -8 - int(std::ceil(std::log2(std::sqrt(double(k)))));
      DSV4_RETURN_IF_ERROR(cuda::testing::fill_random_fp8_groups(c, e, n, int(k), next_seed(), e_hi - 1, e_hi, stream_));
      *out = {c, e};
    } else {
      std::vector<uint8_t> codes(static_cast<size_t>(n * k));
      std::vector<int8_t> exps(static_cast<size_t>(n_exps));
      // Chunks of rows encode in parallel (wo_a is ~1.4G values over 43 layers); the refusal
      // names the first failing element in row order, whichever thread finds it.
      const int64_t rows = std::max<int64_t>(1, (int64_t(4) << 20) / k);
      const int64_t n_chunks = (n + rows - 1) / rows;
      int64_t bad_chunk = n_chunks;
      Fp8GroupsMiss bad;
#pragma omp parallel
      {
        std::vector<float> f(size_t(rows * k));
#pragma omp for schedule(dynamic, 1)
        for (int64_t ci = 0; ci < n_chunks; ++ci) {
          const int64_t r0 = ci * rows, r1 = std::min(n, r0 + rows);
          lw.dequant_rows(r0, r1, f.data());
          for (int64_t i = 0; i < (r1 - r0) * k; ++i) f[size_t(i)] = round_bf16(f[size_t(i)]);  // the bf16 values
          Fp8GroupsMiss miss;
          if (!encode_fp8_groups(f.data(), r1 - r0, k, codes.data() + r0 * k,
                                 exps.data() + r0 * (k / kFp8GroupSize), &miss)) {
#pragma omp critical(dsv4_fp8_refusal)
            if (ci < bad_chunk) {
              bad_chunk = ci;
              bad = std::move(miss);
              bad.row += r0;
            }
          }
        }
      }
      if (bad_chunk < n_chunks)
        return refuse_fp8(lw, fmt::format("element ({}, {}) = {}: {}", bad.row, bad.col, bad.value, bad.why));
      DSV4_ASSIGN_OR_RETURN(uint8_t* c, arena_.alloc_n<uint8_t>(n * k, MemCategory::kWeights, lw.name + " (fp8 codes)"));
      DSV4_ASSIGN_OR_RETURN(int8_t* e, arena_.alloc_n<int8_t>(n_exps, MemCategory::kWeights, lw.name + " (fp8 exps)"));
      DSV4_RETURN_IF_ERROR(copy(c, codes.data(), codes.size()));
      DSV4_RETURN_IF_ERROR(copy(e, exps.data(), exps.size()));
      *out = {c, e};
    }
    ++out_.n_fp8_linears;
    out_.fp8_bytes += size_t(n * k + n_exps);
    return true;
  }

  Result<const bf16*> dense(const LinearWeight& lw) {
    DSV4_ASSIGN_OR_RETURN(bf16* d, arena_.alloc_n<bf16>(lw.n * lw.k, MemCategory::kWeights, lw.name));
    DSV4_RETURN_IF_ERROR(dense_into(lw, d));
    return static_cast<const bf16*>(d);
  }

  // A random bf16 embedding table [vocab, D] (synthetic weights): values in +-1.
  Result<const bf16*> synthetic_embedding() {
    const int64_t V = cfg_.vocab_size, D = cfg_.hidden;
    DSV4_ASSIGN_OR_RETURN(bf16* d, arena_.alloc_n<bf16>(V * D, MemCategory::kWeights, "embed (synthetic)"));
    DSV4_RETURN_IF_ERROR(cuda::testing::fill_random_bf16(d, V * D, next_seed(), 0.5f, stream_));
    out_.bf16_bytes += size_t(V * D) * 2;
    return static_cast<const bf16*>(d);
  }

  // The embedding table [vocab, D] (any float dtype) as bf16.
  Result<const bf16*> embedding(const TensorInfo& t) {
    const int64_t V = cfg_.vocab_size, D = cfg_.hidden;
    if (t.shape != std::vector<int64_t>{V, D})
      return invalid_argument("'{}': shape {}, expected [{}, {}]", t.name, shape_str(t.shape), V, D);
    DSV4_ASSIGN_OR_RETURN(bf16* d, arena_.alloc_n<bf16>(V * D, MemCategory::kWeights, t.name));
    if (t.dtype == DType::kBF16) {
      DSV4_RETURN_IF_ERROR(copy(d, t.data, size_t(V * D) * 2));
    } else {
      std::vector<uint16_t> h(static_cast<size_t>(D));
      for (int64_t v = 0; v < V; ++v) {
        for (int64_t i = 0; i < D; ++i) h[size_t(i)] = f32_to_bf16(t.get_f32(v * D + i));
        DSV4_RETURN_IF_ERROR(copy(d + v * D, h.data(), size_t(D) * 2));
      }
    }
    out_.bf16_bytes += size_t(V * D) * 2;
    return static_cast<const bf16*>(d);
  }

  Result<const int32_t*> tid2eid(const std::vector<int32_t>& t, const std::string& what) {
    const size_t want = size_t(cfg_.vocab_size) * size_t(cfg_.n_experts_per_tok);
    if (t.size() != want) return invalid_argument("'{}': {} entries, expected {}", what, t.size(), want);
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i] < 0 || t[i] >= cfg_.n_routed_experts)
        return invalid_argument("'{}': entry {} = {} is not an expert id < {}", what, i, t[i], cfg_.n_routed_experts);
    DSV4_ASSIGN_OR_RETURN(int32_t* d, arena_.alloc_n<int32_t>(int64_t(t.size()), MemCategory::kWeights, what));
    DSV4_RETURN_IF_ERROR(copy(d, t.data(), t.size() * 4));
    return static_cast<const int32_t*>(d);
  }

  bool refuse_fp8(const LinearWeight& lw, const std::string& why) {
    if (out_.fp8_refused.empty()) out_.fp8_refused = fmt::format("'{}' stays bf16: {}", lw.name, why);
    return false;
  }

  Status finish() { return cuda::cuda_status(cudaStreamSynchronize(stream_), "upload_weights: cudaStreamSynchronize"); }

 private:
  // Host -> device copies from pageable memory: synchronous ones into buffers the stream does not
  // touch yet (the host vector may be reused right after), stream-ordered ones into the staging
  // buffer, whose previous contents the repack on the same stream must have consumed first.
  Status copy(void* dst, const void* src, size_t bytes) {
    return cuda::cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
  }
  Status copy_async(void* dst, const void* src, size_t bytes) {
    return cuda::cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
                             "cudaMemcpyAsync (GPTQ staging)");
  }

  const ModelConfig& cfg_;
  DeviceArena& arena_;
  cudaStream_t stream_;
  DeviceModelWeights& out_;
  uint64_t next_seed() { return 0xD5F4000000ull + seed_++; }

  bool synthetic_ = false;
  uint64_t seed_ = 0;
  int32_t* staging_q_ = nullptr;
  __half* staging_s_ = nullptr;
  size_t staging_q_bytes_ = 0, staging_s_bytes_ = 0;
};

Result<cuda::CompressorParamsView> compressor_params(Uploader& up, const ModelConfig& cfg, const CompressorWeights& cw,
                                                     const std::string& name, int ratio, bool overlap, int dim,
                                                     cuda::CompressedRecord record, const float* inv_freq) {
  cuda::CompressorParamsView p;
  p.ratio = ratio;
  p.overlap = overlap;
  p.dim = dim;
  p.rope_dim = cfg.rope_dim;
  p.norm_eps = float(cfg.norm_eps);
  p.inv_freq = inv_freq;
  p.record = record;
  DSV4_ASSIGN_OR_RETURN(p.ape, up.f32(cw.ape, name + ".ape", size_t(ratio) * size_t(p.width())));
  DSV4_ASSIGN_OR_RETURN(p.norm_w, up.f32(cw.norm, name + ".norm", size_t(dim)));
  return p;
}

Status upload_layer(Uploader& up, DeviceArena& arena, const ModelConfig& cfg, const LayerWeights& lw, int idx,
                    const DeviceModelWeights& g, bool wo_a_fp8, LayerDeviceWeights& L) {
  const std::string p = fmt::format("layers.{}", idx);
  const int D = cfg.hidden;
  L.spec = lw.spec;
  DSV4_ASSIGN_OR_RETURN(L.attn_norm, up.f32(lw.attn_norm, p + ".attn_norm", size_t(D)));
  DSV4_ASSIGN_OR_RETURN(L.ffn_norm, up.f32(lw.ffn_norm, p + ".ffn_norm", size_t(D)));
  DSV4_ASSIGN_OR_RETURN(L.hc_attn, up.hc(lw.hc_attn, p + ".hc_attn", cfg.hc_mix(), 3));
  DSV4_ASSIGN_OR_RETURN(L.hc_ffn, up.hc(lw.hc_ffn, p + ".hc_ffn", cfg.hc_mix(), 3));

  const AttentionWeights& A = lw.attn;
  DSV4_ASSIGN_OR_RETURN(L.wqkv, up.int4({&A.wq_a, &A.wkv}));
  DSV4_ASSIGN_OR_RETURN(L.q_norm, up.f32(A.q_norm, p + ".attn.q_norm", size_t(cfg.q_lora_rank)));
  DSV4_ASSIGN_OR_RETURN(L.wq_b, up.int4({&A.wq_b}));
  DSV4_ASSIGN_OR_RETURN(L.kv_norm, up.f32(A.kv_norm, p + ".attn.kv_norm", size_t(cfg.head_dim)));
  bool wo_a_in_fp8 = false;
  if (wo_a_fp8) {
    DSV4_ASSIGN_OR_RETURN(wo_a_in_fp8, up.fp8_groups(A.wo_a, &L.wo_a8));
  }
  if (!wo_a_in_fp8) {
    DSV4_ASSIGN_OR_RETURN(L.wo_a, up.dense(A.wo_a));
  }
  DSV4_ASSIGN_OR_RETURN(L.wo_b, up.int4({&A.wo_b}));
  DSV4_ASSIGN_OR_RETURN(L.sink, up.f32(A.sink, p + ".attn.attn_sink", size_t(cfg.n_heads)));
  L.inv_freq = lw.spec.attn == AttnType::kSliding ? g.inv_freq_main : g.inv_freq_compress;

  if (lw.spec.attn != AttnType::kSliding) {
    const bool csa = lw.spec.attn == AttnType::kCsa;
    if (!A.has_compressor || (csa && !A.has_indexer))
      return invalid_argument("{}: a {} layer without its compressor/indexer weights", p, attn_type_name(lw.spec.attn));
    L.proj = proj_columns(cfg, lw.spec);
    DSV4_ASSIGN_OR_RETURN(__nv_bfloat16 * wp, arena.alloc_n<__nv_bfloat16>(int64_t(L.proj.n) * D,
                                                                           MemCategory::kWeights, p + " projections"));
    DSV4_RETURN_IF_ERROR(up.dense_into(A.compressor.wkv, wp + int64_t(L.proj.comp_a) * D));
    DSV4_RETURN_IF_ERROR(up.dense_into(A.compressor.wgate, wp + int64_t(L.proj.comp_z) * D));
    if (csa) {
      DSV4_RETURN_IF_ERROR(up.dense_into(A.indexer.compressor.wkv, wp + int64_t(L.proj.idx_a) * D));
      DSV4_RETURN_IF_ERROR(up.dense_into(A.indexer.compressor.wgate, wp + int64_t(L.proj.idx_z) * D));
      DSV4_RETURN_IF_ERROR(up.dense_into(A.indexer.weights_proj, wp + int64_t(L.proj.idx_w) * D));
    }
    L.wproj = wp;
    DSV4_ASSIGN_OR_RETURN(L.comp, compressor_params(up, cfg, A.compressor, p + ".attn.compressor",
                                                    lw.spec.compress_ratio, csa, cfg.head_dim,
                                                    cuda::CompressedRecord::kFp8Entry, g.inv_freq_compress));
    if (csa) {
      DSV4_ASSIGN_OR_RETURN(L.idx_comp, compressor_params(up, cfg, A.indexer.compressor,
                                                          p + ".attn.indexer.compressor", lw.spec.compress_ratio, true,
                                                          cfg.index_head_dim, cuda::CompressedRecord::kFp4IndexKey,
                                                          g.inv_freq_compress));
      DSV4_ASSIGN_OR_RETURN(L.idx_wq_b, up.int4({&A.indexer.wq_b}));
    }
  }

  const MoeWeights& M = lw.moe;
  const int E = cfg.n_routed_experts, I = cfg.moe_inter;
  if (int(M.experts.size()) != E || !M.has_shared)
    return invalid_argument("{}.ffn: {} experts{}, expected {} and a shared expert", p, M.experts.size(),
                            M.has_shared ? "" : " and no shared expert", E);
  cuda::MoeLayerWeights& mw = L.moe;
  DSV4_ASSIGN_OR_RETURN(mw.gate_w, up.dense(M.gate));
  if (lw.spec.moe == MoeType::kScore) {
    DSV4_ASSIGN_OR_RETURN(mw.gate_bias, up.f32(M.bias, p + ".ffn.gate.bias", size_t(E)));
  } else {
    DSV4_ASSIGN_OR_RETURN(mw.tid2eid, up.tid2eid(M.tid2eid, p + ".ffn.gate.tid2eid"));
  }
  // w1 (gate) and w3 (up) share one packed weight, interleaved in 16-column blocks (moe.h).
  DSV4_ASSIGN_OR_RETURN(mw.w13, up.stack(2 * I, D, E, p + ".ffn.experts.w13", [&](int e, uint32_t* q, __half* s) {
    DSV4_RETURN_IF_ERROR(up.repack(M.experts[size_t(e)].w1, q, s, 2 * I, cuda::RepackPlacement::gate_up(0)));
    return up.repack(M.experts[size_t(e)].w3, q, s, 2 * I, cuda::RepackPlacement::gate_up(1));
  }));
  DSV4_ASSIGN_OR_RETURN(mw.w2, up.stack(D, I, E, p + ".ffn.experts.w2", [&](int e, uint32_t* q, __half* s) {
    return up.repack(M.experts[size_t(e)].w2, q, s, D, cuda::RepackPlacement::concat(0));
  }));
  DSV4_ASSIGN_OR_RETURN(cuda::W4A16ExpertStack sh13,
                        up.stack(2 * I, D, 1, p + ".ffn.shared_experts.w13", [&](int, uint32_t* q, __half* s) {
                          DSV4_RETURN_IF_ERROR(up.repack(M.shared.w1, q, s, 2 * I, cuda::RepackPlacement::gate_up(0)));
                          return up.repack(M.shared.w3, q, s, 2 * I, cuda::RepackPlacement::gate_up(1));
                        }));
  DSV4_ASSIGN_OR_RETURN(cuda::W4A16ExpertStack sh2,
                        up.stack(D, I, 1, p + ".ffn.shared_experts.w2", [&](int, uint32_t* q, __half* s) {
                          return up.repack(M.shared.w2, q, s, D, cuda::RepackPlacement::concat(0));
                        }));
  mw.shared_w13 = {sh13.qweight, sh13.scales, 2 * I, D};
  mw.shared_w2 = {sh2.qweight, sh2.scales, D, I};
  mw.hidden = D;
  mw.inter = I;
  mw.n_experts = E;
  mw.top_k = cfg.n_experts_per_tok;
  mw.route_scale = float(cfg.routed_scaling_factor);
  mw.swiglu_limit = float(cfg.swiglu_limit);
  return Status::ok();
}

}  // namespace

Result<DeviceModelWeights> upload_weights(const ModelConfig& cfg, const ModelWeights& w, DeviceArena& arena,
                                          cudaStream_t stream, bool wo_a_fp8) {
  DeviceModelWeights out;
  Uploader up(cfg, arena, stream, out, w.is_synthetic);
  DSV4_RETURN_IF_ERROR(up.init_staging(w));
  if (w.is_synthetic) {
    DSV4_ASSIGN_OR_RETURN(out.embed, up.synthetic_embedding());
  } else {
    if (w.embed == nullptr) return not_found("the checkpoint has no embedding table");
    DSV4_ASSIGN_OR_RETURN(out.embed, up.embedding(*w.embed));
  }
  DSV4_ASSIGN_OR_RETURN(out.head, up.dense(w.head));
  DSV4_ASSIGN_OR_RETURN(out.norm, up.f32(w.norm, "norm", size_t(cfg.hidden)));
  DSV4_ASSIGN_OR_RETURN(out.hc_head, up.hc(w.hc_head, "hc_head", cfg.hc_mult, 1));
  const size_t half_rope = size_t(cfg.rope_dim / 2);
  DSV4_ASSIGN_OR_RETURN(out.inv_freq_main,
                        up.f32(cpu::Rope(cfg.rope_main, cfg.rope_dim).inv_freq(), "rope inv_freq (main)", half_rope));
  DSV4_ASSIGN_OR_RETURN(out.inv_freq_compress, up.f32(cpu::Rope(cfg.rope_compress, cfg.rope_dim).inv_freq(),
                                                      "rope inv_freq (compress)", half_rope));
  if (int(w.layers.size()) != cfg.n_layers)
    return invalid_argument("{} layers of weights for {} layers in the config", w.layers.size(), cfg.n_layers);
  out.layers.resize(size_t(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l)
    DSV4_RETURN_IF_ERROR(upload_layer(up, arena, cfg, w.layers[size_t(l)], l, out, wo_a_fp8, out.layers[size_t(l)]));
  DSV4_RETURN_IF_ERROR(up.finish());
  return out;
}

}  // namespace dsv4::gpu
