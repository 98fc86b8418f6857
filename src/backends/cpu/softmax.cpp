#include <algorithm>

#include "backends/cpu/kernels.h"
#include "backends/cpu/row_ops.h"
#include "graph/ops.h"

namespace ps::cpu {

// Row r of a matrix may see columns j <= r + causal_offset when causal_offset >= 0.
void softmax(Context& ctx, Tensor& node) {
  const Tensor& x = *node.src[0];
  const int64_t n = x.ne[0];
  const SoftMaxParams sp = softmax_params(node);
  const float scale = sp.scale;
  const int32_t causal = sp.causal_offset;
  const RowOps& rows = row_ops(ctx.isa);
  ctx.pool->parallel_for(x.n_rows(), [&](int64_t r, int) {
    const RowIndex at = row_index(x, r);
    const float* in = reinterpret_cast<const float*>(row_ptr(x, at));
    float* out = reinterpret_cast<float*>(row_ptr(node, at));
    const int64_t visible = causal >= 0 ? std::min<int64_t>(n, at.i1 + causal + 1) : n;
    const double sum = softmax_exp(rows, in, scale, out, visible);
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j < visible; ++j) out[j] *= inv;
    for (int64_t j = visible; j < n; ++j) out[j] = 0.0f;
  });
}

}  // namespace ps::cpu
