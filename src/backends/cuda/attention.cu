// Causal attention of a batch of queries over the F16 KV cache, fused: one block per (head,
// token). Positions are taken in chunks of one per thread: each thread scores one position,
// the block keeps a running maximum and sum (online softmax), and each thread accumulates the
// weighted V values of its own output dimensions. Grouped-query heads map onto cache heads as
// on the CPU; a sliding window limits each query to its last `window` positions, and position j
// lives in slot j % slots (ring caches). With per-token data (graph/ops.h), each token's
// position and cache plane come from it, so tokens of several sequences share one launch; with a
// paged cache (graph/ops.h) each token's block table, which maps its positions to cells. Sinks
// (graph/ops.h) join the running softmax after the last chunk.
#include "backends/cuda/kernels.h"
#include "graph/ops.h"

namespace ps::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kDimsPerThread = int(kMaxHeadDim / kThreads);

// Position j's row of cache head kvh: slot j % slots of the plane, or (paged: header non-null)
// the cell the table at header[plane] gives.
__device__ const __half* cache_row(const View& c, int64_t kvh, int64_t j, int64_t slots,
                                   int64_t plane, const int32_t* header, int64_t block) {
  const int64_t slot = j % slots;
  if (!header) return reinterpret_cast<const __half*>(row_at(c, kvh, slot, plane));
  const int64_t cell = int64_t(header[plane + slot / block]) * block + slot % block;
  return reinterpret_cast<const __half*>(row_at(c, kvh, cell, 0));
}

__global__ void attention_kernel(View q, View kc, View vc, View d, const int32_t* info, int n_past,
                                 int window, float scale, int paged, const float* sinks) {
  __shared__ float qs[kMaxHeadDim];
  __shared__ float p[kThreads];
  __shared__ float scratch[kThreads / 32 + 1];
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const int64_t hd = q.ne[0], group = q.ne[1] / kc.ne[1], kvh = h / group;
  const int32_t* header = paged ? info : nullptr;
  const int64_t slots = paged ? int64_t(info[0]) : kc.ne[2];
  const int64_t block = paged ? int64_t(info[1]) : 1;
  const int32_t* pairs = paged ? info + 2 : info;
  const int tid = int(threadIdx.x);
  const float* qr = reinterpret_cast<const float*>(row_at(q, h, t, 0));
  for (int64_t i = tid; i < hd; i += kThreads) qs[i] = qr[i];
  __syncthreads();
  const int64_t plane = pairs ? pairs[2 * t + 1] : 0;
  const int64_t end = (pairs ? int64_t(pairs[2 * t]) : int64_t(n_past) + t) + 1;
  const int64_t first = window > 0 ? imax<int64_t>(0, end - window) : 0;
  float acc[kDimsPerThread];
  for (int i = 0; i < kDimsPerThread; ++i) acc[i] = 0.0f;
  float run_max = -INFINITY, run_sum = 0.0f;
  for (int64_t c0 = first; c0 < end; c0 += kThreads) {
    const int64_t j = c0 + tid;
    float s = -INFINITY;
    if (j < end) {
      const __half* kr = cache_row(kc, kvh, j, slots, plane, header, block);
      float dot = 0.0f;
      for (int64_t i = 0; i < hd; ++i) dot += __half2float(kr[i]) * qs[i];
      s = dot * scale;
    }
    const float new_max = fmaxf(run_max, block_reduce<true>(s, scratch));
    const float e = j < end ? expf(s - new_max) : 0.0f;
    p[tid] = e;
    const float chunk_sum = block_reduce<false>(e, scratch);  // also orders the writes to p
    const float correction = expf(run_max - new_max);
    run_sum = run_sum * correction + chunk_sum;
    run_max = new_max;
    const int64_t n = imin<int64_t>(kThreads, end - c0);
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int64_t dim = tid + int64_t(i) * kThreads;
      if (dim >= hd) break;
      float a = acc[i] * correction;
      for (int64_t jj = 0; jj < n; ++jj)
        a += p[jj] * __half2float(cache_row(vc, kvh, c0 + jj, slots, plane, header, block)[dim]);
      acc[i] = a;
    }
    __syncthreads();  // p is rewritten by the next chunk
  }
  float sink_scale = 1.0f;
  if (sinks) {
    const float new_max = fmaxf(run_max, sinks[h]);
    sink_scale = expf(run_max - new_max);
    run_sum = run_sum * sink_scale + expf(sinks[h] - new_max);
  }
  float* out = reinterpret_cast<float*>(row_at(d, h, t, 0));
  const float inv = sink_scale / run_sum;
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int64_t dim = tid + int64_t(i) * kThreads;
    if (dim < hd) out[dim] = acc[i] * inv;
  }
}

}  // namespace

void attention(const Launch& l, const Tensor& node) {
  const Tensor& q = *node.src[0];
  const dim3 grid(unsigned(q.ne[1]), unsigned(q.ne[2]));
  const Tensor* info = attention_token_info(node);
  const AttentionParams ap = attention_params(node);
  PS_LAUNCH(
      attention_kernel, grid, kThreads, l.stream, view_of(q), view_of(*node.src[1]),
      view_of(*node.src[2]), view_of(node),
      info ? static_cast<const int32_t*>(info->data) : nullptr, ap.n_past, ap.window, ap.scale,
      ap.paged ? 1 : 0,
      attention_sinks(node) ? static_cast<const float*>(attention_sinks(node)->data) : nullptr);
  check_launch("attention");
}

}  // namespace ps::gpu
