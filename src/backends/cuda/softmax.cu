// Softmax over rows, scaled, with an optional causal mask (row i1 sees columns up to
// i1 + offset; the rest are 0): one block per row.
#include "backends/cuda/kernels.h"
#include "graph/ops.h"

namespace ps::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void softmax_kernel(View x, View d, float scale, int causal) {
  __shared__ float scratch[kThreads / 32 + 1];
  const int64_t r = blockIdx.x;
  const float* in = reinterpret_cast<const float*>(row_at(x, r));
  float* out = reinterpret_cast<float*>(row_at(d, r));
  const int64_t n = x.ne[0], i1 = r % x.ne[1];
  const int64_t visible = causal >= 0 ? imin<int64_t>(n, i1 + causal + 1) : n;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < visible; i += blockDim.x) mx = fmaxf(mx, in[i] * scale);
  mx = block_reduce<true>(mx, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < visible; i += blockDim.x) {
    const float e = expf(in[i] * scale - mx);
    out[i] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = i < visible ? out[i] * inv : 0.0f;
}

}  // namespace

void softmax(const Launch& l, const Tensor& node) {
  const Tensor& x = *node.src[0];
  const SoftMaxParams p = softmax_params(node);
  PS_LAUNCH(softmax_kernel, unsigned(x.n_rows()), kThreads, l.stream, view_of(x), view_of(node),
            p.scale, p.causal_offset);
  check_launch("softmax");
}

}  // namespace ps::gpu
