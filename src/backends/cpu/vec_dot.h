#pragma once
// Row dot products between one weight row and one activation row: the inner loop of the CPU
// matmul. Quantized weights are multiplied against activations quantized to 8 bits (Q8_0, or
// Q8_1 whose per-block sum serves the weight types with an offset m); float weights against
// F32 activations. Each ISA level has its own translation unit compiled with its own flags.
#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"

namespace ps::cpu {

// out = sum_i w[i] * a[i] over n elements (n a multiple of the weight's block size).
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
// Converts n F32 activations into the activation type.
using ActFromF32Fn = void (*)(const float* x, void* dst, int64_t n);

struct DotKernel {
  DType act_type;         // F32, Q8_0 or Q8_1
  ActFromF32Fn act_from_f32;
  VecDotFn dot;
};

// The kernel for weight type w at ISA level isa (falls back to lower levels for types a level
// does not specialize). Throws BackendError for a non-computable type.
const DotKernel& dot_kernel(DType w, IsaLevel isa);

// Per-level tables; a null entry means "use the level below".
const DotKernel* dot_kernel_scalar(DType w);
const DotKernel* dot_kernel_avx2(DType w);
const DotKernel* dot_kernel_avx512(DType w);

}  // namespace ps::cpu
