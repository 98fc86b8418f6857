// Rotary position embedding: one thread per element of [head_dim, heads, tokens]; the thread of
// a pair's first element writes both. Angles in double, as the CPU backend computes them.
#include "backends/cuda/kernels.h"
#include "graph/ops.h"

namespace ps::gpu {
namespace {

__global__ void rope_kernel(View x, View d, const int32_t* pos, const float* factors, int n_rot,
                            bool neox, double base, double freq_scale, double mscale, int64_t n) {
  const int half = n_rot / 2;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % x.ne[0], h = (e / x.ne[0]) % x.ne[1], t = e / (x.ne[0] * x.ne[1]);
    const float* in = reinterpret_cast<const float*>(row_at(x, h, t, 0));
    float* out = reinterpret_cast<float*>(row_at(d, h, t, 0));
    if (i >= n_rot) {
      out[i] = in[i];
      continue;
    }
    // Pair k is (2k, 2k + 1) in normal mode, (k, k + half) in NeoX mode.
    const bool first = neox ? i < half : i % 2 == 0;
    if (!first) continue;
    const int k = neox ? int(i) : int(i) / 2;
    const int64_t a = neox ? k : 2 * k, b = neox ? k + half : 2 * k + 1;
    double theta = double(pos[t]) * freq_scale * pow(base, -2.0 * k / n_rot);
    if (factors) theta /= double(factors[k]);
    const float c = float(cos(theta) * mscale), s = float(sin(theta) * mscale);
    const float x0 = in[a], x1 = in[b];
    out[a] = x0 * c - x1 * s;
    out[b] = x0 * s + x1 * c;
  }
}

}  // namespace

void rope(const Launch& l, const Tensor& node) {
  const Tensor& x = *node.src[0];
  const int64_t n = x.ne[0] * x.ne[1] * x.ne[2];
  const RopeParams p = rope_params(node);
  PS_LAUNCH(rope_kernel, blocks_for(n, 256), 256, l.stream, view_of(x), view_of(node),
            static_cast<const int32_t*>(node.src[1]->data),
            node.src[2] ? static_cast<const float*>(node.src[2]->data) : nullptr, p.n_rot,
            p.mode == RopeMode::NeoX, double(p.freq_base), double(p.freq_scale),
            double(p.attn_factor), n);
  check_launch("rope");
}

}  // namespace ps::gpu
