#pragma once
// Row dot products between one weight row and one activation row: the inner loop of the CPU
// matmul. Quantized weights are multiplied against activations quantized to 8 bits (Q8_0, or
// Q8_1 whose per-block sum serves the weight types with an offset m); float weights against
// F32 activations. Each ISA level has its own translation unit compiled with its own flags.
#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"

// The weight types with CPU kernels. Each per-ISA file maps them to its own kernel tables
// through this list: a macro rather than a shared inline function, so no code compiled for one
// ISA level is linked into another.
#define POLYSTACK_CPU_WEIGHT_TYPES(X) X(F32) X(F16) X(BF16) X(Q8_0) X(Q4_0) X(Q5_0) X(Q4_1) X(Q5_1)
// The 4-bit codebook types (core/dtype.h), dotted with Q8_0 activations (IQ4_XS per 32-element
// sub-block): scalar, AVX2 (AVX-VNNI) and AVX-512 row kernels and prompt tiles by table lookup;
// no packed layout yet.
#define POLYSTACK_CPU_TABLE_TYPES(X) X(IQ4_NL) X(MXFP4) X(IQ4_XS)
// The k-quants: scalar kernels (vec_dot_kquants.cpp), AVX2 for all of them
// (vec_dot_kquants_avx2.cpp).
#define POLYSTACK_CPU_KQUANT_TYPES(X) X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K)
#define POLYSTACK_CPU_KERNEL_CASE(T) \
  case DType::T:                     \
    return &k##T;

namespace ps::cpu {

// GGUF's Q8_1 block. Only activations use it, so it lives with the kernels rather than in core:
// s = d * sum(qs) lets a weight block's offset m contribute m * s without touching qs.
struct BlockQ8_1 {
  uint16_t d;  // fp16 bits
  uint16_t s;  // fp16 bits of d * sum(qs), computed with the unrounded d
  int8_t qs[QK8_0];
};
static_assert(sizeof(BlockQ8_1) == 36);

// out = sum_i w[i] * a[i] over n elements (n a multiple of the weight's block size).
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
// Converts n F32 activations into the activation type.
using ActFromF32Fn = void (*)(const float* x, void* dst, int64_t n);

// out[q * out_stride + i] += p[q * p_stride + j] * x_j[i] for j = 0, 1, .. rows - 1 in turn, for
// q < nq and i < n, where row x_j of a float weight type starts x_stride bytes after x_(j-1):
// attention's weighted sum of V rows for several queries at once, each row converted once for
// all of them. The sums are made in row order, so rows given in two calls give the same floats
// as in one.
using WeightedSumFn = void (*)(int64_t n, int64_t rows, const float* p, size_t p_stride, int nq,
                               const void* x, size_t x_stride, float* out, size_t out_stride);

struct DotKernel {
  DType act_type;  // F32, Q8_0, Q8_1 or Q8_K
  ActFromF32Fn act_from_f32;
  VecDotFn dot;
  WeightedSumFn weighted_sum = nullptr;  // float types only
};

// The kernel for weight type w at ISA level isa (falls back to lower levels for types a level
// does not specialize). The level is also capped at best_isa_level(), so a caller can never
// reach instructions the CPU lacks. Throws BackendError for a non-computable type.
const DotKernel& dot_kernel(DType w, IsaLevel isa);

// Per-level tables; a null entry means "use the level below". Only call the functions of a
// level the CPU supports.
const DotKernel* dot_kernel_scalar(DType w);
const DotKernel* dot_kernel_avx2(DType w);
const DotKernel* dot_kernel_avxvnni(DType w);  // AVX2 with AVX-VNNI
const DotKernel* dot_kernel_avx512(DType w);
const DotKernel* dot_kernel_kquants(DType w);       // scalar; part of the scalar level
const DotKernel* dot_kernel_kquants_avx2(DType w);  // Q2_K .. Q6_K; part of the AVX2 level

// The F32 "conversion" (a copy), shared by every level's float-weight kernels.
void act_copy_f32(const float* x, void* dst, int64_t n);

}  // namespace ps::cpu
