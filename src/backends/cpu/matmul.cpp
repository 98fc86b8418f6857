// Y[N, M] = W[K, N]^T-by-rows . X[K, M]: every output is the dot of one weight row with one
// activation row. Activations are converted once into the weight type's partner type (8-bit
// blocks for quantized weights). One activation row (decode) is a matrix-vector product bound
// by the weight stream: weight rows are split across threads in chunks and dotted with row
// kernels. Several rows (prompt processing) go to the register-tiled kernels of gemm.h, which
// reuse each loaded weight block for several columns and each activation block for several
// rows.
#include <fmt/format.h>

#include <algorithm>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/packed.h"
#include "backends/cpu/vec_dot.h"
#include "core/error.h"

namespace ps::cpu {

namespace {

// Constant weights with a packed layout: the packed tiles serve every column count, one column
// (decode) included.
void matmul_packed(Context& ctx, Tensor& node, const PackedKernel& pk) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const int64_t K = w.ne[0], N = w.ne[1], M = x.ne[1];
  const int rows = pk.gemm.rows;
  const void* packed = ctx.packed->get(w, rows, *ctx.pool);
  const size_t act_stride = pk.act_row_bytes(K);
  char* act = static_cast<char*>(ctx.scratch_bytes(act_stride * size_t(M)));
  ctx.pool->parallel_for(M, [&](int64_t m, int) {
    pk.act_from_f32(reinterpret_cast<const float*>(row_ptr(x, m)), act + size_t(m) * act_stride, K);
  });
  gemm(*ctx.pool, pk.gemm, pk.tail_dot, K, N, M, packed, packed_layout(w.type, rows, K).row_bytes,
       act, act_stride, static_cast<float*>(node.data), node.nb[1] / sizeof(float));
}

}  // namespace

void matmul(Context& ctx, Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const int64_t K = w.ne[0], N = w.ne[1], M = x.ne[1];
  if (x.nb[0] != sizeof(float))
    throw BackendError(fmt::format("cpu matmul: activations {} are not contiguous rows", x.name));
  if (ctx.packed) {
    const PackedKernel* pk = packed_kernel(w.type, ctx.isa);
    if (pk && can_pack(w, pk->gemm.rows)) return matmul_packed(ctx, node, *pk);
  }
  const DotKernel& k = dot_kernel(w.type, ctx.isa);

  const char* act = nullptr;
  size_t act_stride = 0;
  if (k.act_type == DType::F32) {
    act = static_cast<const char*>(x.data);
    act_stride = x.nb[1];
  } else {
    act_stride = row_bytes(k.act_type, K);
    char* buf = static_cast<char*>(ctx.scratch_bytes(act_stride * size_t(M)));
    ctx.pool->parallel_for(M, [&](int64_t m, int) {
      k.act_from_f32(reinterpret_cast<const float*>(row_ptr(x, m)), buf + size_t(m) * act_stride,
                     K);
    });
    act = buf;
  }

  float* y = static_cast<float*>(node.data);
  const size_t y_stride = node.nb[1] / sizeof(float);
  const char* wdata = static_cast<const char*>(w.data);

  if (M >= kMinGemmColumns) {
    if (const GemmKernel* g = gemm_kernel(w.type, ctx.isa)) {
      gemm(*ctx.pool, *g, k.dot, K, N, M, wdata, w.nb[1], act, act_stride, y, y_stride);
      return;
    }
  }

  const int threads = ctx.pool->size();
  // Chunks small enough to balance the threads, large enough to amortize the hand-out.
  int64_t chunk = std::max<int64_t>(1, N / (int64_t(threads) * 8));
  chunk = std::min<int64_t>(chunk, M > 1 ? 16 : 64);
  const int64_t n_chunks = (N + chunk - 1) / chunk;

  ctx.pool->parallel_for(n_chunks, [&](int64_t c, int) {
    const int64_t r0 = c * chunk, r1 = std::min(N, r0 + chunk);
    constexpr int64_t kColumnBlock = 8;
    for (int64_t m0 = 0; m0 < M; m0 += kColumnBlock) {
      const int64_t m1 = std::min(M, m0 + kColumnBlock);
      for (int64_t r = r0; r < r1; ++r) {
        const char* wr = wdata + size_t(r) * w.nb[1];
        for (int64_t m = m0; m < m1; ++m)
          y[size_t(m) * y_stride + size_t(r)] = k.dot(K, wr, act + size_t(m) * act_stride);
      }
    }
  });
}

}  // namespace ps::cpu
