#pragma once
// Register-tiled matmul for many activation columns (prompt processing). A tile kernel computes
// an R x C block of outputs at once, holding R x C accumulators in registers: each weight block
// it loads and unpacks serves C columns, each activation block R rows, so the work per
// multiply-add is a fraction of a row dot's. The activations are those of the level's
// DotKernel (Q8_0, Q8_1 or F32), converted once per matmul. Decode (one column) stays on the
// row dots, which are bound by the weight stream, not by arithmetic.
#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/cpu/vec_dot.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ps::cpu {

// y[c * y_stride + r] = dot(weight row r, activation column c) for r < rows, c < the tile's
// column count. Weight rows lie w_stride bytes apart, activation columns a_stride bytes apart;
// k is the row length in elements (a multiple of the weight's block size).
using GemmTileFn = void (*)(int64_t k, const void* w, size_t w_stride, const void* a,
                            size_t a_stride, float* y, size_t y_stride);

inline constexpr int kMaxTileCols = 8;

struct GemmKernel {
  int rows;  // R: weight rows per tile
  int cols;  // C: activation columns per full tile (at most kMaxTileCols)
  // tiles[j] computes R x (j + 1) outputs, for the columns left over at the edge of M.
  GemmTileFn tiles[kMaxTileCols];
};

// The tiled kernel for weight type w at ISA level isa (capped at best_isa_level()), or null
// when the level has none (scalar CPUs; non-computable types): the caller then uses row dots.
const GemmKernel* gemm_kernel(DType w, IsaLevel isa);

// Per-level tables; null where the level has no kernel. Only call the functions of a level the
// CPU supports.
const GemmKernel* gemm_kernel_avx2(DType w);
const GemmKernel* gemm_kernel_avxvnni(DType w);  // AVX2 with AVX-VNNI
const GemmKernel* gemm_kernel_avx512(DType w);

// Activation columns from which the tiled path is used: a single column is a matrix-vector
// product, bound by memory, which the row dots already stream at full speed.
inline constexpr int64_t kMinGemmColumns = 2;

// How the output is cut into tasks: row blocks of block_rows weight rows (a multiple of the
// tile's R) by column blocks of block_cols columns.
struct GemmBlocking {
  int64_t block_rows;
  int64_t block_cols;
  int64_t n_row_blocks;
  int64_t n_col_blocks;
};

// Row blocks small enough that their weights stay in L2 while every column of the block
// streams past them, and enough tasks (rows x columns) to balance `threads` dynamically.
GemmBlocking plan_gemm(int64_t n, int64_t m, size_t w_row_bytes, const GemmKernel& g, int threads);

// Y[m][n] = W[n] . A[m] for n rows of k weights (w_stride bytes apart) and m converted
// activation columns (a_stride bytes apart), y_stride floats between output columns. Full
// tiles go to the tile kernels, rows left over at the edge of n (fewer than R) to `dot`.
void gemm(ThreadPool& pool, const GemmKernel& g, VecDotFn dot, int64_t k, int64_t n, int64_t m,
          const void* w, size_t w_stride, const void* a, size_t a_stride, float* y,
          size_t y_stride);

// The arguments of one gemm() call.
struct GemmProblem {
  const GemmKernel* g;
  VecDotFn dot;
  int64_t k, n, m;
  const void* w;
  size_t w_stride;
  const void* a;
  size_t a_stride;
  float* y;
  size_t y_stride;
};

// Independent products (outputs that overlap neither each other nor any input) in one
// parallel_for: each is cut into tasks as gemm() cuts it and the tasks of all are handed out
// together, so the threads meet once at the end instead of once per product. Each output is
// bit-identical to its own gemm() call.
void gemm_batch(ThreadPool& pool, std::span<const GemmProblem> problems);

}  // namespace ps::cpu
