// blas_test.cpp: gpu::Blas's grouped wo_a on cuBLAS captured into a CUDA graph. With weights at
// evict-first priority (cuda::set_weights_evict_first) the captured kernel nodes carry an L2
// access-policy window over the weights with streaming priority, and the graph computes the same
// bits as the eager call; at normal priority no node gets a window. Label "gpu": skips without one.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/common/arch.h"
#include "gpu/blas.h"
#include "harness.h"

namespace dsv4::gpu {
namespace {

using cuda::DeviceBuffer;
using namespace cuda::test;

// Flash's grouped wo_a: 8 groups of 1024 x 4096 (67 MB of bf16 weights).
constexpr int kGroups = 8, kN = 1024, kK = 4096;

// Kernel nodes of `graph` and how many of them hold a streaming window over [w, w + bytes).
struct WindowCount {
  int kernels = 0, streaming_over_w = 0, any_window = 0;
};
WindowCount count_windows(cudaGraph_t graph, const void* w) {
  WindowCount c;
  size_t n = 0;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &n), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(n);
  EXPECT_EQ(cudaGraphGetNodes(graph, nodes.data(), &n), cudaSuccess);
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    EXPECT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    if (type != cudaGraphNodeTypeKernel) continue;
    ++c.kernels;
    cudaLaunchAttributeValue v{};
    EXPECT_EQ(cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeAccessPolicyWindow, &v), cudaSuccess);
    const cudaAccessPolicyWindow& win = v.accessPolicyWindow;
    if (win.num_bytes > 0) ++c.any_window;
    if (win.base_ptr == w && win.num_bytes > 0 && win.hitProp == cudaAccessPropertyStreaming &&
        win.missProp == cudaAccessPropertyStreaming)
      ++c.streaming_over_w;
  }
  return c;
}

TEST(BlasGraph, EvictFirstMarksTheCapturedWoAWithAStreamingWindow) {
  DSV4_SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  DSV4_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer ws = device_alloc(size_t(32) << 20);
  Blas blas;
  DSV4_ASSERT_OK(blas.init(stream, ws.get(), ws.bytes()));
  DeviceBuffer w = upload_vector(to_bf16(random_bf16_values(int64_t(kGroups) * kN * kK, 11, 0.05f)));
  for (int m : {1, 4}) {
    SCOPED_TRACE("M=" + std::to_string(m));
    DeviceBuffer o = upload_vector(to_bf16(random_bf16_values(int64_t(m) * kGroups * kK, 12 + uint64_t(m), 1.0f)));
    DeviceBuffer u_eager = device_alloc(size_t(m) * kGroups * kN * 2), u_graph = device_alloc(size_t(m) * kGroups * kN * 2);
    const auto* wp = w.as<__nv_bfloat16>();
    DSV4_ASSERT_OK(blas.grouped_bf16_out(o.as<__nv_bfloat16>(), m, kGroups, wp, kN, kK, u_eager.as<__nv_bfloat16>()));
    DSV4_ASSERT_CUDA(cudaStreamSynchronize(stream));
    const std::vector<uint16_t> want = download<uint16_t>(u_eager.get(), size_t(m) * kGroups * kN);
    for (bool first : {false, true}) {
      const ScopedWeightsEvictFirst l2(first);
      poison(u_graph);
      cudaGraph_t graph = nullptr;
      DSV4_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      const Status st = blas.grouped_bf16_out(o.as<__nv_bfloat16>(), m, kGroups, wp, kN, kK, u_graph.as<__nv_bfloat16>());
      DSV4_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
      DSV4_ASSERT_OK(st);
      const WindowCount c = count_windows(graph, wp);
      EXPECT_GE(c.kernels, 1);
      if (first) {
        EXPECT_GE(c.streaming_over_w, 1) << "no captured kernel node reads wo_a through a streaming window";
      } else {
        EXPECT_EQ(c.any_window, 0) << "normal priority must leave the nodes alone";
      }
      cudaGraphExec_t exec = nullptr;
      DSV4_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      DSV4_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
      DSV4_ASSERT_CUDA(cudaStreamSynchronize(stream));
      EXPECT_EQ(download<uint16_t>(u_graph.get(), size_t(m) * kGroups * kN), want) << (first ? "first" : "normal");
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace dsv4::gpu
