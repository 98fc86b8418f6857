// AVX2 + FMA + F16C dot kernels. Quantized types work one 32-element block per 256-bit vector:
// the 8-bit products are summed in pairs to int16 (vpmaddubsw), then to int32 lanes, converted
// to float and accumulated with the block's scale, so nothing is summed horizontally until the
// end of the row. Four blocks per step feed four accumulators, hiding the FMA latency. (Building
// the four scales in one vector measured slower here than converting each with vcvtph2ps.)
//
// At the avxvnni level this file is compiled again with -mavxvnni (__AVXVNNI__, entry point
// dot_kernel_avxvnni): vpdpbusd sums each lane's 4 products into int32 in one instruction.
//
// This file is compiled with -mavx2 -mfma -mf16c: it calls no inline function of a header that
// baseline files include (simd_avx2.h is for AVX2 files only and has internal linkage), so no
// out-of-line copy built with these flags can replace the baseline one at link.
#include "backends/cpu/vec_dot.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#include "backends/cpu/simd_avx2.h"

namespace ps::cpu {
namespace {

float hsum(__m128 v) {
  __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---- float weights ----------------------------------------------------------------------

template <typename Load>
float dot_float(int64_t n, const void* wv, const void* av) {
  using Elem = typename Load::Elem;
  const Elem* w = static_cast<const Elem*>(wv);
  const float* a = static_cast<const float*>(av);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(Load::load(w + i), _mm256_loadu_ps(a + i), acc0);
    acc1 = _mm256_fmadd_ps(Load::load(w + i + 8), _mm256_loadu_ps(a + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(Load::load(w + i + 16), _mm256_loadu_ps(a + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(Load::load(w + i + 24), _mm256_loadu_ps(a + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(Load::load(w + i), _mm256_loadu_ps(a + i), acc0);
  if (i < n) {
    // AVX2 has no masked 16-bit load; a zero-padded copy of the tail keeps it in vector code.
    Elem w_tail[8] = {};
    float a_tail[8] = {};
    std::memcpy(w_tail, w + i, size_t(n - i) * sizeof(Elem));
    std::memcpy(a_tail, a + i, size_t(n - i) * sizeof(float));
    acc1 = _mm256_fmadd_ps(Load::load(w_tail), _mm256_loadu_ps(a_tail), acc1);
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

// ---- quantized weights ------------------------------------------------------------------

#if defined(__AVXVNNI__)
// The int32 lanes' sums of 4 products of unsigned by signed bytes.
__m256i quad_sums(__m256i u, __m256i s) {
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
}
__m256 products(__m256i u, __m256i s) { return _mm256_cvtepi32_ps(quad_sums(u, s)); }
__m256 dot_u8_i8_offset(__m256i w, __m256i a, __m256i offset) {
  return _mm256_cvtepi32_ps(_mm256_dpbusd_avx_epi32(
      _mm256_sub_epi32(_mm256_setzero_si256(), quad_sums(offset, a)), w, a));
}
#else
// Sums of adjacent int16 pairs, as 8 floats.
__m256 pair_sums(__m256i x) {
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(x, _mm256_set1_epi16(1)));
}

// Unsigned weights 0..31 times signed activations; no pair can saturate int16 (2*31*127).
__m256 products(__m256i u, __m256i s) { return pair_sums(_mm256_maddubs_epi16(u, s)); }

// (w - offset) . a as q . a - offset . a, cheaper than re-signing the weights.
__m256 dot_u8_i8_offset(__m256i w, __m256i a, __m256i offset) {
  return pair_sums(_mm256_sub_epi16(_mm256_maddubs_epi16(w, a), _mm256_maddubs_epi16(offset, a)));
}
#endif
__m256 dot_u8_i8(__m256i w, __m256i a) { return products(w, a); }

// vpmaddubsw multiplies unsigned by signed bytes: move w's sign onto a. |w| = 128 for w = -128
// reads as unsigned 128, still exact, and activations never exceed 127 in magnitude.
__m256 dot_i8_i8(__m256i w, __m256i a) {
  return products(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

// Four products of fp16 pairs x[k] * y[k] (the m * s terms), converted in one vector.
__m128 half_products(uint16_t x0, uint16_t x1, uint16_t x2, uint16_t x3, uint16_t y0, uint16_t y1,
                     uint16_t y2, uint16_t y3) {
  const uint64_t xs = uint64_t(x0) | uint64_t(x1) << 16 | uint64_t(x2) << 32 | uint64_t(x3) << 48;
  const uint64_t ys = uint64_t(y0) | uint64_t(y1) << 16 | uint64_t(y2) << 32 | uint64_t(y3) << 48;
  const __m256 f = _mm256_cvtph_ps(_mm_set_epi64x(int64_t(ys), int64_t(xs)));
  return _mm_mul_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
}

// A block's own scale: fp16 d, or MXFP4's E8M0 exponent.
template <typename WBlock>
float weight_scale(const WBlock& w) {
  return half_to_float(w.d);
}
float weight_scale(const BlockMXFP4& w) { return e8m0_half(w.e); }

// One kernel per weight type: block_dot(w, a) is the unscaled dot of one block as 8 float lane
// sums; has_offset types add m_w * s_a per block.
template <typename WBlock, typename ABlock, __m256 (*block_dot)(const WBlock&, const ABlock&),
          bool has_offset>
float dot_quant(int64_t n, const void* wv, const void* av) {
  const WBlock* w = static_cast<const WBlock*>(wv);
  const ABlock* a = static_cast<const ABlock*>(av);
  const int64_t nb = n / 32;
  const auto scale = [&](int64_t i) {
    return _mm256_set1_ps(weight_scale(w[i]) * half_to_float(a[i].d));
  };
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  __m128 offsets = _mm_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    acc0 = _mm256_fmadd_ps(scale(b), block_dot(w[b], a[b]), acc0);
    acc1 = _mm256_fmadd_ps(scale(b + 1), block_dot(w[b + 1], a[b + 1]), acc1);
    acc2 = _mm256_fmadd_ps(scale(b + 2), block_dot(w[b + 2], a[b + 2]), acc2);
    acc3 = _mm256_fmadd_ps(scale(b + 3), block_dot(w[b + 3], a[b + 3]), acc3);
    if constexpr (has_offset) {
      offsets = _mm_add_ps(offsets, half_products(w[b].m, w[b + 1].m, w[b + 2].m, w[b + 3].m,
                                                  a[b].s, a[b + 1].s, a[b + 2].s, a[b + 3].s));
    }
  }
  float tail_offsets = 0;
  for (; b < nb; ++b) {
    acc0 = _mm256_fmadd_ps(scale(b), block_dot(w[b], a[b]), acc0);
    if constexpr (has_offset) tail_offsets += half_to_float(w[b].m) * half_to_float(a[b].s);
  }
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  if constexpr (has_offset) sum += hsum(offsets) + tail_offsets;
  return sum;
}

__m256 block_q8_0(const BlockQ8_0& w, const BlockQ8_0& a) {
  return dot_i8_i8(load_bytes(w.qs), load_bytes(a.qs));
}
__m256 block_q4_0(const BlockQ4_0& w, const BlockQ8_0& a) {
  return dot_u8_i8_offset(unpack_nibbles(w.qs), load_bytes(a.qs), _mm256_set1_epi8(8));
}
__m256 block_q5_0(const BlockQ5_0& w, const BlockQ8_0& a) {
  const __m256i q = _mm256_or_si256(unpack_nibbles(w.qs), unpack_fifth_bits(w.qh));
  return dot_u8_i8_offset(q, load_bytes(a.qs), _mm256_set1_epi8(16));
}
__m256 block_q4_1(const BlockQ4_1& w, const BlockQ8_1& a) {
  return dot_u8_i8(unpack_nibbles(w.qs), load_bytes(a.qs));
}
__m256 block_q5_1(const BlockQ5_1& w, const BlockQ8_1& a) {
  const __m256i q = _mm256_or_si256(unpack_nibbles(w.qs), unpack_fifth_bits(w.qh));
  return dot_u8_i8(q, load_bytes(a.qs));
}

// The codebook types: each nibble looks its int8 value up in the 16-byte table (vpshufb, the
// table in both 128-bit lanes), then as Q8_0.
template <typename WBlock, const int8_t* kValues>
__m256 block_codebook(const WBlock& w, const BlockQ8_0& a) {
  return dot_i8_i8(looked_up(w.qs, codebook(kValues)), load_bytes(a.qs));
}

// IQ4_XS: sub-block ib of super-block b against activation block 8 b + ib, each with its scale
// (d * (l - 32)) * d_a; four accumulators in turn.
float dot_iq4_xs(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  const auto* a = static_cast<const BlockQ8_0*>(av);
  const __m256i table = codebook(kIq4nlValues);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = half_to_float(w[b].d);
    const BlockQ8_0* ab = a + b * (QK_K / 32);
#pragma GCC unroll 8
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const float scale = d * float(iq4_xs_sub_scale(w[b], ib)) * half_to_float(ab[ib].d);
      acc[ib % 4] = _mm256_fmadd_ps(
          _mm256_set1_ps(scale),
          dot_i8_i8(looked_up(w[b].qs + 16 * ib, table), load_bytes(ab[ib].qs)), acc[ib % 4]);
    }
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// ---- activation quantization --------------------------------------------------------------

// Bit-identical to the scalar quantizers (see quantize_q8_block in simd_avx2.h).
template <typename Block, bool with_sum>
void quantize_act(const float* x, void* dst, int64_t n) {
  Block* y = static_cast<Block*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    const Q8Block q = quantize_q8_block(x, y[b].qs);
    y[b].d = _cvtss_sh(q.d, _MM_FROUND_TO_NEAREST_INT);
    if constexpr (with_sum) y[b].s = _cvtss_sh(float(q.sum) * q.d, _MM_FROUND_TO_NEAREST_INT);
  }
}

// Q queries by U vectors of 8 elements (see the AVX-512 version); the last partial vector of a
// row is read from a zero-padded copy, AVX2 having no masked 16-bit load.
template <typename Load, int Q>
void weighted_sum_tile(int64_t n, int64_t rows, const float* p, size_t p_stride, const void* xv,
                       size_t x_stride, float* out, size_t out_stride) {
  using Elem = typename Load::Elem;
  constexpr int U = Q >= 3 ? 1 : Q == 2 ? 2 : 4;
  const char* x = static_cast<const char*>(xv);
  const auto row_at = [&](int64_t j) {
    return reinterpret_cast<const Elem*>(x + size_t(j) * x_stride);
  };
  int64_t i = 0;
  for (; i + 8 * U <= n; i += 8 * U) {
    __m256 acc[U][Q];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u)
#pragma GCC unroll 8
      for (int q = 0; q < Q; ++q)
        acc[u][q] = _mm256_loadu_ps(out + size_t(q) * out_stride + size_t(i + 8 * u));
    for (int64_t j = 0; j < rows; ++j) {
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) {
        const __m256 v = Load::load(row_at(j) + i + 8 * u);
#pragma GCC unroll 8
        for (int q = 0; q < Q; ++q)
          acc[u][q] =
              _mm256_fmadd_ps(_mm256_set1_ps(p[size_t(q) * p_stride + size_t(j)]), v, acc[u][q]);
      }
    }
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u)
#pragma GCC unroll 8
      for (int q = 0; q < Q; ++q)
        _mm256_storeu_ps(out + size_t(q) * out_stride + size_t(i + 8 * u), acc[u][q]);
  }
  for (; i < n; i += 8) {
    const int64_t width = n - i < 8 ? n - i : 8;
    __m256 acc[Q];
#pragma GCC unroll 8
    for (int q = 0; q < Q; ++q) {
      float lanes[8] = {};
      std::memcpy(lanes, out + size_t(q) * out_stride + size_t(i), size_t(width) * sizeof(float));
      acc[q] = _mm256_loadu_ps(lanes);
    }
    for (int64_t j = 0; j < rows; ++j) {
      Elem tail[8] = {};
      std::memcpy(tail, row_at(j) + i, size_t(width) * sizeof(Elem));
      const __m256 v = Load::load(tail);
#pragma GCC unroll 8
      for (int q = 0; q < Q; ++q)
        acc[q] = _mm256_fmadd_ps(_mm256_set1_ps(p[size_t(q) * p_stride + size_t(j)]), v, acc[q]);
    }
#pragma GCC unroll 8
    for (int q = 0; q < Q; ++q) {
      float lanes[8];
      _mm256_storeu_ps(lanes, acc[q]);
      std::memcpy(out + size_t(q) * out_stride + size_t(i), lanes, size_t(width) * sizeof(float));
    }
  }
}

template <typename Load>
void weighted_sum(int64_t n, int64_t rows, const float* p, size_t p_stride, int nq, const void* x,
                  size_t x_stride, float* out, size_t out_stride) {
  using Tile =
      void (*)(int64_t, int64_t, const float*, size_t, const void*, size_t, float*, size_t);
  static constexpr Tile kTiles[4] = {weighted_sum_tile<Load, 1>, weighted_sum_tile<Load, 2>,
                                     weighted_sum_tile<Load, 3>, weighted_sum_tile<Load, 4>};
  for (int q = 0; q < nq; q += 4)
    kTiles[(nq - q < 4 ? nq - q : 4) - 1](n, rows, p + size_t(q) * p_stride, p_stride, x, x_stride,
                                          out + size_t(q) * out_stride, out_stride);
}

constexpr DotKernel kF32{DType::F32, act_copy_f32, dot_float<LoadF32>, weighted_sum<LoadF32>};
constexpr DotKernel kF16{DType::F32, act_copy_f32, dot_float<LoadF16>, weighted_sum<LoadF16>};
constexpr DotKernel kBF16{DType::F32, act_copy_f32, dot_float<LoadBF16>, weighted_sum<LoadBF16>};
constexpr ActFromF32Fn kActQ8_0 = quantize_act<BlockQ8_0, false>;
constexpr ActFromF32Fn kActQ8_1 = quantize_act<BlockQ8_1, true>;
constexpr DotKernel kQ8_0{DType::Q8_0, kActQ8_0,
                          dot_quant<BlockQ8_0, BlockQ8_0, block_q8_0, false>};
constexpr DotKernel kQ4_0{DType::Q8_0, kActQ8_0,
                          dot_quant<BlockQ4_0, BlockQ8_0, block_q4_0, false>};
constexpr DotKernel kQ5_0{DType::Q8_0, kActQ8_0,
                          dot_quant<BlockQ5_0, BlockQ8_0, block_q5_0, false>};
constexpr DotKernel kQ4_1{DType::Q8_1, kActQ8_1, dot_quant<BlockQ4_1, BlockQ8_1, block_q4_1, true>};
constexpr DotKernel kQ5_1{DType::Q8_1, kActQ8_1, dot_quant<BlockQ5_1, BlockQ8_1, block_q5_1, true>};
constexpr DotKernel kIQ4_NL{
    DType::Q8_0, kActQ8_0,
    dot_quant<BlockIQ4_NL, BlockQ8_0, block_codebook<BlockIQ4_NL, kIq4nlValues>, false>};
constexpr DotKernel kMXFP4{
    DType::Q8_0, kActQ8_0,
    dot_quant<BlockMXFP4, BlockQ8_0, block_codebook<BlockMXFP4, kMxfp4Values>, false>};
constexpr DotKernel kIQ4_XS{DType::Q8_0, kActQ8_0, dot_iq4_xs};

}  // namespace

#if defined(__AVXVNNI__)
const DotKernel* dot_kernel_avxvnni(DType w) {
#else
const DotKernel* dot_kernel_avx2(DType w) {
#endif
  switch (w) {
    POLYSTACK_CPU_WEIGHT_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    POLYSTACK_CPU_TABLE_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    default:
      return dot_kernel_kquants_avx2(w);
  }
}

}  // namespace ps::cpu

#else

namespace ps::cpu {
const DotKernel* dot_kernel_avx2(DType) { return nullptr; }
const DotKernel* dot_kernel_avxvnni(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
