#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/row_ops.h"
#include "graph/ops.h"

namespace ps::cpu {

void rms_norm(Context& ctx, Tensor& node) {
  const Tensor& x = *node.src[0];
  const int64_t n = x.ne[0];
  const float eps = rms_norm_params(node).eps;
  const RowOps& rows = row_ops(ctx.isa);
  ctx.pool->parallel_for(x.n_rows(), [&](int64_t r, int) {
    const RowIndex at = row_index(x, r);
    const float* in = reinterpret_cast<const float*>(row_ptr(x, at));
    float* out = reinterpret_cast<float*>(row_ptr(node, at));
    const double sum = rows.sum_squares(in, n);
    const float scale = float(1.0 / std::sqrt(sum / double(n) + double(eps)));
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] * scale;
  });
}

}  // namespace ps::cpu
