#include <vector>

#include "backends/cpu/kernels.h"

namespace ps::cpu {

// Converts src row by row into the destination's type and layout (e.g. F32 keys into the F16
// KV cache). The node's own data aliases the destination view.
void copy(Context& ctx, Tensor& node) {
  const Tensor& src = *node.src[0];
  const Tensor& dst = *node.src[1];
  const int64_t n = src.ne[0];
  ctx.pool->parallel_for(src.n_rows(), [&](int64_t r, int) {
    const int64_t s1 = r % src.ne[1], s2 = (r / src.ne[1]) % src.ne[2],
                  s3 = r / (src.ne[1] * src.ne[2]);
    const int64_t d1 = r % dst.ne[1], d2 = (r / dst.ne[1]) % dst.ne[2],
                  d3 = r / (dst.ne[1] * dst.ne[2]);
    const void* in = row_ptr(src, s1, s2, s3);
    void* out = row_ptr(dst, d1, d2, d3);
    if (src.type == DType::F32) {
      quantize_row(dst.type, static_cast<const float*>(in), out, n);
    } else {
      std::vector<float> tmp(static_cast<size_t>(n));
      dequantize_row(src.type, in, tmp.data(), n);
      quantize_row(dst.type, tmp.data(), out, n);
    }
  });
}

}  // namespace ps::cpu
