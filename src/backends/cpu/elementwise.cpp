#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/row_ops.h"
#include "graph/ops.h"

namespace ps::cpu {

void elementwise(Context& ctx, Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor* b = node.src[1];
  const int64_t n = a.ne[0];
  const OpKind op = node.op;
  const float s = node.op == OpKind::Scale ? scale_params(node).scale : 0.0f;
  const SwiGluOaiParams oai = swiglu_oai_params(node);
  const RowOps& rows = row_ops(ctx.isa);
  ctx.pool->parallel_for(a.n_rows(), [&](int64_t r, int) {
    const RowIndex at = row_index(a, r);
    const float* x = reinterpret_cast<const float*>(row_ptr(a, at));
    float* out = reinterpret_cast<float*>(row_ptr(node, at));
    const float* y = nullptr;
    if (b)  // rows of b repeat along any dimension where b has extent 1
      y = reinterpret_cast<const float*>(
          row_ptr(*b, at.i1 % b->ne[1], at.i2 % b->ne[2], at.i3 % b->ne[3]));
    switch (op) {
      case OpKind::Add:
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
        break;
      case OpKind::Mul:
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * y[i];
        break;
      case OpKind::Silu:
        rows.silu(x, nullptr, out, n);
        break;
      case OpKind::Gelu:
        rows.gelu(x, out, n);
        break;
      case OpKind::Scale:
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
        break;
      case OpKind::SwiGlu:
        rows.silu(x, y, out, n);
        break;
      case OpKind::Sigmoid:
        for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
        break;
      case OpKind::SwiGluOai:
        for (int64_t i = 0; i < n; ++i) {
          const float g = std::min(x[i], oai.limit);
          const float u = std::clamp(y[i], -oai.limit, oai.limit);
          out[i] = g / (1.0f + std::exp(-oai.alpha * g)) * (u + 1.0f);
        }
        break;
      default:
        break;
    }
  });
}

}  // namespace ps::cpu
