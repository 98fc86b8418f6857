#include <cmath>

#include "backends/cpu/kernels.h"

namespace ps::cpu {
namespace {

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }
// The tanh approximation 0.5 v (1 + tanh(z)), written as v / (1 + exp(-2z)): the same value,
// one exp instead of a tanh (which costs about two), and no overflow (exp -> inf gives -0).
inline float gelu_tanh(float v) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.79788456080286535588f;
  return v / (1.0f + std::exp(-kTwoSqrt2OverPi * v * (1.0f + 0.044715f * v * v)));
}

}  // namespace

void elementwise(Context& ctx, Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor* b = node.src[1];
  const int64_t n = a.ne[0];
  const OpKind op = node.op;
  const float s = node.fparams[0];
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
        for (int64_t i = 0; i < n; ++i) out[i] = silu(x[i]);
        break;
      case OpKind::Gelu:
        for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(x[i]);
        break;
      case OpKind::Scale:
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
        break;
      case OpKind::SwiGlu:
        for (int64_t i = 0; i < n; ++i) out[i] = silu(x[i]) * y[i];
        break;
      default:
        break;
    }
  });
}

}  // namespace ps::cpu
