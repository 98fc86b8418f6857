// Scalar dot kernels (the reference every SIMD level is tested against, and the kernels of
// CPUs without one) and the dispatch between levels. The scalar kernels accumulate in double:
// they are the yardstick, so their own rounding should be far below any SIMD variant's.
#include "backends/cpu/vec_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/fp16.h"

namespace ps::cpu {
namespace {

template <typename Block>
const Block* blocks(const void* p) {
  return static_cast<const Block*>(p);
}

float dot_f32(int64_t n, const void* wv, const void* av) {
  const float* w = static_cast<const float*>(wv);
  const float* a = static_cast<const float*>(av);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(w[i]) * a[i];
  return float(sum);
}

float dot_f16(int64_t n, const void* wv, const void* av) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  const float* a = static_cast<const float*>(av);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(fp16_to_f32(w[i])) * a[i];
  return float(sum);
}

float dot_bf16(int64_t n, const void* wv, const void* av) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  const float* a = static_cast<const float*>(av);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(bf16_to_f32(w[i])) * a[i];
  return float(sum);
}

template <float (*ToFloat)(uint16_t)>
float widen16(const void* x, int64_t i) {
  return ToFloat(static_cast<const uint16_t*>(x)[i]);
}
float widen32(const void* x, int64_t i) { return static_cast<const float*>(x)[i]; }

template <float (*Widen)(const void*, int64_t)>
void weighted_sum(int64_t n, int64_t rows, const float* p, size_t p_stride, int nq, const void* x,
                  size_t x_stride, float* out, size_t out_stride) {
  for (int64_t j = 0; j < rows; ++j) {
    const void* row = static_cast<const char*>(x) + size_t(j) * x_stride;
    for (int q = 0; q < nq; ++q) {
      const float a = p[size_t(q) * p_stride + size_t(j)];
      float* y = out + size_t(q) * out_stride;
      for (int64_t i = 0; i < n; ++i) y[i] += a * Widen(row, i);
    }
  }
}

// Every integer block sum below is exact (|sum| < 2^16); only the scaling is floating point.
// The scale is rounded to float as d_w * d_a, as the SIMD kernels do, so that the levels differ
// only by the order of the float additions.
float block_scale(uint16_t dw, uint16_t da) { return fp16_to_f32(dw) * fp16_to_f32(da); }

float dot_q8_0(int64_t n, const void* wv, const void* av) {
  const auto* w = blocks<BlockQ8_0>(wv);
  const auto* a = blocks<BlockQ8_0>(av);
  double sum = 0;
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < QK8_0; ++j) isum += int32_t(w[b].qs[j]) * a[b].qs[j];
    sum += double(block_scale(w[b].d, a[b].d)) * isum;
  }
  return float(sum);
}

float dot_q4_0(int64_t n, const void* wv, const void* av) {
  const auto* w = blocks<BlockQ4_0>(wv);
  const auto* a = blocks<BlockQ8_0>(av);
  double sum = 0;
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < QK4_0 / 2; ++j) {
      isum += ((w[b].qs[j] & 0x0f) - 8) * a[b].qs[j];
      isum += ((w[b].qs[j] >> 4) - 8) * a[b].qs[j + QK4_0 / 2];
    }
    sum += double(block_scale(w[b].d, a[b].d)) * isum;
  }
  return float(sum);
}

float dot_q4_1(int64_t n, const void* wv, const void* av) {
  const auto* w = blocks<BlockQ4_1>(wv);
  const auto* a = blocks<BlockQ8_1>(av);
  double sum = 0;
  for (int64_t b = 0; b < n / QK4_1; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < QK4_1 / 2; ++j) {
      isum += (w[b].qs[j] & 0x0f) * a[b].qs[j];
      isum += (w[b].qs[j] >> 4) * a[b].qs[j + QK4_1 / 2];
    }
    sum += double(block_scale(w[b].d, a[b].d)) * isum;
    sum += double(block_scale(w[b].m, a[b].s));
  }
  return float(sum);
}

uint32_t high_bits(const uint8_t qh[4]) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return bits;
}

float dot_q5_0(int64_t n, const void* wv, const void* av) {
  const auto* w = blocks<BlockQ5_0>(wv);
  const auto* a = blocks<BlockQ8_0>(av);
  double sum = 0;
  for (int64_t b = 0; b < n / QK5_0; ++b) {
    const uint32_t qh = high_bits(w[b].qh);
    int32_t isum = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int lo = (w[b].qs[j] & 0x0f) | int(((qh >> j) & 1) << 4);
      const int hi = (w[b].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      isum += (lo - 16) * a[b].qs[j] + (hi - 16) * a[b].qs[j + QK5_0 / 2];
    }
    sum += double(block_scale(w[b].d, a[b].d)) * isum;
  }
  return float(sum);
}

float dot_q5_1(int64_t n, const void* wv, const void* av) {
  const auto* w = blocks<BlockQ5_1>(wv);
  const auto* a = blocks<BlockQ8_1>(av);
  double sum = 0;
  for (int64_t b = 0; b < n / QK5_1; ++b) {
    const uint32_t qh = high_bits(w[b].qh);
    int32_t isum = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int lo = (w[b].qs[j] & 0x0f) | int(((qh >> j) & 1) << 4);
      const int hi = (w[b].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      isum += lo * a[b].qs[j] + hi * a[b].qs[j + QK5_1 / 2];
    }
    sum += double(block_scale(w[b].d, a[b].d)) * isum;
    sum += double(block_scale(w[b].m, a[b].s));
  }
  return float(sum);
}

// The codebook types: one table lookup per element, an exact int32 block sum, one scale.
template <typename Block>
int32_t table_block_sum(const Block& w, const BlockQ8_0& a, const int8_t* table) {
  int32_t isum = 0;
  for (int j = 0; j < 16; ++j) {
    isum += int32_t(table[w.qs[j] & 0x0f]) * a.qs[j];
    isum += int32_t(table[w.qs[j] >> 4]) * a.qs[j + 16];
  }
  return isum;
}

float dot_iq4_nl(int64_t n, const void* wv, const void* av) {
  const auto* w = blocks<BlockIQ4_NL>(wv);
  const auto* a = blocks<BlockQ8_0>(av);
  double sum = 0;
  for (int64_t b = 0; b < n / 32; ++b)
    sum += double(block_scale(w[b].d, a[b].d)) * table_block_sum(w[b], a[b], kIq4nlValues);
  return float(sum);
}

float dot_mxfp4(int64_t n, const void* wv, const void* av) {
  const auto* w = blocks<BlockMXFP4>(wv);
  const auto* a = blocks<BlockQ8_0>(av);
  double sum = 0;
  for (int64_t b = 0; b < n / 32; ++b)
    sum += double(e8m0_half_to_f32(w[b].e) * fp16_to_f32(a[b].d)) *
           table_block_sum(w[b], a[b], kMxfp4Values);
  return float(sum);
}

// IQ4_XS against Q8_0 activations: sub-block ib of super-block b meets activation block
// 8 b + ib; its scale is d * (l - 32), rounded to float with the activation's as
// (d * (l - 32)) * d_a.
float dot_iq4_xs(int64_t n, const void* wv, const void* av) {
  const auto* w = blocks<BlockIQ4_XS>(wv);
  const auto* a = blocks<BlockQ8_0>(av);
  double sum = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_f32(w[b].d);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const BlockQ8_0& ab = a[b * (QK_K / 32) + ib];
      const uint8_t* qs = w[b].qs + 16 * ib;
      int32_t isum = 0;
      for (int j = 0; j < 16; ++j) {
        isum += int32_t(kIq4nlValues[qs[j] & 0x0f]) * ab.qs[j];
        isum += int32_t(kIq4nlValues[qs[j] >> 4]) * ab.qs[j + 16];
      }
      sum += double(d * float(iq4_xs_scale(w[b], ib)) * fp16_to_f32(ab.d)) * isum;
    }
  }
  return float(sum);
}

void act_q8_0(const float* x, void* dst, int64_t n) { quantize_row(DType::Q8_0, x, dst, n); }

// GGUF's Q8_1 quantizer, rounding like the Q8_0 reference one (halves away from zero), and like
// it for NaN and infinities: an infinity makes the block's scale infinite, and a quant with no
// int8 value (NaN) is 0, where converting it would be undefined.
void act_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    float amax = 0;
    for (int j = 0; j < QK8_0; ++j)
      if (const float a = std::fabs(x[j]); !(a <= amax)) amax = a;
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < QK8_0; ++j) {
      const float q = std::round(x[j] * id);
      y[b].qs[j] = q == q ? int8_t(std::clamp(q, -127.0f, 127.0f)) : int8_t(0);
      sum += y[b].qs[j];
    }
    y[b].d = f32_to_fp16(d);
    y[b].s = f32_to_fp16(float(sum) * d);
  }
}

constexpr DotKernel kF32{DType::F32, act_copy_f32, dot_f32, weighted_sum<widen32>};
constexpr DotKernel kF16{DType::F32, act_copy_f32, dot_f16, weighted_sum<widen16<fp16_to_f32>>};
constexpr DotKernel kBF16{DType::F32, act_copy_f32, dot_bf16, weighted_sum<widen16<bf16_to_f32>>};
constexpr DotKernel kQ8_0{DType::Q8_0, act_q8_0, dot_q8_0};
constexpr DotKernel kQ4_0{DType::Q8_0, act_q8_0, dot_q4_0};
constexpr DotKernel kQ5_0{DType::Q8_0, act_q8_0, dot_q5_0};
constexpr DotKernel kQ4_1{DType::Q8_1, act_q8_1, dot_q4_1};
constexpr DotKernel kQ5_1{DType::Q8_1, act_q8_1, dot_q5_1};
constexpr DotKernel kIQ4_NL{DType::Q8_0, act_q8_0, dot_iq4_nl};
constexpr DotKernel kMXFP4{DType::Q8_0, act_q8_0, dot_mxfp4};
constexpr DotKernel kIQ4_XS{DType::Q8_0, act_q8_0, dot_iq4_xs};

}  // namespace

void act_copy_f32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, size_t(n) * sizeof(float));
}

const DotKernel* dot_kernel_scalar(DType w) {
  switch (w) {
    POLYSTACK_CPU_WEIGHT_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    POLYSTACK_CPU_TABLE_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    default:
      return dot_kernel_kquants(w);
  }
}

const DotKernel& dot_kernel(DType w, IsaLevel isa) {
  const IsaLevel best = best_isa_level();
  const IsaLevel level = isa < best ? isa : best;
  if (level >= IsaLevel::Avx512) {
    if (const DotKernel* k = dot_kernel_avx512(w)) return *k;
  }
  if (level >= IsaLevel::AvxVnni && cpu_features().avx_vnni) {
    if (const DotKernel* k = dot_kernel_avxvnni(w)) return *k;
  }
  if (level >= IsaLevel::Avx2) {
    if (const DotKernel* k = dot_kernel_avx2(w)) return *k;
  }
  if (const DotKernel* k = dot_kernel_scalar(w)) return *k;
  throw BackendError("cpu: no dot kernel for weight type " + std::string(dtype_name(w)));
}

}  // namespace ps::cpu
