// Copy converts F32 rows into the bytes of a view (the KV cache): F32 or F16 (rounded to
// nearest even, as the CPU backend does), any strides on both sides.
#include "backends/cuda/kernels.h"

namespace ps::gpu {
namespace {

template <bool kF16>
__global__ void copy_kernel(View s, View d, int64_t n) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i0 = e % s.ne[0], r = e / s.ne[0];
    const int64_t i1 = r % s.ne[1], i2 = (r / s.ne[1]) % s.ne[2], i3 = r / (s.ne[1] * s.ne[2]);
    const float v = *reinterpret_cast<const float*>(row_at(s, i1, i2, i3) + i0 * s.nb[0]);
    char* out = row_at(d, i1, i2, i3) + i0 * d.nb[0];
    if constexpr (kF16)
      *reinterpret_cast<__half*>(out) = __float2half_rn(v);
    else
      *reinterpret_cast<float*>(out) = v;
  }
}

}  // namespace

void copy(const Launch& l, const Tensor& node) {
  const Tensor& src = *node.src[0];
  const Tensor& dst = *node.src[1];
  const int64_t n = src.n_elements();
  if (dst.type == DType::F16)
    PS_LAUNCH(copy_kernel<true>, blocks_for(n, 256), 256, l.stream, view_of(src), view_of(dst), n);
  else
    PS_LAUNCH(copy_kernel<false>, blocks_for(n, 256), 256, l.stream, view_of(src), view_of(dst), n);
  check_launch("copy");
}

}  // namespace ps::gpu
