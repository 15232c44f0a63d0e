// gpu_model.cpp: GpuModel: load (weights, KV state, buffers, workspaces, CUDA graphs of decode
// steps), and the step driver: validate on the host, one copy of the step arrays to static
// device buffers, the launch sequence (forward_pass.h) eagerly or as a graph replay, the logits
// copy, one synchronization.
#include "gpu/gpu_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/check.h"
#include "cuda/common/arch.h"
#include "cuda/common/cuda_check.h"
#include "gpu/device_arena.h"
#include "gpu/device_weights.h"
#include "gpu/forward_pass.h"
#include "gpu/kv_state.h"
#include "gpu/memory_estimate.h"
#include "gpu/model_support.h"
#include "gpu/step_plan.h"

namespace dsv4::gpu {
namespace {

using cuda::cuda_status;

constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;  // what cuBLAS asks for on Hopper
constexpr int kMaxStepTokens = 8192;                       // the W4A16 GEMM's M range
constexpr int kMinLogitRows = 64;                          // head chunk of all_rows steps (logits f32 [64, vocab])

// The model's stream and the event that says the step inputs have left the pinned staging area;
// the side stream and its events (GpuModelOptions::compressor_branch, query_branch; null when both
// are off).
// Declared first in Impl, so it outlives every member that still refers to the streams.
struct StreamOwner {
  cudaStream_t stream = nullptr;
  cudaEvent_t staging_free = nullptr;
  SideStream side;
  SideStream prefetch;  // the weight prefetch branch (GpuModelOptions::l2_prefetch_mb; null when off)
  ~StreamOwner() {
    for (SideStream* b : {&prefetch, &side}) {
      if (b->query_join) cudaEventDestroy(b->query_join);
      if (b->query_fork) cudaEventDestroy(b->query_fork);
      if (b->join) cudaEventDestroy(b->join);
      if (b->fork) cudaEventDestroy(b->fork);
      if (b->stream) cudaStreamDestroy(b->stream);
    }
    if (staging_free) cudaEventDestroy(staging_free);
    if (stream) cudaStreamDestroy(stream);
  }
};

double gib(size_t b) { return double(b) / double(size_t(1) << 30); }

}  // namespace

struct GpuModel::Impl {
  StreamOwner so;
  ModelConfig cfg;
  GpuModelOptions opts;
  DeviceArena arena;
  DeviceModelWeights w;
  KvState kv;
  Activations act;
  Workspaces ws;
  std::unique_ptr<ForwardPass> pass;
  StepMetaLayout layout;
  PinnedBuffer staging;        // i32 [layout.total_elems], host side of the step arrays
  int32_t* meta = nullptr;     // i32 [layout.total_elems], device side
  std::vector<int64_t> slot_next_pos;  // [max_seqs] length of each slot's sequence
  struct Graph {
    int batch = 0;
    cudaGraphExec_t exec = nullptr;
  };
  std::vector<Graph> graphs;   // increasing batch size
  bool graph_replay = true;
  bool last_graph = false;
  StepProfiler prof;
  bool profiling = false;
  std::vector<std::pair<std::string, double>> last_prof;
  double load_seconds = 0;

  ~Impl() {
    if (so.stream) cudaStreamSynchronize(so.stream);
    if (so.side.stream) cudaStreamSynchronize(so.side.stream);
    if (so.prefetch.stream) cudaStreamSynchronize(so.prefetch.stream);
    for (Graph& g : graphs) cudaGraphExecDestroy(g.exec);
  }

  StepLimits limits() const {
    return {opts.max_seqs, opts.max_tokens_per_step, cfg.vocab_size, opts.n_kv_blocks, opts.max_positions};
  }

  // The device view of the step arrays for a shape written by fill_step.
  cuda::StepBatchView batch_view(const StepShape& sh) const {
    cuda::StepBatchView b;
    b.n_tokens = sh.n_tokens;
    b.n_seqs = sh.n_seqs;
    b.token_ids = meta + layout.token_ids;
    b.token_seq = meta + layout.token_seq;
    b.token_pos = meta + layout.token_pos;
    b.seq_slot = meta + layout.seq_slot;
    b.seq_pos0 = meta + layout.seq_pos0;
    b.seq_tok0 = meta + layout.seq_tok0;
    b.seq_ntok = meta + layout.seq_ntok;
    b.block_table = meta + layout.block_table;
    b.max_blocks = layout.max_blocks;
    b.one_row_per_seq = sh.max_seq_rows <= 1;
    return b;
  }

  // Waits until the previous step's inputs have left the staging area (normally long done).
  Status staging_wait() { return cuda_status(cudaEventSynchronize(so.staging_free), "cudaEventSynchronize"); }

  // The step arrays to the device: the fixed part whole, the block table as used rows x columns.
  Status upload_step(const StepShape& sh) {
    const int32_t* h = staging.as<int32_t>();
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(meta, h, size_t(layout.fixed_elems) * 4, cudaMemcpyHostToDevice,
                                                     so.stream),
                                     "cudaMemcpyAsync (step arrays)"));
    if (sh.n_seqs > 0 && sh.used_blocks > 0) {
      const size_t pitch = size_t(layout.max_blocks) * 4;
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpy2DAsync(meta + layout.block_table, pitch, h + layout.block_table, pitch,
                                                         size_t(sh.used_blocks) * 4, size_t(sh.n_seqs),
                                                         cudaMemcpyHostToDevice, so.stream),
                                       "cudaMemcpy2DAsync (block tables)"));
    }
    return cuda_status(cudaEventRecord(so.staging_free, so.stream), "cudaEventRecord");
  }

  // The launches of a step whose arrays are on the device: layers, then the head over the first
  // n_head_rows entries of logit_rows (0: no head).
  Status launch(const StepShape& sh, TraceSink* trace) {
    const cuda::StepBatchView b = batch_view(sh);
    DSV4_RETURN_IF_ERROR(pass->layers(b, trace));
    if (sh.n_head_rows > 0) DSV4_RETURN_IF_ERROR(pass->head(act.X, meta + layout.logit_rows, sh.n_head_rows));
    return Status::ok();
  }

  // Captures the decode step of `batch` sequences: warm-up on an all-padding step (nothing of it
  // touches KV state), capture, instantiate, and one replay to prove the graph runs.
  Status capture(int batch) {
    DSV4_RETURN_IF_ERROR(staging_wait());
    const StepShape sh = fill_step({}, layout, batch, false, staging.as<int32_t>());
    DSV4_RETURN_IF_ERROR(upload_step(sh));
    DSV4_RETURN_IF_ERROR(launch(sh, nullptr).with_context("warm-up"));
    DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(so.stream), "warm-up"));
    DSV4_RETURN_IF_ERROR(
        cuda_status(cudaStreamBeginCapture(so.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
    const Status st = launch(sh, nullptr);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(so.stream, &graph);
    if (!st.is_ok() || end != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();  // a failed capture leaves an error behind; the Status carries it
      return st.is_ok() ? cuda_status(end, "cudaStreamEndCapture") : st;
    }
    Graph g;
    g.batch = batch;
    const cudaError_t inst = cudaGraphInstantiate(&g.exec, graph, 0);
    cudaGraphDestroy(graph);
    DSV4_RETURN_IF_ERROR(cuda_status(inst, "cudaGraphInstantiate"));
    graphs.push_back(g);
    DSV4_RETURN_IF_ERROR(cuda_status(cudaGraphLaunch(g.exec, so.stream), "cudaGraphLaunch"));
    return cuda_status(cudaStreamSynchronize(so.stream), "first graph replay");
  }

  // The fp8 wo_a's large-step form (its bf16 copy in ws.wo_a_bf16, then cuBLAS's strided-batched
  // GEMM) runs in none of the decode warm-ups, and its first call costs ~0.1 s (H200, 4 and 20
  // layers alike: a one-off, not per layer; bench/results/ab_h200_41af52e): the first prefill paid
  // it. One call at load on zeroed inputs, at the largest step, pays it here instead.
  Status warm_fp8_wo_a_large_steps() {
    if (ws.wo_a_bf16 == nullptr) return Status::ok();
    const ModelConfig& c = cfg;
    const auto l = std::find_if(w.layers.begin(), w.layers.end(),
                                [](const LayerDeviceWeights& x) { return x.wo_a8.codes != nullptr; });
    if (l == w.layers.end()) return Status::ok();
    const int T = opts.max_tokens_per_step;
    DSV4_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(act.o, 0, size_t(T) * c.q_dim() * 2, so.stream), "cudaMemsetAsync"));
    DSV4_RETURN_IF_ERROR(ws.blas.grouped_fp8_bf16_out(act.o, T, c.o_groups, l->wo_a8, c.o_lora_rank, c.group_in_dim(),
                                                      act.u, ws.wo_a_bf16)
                             .with_context("warming the fp8 wo_a's large-step GEMM"));
    return cuda_status(cudaStreamSynchronize(so.stream), "fp8 wo_a warm-up");
  }

  Status allocate_activations() {
    const ModelConfig& c = cfg;
    const int64_t T = opts.max_tokens_per_step;
    const MemCategory cat = MemCategory::kActivations;
    act.max_tokens = int(T);
    // Room for one output row per sequence; all_rows steps run the head in chunks of this many.
    act.logit_rows = std::max(opts.max_seqs, std::min(opts.max_tokens_per_step, kMinLogitRows));
    for (const LayerDeviceWeights& l : w.layers) act.proj_cols = std::max(act.proj_cols, l.proj.n);
    using bf16 = __nv_bfloat16;
    DSV4_ASSIGN_OR_RETURN(act.X, arena.alloc_n<bf16>(T * c.hc_dim(), cat, "residual streams"));
    DSV4_ASSIGN_OR_RETURN(act.x, arena.alloc_n<bf16>(T * c.hidden, cat, "sublayer input"));
    DSV4_ASSIGN_OR_RETURN(act.mix, arena.alloc_n<float>(T * (c.hc_mult + c.hc_mult * c.hc_mult), cat, "mHC mix"));
    DSV4_ASSIGN_OR_RETURN(act.qkv, arena.alloc_n<bf16>(T * (c.q_lora_rank + c.head_dim), cat, "qa|kv"));
    DSV4_ASSIGN_OR_RETURN(act.q, arena.alloc_n<bf16>(T * c.q_dim(), cat, "queries"));
    DSV4_ASSIGN_OR_RETURN(act.o, arena.alloc_n<bf16>(T * c.q_dim(), cat, "attention output"));
    DSV4_ASSIGN_OR_RETURN(act.u, arena.alloc_n<bf16>(T * c.o_groups * c.o_lora_rank, cat, "wo_a output"));
    DSV4_ASSIGN_OR_RETURN(act.y, arena.alloc_n<bf16>(T * c.hidden, cat, "sublayer output"));
    if (act.proj_cols > 0) {
      DSV4_ASSIGN_OR_RETURN(act.proj, arena.alloc_n<float>(T * act.proj_cols, cat, "compressor projections"));
      DSV4_ASSIGN_OR_RETURN(act.qi, arena.alloc_n<bf16>(T * c.index_n_heads * c.index_head_dim, cat, "indexer queries"));
      DSV4_ASSIGN_OR_RETURN(act.wi, arena.alloc_n<float>(T * c.index_n_heads, cat, "indexer weights"));
      DSV4_ASSIGN_OR_RETURN(act.selected, arena.alloc_n<int32_t>(T * c.index_topk, cat, "indexer selection"));
    }
    DSV4_ASSIGN_OR_RETURN(act.xh, arena.alloc_n<bf16>(int64_t(act.logit_rows) * c.hidden, cat, "head input"));
    DSV4_ASSIGN_OR_RETURN(act.logits, arena.alloc_n<float>(int64_t(act.logit_rows) * c.vocab_size, cat, "logits"));
    return Status::ok();
  }

  Status create_workspaces() {
    const ModelConfig& c = cfg;
    const int T = opts.max_tokens_per_step;
    const MemCategory cat = MemCategory::kWorkspaces;
    DSV4_ASSIGN_OR_RETURN(ws.w4a16, cuda::W4A16Workspace::create());
    arena.account(cuda::W4A16Workspace::kDefaultPartialBytes + size_t(cuda::W4A16Workspace::kDefaultCounters) * 4, cat);
    DSV4_ASSIGN_OR_RETURN(
        ws.moe, cuda::MoeWorkspace::create(T, c.hidden, c.moe_inter, c.n_routed_experts, c.n_experts_per_tok));
    arena.account(ws.moe.bytes(), cat);
    ws.has_indexer = std::any_of(c.layers.begin(), c.layers.end(),
                                 [](const LayerSpec& l) { return l.attn == AttnType::kCsa; });
    if (ws.has_indexer) {
      DSV4_ASSIGN_OR_RETURN(ws.indexer, cuda::IndexerWorkspace::create(T, opts.max_positions, 4, c.index_topk));
      arena.account(ws.indexer.bytes(), cat);
    }
    DSV4_ASSIGN_OR_RETURN(ws.attention, cuda::AttentionWorkspace::create(T, c.n_heads, c.head_dim));
    arena.account(ws.attention.bytes(), cat);
    DSV4_ASSIGN_OR_RETURN(void* blas_ws, arena.alloc(kBlasWorkspaceBytes, cat, "the cuBLAS workspace"));
    const bool any_fp8_wo_a = std::any_of(w.layers.begin(), w.layers.end(),
                                          [](const LayerDeviceWeights& l) { return l.wo_a8.codes != nullptr; });
    if (any_fp8_wo_a && T > Blas::kDecodeMaxRows) {
      DSV4_ASSIGN_OR_RETURN(ws.wo_a_bf16, arena.alloc_n<__nv_bfloat16>(int64_t(c.o_groups) * c.o_lora_rank * c.group_in_dim(),
                                                                        cat, "wo_a as bf16 (fp8 weights, large steps)"));
    }
    if (opts.attention_head_groups != 0 && opts.attention_head_groups != 1 && opts.attention_head_groups != 4)
      return invalid_argument("attention_head_groups must be 0 (the plan picks), 1 or 4, found {}",
                              opts.attention_head_groups);
    const std::string& dd = opts.dense_decode;
    if (dd != "none" && dd != "woa" && dd != "proj" && dd != "woa,proj")
      return invalid_argument("dense_decode must be none, woa, proj or woa,proj, found '{}'", dd);
    const bool woa = dd.find("woa") != std::string::npos, proj = dd.find("proj") != std::string::npos;
    DSV4_RETURN_IF_ERROR(ws.blas.init(so.stream, blas_ws, kBlasWorkspaceBytes, woa, proj));
    if (so.side.stream == nullptr) return Status::ok();
    if (opts.query_branch != QueryBranch::kOff) {
      // wq_b alone at 1..4 rows: a few MB of split-K partials at most.
      constexpr size_t kSidePartialBytes = size_t(8) << 20;
      constexpr int kSideCounters = 1 << 12;
      DSV4_ASSIGN_OR_RETURN(ws.side_w4a16, cuda::W4A16Workspace::create(kSidePartialBytes, kSideCounters));
      arena.account(kSidePartialBytes + size_t(kSideCounters) * 4, cat);
    }
    // The branch's projections run on cuBLAS (more than 4 rows). No cuBLAS call on the model's
    // stream falls between fork and join today, but a handle and workspace of its own keep that
    // from being an ordering rule every later change would have to respect (32 MB).
    DSV4_ASSIGN_OR_RETURN(void* side_ws, arena.alloc(kBlasWorkspaceBytes, cat, "the compressor branch's cuBLAS workspace"));
    return ws.side_blas.init(so.side.stream, side_ws, kBlasWorkspaceBytes, woa, proj);
  }

  // The weight prefetch branch's stream and events, where asked for and the GPU has the bulk L2
  // prefetch (elsewhere the option is ignored: nothing to tune on an SM86's 6 MB L2).
  Status create_prefetch_branch() {
    DSV4_ASSIGN_OR_RETURN(const cuda::DeviceInfo* dev, cuda::current_device_info());
    const int l2_mb = int(dev->l2_bytes >> 20);
    if (opts.l2_prefetch_mb < 0 || (opts.l2_prefetch_mb > l2_mb && cuda::l2_prefetch_supported(*dev)))
      return invalid_argument("l2_prefetch_mb must be in 0..{} (the L2 of the {}), found {}", l2_mb, dev->name,
                              opts.l2_prefetch_mb);
    if (opts.l2_prefetch_mb == 0 || !cuda::l2_prefetch_supported(*dev)) return Status::ok();
    DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&so.prefetch.stream, cudaStreamNonBlocking),
                                     "cudaStreamCreateWithFlags (weight prefetch)"));
    for (cudaEvent_t* e : {&so.prefetch.fork, &so.prefetch.join})
      DSV4_RETURN_IF_ERROR(
          cuda_status(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreateWithFlags (prefetch)"));
    return Status::ok();
  }

  // n_kv_blocks: as asked, else enough for every slot at max_positions, capped by the memory left
  // (less a reserve for graphs, cuBLAS and the CUDA context's own growth).
  Status size_kv() {
    const int64_t wanted = int64_t(opts.max_seqs) * blocks_for_positions(opts.max_positions);
    const KvStateSizes probe = kv_state_sizes(cfg, w.layers, opts.max_seqs, opts.max_tokens_per_step, 1);
    if (opts.n_kv_blocks > 0) return Status::ok();
    int64_t n = std::min<int64_t>(wanted, INT32_MAX);
    if (probe.block_bytes > 0) {
      size_t free_b = 0, total_b = 0;
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
      const int64_t reserve = device_reserve_bytes(int64_t(total_b));
      const int64_t fixed = probe.slot_bytes * opts.max_seqs + probe.chunk_bytes;
      const int64_t room = int64_t(free_b) - reserve - fixed;
      if (room < probe.block_bytes)
        return Status(StatusCode::kResourceExhausted,
                      fmt::format("no device memory left for the KV pool: {:.2f} GiB free after the weights and "
                                  "buffers, {:.2f} GiB reserved, {:.2f} GiB of slot state for {} slots",
                                  gib(free_b), gib(size_t(reserve)), gib(size_t(fixed)), opts.max_seqs));
      n = std::min(n, room / probe.block_bytes);
    }
    opts.n_kv_blocks = int(n);
    return Status::ok();
  }

  Status load(const ModelConfig& c, const ModelWeights& weights, const GpuModelOptions& o) {
    cfg = c;
    opts = o;
    DSV4_RETURN_IF_ERROR(check_gpu_supported(cfg));
    if (opts.max_positions == 0) opts.max_positions = cfg.max_position_embeddings;
    if (opts.max_seqs < 1) return invalid_argument("max_seqs must be >= 1, found {}", opts.max_seqs);
    if (opts.max_tokens_per_step < 1 || opts.max_tokens_per_step > kMaxStepTokens)
      return invalid_argument("max_tokens_per_step must be in 1..{}, found {}", kMaxStepTokens,
                              opts.max_tokens_per_step);
    if (opts.max_positions < 1 || opts.max_positions > INT32_MAX - 1)
      return invalid_argument("max_positions must be in 1..{}, found {}", INT32_MAX - 1, opts.max_positions);
    if (opts.n_kv_blocks < 0) return invalid_argument("n_kv_blocks must be >= 0, found {}", opts.n_kv_blocks);
    std::vector<int> batches = opts.graph_batch_sizes;
    std::sort(batches.begin(), batches.end());
    batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
    for (int s : batches)
      if (s < 1 || s > opts.max_seqs || s > opts.max_tokens_per_step)
        return invalid_argument("graph batch size {} outside 1..min(max_seqs {}, max_tokens_per_step {})", s,
                                opts.max_seqs, opts.max_tokens_per_step);
    opts.graph_batch_sizes = batches;

    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
      cudaGetLastError();
      return not_found("no CUDA device: the GPU model needs one");
    }
    DSV4_RETURN_IF_ERROR(
        cuda_status(cudaStreamCreateWithFlags(&so.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
    DSV4_RETURN_IF_ERROR(
        cuda_status(cudaEventCreateWithFlags(&so.staging_free, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    const bool any_compressed = std::any_of(cfg.layers.begin(), cfg.layers.end(),
                                            [](const LayerSpec& l) { return l.attn != AttnType::kSliding; });
    if ((opts.compressor_branch || opts.query_branch != QueryBranch::kOff) && any_compressed) {
      DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&so.side.stream, cudaStreamNonBlocking),
                                       "cudaStreamCreateWithFlags (side stream)"));
      for (cudaEvent_t* e : {&so.side.fork, &so.side.join})
        DSV4_RETURN_IF_ERROR(
            cuda_status(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreateWithFlags (branch)"));
      if (opts.query_branch != QueryBranch::kOff)
        for (cudaEvent_t* e : {&so.side.query_fork, &so.side.query_join})
          DSV4_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(e, cudaEventDisableTiming),
                                           "cudaEventCreateWithFlags (query branch)"));
    }

    DSV4_RETURN_IF_ERROR(create_prefetch_branch());

    DSV4_ASSIGN_OR_RETURN(w, upload_weights(cfg, weights, arena, so.stream, opts.wo_a_fp8));
    DSV4_RETURN_IF_ERROR(allocate_activations());
    DSV4_RETURN_IF_ERROR(create_workspaces());
    layout = StepMetaLayout::make(opts.max_tokens_per_step, opts.max_seqs,
                                  int(blocks_for_positions(opts.max_positions)));
    DSV4_ASSIGN_OR_RETURN(staging, PinnedBuffer::create(size_t(layout.total_elems) * 4));
    DSV4_ASSIGN_OR_RETURN(meta, arena.alloc_n<int32_t>(layout.total_elems, MemCategory::kActivations, "step arrays",
                                                       true));
    DSV4_RETURN_IF_ERROR(size_kv());
    const KvStateSizes kv_sizes =
        kv_state_sizes(cfg, w.layers, opts.max_seqs, opts.max_tokens_per_step, opts.n_kv_blocks);
    DSV4_ASSIGN_OR_RETURN(kv, create_kv_state(cfg, w.layers, kv_sizes, arena));
    slot_next_pos.assign(size_t(opts.max_seqs), 0);
    const WeightPrefetch prefetch{.branch = so.prefetch, .wo_a_bytes = int64_t(opts.l2_prefetch_mb) << 20,
                                  .early = opts.l2_prefetch_early};
    pass = std::make_unique<ForwardPass>(cfg, w, kv, act, ws, so.stream, opts.attention_head_groups, so.side, prefetch,
                                         opts.query_branch, opts.compressor_branch);
    DSV4_RETURN_IF_ERROR(prof.init());
    // The whole device, not only the model's stream: zeroed buffers (DeviceBuffer::create) are
    // cleared on the legacy default stream, which the model's non-blocking streams do not wait for.
    DSV4_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "load"));
    for (int s : opts.graph_batch_sizes)
      DSV4_RETURN_IF_ERROR(capture(s).with_context(fmt::format("capturing the decode graph of batch {}", s)));
    DSV4_RETURN_IF_ERROR(warm_fp8_wo_a_large_steps());
    arena.seal();
    return Status::ok();
  }

  Status forward(std::span<const GpuStepSeq> seqs, float* logits_out, bool all_rows, GpuStepTrace* trace) {
    last_graph = false;
    if (seqs.empty()) return Status::ok();
    DSV4_RETURN_IF_ERROR(validate_step(seqs, limits(), slot_next_pos));
    const Graph* graph = nullptr;
    if (graph_replay && !profiling && !all_rows && trace == nullptr && is_pure_decode(seqs))
      for (const Graph& g : graphs)
        if (g.batch >= int(seqs.size())) {
          graph = &g;
          break;
        }
    DSV4_RETURN_IF_ERROR(staging_wait());
    const StepShape sh = fill_step(seqs, layout, graph ? graph->batch : 0, all_rows, staging.as<int32_t>());
    DSV4_RETURN_IF_ERROR(upload_step(sh));
    // From here on the slots' state advances; a failure leaves it unknown, so those slots can
    // only start new sequences afterwards.
    for (const GpuStepSeq& s : seqs) slot_next_pos[size_t(s.slot)] = s.pos0 + int64_t(s.tokens.size());
    const Status st = run(sh, graph, logits_out, all_rows, trace);
    if (!st.is_ok())
      for (const GpuStepSeq& s : seqs) slot_next_pos[size_t(s.slot)] = 0;
    return st;
  }

  Status run(const StepShape& sh, const Graph* graph, float* logits_out, bool all_rows, GpuStepTrace* trace) {
    const int V = cfg.vocab_size;
    TraceSink sink;
    if (graph) {
      DSV4_RETURN_IF_ERROR(cuda_status(cudaGraphLaunch(graph->exec, so.stream), "cudaGraphLaunch"));
      last_graph = true;
    } else {
      StepShape body = sh;
      body.n_head_rows = all_rows ? 0 : sh.n_logits;
      if (profiling) {
        prof.begin(so.stream);
        pass->set_profiler(&prof);
      }
      const Status st = launch(body, trace ? &sink : nullptr);
      pass->set_profiler(nullptr);
      DSV4_RETURN_IF_ERROR(st);
      if (profiling) last_prof = prof.finish();
    }
    if (all_rows) {
      // The head runs over the rows in chunks of the logits buffer, each copied out before the
      // next overwrites it (stream order).
      const int64_t stride = cfg.hc_dim();
      for (int r0 = 0; r0 < sh.n_real_tokens; r0 += act.logit_rows) {
        const int n = std::min(act.logit_rows, sh.n_real_tokens - r0);
        DSV4_RETURN_IF_ERROR(pass->head(act.X + int64_t(r0) * stride, nullptr, n));
        if (logits_out)
          DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(logits_out + int64_t(r0) * V, act.logits,
                                                           size_t(n) * size_t(V) * 4, cudaMemcpyDeviceToHost,
                                                           so.stream),
                                           "cudaMemcpyAsync (logits)"));
      }
    } else if (logits_out && sh.n_logits > 0) {
      DSV4_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(logits_out, act.logits, size_t(sh.n_logits) * size_t(V) * 4,
                                                       cudaMemcpyDeviceToHost, so.stream),
                                       "cudaMemcpyAsync (logits)"));
    }
    if (logits_out == nullptr && trace == nullptr) return Status::ok();
    DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(so.stream), "GpuModel::forward"));
    if (trace) fill_trace(sh, sink, *trace);
    return Status::ok();
  }

  void fill_trace(const StepShape& sh, const TraceSink& sink, GpuStepTrace& trace) const {
    const int L = cfg.n_layers, K = cfg.n_experts_per_tok, topk = cfg.index_topk, T = sh.n_real_tokens;
    trace.selected.assign(size_t(L), {});
    trace.experts.assign(size_t(L), {});
    for (int l = 0; l < L; ++l) {
      const std::vector<int32_t>& sel = sink.selected[size_t(l)];
      if (!sel.empty()) {
        trace.selected[size_t(l)].resize(size_t(T));
        for (int t = 0; t < T; ++t) {
          std::vector<int32_t>& row = trace.selected[size_t(l)][size_t(t)];
          for (int j = 0; j < topk; ++j)
            if (const int32_t e = sel[size_t(t) * size_t(topk) + size_t(j)]; e >= 0) row.push_back(e);
        }
      }
      const std::vector<int32_t>& ex = sink.experts[size_t(l)];
      trace.experts[size_t(l)].assign(ex.begin(), ex.begin() + int64_t(T) * K);
    }
  }

  std::vector<std::string> manifest() const {
    std::vector<std::string> m;
    m.push_back(fmt::format("gpu model: {} layers, vocab {}, numerics bf16 (W4A16 linears, fp8 KV, fp4 indexer keys)",
                            cfg.n_layers, cfg.vocab_size));
    m.push_back(fmt::format("gpu weights: {:.3f} GiB ({} INT4 linears repacked, {:.3f} GiB; bf16 {:.3f} GiB; f32 {:.3f} "
                            "GiB; {} fp8-form linears, {:.3f} GiB), load {:.1f} s",
                            gib(arena.bytes(MemCategory::kWeights)), w.n_int4_linears, gib(w.int4_bytes),
                            gib(w.bf16_bytes), gib(w.f32_bytes), w.n_fp8_linears, gib(w.fp8_bytes), load_seconds));
    if (!w.fp8_refused.empty()) m.push_back("gpu weights: " + w.fp8_refused);
    const KvStateSizes& k = kv.sizes;
    m.push_back(fmt::format("gpu KV: {} blocks x {} B ({:.3f} GiB), {} slots x {} B (window rings + compressor state), "
                            "chunk {} B; {:.3f} GiB in all",
                            k.n_kv_blocks, k.block_bytes, gib(size_t(k.block_bytes) * size_t(k.n_kv_blocks)),
                            k.max_seqs, k.slot_bytes, k.chunk_bytes, gib(arena.bytes(MemCategory::kKvState))));
    m.push_back(fmt::format("gpu buffers: activations {:.3f} GiB for {} tokens/step, workspaces {:.3f} GiB; max "
                            "positions {}; {:.3f} GiB allocated in all",
                            gib(arena.bytes(MemCategory::kActivations)), opts.max_tokens_per_step,
                            gib(arena.bytes(MemCategory::kWorkspaces)), opts.max_positions, gib(arena.bytes())));
    const std::string prefetch =
        so.prefetch.stream != nullptr
            ? fmt::format("{} MB of each layer's wo_a, forked {}, in decode steps of 1..{} rows", opts.l2_prefetch_mb,
                          opts.l2_prefetch_early ? "at the layer's start" : "after wq_b", WeightPrefetch::kMaxRows)
        : opts.l2_prefetch_mb == 0 ? std::string("off")
                                   : std::string("off (the bulk L2 prefetch needs SM90)");
    const char* query = so.side.stream == nullptr                       ? "off"
                        : opts.query_branch == QueryBranch::kCsa
                            ? "on for CSA layers (steps without the compressor branch: compress at the layer's start, "
                              "wq_b after the q norm)"
                        : opts.query_branch == QueryBranch::kCsaLate
                            ? "on for CSA layers (steps without the compressor branch: compress after wqkv, wq_b "
                              "after the q norm)"
                            : "off";
    m.push_back(fmt::format("gpu side streams: compressor branch {}; query branch {}; L2 prefetch {}",
                            so.side.stream != nullptr && opts.compressor_branch
                                ? "on (steps whose compressor projections run on cuBLAS)"
                                : "off",
                            query, prefetch));
    std::string g;
    for (const Graph& x : graphs) g += (g.empty() ? "" : ", ") + std::to_string(x.batch);
    m.push_back(g.empty() ? std::string("gpu CUDA graphs: none (every step eager)")
                          : fmt::format("gpu CUDA graphs: decode batch sizes {}", g));
    return m;
  }
};

GpuModel::GpuModel() : impl_(std::make_unique<Impl>()) {}
GpuModel::~GpuModel() = default;

Result<std::unique_ptr<GpuModel>> GpuModel::load(const ModelConfig& cfg, const ModelWeights& w,
                                                 const GpuModelOptions& opts) {
  std::unique_ptr<GpuModel> m(new GpuModel());
  const auto t0 = std::chrono::steady_clock::now();
  DSV4_RETURN_IF_ERROR(m->impl_->load(cfg, w, opts).with_context("loading the GPU model"));
  m->impl_->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

Status GpuModel::forward(std::span<const GpuStepSeq> seqs, float* logits_out, bool all_rows, GpuStepTrace* trace) {
  return impl_->forward(seqs, logits_out, all_rows, trace);
}

const float* GpuModel::device_logits() const { return impl_->act.logits; }
void* GpuModel::stream() const { return impl_->so.stream; }
const ModelConfig& GpuModel::config() const { return impl_->cfg; }
const GpuModelOptions& GpuModel::options() const { return impl_->opts; }
size_t GpuModel::device_bytes() const { return impl_->arena.bytes(); }
int64_t GpuModel::fp8_linears() const { return impl_->w.n_fp8_linears; }
const std::string& GpuModel::fp8_refused() const { return impl_->w.fp8_refused; }
std::vector<std::string> GpuModel::manifest() const { return impl_->manifest(); }
int64_t GpuModel::allocations_after_load() const { return impl_->arena.allocations_after_seal(); }
bool GpuModel::last_step_replayed_graph() const { return impl_->last_graph; }
void GpuModel::release_slot(int slot) {
  if (slot >= 0 && size_t(slot) < impl_->slot_next_pos.size()) impl_->slot_next_pos[size_t(slot)] = 0;
}
Status GpuModel::fork_slot(int src, int dst, std::span<const int32_t> src_blocks,
                           std::span<const int32_t> dst_blocks, int64_t n_tokens) {
  Impl& m = *impl_;
  const int slots = m.opts.max_seqs;
  if (src < 0 || src >= slots || dst < 0 || dst >= slots || src == dst)
    return invalid_argument("fork_slot: slots {} -> {} must differ and lie in [0, {})", src, dst, slots);
  if (n_tokens < 1 || m.slot_next_pos[size_t(src)] != n_tokens)
    return invalid_argument("fork_slot: slot {} holds {} tokens, the fork copies {}", src,
                            m.slot_next_pos[size_t(src)], n_tokens);
  const int64_t need = blocks_for_positions(n_tokens);
  for (const auto& [name, table] : {std::pair{"source", src_blocks}, {"destination", dst_blocks}}) {
    if (int64_t(table.size()) < need)
      return invalid_argument("fork_slot: the {} block table has {} blocks, {} tokens need {}", name, table.size(),
                              n_tokens, need);
    for (int64_t b = 0; b < need; ++b)
      if (table[size_t(b)] < 0 || table[size_t(b)] >= m.opts.n_kv_blocks)
        return invalid_argument("fork_slot: {} block {} is outside the pool [0, {})", name, table[size_t(b)],
                                m.opts.n_kv_blocks);
  }
  DSV4_RETURN_IF_ERROR(copy_sequence_state(m.kv, src, dst, src_blocks, dst_blocks, n_tokens, m.so.stream));
  m.slot_next_pos[size_t(dst)] = n_tokens;
  return Status::ok();
}

void GpuModel::set_graph_replay(bool enabled) { impl_->graph_replay = enabled; }
void GpuModel::set_profiling(bool enabled) { impl_->profiling = enabled; }
std::vector<std::pair<std::string, double>> GpuModel::last_profile() const { return impl_->last_prof; }

}  // namespace dsv4::gpu
