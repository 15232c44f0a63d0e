// kernel_trace_test.cpp: KernelTracer (gpu/kernel_trace.h) on the device: eager launches and a
// graph instantiated after start() come back with their names, grids and ordered times. Needs a
// GPU and libcupti on the library path (the H200 runs carry it in .carry/lib).
#include "gpu/kernel_trace.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "cuda/testing/bandwidth.h"
#include "harness.h"

namespace dsv4::gpu {
namespace {

constexpr size_t kBytes = size_t(64) << 20;

TEST(KernelTrace, EagerLaunchesInOrder) {
  DSV4_SKIP_WITHOUT_GPU();
  auto tracer = KernelTracer::start();
  ASSERT_TRUE(tracer.is_ok()) << tracer.status().to_string();
  // One tracer at a time: CUPTI's callbacks are process-wide.
  EXPECT_FALSE(KernelTracer::start().is_ok());
  cuda::DeviceBuffer a = cuda::test::device_alloc(kBytes, true), b = cuda::test::device_alloc(kBytes, true);
  cuda::DeviceBuffer sink = cuda::test::device_alloc(4096 * sizeof(float), true);
  DSV4_ASSERT_OK(cuda::testing::stream_copy(b.get(), a.get(), kBytes, nullptr));
  DSV4_ASSERT_OK(cuda::testing::stream_read(b.get(), kBytes, static_cast<float*>(sink.get()), nullptr));
  auto recs = (*tracer)->take();
  ASSERT_TRUE(recs.is_ok()) << recs.status().to_string();
  const StepTimeline t = step_timeline(*recs);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0].name, "copy_kernel");
  EXPECT_EQ(t.rows[1].name, "read_kernel");
  EXPECT_EQ(t.rows[0].grid[0], 4096);
  EXPECT_EQ((*recs)[0].block[0], 256);
  EXPECT_GT(t.rows[0].duration_us, 0.0);
  // The same stream without programmatic launch: the read starts after the copy ends.
  EXPECT_GE(t.rows[1].lead_us, 0.0);
  // Nothing ran since: nothing to take.
  auto again = (*tracer)->take();
  ASSERT_TRUE(again.is_ok());
  EXPECT_TRUE(again->empty());
  tracer->reset();
  EXPECT_TRUE(KernelTracer::start().is_ok());  // a new tracer once the first is gone
}

TEST(KernelTrace, GraphReplaysAreTraced) {
  DSV4_SKIP_WITHOUT_GPU();
  auto tracer = KernelTracer::start();
  ASSERT_TRUE(tracer.is_ok()) << tracer.status().to_string();
  cuda::DeviceBuffer a = cuda::test::device_alloc(kBytes, true), b = cuda::test::device_alloc(kBytes, true);
  cudaStream_t s = nullptr;
  DSV4_ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  DSV4_ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 3; ++i) DSV4_ASSERT_OK(cuda::testing::stream_copy(b.get(), a.get(), kBytes, s));
  DSV4_ASSERT_CUDA(cudaStreamEndCapture(s, &g));
  DSV4_ASSERT_CUDA(cudaGraphInstantiate(&ge, g, 0));
  ASSERT_TRUE((*tracer)->take().is_ok());  // drop anything before the replays
  for (int r = 0; r < 2; ++r) DSV4_ASSERT_CUDA(cudaGraphLaunch(ge, s));
  auto recs = (*tracer)->take();
  ASSERT_TRUE(recs.is_ok()) << recs.status().to_string();
  ASSERT_EQ(recs->size(), 6u);
  const StepTimeline t = step_timeline(*recs);
  double sum = 0;
  for (const TimelineRow& row : t.rows) {
    EXPECT_EQ(row.name, "copy_kernel");
    EXPECT_GT(row.duration_us, 0.0);
    sum += row.exposed_us;
  }
  EXPECT_NEAR(sum, t.span_us, 1e-6);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace dsv4::gpu
