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

constexpr size_t kMaxSiblings = 8;

// Constant weights with a packed layout: the packed tiles serve every column count, one column
// (decode) included. nodes (at most kMaxSiblings) multiply the same activations, kernels[j]
// being the packed kernel of nodes[j]; all convert activations alike, so the activations are
// converted once and one gemm_batch covers every product.
void matmul_packed(Context& ctx, std::span<Tensor* const> nodes,
                   const PackedKernel* const* kernels) {
  const Tensor& x = *nodes[0]->src[1];
  const int64_t K = x.ne[0], M = x.ne[1];
  // Pack first (a first use packs with the pool), then convert the activations once.
  const void* packed[kMaxSiblings];
  for (size_t j = 0; j < nodes.size(); ++j)
    packed[j] = ctx.packed->get(*nodes[j]->src[0], kernels[j]->gemm.rows, *ctx.pool);
  const PackedKernel& pk = *kernels[0];
  const size_t act_stride = pk.act_row_bytes(K);
  char* act = static_cast<char*>(ctx.scratch_bytes(act_stride * size_t(M)));
  ctx.pool->parallel_for(M, [&](int64_t m, int) {
    pk.act_from_f32(reinterpret_cast<const float*>(row_ptr(x, m)), act + size_t(m) * act_stride, K);
  });
  GemmProblem problems[kMaxSiblings];
  for (size_t j = 0; j < nodes.size(); ++j) {
    Tensor& n = *nodes[j];
    const Tensor& w = *n.src[0];
    const PackedKernel& q = *kernels[j];
    problems[j] = GemmProblem{&q.gemm,
                              q.tail_dot,
                              K,
                              w.ne[1],
                              M,
                              packed[j],
                              packed_layout(w.type, q.gemm.rows, K).row_bytes,
                              act,
                              act_stride,
                              static_cast<float*>(n.data),
                              n.nb[1] / sizeof(float)};
  }
  gemm_batch(*ctx.pool, std::span(problems, nodes.size()));
}

// The packed kernel a matmul would take, or null when it takes another path.
const PackedKernel* packed_path(const Context& ctx, const Tensor& node) {
  if (!ctx.packed) return nullptr;
  const Tensor& w = *node.src[0];
  const PackedKernel* pk = packed_kernel(w.type, ctx.isa);
  return pk && can_pack(w, pk->gemm.rows) ? pk : nullptr;
}

// The bytes a 2-D tensor's rows span, from its data pointer.
size_t byte_span(const Tensor& t) {
  return t.ne[1] > 0 ? size_t(t.ne[1] - 1) * t.nb[1] + size_t(t.ne[0]) * t.nb[0] : 0;
}

bool overlap(const Tensor& a, const Tensor& b) {
  const char* pa = static_cast<const char*>(a.data);
  const char* pb = static_cast<const char*>(b.data);
  return pa < pb + byte_span(b) && pb < pa + byte_span(a);
}

}  // namespace

size_t matmul_siblings(Context& ctx, std::span<Tensor* const> nodes) {
  Tensor& first = *nodes[0];
  const PackedKernel* pk = packed_path(ctx, first);
  const Tensor& x = *first.src[1];
  if (pk == nullptr || x.nb[0] != sizeof(float) || overlap(first, x)) {
    matmul(ctx, first);
    return 1;
  }
  Tensor* group[kMaxSiblings] = {&first};
  const PackedKernel* kernels[kMaxSiblings] = {pk};
  size_t count = 1, ran = 1;
  for (size_t i = 1; i < nodes.size() && count < kMaxSiblings; ++i) {
    Tensor& n = *nodes[i];
    if (n.op == OpKind::View || n.op == OpKind::None) continue;
    if (n.op != OpKind::MatMul || n.src[1] != &x) break;
    const PackedKernel* q = packed_path(ctx, n);
    // One conversion must serve every product, and no output may be another's or the input.
    if (q == nullptr || q->act_from_f32 != pk->act_from_f32 ||
        q->act_block_bytes != pk->act_block_bytes || overlap(n, x))
      break;
    bool clash = false;
    for (size_t j = 0; j < count; ++j) clash = clash || overlap(n, *group[j]);
    if (clash) break;
    group[count] = &n;
    kernels[count++] = q;
    ran = i + 1;
  }
  matmul_packed(ctx, std::span(group, count), kernels);
  return ran;
}

void matmul(Context& ctx, Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const int64_t K = w.ne[0], N = w.ne[1], M = x.ne[1];
  if (x.nb[0] != sizeof(float))
    throw BackendError(fmt::format("cpu matmul: activations {} are not contiguous rows", x.name));
  if (const PackedKernel* pk = packed_path(ctx, node)) {
    Tensor* const one[] = {&node};
    return matmul_packed(ctx, one, &pk);
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

  if (M >= kMinGemmColumns && !ctx.batch_invariant) {
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
