#include "backends/cpu/row_ops.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"

namespace ps::cpu {
namespace {

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }
// The tanh approximation 0.5 v (1 + tanh(z)), written as v / (1 + exp(-2z)): the same value,
// one exp instead of a tanh (which costs about two), and no overflow (exp -> inf gives -0).
inline float gelu_tanh(float v) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.79788456080286535588f;
  return v / (1.0f + std::exp(-kTwoSqrt2OverPi * v * (1.0f + 0.044715f * v * v)));
}

void silu_row(const float* x, const float* g, float* out, int64_t n) {
  if (g)
    for (int64_t i = 0; i < n; ++i) out[i] = silu(x[i]) * g[i];
  else
    for (int64_t i = 0; i < n; ++i) out[i] = silu(x[i]);
}

void gelu_row(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(x[i]);
}

double exp_sum_row(const float* x, float scale, float shift, float* out, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::exp(x[i] * scale - shift);
    sum += out[i];
  }
  return sum;
}

double sum_squares_row(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  return sum;
}

void f32_to_f16_row(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_fp16(x[i]);
}

constexpr RowOps kScalar{silu_row, gelu_row, exp_sum_row, sum_squares_row, f32_to_f16_row};

}  // namespace

const RowOps* row_ops_scalar() { return &kScalar; }

double softmax_exp(const RowOps& ops, const float* x, float scale, float* out, int64_t n,
                   float* max) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i] * scale);
  if (max) *max = mx;
  return ops.exp_sum(x, scale, mx, out, n);
}

const RowOps& row_ops(IsaLevel isa) {
  const IsaLevel best = best_isa_level();
  const IsaLevel level = isa < best ? isa : best;
  if (level >= IsaLevel::Avx512)
    if (const RowOps* r = row_ops_avx512()) return *r;
  if (level >= IsaLevel::Avx2)
    if (const RowOps* r = row_ops_avx2()) return *r;
  return kScalar;
}

}  // namespace ps::cpu
