// RMS norm: one block per row; the sum of squares is reduced over the block.
#include "backends/cuda/kernels.h"
#include "graph/ops.h"

namespace ps::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(View x, View d, float eps) {
  __shared__ float scratch[kThreads / 32 + 1];
  const int64_t r = blockIdx.x;
  const float* in = reinterpret_cast<const float*>(row_at(x, r));
  float* out = reinterpret_cast<float*>(row_at(d, r));
  const int64_t n = x.ne[0];
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += in[i] * in[i];
  sum = block_reduce<false>(sum, scratch);
  const float scale = rsqrtf(sum / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i] * scale;
}

}  // namespace

void rms_norm(const Launch& l, const Tensor& node) {
  const Tensor& x = *node.src[0];
  PS_LAUNCH(rms_norm_kernel, unsigned(x.n_rows()), kThreads, l.stream, view_of(x), view_of(node),
            rms_norm_params(node).eps);
  check_launch("rms_norm");
}

}  // namespace ps::gpu
