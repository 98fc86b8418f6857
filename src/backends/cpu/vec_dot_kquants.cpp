// Scalar dot products of k-quant weight rows with activations quantized to Q8_K: each
// super-block is read as integer levels with one scale and min per sub-block
// (core/kquants.h), so the sub-block sums are exact integers and the mins meet the activation
// sums Q8_K keeps per 16 elements. Accumulated in double, like the other scalar kernels.
#include "backends/cpu/vec_dot.h"
#include "core/kquants.h"

namespace ps::cpu {
namespace {

template <typename Block>
float dot_k(int64_t n, const void* wv, const void* av) {
  const Block* w = static_cast<const Block*>(wv);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(av);
  kquants::KLevels L;
  double sum = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    kquants::levels(w[b], L);
    const int size = QK_K / L.subs;
    double block = 0;
    for (int s = 0; s < L.subs; ++s) {
      int32_t isum = 0, asum = 0;
      for (int l = 0; l < size; ++l) isum += L.q[size * s + l] * a[b].qs[size * s + l];
      for (int k = 0; k < size / 16; ++k) asum += a[b].bsums[s * (size / 16) + k];
      block += double(L.scale[s]) * isum - double(L.min[s]) * asum;
    }
    sum += block * a[b].d;
  }
  return float(sum);
}

void act_q8_k(const float* x, void* dst, int64_t n) { quantize_row(DType::Q8_K, x, dst, n); }

constexpr DotKernel kQ2_K{DType::Q8_K, act_q8_k, dot_k<BlockQ2_K>};
constexpr DotKernel kQ3_K{DType::Q8_K, act_q8_k, dot_k<BlockQ3_K>};
constexpr DotKernel kQ4_K{DType::Q8_K, act_q8_k, dot_k<BlockQ4_K>};
constexpr DotKernel kQ5_K{DType::Q8_K, act_q8_k, dot_k<BlockQ5_K>};
constexpr DotKernel kQ6_K{DType::Q8_K, act_q8_k, dot_k<BlockQ6_K>};

}  // namespace

const DotKernel* dot_kernel_kquants(DType w) {
  switch (w) {
    POLYSTACK_CPU_KQUANT_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    default:
      return nullptr;
  }
}

}  // namespace ps::cpu
