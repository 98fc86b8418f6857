// Rotary position embedding. Normal mode rotates adjacent pairs (x[2i], x[2i+1]), which is how
// GGUF stores llama's Q and K rows; NeoX mode rotates (x[i], x[i + n_rot/2]). Angles are
// computed in double so every backend can match them closely, once per step: the table of them
// is kept while the positions and parameters stay the same.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "graph/ops.h"

namespace ps::cpu {

namespace {

// Fills the table for these positions and parameters unless it already holds them.
const float* rope_angles(RopeTable& table, const int32_t* pos, int64_t n_tokens, int n_rot,
                         double base, double freq_scale, double mscale, const float* factors) {
  const int half = n_rot / 2;
  const bool same = table.n_rot == n_rot && table.base == base && table.freq_scale == freq_scale &&
                    table.mscale == mscale && table.pos.size() == size_t(n_tokens) &&
                    std::equal(pos, pos + n_tokens, table.pos.begin()) &&
                    table.factors.size() == (factors ? size_t(half) : 0) &&
                    (!factors || std::equal(factors, factors + half, table.factors.begin()));
  if (same) return table.cs.data();
  table.pos.assign(pos, pos + n_tokens);
  table.n_rot = n_rot;
  table.base = base;
  table.freq_scale = freq_scale;
  table.mscale = mscale;
  if (factors)
    table.factors.assign(factors, factors + half);
  else
    table.factors.clear();
  table.cs.resize(size_t(n_tokens) * size_t(half) * 2);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int i = 0; i < half; ++i) {
      double theta = double(pos[t]) * freq_scale * std::pow(base, -2.0 * i / n_rot);
      if (factors) theta /= double(factors[i]);
      float* cs = &table.cs[(size_t(t) * size_t(half) + size_t(i)) * 2];
      cs[0] = float(std::cos(theta) * mscale);
      cs[1] = float(std::sin(theta) * mscale);
    }
  return table.cs.data();
}

}  // namespace

void rope(Context& ctx, Tensor& node) {
  const Tensor& x = *node.src[0];
  const int32_t* pos = static_cast<const int32_t*>(node.src[1]->data);
  const RopeParams rp = rope_params(node);
  const int n_rot = rp.n_rot;
  const bool neox = rp.mode == RopeMode::NeoX;
  const int64_t hd = x.ne[0], n_heads = x.ne[1], n_tokens = x.ne[2];
  const int half = n_rot / 2;
  const float* angles =
      rope_angles(ctx.rope, pos, n_tokens, n_rot, rp.freq_base, rp.freq_scale, rp.attn_factor,
                  node.src[2] ? static_cast<const float*>(node.src[2]->data) : nullptr);

  ctx.pool->parallel_for(n_tokens, [&](int64_t t, int) {
    const float* cs = angles + size_t(t) * size_t(half) * 2;
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
