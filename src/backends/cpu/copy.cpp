#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/row_ops.h"

namespace ps::cpu {

// Converts src row by row into the destination's type and layout (e.g. F32 keys into the F16
// KV cache). The node's own data aliases the destination view.
void copy(Context& ctx, Tensor& node) {
  const Tensor& src = *node.src[0];
  const Tensor& dst = *node.src[1];
  const int64_t n = src.ne[0];
  const RowOps& rows = row_ops(ctx.isa);
  ctx.pool->parallel_for(src.n_rows(), [&](int64_t r, int) {
    const void* in = row_ptr(src, row_index(src, r));
    void* out = row_ptr(dst, row_index(dst, r));
    if (src.type == DType::F32 && dst.type == DType::F16) {
      rows.f32_to_f16(static_cast<const float*>(in), static_cast<uint16_t*>(out), n);
    } else if (src.type == DType::F32) {
      quantize_row(dst.type, static_cast<const float*>(in), out, n);
    } else {
      std::vector<float> tmp(static_cast<size_t>(n));
      dequantize_row(src.type, in, tmp.data(), n);
      quantize_row(dst.type, tmp.data(), out, n);
    }
  });
}

}  // namespace ps::cpu
