// graph_timing.cpp: see graph_timing.h.
#include "cuda/testing/graph_timing.h"

#include "cuda/common/cuda_check.h"

namespace dsv4::cuda::testing {

Result<std::vector<double>> time_graph_calls(cudaStream_t stream, int calls, const std::function<void(int)>& body,
                                             int warmup, int reps) {
  if (calls < 1 || reps < 1 || warmup < 0)
    return invalid_argument("time_graph_calls: calls {} reps {} warmup {}", calls, reps, warmup);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<double> us;
  // Every resource is released whatever fails; the first error is the answer.
  Status st = cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  if (st.is_ok()) {
    for (int i = 0; i < calls; ++i) body(i);
    st = cuda_status(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  }
  if (st.is_ok()) st = cuda_status(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  if (st.is_ok()) st = cuda_status(cudaEventCreate(&e0), "cudaEventCreate");
  if (st.is_ok()) st = cuda_status(cudaEventCreate(&e1), "cudaEventCreate");
  for (int w = 0; w < warmup && st.is_ok(); ++w) st = cuda_status(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  for (int r = 0; r < reps && st.is_ok(); ++r) {
    st = cuda_status(cudaEventRecord(e0, stream), "cudaEventRecord");
    if (st.is_ok()) st = cuda_status(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    if (st.is_ok()) st = cuda_status(cudaEventRecord(e1, stream), "cudaEventRecord");
    if (st.is_ok()) st = cuda_status(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0.0f;
    if (st.is_ok()) st = cuda_status(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (st.is_ok()) us.push_back(double(ms) * 1000.0 / calls);
  }
  if (e0 != nullptr) cudaEventDestroy(e0);
  if (e1 != nullptr) cudaEventDestroy(e1);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!st.is_ok()) return st;
  return us;
}

}  // namespace dsv4::cuda::testing
