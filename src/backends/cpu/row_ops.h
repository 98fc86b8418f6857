#pragma once
// Row loops of the element-wise ops that cost more than a load and a store per element: the
// sigmoid-based activations and softmax (one exp each), rms_norm's sum of squares (a chain of
// dependent double adds when written as a loop) and F32 -> F16 conversion (keys and values
// into the KV cache). A decode step runs them on one row each, between matmuls that the threads
// share, so their speed on one thread counts. Each ISA level has its own translation unit
// (row_ops_avx2.cpp, row_ops_avx512.cpp); the scalar level is the reference.
#include <cstdint>

#include "core/cpu_features.h"

namespace ps::cpu {

struct RowOps {
  // out[i] = silu(x[i]) * g[i], or silu(x[i]) where g is null (silu(v) = v / (1 + e^-v)).
  void (*silu)(const float* x, const float* g, float* out, int64_t n);
  // out[i] = gelu(x[i]), the tanh approximation 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))).
  void (*gelu)(const float* x, float* out, int64_t n);
  // out[i] = e^(x[i] * scale - shift) for a shift at least every x[i] * scale (softmax's
  // maximum), so no argument is positive; returns the sum of the out[i].
  double (*exp_sum)(const float* x, float scale, float shift, float* out, int64_t n);
  // The sum of x[i]^2 in double (rms_norm's): exact products, summed in four or more chains.
  double (*sum_squares)(const float* x, int64_t n);
  // Round to nearest even, as f32_to_fp16.
  void (*f32_to_f16)(const float* x, uint16_t* out, int64_t n);
};

// Softmax's exponentials over a row: out[i] = e^(x[i] scale - m), m the largest x[i] scale
// (written to *max when max is not null), through ops.exp_sum; returns their sum.
double softmax_exp(const RowOps& ops, const float* x, float scale, float* out, int64_t n,
                   float* max = nullptr);

// The table for ISA level isa, capped at best_isa_level() like dot_kernel.
const RowOps& row_ops(IsaLevel isa);

// Per-level tables; only call those of a level the CPU supports.
const RowOps* row_ops_scalar();
const RowOps* row_ops_avx2();
const RowOps* row_ops_avx512();

}  // namespace ps::cpu
