#pragma once
// CPU kernels, one file per op (mirrored by the other backends' folders). Each takes the node
// whose src pointers and data are set, and the context with the thread pool and scratch.
#include <cstddef>
#include <span>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "graph/tensor.h"

namespace ps::cpu {

class PackedWeights;

// rope's cos and sin per token and rotated pair, kept while the positions and the parameters
// stay the same: the q and k of every layer of one step share them.
struct RopeTable {
  std::vector<int32_t> pos;
  int n_rot = -1;
  double base = 0, freq_scale = 0, mscale = 0;
  std::vector<float> factors;
  std::vector<float> cs;  // token t, pair i: cs[(t * n_rot / 2 + i) * 2 + {0: cos, 1: sin}]
};

struct Context {
  ThreadPool* pool = nullptr;
  IsaLevel isa = IsaLevel::Scalar;
  PackedWeights* packed = nullptr;  // the device's packed weights; null: never pack
  // DeviceOptions::batch_invariant: a column's (token's) arithmetic must not depend on the
  // others. Matmuls without packed tiles then take the row dots for every column count (the
  // register tiles of gemm.h sum in another order than the dot), and attention takes one path
  // for every query with row-dot scores (the decode path's partial softmaxes, and tiles that
  // cover a position or not by the block's extent, round differently).
  bool batch_invariant = false;
  std::vector<unsigned char> scratch;  // grown on demand (activation quantization, ...)
  RopeTable rope;
  // matmul_id's grouping of (slot, token) pairs by expert and its gathered activations and
  // products (matmul itself uses `scratch`).
  std::vector<int64_t> expert_order, expert_first, expert_next;
  std::vector<float> gather_x, gather_y;
  void* scratch_bytes(size_t n) {
    if (scratch.size() < n) scratch.resize(n);
    return scratch.data();
  }
};

void matmul(Context& ctx, Tensor& node);
// Runs nodes[0], a matmul, together with the matmuls right after it (views between them are
// skipped, being no-ops here) that multiply the same activations by packed weights: a layer's
// q, k and v projections, or its gate and up. The activations are converted once and one
// parallel_for covers every product, so the threads meet once instead of once per matmul.
// Returns how many of nodes were run (1 when nodes[0] has no such siblings).
size_t matmul_siblings(Context& ctx, std::span<Tensor* const> nodes);
void get_rows(Context& ctx, Tensor& node);
void rms_norm(Context& ctx, Tensor& node);
void rope(Context& ctx, Tensor& node);
void softmax(Context& ctx, Tensor& node);
void attention(Context& ctx, Tensor& node);
void copy(Context& ctx, Tensor& node);
// add, mul, silu, gelu, scale, swiglu, sigmoid
void elementwise(Context& ctx, Tensor& node);
// Mixture of experts (moe.cpp).
void top_k(Context& ctx, Tensor& node);
void expert_weights(Context& ctx, Tensor& node);
void matmul_id(Context& ctx, Tensor& node);
void expert_sum(Context& ctx, Tensor& node);

// Row pointer helpers for tensors with byte strides.
inline char* row_ptr(const Tensor& t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return static_cast<char*>(t.data) + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

// The r-th row of t, counting over dimensions 1..3 with dimension 1 fastest.
struct RowIndex {
  int64_t i1, i2, i3;
};
inline RowIndex row_index(const Tensor& t, int64_t r) {
  return {r % t.ne[1], (r / t.ne[1]) % t.ne[2], r / (t.ne[1] * t.ne[2])};
}
inline char* row_ptr(const Tensor& t, RowIndex i) { return row_ptr(t, i.i1, i.i2, i.i3); }

}  // namespace ps::cpu
