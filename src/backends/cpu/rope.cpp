// Rotary position embedding. Normal mode rotates adjacent pairs (x[2i], x[2i+1]), which is how
// GGUF stores llama's Q and K rows; NeoX mode rotates (x[i], x[i + n_rot/2]). Angles are
// computed in double so every backend can match them closely.
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"

namespace ps::cpu {

void rope(Context& ctx, Tensor& node) {
  const Tensor& x = *node.src[0];
  const int32_t* pos = static_cast<const int32_t*>(node.src[1]->data);
  const int n_rot = node.iparams[0];
  const bool neox = RopeMode(node.iparams[1]) == RopeMode::NeoX;
  const double base = node.fparams[0], freq_scale = node.fparams[1], mscale = node.fparams[2];
  const int64_t hd = x.ne[0], n_heads = x.ne[1], n_tokens = x.ne[2];
  const int half = n_rot / 2;
  const float* factors = node.src[2] ? static_cast<const float*>(node.src[2]->data) : nullptr;

  ctx.pool->parallel_for(n_tokens, [&](int64_t t, int) {
    std::vector<float> cs(size_t(half) * 2);
    for (int i = 0; i < half; ++i) {
      double theta = double(pos[t]) * freq_scale * std::pow(base, -2.0 * i / n_rot);
      if (factors) theta /= double(factors[i]);
      cs[size_t(2 * i)] = float(std::cos(theta) * mscale);
      cs[size_t(2 * i + 1)] = float(std::sin(theta) * mscale);
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* in = reinterpret_cast<const float*>(row_ptr(x, h, t));
      float* out = reinterpret_cast<float*>(row_ptr(node, h, t));
      for (int i = 0; i < half; ++i) {
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float c = cs[size_t(2 * i)], s = cs[size_t(2 * i + 1)];
        const float x0 = in[a], x1 = in[b];
        out[a] = x0 * c - x1 * s;
        out[b] = x0 * s + x1 * c;
      }
      for (int64_t i = n_rot; i < hd; ++i) out[i] = in[i];
    }
  });
}

}  // namespace ps::cpu
