// Causal attention for a batch of queries over the F16 KV cache: scores with the SIMD F16 dot
// kernel, an exact softmax per (token, head), then the weighted sum of V rows with the SIMD
// axpy kernel. Grouped-query attention maps n_head / n_kv_head query heads onto each cache
// head; a sliding window limits each query to the last `window` positions, which a ring cache
// holds at slot position % slots.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_dot.h"
#include "core/error.h"
#include "graph/ops.h"

namespace ps::cpu {

void attention(Context& ctx, Tensor& node) {
  const Tensor& q = *node.src[0];
  const Tensor& kc = *node.src[1];
  const Tensor& vc = *node.src[2];
  const int64_t hd = q.ne[0], n_head = q.ne[1], n_tokens = q.ne[2];
  const int64_t n_kv_head = kc.ne[1];
  const int64_t group = n_head / n_kv_head;
  const AttentionParams ap = attention_params(node);
  const int64_t window = ap.window;
  const int64_t slots = kc.ne[2];  // position j is in slot j % slots
  const float scale = ap.scale;
  // Per token: its position and cache plane (several sequences), else n_past + t in plane 0.
  const Tensor* info = attention_token_info(node);
  const int32_t* tok = info ? static_cast<const int32_t*>(info->data) : nullptr;
  const DotKernel& kdot = dot_kernel(kc.type, ctx.isa);
  const AxpyFn vaxpy = dot_kernel(vc.type, ctx.isa).axpy;
  if (!vaxpy)
    throw BackendError(fmt::format("cpu attention: V cache {} of type {} is not a float type",
                                   vc.name, dtype_name(vc.type)));

  if (tok)
    for (int64_t t = 0; t < n_tokens; ++t)
      if (tok[2 * t] < 0 || tok[2 * t + 1] < 0 || tok[2 * t + 1] >= kc.ne[3] ||
          tok[2 * t + 1] >= vc.ne[3])
        throw BackendError(fmt::format("cpu attention: token {} has position {} in plane {} of {}",
                                       t, tok[2 * t], tok[2 * t + 1], kc.ne[3]));
  ctx.pool->parallel_for(n_tokens * n_head, [&](int64_t task, int) {
    const int64_t t = task / n_head, h = task % n_head, kvh = h / group;
    const int64_t plane = tok ? tok[2 * t + 1] : 0;
    // Visible cache positions: [first, end).
    const int64_t end = (tok ? int64_t(tok[2 * t]) : int64_t(ap.n_past) + t) + 1;
    const int64_t first = window > 0 ? std::max<int64_t>(0, end - window) : 0;
    const float* qr = reinterpret_cast<const float*>(row_ptr(q, h, t));
    thread_local std::vector<float> scores, acc;
    scores.resize(size_t(end - first));
    acc.assign(size_t(hd), 0.0f);
    float mx = -INFINITY;
    for (int64_t j = first; j < end; ++j) {
      scores[size_t(j - first)] = kdot.dot(hd, row_ptr(kc, kvh, j % slots, plane), qr) * scale;
      mx = std::max(mx, scores[size_t(j - first)]);
    }
    double sum = 0;
    for (int64_t j = first; j < end; ++j) {
      const float p = std::exp(scores[size_t(j - first)] - mx);
      sum += p;
      vaxpy(hd, p, row_ptr(vc, kvh, j % slots, plane), acc.data());
    }
    float* out = reinterpret_cast<float*>(row_ptr(node, h, t));
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < hd; ++i) out[i] = acc[size_t(i)] * inv;
  });
}

}  // namespace ps::cpu
