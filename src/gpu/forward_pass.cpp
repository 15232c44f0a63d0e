// forward_pass.cpp: the launch sequence of a step (see forward_pass.h). Each block mirrors
// cpu::CpuModel::block and cpu::attention_forward line by line; comments name the reference step.
#include "gpu/forward_pass.h"

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/compressor/compressor.h"
#include "cuda/dense/weight_prefetch.h"
#include "cuda/ops/ops.h"

namespace dsv4::gpu {
namespace {

// Small decode batches leave the mHC comb as logits, projected by the kernel that applies it
// (ops.h HcComb: the Sinkhorn leaves the critical path); every mix of a step uses one mode, and
// each producer is at least two launches before its consumer (sublayers have more kernels).
cuda::HcComb comb_mode(int n_tokens) {
  return n_tokens <= cuda::kHcLogitsMaxTokens ? cuda::HcComb::kLogits : cuda::HcComb::kProjected;
}

cuda::HcDims hc_dims(const ModelConfig& c) {
  cuda::HcDims d;
  d.hc = c.hc_mult;
  d.D = c.hidden;
  d.sinkhorn_iters = c.hc_sinkhorn_iters;
  d.hc_eps = float(c.hc_eps);
  d.norm_eps = float(c.norm_eps);
  return d;
}

// Device -> host copy of a trace array (pageable destination; read after the step's final sync).
Status trace_copy(std::vector<int32_t>& dst, const int32_t* src, int64_t count, cudaStream_t stream) {
  dst.resize(size_t(count));
  return cuda::cuda_status(cudaMemcpyAsync(dst.data(), src, size_t(count) * 4, cudaMemcpyDeviceToHost, stream),
                           "cudaMemcpyAsync (trace)");
}

}  // namespace

Status ForwardPass::gemm(const __nv_bfloat16* x, int64_t ldx, int m, const cuda::W4A16Weight& w, __nv_bfloat16* y,
                         int64_t ldy, cuda::SplitSumView* deferred) const {
  return gemm_on(stream_, ws_.w4a16.view(), x, ldx, m, w, y, ldy, deferred);
}

Status ForwardPass::gemm_on(cudaStream_t stream, const cuda::W4A16WorkspaceView& ws, const __nv_bfloat16* x,
                            int64_t ldx, int m, const cuda::W4A16Weight& w, __nv_bfloat16* y, int64_t ldy,
                            cuda::SplitSumView* deferred) const {
  cuda::W4A16GemmArgs g;
  g.x = x;
  g.ldx = ldx;
  g.m = m;
  g.w = w;
  g.y = y;
  g.ldy = ldy;
  if (deferred != nullptr) return cuda::w4a16_gemm_deferred(g, ws, stream, deferred);
  return cuda::w4a16_gemm(g, ws, stream);
}

Status ForwardPass::layers(const cuda::StepBatchView& b, TraceSink* trace) const {
  mark(StepCategory::kOther);
  DSV4_RETURN_IF_ERROR(
      cuda::embed_streams(w_.embed, cfg_.vocab_size, cfg_.hidden, b.token_ids, b.n_tokens, cfg_.hc_mult, a_.X, stream_));
  if (trace) {
    trace->selected.assign(size_t(cfg_.n_layers), {});
    trace->experts.assign(size_t(cfg_.n_layers), {});
  }
  // Layer 0's HCPre; every later HCPre is fused with the HCPost before it (ops.h hc_post_pre_norm).
  mark(StepCategory::kMhcNorm);
  const LayerDeviceWeights& L0 = w_.layers[0];
  DSV4_RETURN_IF_ERROR(cuda::hc_pre_norm(a_.X, b.n_tokens, L0.hc_attn, L0.attn_norm, hc_dims(cfg_), a_.x, a_.mix,
                                         stream_, comb_mode(b.n_tokens)));
  prefetch_forks_ = 0;
  Status st = Status::ok();
  for (int l = 0; l < cfg_.n_layers && st.is_ok(); ++l) st = layer(l, b, trace).with_context(fmt::format("layer {}", l));
  // The prefetch branch joins here, after an error too: the step's caller synchronizes only the
  // model's stream, and a capture must end with every forked stream joined.
  if (prefetch_forks_ > 0) {
    const WeightPrefetch& p = prefetch_;
    const cudaError_t rec = cudaEventRecord(p.branch.join, p.branch.stream);
    const cudaError_t joined = rec == cudaSuccess ? cudaStreamWaitEvent(stream_, p.branch.join, 0) : rec;
    DSV4_RETURN_IF_ERROR(st);
    DSV4_RETURN_IF_ERROR(cuda::cuda_status(joined, "joining the weight prefetch branch"));
  }
  return st;
}

bool ForwardPass::prefetching(int n_tokens) const {
  return prefetch_.branch.stream != nullptr && prefetch_.wo_a_bytes > 0 && n_tokens <= WeightPrefetch::kMaxRows &&
         prof_ == nullptr;
}

Status ForwardPass::fork_prefetch(int l) const {
  const LayerDeviceWeights& L = w_.layers[size_t(l)];
  if (L.wo_a8.codes != nullptr) return Status::ok();  // the fp8 form: not asked for (yet)
  const int64_t n_rows = int64_t(cfg_.o_groups) * cfg_.o_lora_rank, row_bytes = int64_t(cfg_.group_in_dim()) * 2;
  const cuda::RowPrefixes rows{.base = L.wo_a,
                               .rows = n_rows,
                               .row_stride = row_bytes,
                               .prefix_bytes = cuda::prefix_for_budget(n_rows, row_bytes, prefetch_.wo_a_bytes)};
  if (rows.prefix_bytes == 0) return Status::ok();
  const SideStream& p = prefetch_.branch;
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaEventRecord(p.fork, stream_), "cudaEventRecord (prefetch fork)"));
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaStreamWaitEvent(p.stream, p.fork, 0), "cudaStreamWaitEvent (prefetch fork)"));
  ++prefetch_forks_;  // from here on layers() joins, whatever the launch returns
  return cuda::l2_prefetch_rows(rows, p.stream).with_context("wo_a's L2 prefetch");
}

Status ForwardPass::layer(int l, const cuda::StepBatchView& b, TraceSink* trace) const {
  const LayerDeviceWeights& L = w_.layers[size_t(l)];
  const cuda::HcDims dims = hc_dims(cfg_);
  const int T = b.n_tokens, D = cfg_.hidden;

  // attention sublayer (its HCPre + attn_norm already ran: layers() or the previous layer's end)
  cuda::SplitSumView y_split;
  DSV4_RETURN_IF_ERROR(attention(l, b, trace, &y_split));
  // attention HCPost fused with the MoE sublayer's HCPre + ffn_norm
  mark(StepCategory::kMhcNorm);
  DSV4_RETURN_IF_ERROR(cuda::hc_post_pre_norm(a_.X, a_.y, a_.mix, T, L.hc_ffn, L.ffn_norm, dims, a_.x, a_.mix,
                                              stream_, comb_mode(T), &y_split));

  // MoE sublayer: router + experts + shared expert (bf16 y) -> HCPost
  cuda::MoeArgs m;
  m.x = a_.x;
  m.ldx = D;
  m.token_ids = b.token_ids;
  m.m = T;
  m.y = a_.y;
  m.ldy = D;
  // The sum over each token's expert rows is left to the next layer's HCPre (the last layer's
  // plain HCPost reads y).
  cuda::PairSumView moe_y;
  if (l + 1 < cfg_.n_layers && T <= cuda::kHcDeferredYMaxTokens) m.deferred = &moe_y;
  mark(StepCategory::kMoe);
  DSV4_RETURN_IF_ERROR(cuda::moe_forward(L.moe, m, ws_.moe, stream_));
  if (trace)
    DSV4_RETURN_IF_ERROR(trace_copy(trace->experts[size_t(l)], ws_.moe.topk_ids(), int64_t(T) * cfg_.n_experts_per_tok,
                                    stream_));
  mark(StepCategory::kMhcNorm);
  if (l + 1 == cfg_.n_layers) {
    if (comb_mode(T) == cuda::HcComb::kLogits) DSV4_RETURN_IF_ERROR(cuda::hc_sinkhorn(a_.mix, T, dims, stream_));
    return cuda::hc_post(a_.X, a_.y, a_.mix, T, dims, stream_);
  }
  // MoE HCPost fused with the next layer's attention HCPre + attn_norm
  const LayerDeviceWeights& N = w_.layers[size_t(l + 1)];
  return cuda::hc_post_pre_norm(a_.X, a_.y, a_.mix, T, N.hc_attn, N.attn_norm, dims, a_.x, a_.mix, stream_,
                                comb_mode(T), nullptr, &moe_y);
}

Status ForwardPass::compress(int l, const cuda::StepBatchView& b, cudaStream_t stream, const Blas& blas,
                             const cuda::QueryNormRope* q_heads) const {
  const LayerDeviceWeights& L = w_.layers[size_t(l)];
  const LayerKvState& kv = kv_.layers[size_t(l)];
  const ProjColumns& pc = L.proj;
  const int T = b.n_tokens, D = cfg_.hidden;
  // Every dense projection of x in one fp32-output GEMM (the reference keeps them unrounded).
  mark(StepCategory::kDenseLinear);
  DSV4_RETURN_IF_ERROR(blas.gemm_f32_out(a_.x, D, T, L.wproj, pc.n, D, a_.proj, pc.n));
  mark(StepCategory::kCompressor);
  // Compressors run before attention: an entry completed by a row of this step is visible to the
  // later rows (the reference pushes the whole chunk first).
  if (L.spec.attn != AttnType::kCsa)
    return cuda::compressor_forward(b, a_.proj + pc.comp_a, a_.proj + pc.comp_z, pc.n, L.comp, kv.comp_state,
                                    kv.view.entries, kv.view.entry_bytes, stream, q_heads)
        .with_context("main compressor");
  // Both compressors' emits in one launch (the same records as two compressor_forward calls).
  const cuda::CompressorCall main_comp{a_.proj + pc.comp_a, a_.proj + pc.comp_z, pc.n, L.comp,
                                       kv.comp_state, kv.view.entries, kv.view.entry_bytes};
  const cuda::CompressorCall idx_comp{a_.proj + pc.idx_a, a_.proj + pc.idx_z, pc.n, L.idx_comp,
                                      kv.idx_state, kv.view.index_keys, kv.view.index_key_bytes};
  return cuda::compressor_forward_pair(b, main_comp, idx_comp, stream).with_context("main and indexer compressors");
}

Status ForwardPass::fork_compress(int l, const cuda::StepBatchView& b) const {
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaEventRecord(side_.fork, stream_), "cudaEventRecord (fork)"));
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaStreamWaitEvent(side_.stream, side_.fork, 0), "cudaStreamWaitEvent (fork)"));
  const Status st = compress(l, b, side_.stream, ws_.side_blas);
  // The join point is recorded even after an error, and then waited for at once, so the model's
  // stream (which the step's caller synchronizes) never runs ahead of the branch's launches.
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaEventRecord(side_.join, side_.stream), "cudaEventRecord (join)"));
  if (!st.is_ok()) {
    cudaStreamWaitEvent(stream_, side_.join, 0);
    return st;
  }
  return Status::ok();
}

Status ForwardPass::fork_query(int l, const cuda::StepBatchView& b) const {
  const LayerDeviceWeights& L = w_.layers[size_t(l)];
  const ModelConfig& c = cfg_;
  const int T = b.n_tokens, H = c.n_heads, d = c.head_dim;
  DSV4_RETURN_IF_ERROR(cuda::cuda_status(cudaEventRecord(side_.query_fork, stream_), "cudaEventRecord (query fork)"));
  DSV4_RETURN_IF_ERROR(
      cuda::cuda_status(cudaStreamWaitEvent(side_.stream, side_.query_fork, 0), "cudaStreamWaitEvent (query fork)"));
  const Status st = [&]() -> Status {
    DSV4_RETURN_IF_ERROR(gemm_on(side_.stream, ws_.side_w4a16.view(), a_.qkv, c.q_lora_rank + d, T, L.wq_b, a_.q,
                                 int64_t(H) * d)
                             .with_context("wq_b (query branch)"));
    return cuda::q_norm_rope(a_.q, T, H, d, c.rope_dim, b.token_pos, L.inv_freq, float(c.norm_eps), side_.stream);
  }();
  // Recorded even after an error: the caller's join then waits for what was launched.
  DSV4_RETURN_IF_ERROR(
      cuda::cuda_status(cudaEventRecord(side_.query_join, side_.stream), "cudaEventRecord (query join)"));
  return st;
}

Status ForwardPass::attention(int l, const cuda::StepBatchView& b, TraceSink* trace,
                              cuda::SplitSumView* y_split) const {
  const LayerDeviceWeights& L = w_.layers[size_t(l)];
  const LayerKvState& kv = kv_.layers[size_t(l)];
  const ModelConfig& c = cfg_;
  const int T = b.n_tokens, D = c.hidden, H = c.n_heads, d = c.head_dim, r = c.rope_dim, ql = c.q_lora_rank;
  const int64_t ld_qkv = ql + d;
  const float eps = float(c.norm_eps);
  const bool csa = L.spec.attn == AttnType::kCsa, compressed = L.spec.attn != AttnType::kSliding;
  // The attention query heads' norm + RoPE, for the launches that take it in extra blocks.
  const cuda::QueryNormRope qn{a_.q, H, d, r, L.inv_freq, eps};
  // The compressor branch (SideStream) starts here, beside the query path, where the projection
  // runs on cuBLAS, whose plain launch would otherwise stop the chain of programmatic launches
  // (H200, 20 layers, batch 32: 13.04-13.05 -> 12.83-12.87 ms per step). Where it runs on the
  // weight-streaming kernel (decode batches of 1..4), which streams its weights during the kernel
  // before it, the fork and join cost more than the branch hides (batch 1: 3.12 -> 3.17 ms), so
  // those stay on the model's stream (bench/results/forward_h200.md) unless the query branch,
  // below, takes them on CSA layers. Profiled steps keep one stream, so
  // that each category's events time only its own launches.
  const bool branch = compressed && compressor_branch_ && side_.stream != nullptr && prof_ == nullptr &&
                      ws_.blas.f32_out_on_cublas(a_.x, D, T, L.wproj, L.proj.n, D, a_.proj, L.proj.n);
  if (branch) DSV4_RETURN_IF_ERROR(fork_compress(l, b));
  // The query branch (GpuModelOptions::query_branch) takes the side stream where the compressor
  // branch does not, on CSA layers: the compress launches forked at the layer's start (kCsaLate:
  // after wqkv), joined before the indexer's prep; wq_b and the heads' norm + RoPE forked after
  // the q norm, joined before attention.
  const bool side_free = !branch && side_.stream != nullptr && side_.query_fork != nullptr && prof_ == nullptr;
  const bool query_fork = side_free && csa && query_branch_ != QueryBranch::kOff;
  const bool compress_late = query_branch_ == QueryBranch::kCsaLate;
  bool compress_forked = false, query_forked = false;

  // The query path, beside the branch; once forked, the model's stream joins the branch whatever
  // it returns (the step's caller synchronizes only the model's stream, and the next step rewrites
  // what the branch reads).
  const int nI = c.index_n_heads, dI = c.index_head_dim;
  auto query_path = [&]() -> Status {
    // query and KV projections in one GEMM: qkv = [bf16(x wq_a^T) | bf16(x wkv^T)]
    mark(StepCategory::kW4A16Linear);
    if (prefetch_.early && prefetching(T)) DSV4_RETURN_IF_ERROR(fork_prefetch(l));
    auto fork_compress_once = [&]() -> Status {
      compress_forked = true;  // from here on the model's stream joins the branch, whatever it returns
      return fork_compress(l, b);
    };
    if (query_fork && !compress_late) DSV4_RETURN_IF_ERROR(fork_compress_once());
    DSV4_RETURN_IF_ERROR(gemm(a_.x, D, T, L.wqkv, a_.qkv, ld_qkv));
    if (query_fork && compress_late) DSV4_RETURN_IF_ERROR(fork_compress_once());
    mark(StepCategory::kMhcNorm);
    // qa = bf16(rmsnorm(qa, q_norm)); kv -> kv_norm, rope, fp8 nope -> 584-byte records in the chunk
    // Decode steps also copy the records into the window rings here (no window_save below).
    DSV4_RETURN_IF_ERROR(cuda::qkv_norm_finish(a_.qkv, ld_qkv, T, ql, L.q_norm, eps, ql, L.kv_norm, eps, b.token_pos,
                                               L.inv_freq, kv.view, kv.view.chunk, stream_,
                                               b.one_row_per_seq ? &b : nullptr));
    // q = bf16(qa wq_b^T), then per head unweighted rmsnorm and rope (CSA layers: in the indexer's
    // prep launch below or on the query branch; HCA layers: in the compressor's emit launch; one
    // launch fewer either way; attention is the first reader of q). The HCA form once measured no
    // gain when a plain cuBLAS launch sat between wq_b and the emit (bench/results/forward_h200.md);
    // the decode projection is now a programmatic launch.
    mark(StepCategory::kW4A16Linear);
    if (query_fork) {
      query_forked = true;  // from here on the model's stream joins the branch, whatever it returns
      DSV4_RETURN_IF_ERROR(fork_query(l, b));
    } else {
      DSV4_RETURN_IF_ERROR(gemm(a_.qkv, ld_qkv, T, L.wq_b, a_.q, int64_t(H) * d));
    }
    // wo_a's weights into L2 while the attention chain (latency-bound kernels) keeps DRAM idle:
    // forked after wq_b, the last weight stream before wo_a's (A/B runs; by default the fork is
    // at the layer's start, above, whose longer window measured faster).
    if (!prefetch_.early && prefetching(T)) DSV4_RETURN_IF_ERROR(fork_prefetch(l));
    // HCA layers whose compressor runs here take the heads' norm + RoPE in its emit launch (one
    // launch fewer between wq_b and attention; a profiled step counts it as the compressors'
    // time); SWA layers and those with the compressor branch launch q_norm_rope.
    const bool compress_here = compressed && !branch && !compress_forked;
    mark(StepCategory::kMhcNorm);
    if (!csa && !query_forked && !compress_here)
      DSV4_RETURN_IF_ERROR(cuda::q_norm_rope(a_.q, T, H, d, r, b.token_pos, L.inv_freq, eps, stream_));
    if (compress_here) DSV4_RETURN_IF_ERROR(compress(l, b, stream_, ws_.blas, csa ? nullptr : &qn));
    if (csa) {
      mark(StepCategory::kW4A16Linear);
      DSV4_RETURN_IF_ERROR(gemm(a_.qkv, ld_qkv, T, L.idx_wq_b, a_.qi, int64_t(nI) * dI));
    }
    return Status::ok();
  };
  const Status query_st = query_path();
  // The query branch joins before attention, its first reader (and on every return before it).
  struct QueryJoin {
    const ForwardPass* fp;
    bool armed;
    ~QueryJoin() {
      if (armed) cudaStreamWaitEvent(fp->stream_, fp->side_.query_join, 0);
    }
    Status join() {
      armed = false;
      return cuda::cuda_status(cudaStreamWaitEvent(fp->stream_, fp->side_.query_join, 0),
                               "cudaStreamWaitEvent (query join)");
    }
  } query_join{this, query_forked};
  // The branch joins before the first reader of the projections and the compressed entries.
  if (branch || compress_forked) {
    const cudaError_t joined = cudaStreamWaitEvent(stream_, side_.join, 0);
    DSV4_RETURN_IF_ERROR(query_st);
    DSV4_RETURN_IF_ERROR(cuda::cuda_status(joined, "cudaStreamWaitEvent (join)"));
  }
  DSV4_RETURN_IF_ERROR(query_st);
  if (csa) {
    mark(StepCategory::kIndexer);
    // Query prep and head weights in one launch; the reference's weight scale, computed the same
    // way (double, then float).
    const float scale = float(1.0 / std::sqrt(double(dI)) / std::sqrt(double(nI)));
    const ProjColumns& pc = L.proj;
    DSV4_RETURN_IF_ERROR(cuda::indexer_prepare(a_.qi, T, nI, dI, r, b.token_pos, L.inv_freq, a_.proj + pc.idx_w, pc.n,
                                               scale, a_.wi, stream_, query_forked ? nullptr : &qn));
    DSV4_RETURN_IF_ERROR(
        cuda::indexer_topk(b, a_.qi, a_.wi, nI, kv.view, c.index_topk, ws_.indexer, a_.selected, stream_));
    if (trace)
      DSV4_RETURN_IF_ERROR(trace_copy(trace->selected[size_t(l)], a_.selected, int64_t(T) * c.index_topk, stream_));
  }

  cuda::AttentionParams ap;
  ap.n_heads = H;
  ap.head_dim = d;
  ap.rope_dim = r;
  ap.softmax_scale = float(1.0 / std::sqrt(double(d)));
  ap.sink = L.sink;
  ap.inv_freq = L.inv_freq;
  ap.topk = c.index_topk;
  ap.head_groups = attention_head_groups_;
  mark(StepCategory::kAttention);
  if (query_forked) DSV4_RETURN_IF_ERROR(query_join.join());
  DSV4_RETURN_IF_ERROR(
      cuda::sparse_attention(b, a_.q, kv.view, csa ? a_.selected : nullptr, ap, ws_.attention, a_.o, stream_));

  // output: u = bf16(grouped wo_a), y = bf16(u wo_b^T)
  mark(StepCategory::kDenseLinear);
  if (L.wo_a8.codes != nullptr)
    DSV4_RETURN_IF_ERROR(ws_.blas.grouped_fp8_bf16_out(a_.o, T, c.o_groups, L.wo_a8, c.o_lora_rank, c.group_in_dim(),
                                                       a_.u, ws_.wo_a_bf16));
  else
    DSV4_RETURN_IF_ERROR(
        ws_.blas.grouped_bf16_out(a_.o, T, c.o_groups, L.wo_a, c.o_lora_rank, c.group_in_dim(), a_.u));
  mark(StepCategory::kW4A16Linear);
  // wo_b's split-K sum is left to the HCPost (no kernel until then uses the W4A16 workspace).
  DSV4_RETURN_IF_ERROR(gemm(a_.u, int64_t(c.o_groups) * c.o_lora_rank, T, L.wo_b, a_.y, D, y_split));
  if (b.one_row_per_seq) return Status::ok();  // the ring copy came with qkv_norm_finish
  mark(StepCategory::kAttention);
  // The ring advances after attention read it (the chunk's rows may overwrite older positions).
  return cuda::window_save(b, kv.view, stream_);
}

Status ForwardPass::head(const __nv_bfloat16* X, const int32_t* rows, int n) const {
  if (n < 1 || n > a_.logit_rows) return invalid_argument("head: {} rows outside 1..{}", n, a_.logit_rows);
  mark(StepCategory::kHead);
  DSV4_RETURN_IF_ERROR(cuda::hc_head_norm(X, rows, n, w_.hc_head, w_.norm, hc_dims(cfg_), a_.xh, stream_));
  return ws_.blas.gemm_f32_out(a_.xh, cfg_.hidden, n, w_.head, cfg_.vocab_size, cfg_.hidden, a_.logits, cfg_.vocab_size);
}

}  // namespace dsv4::gpu
