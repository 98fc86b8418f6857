// AVX-512 (F, BW, VL, DQ, VNNI) dot kernels. Quantized types put two 32-element blocks in one
// 512-bit vector and sum their 8-bit products straight into int32 lanes with vpdpbusd
// (unsigned x signed bytes), then scale each block's lanes in float; nothing is summed
// horizontally until the end of the row. Float types handle row tails with masked loads.
//
// This file is compiled with the AVX-512 flags: it calls no inline function of a header that
// baseline files include (simd_avx512.h is for AVX-512 files only and has internal linkage), so
// no out-of-line copy built with these flags can replace the baseline one at link.
#include "backends/cpu/vec_dot.h"

#if defined(__x86_64__)

// GCC 12's AVX-512 headers build "undefined" placeholder vectors as `__Y = __Y`, which its
// uninitialized-use warnings flag once inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backends/cpu/simd_avx512.h"
#pragma GCC diagnostic pop

#include <cstring>

namespace ps::cpu {
namespace {

float hsum(__m128 v) {
  __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float hsum(__m256 v) {
  return hsum(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

// ---- float weights ----------------------------------------------------------------------

template <typename Load>
float dot_float(int64_t n, const void* wv, const void* av) {
  using Elem = typename Load::Elem;
  const Elem* w = static_cast<const Elem*>(wv);
  const float* a = static_cast<const float*>(av);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_fmadd_ps(Load::load(w + i), _mm512_loadu_ps(a + i), acc0);
    acc1 = _mm512_fmadd_ps(Load::load(w + i + 16), _mm512_loadu_ps(a + i + 16), acc1);
    acc2 = _mm512_fmadd_ps(Load::load(w + i + 32), _mm512_loadu_ps(a + i + 32), acc2);
    acc3 = _mm512_fmadd_ps(Load::load(w + i + 48), _mm512_loadu_ps(a + i + 48), acc3);
  }
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm512_fmadd_ps(Load::load(w + i), _mm512_loadu_ps(a + i), acc0);
  }
  if (i < n) {
    const __mmask16 mask = __mmask16((1u << (n - i)) - 1);
    acc1 = _mm512_fmadd_ps(Load::load(w + i, mask), _mm512_maskz_loadu_ps(mask, a + i), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

// Q queries by U vectors of 16 elements: Q x U sums stay in registers while the rows stream
// past, each row's U vectors converted once for the Q queries. U grows as Q shrinks, so that
// enough independent FMAs are in flight for the FMA latency.
template <typename Load, int Q>
void weighted_sum_tile(int64_t n, int64_t rows, const float* p, size_t p_stride, const void* xv,
                       size_t x_stride, float* out, size_t out_stride) {
  using Elem = typename Load::Elem;
  constexpr int U = Q >= 5 ? 1 : Q >= 3 ? 2 : Q == 2 ? 4 : 8;
  const char* x = static_cast<const char*>(xv);
  for (int64_t i = 0; i < n; i += 16 * U) {
    __mmask16 mask[U];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      const int64_t left = n - i - 16 * u;
      mask[u] = left >= 16 ? __mmask16(0xffff) : left <= 0 ? 0 : __mmask16((1u << left) - 1);
    }
    __m512 acc[U][Q];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u)
#pragma GCC unroll 8
      for (int q = 0; q < Q; ++q)
        acc[u][q] =
            _mm512_maskz_loadu_ps(mask[u], out + size_t(q) * out_stride + size_t(i + 16 * u));
    for (int64_t j = 0; j < rows; ++j) {
      const Elem* row = reinterpret_cast<const Elem*>(x + size_t(j) * x_stride) + i;
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) {
        const __m512 v = Load::load(row + 16 * u, mask[u]);
#pragma GCC unroll 8
        for (int q = 0; q < Q; ++q)
          acc[u][q] =
              _mm512_fmadd_ps(_mm512_set1_ps(p[size_t(q) * p_stride + size_t(j)]), v, acc[u][q]);
      }
    }
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u)
#pragma GCC unroll 8
      for (int q = 0; q < Q; ++q)
        _mm512_mask_storeu_ps(out + size_t(q) * out_stride + size_t(i + 16 * u), mask[u],
                              acc[u][q]);
  }
}

template <typename Load>
void weighted_sum(int64_t n, int64_t rows, const float* p, size_t p_stride, int nq, const void* x,
                  size_t x_stride, float* out, size_t out_stride) {
  using Tile =
      void (*)(int64_t, int64_t, const float*, size_t, const void*, size_t, float*, size_t);
  static constexpr Tile kTiles[8] = {weighted_sum_tile<Load, 1>, weighted_sum_tile<Load, 2>,
                                     weighted_sum_tile<Load, 3>, weighted_sum_tile<Load, 4>,
                                     weighted_sum_tile<Load, 5>, weighted_sum_tile<Load, 6>,
                                     weighted_sum_tile<Load, 7>, weighted_sum_tile<Load, 8>};
  for (int q = 0; q < nq; q += 8)
    kTiles[(nq - q < 8 ? nq - q : 8) - 1](n, rows, p + size_t(q) * p_stride, p_stride, x, x_stride,
                                          out + size_t(q) * out_stride, out_stride);
}

// ---- quantized weights ------------------------------------------------------------------

// Two blocks' 32 bytes each, one block per 256-bit half.
__m512i load_pair(const int8_t* p0, const int8_t* p1) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

__m256i load_block(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Two blocks' packed nibbles as bytes in element order (element j is the low nibble of qs[j],
// element j+16 the high one): 128-bit lanes [qs0, qs0 >> 4, qs1, qs1 >> 4], masked to 4 bits.
__m512i unpack_nibbles_pair(const uint8_t* qs0, const uint8_t* qs1) {
  __m512i z = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0)));
  z = _mm512_mask_broadcast_i32x4(z, 0xff00,
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)));
  z = _mm512_mask_srli_epi16(z, 0xff00ff00u, z, 4);
  return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

__m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

uint32_t fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return bits;
}

// Adds 16 to byte j where bit j of the block's qh is set: a byte mask does it in one op.
__m512i with_fifth_bits_pair(__m512i q, const uint8_t* qh0, const uint8_t* qh1) {
  const uint64_t bits = uint64_t(fifth_bits(qh0)) | uint64_t(fifth_bits(qh1)) << 32;
  return _mm512_mask_add_epi8(q, _cvtu64_mask64(bits), q, _mm512_set1_epi8(16));
}

__m256i with_fifth_bits(__m256i q, const uint8_t* qh) {
  return _mm256_mask_add_epi8(q, _cvtu32_mask32(fifth_bits(qh)), q, _mm256_set1_epi8(16));
}

// vpdpbusd multiplies unsigned by signed bytes. Offset weights (w - c with w in 0..31) become
// w . a - c . a; signed weights move their sign onto the activation (|-128| reads as unsigned
// 128, still exact).
__m512i dot_u8_i8_offset(__m512i w, __m512i a, char offset) {
  const __m512i zero = _mm512_setzero_si512();
  return _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, w, a),
                          _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(offset), a));
}
__m256i dot_u8_i8_offset(__m256i w, __m256i a, char offset) {
  const __m256i zero = _mm256_setzero_si256();
  return _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, w, a),
                          _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(offset), a));
}
__m512i dot_u8_i8(__m512i w, __m512i a) {
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, a);
}
__m256i dot_u8_i8(__m256i w, __m256i a) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a);
}
__m512i dot_i8_i8(__m512i w, __m512i a) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i a_signed = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), zero, a);
  return _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(w), a_signed);
}
__m256i dot_i8_i8(__m256i w, __m256i a) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i a_signed = _mm256_mask_sub_epi8(a, _mm256_movepi8_mask(w), zero, a);
  return _mm256_dpbusd_epi32(zero, _mm256_abs_epi8(w), a_signed);
}

// Products of four fp16 pairs x[k] * y[k], converted in one vector.
__m128 half_products(uint16_t x0, uint16_t x1, uint16_t x2, uint16_t x3, uint16_t y0, uint16_t y1,
                     uint16_t y2, uint16_t y3) {
  const uint64_t xs = uint64_t(x0) | uint64_t(x1) << 16 | uint64_t(x2) << 32 | uint64_t(x3) << 48;
  const uint64_t ys = uint64_t(y0) | uint64_t(y1) << 16 | uint64_t(y2) << 32 | uint64_t(y3) << 48;
  const __m256 f = _mm256_cvtph_ps(_mm_set_epi64x(int64_t(ys), int64_t(xs)));
  return _mm_mul_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
}

// Scales k and k+1 of four, each over the 8 lanes of its block.
template <int k>
__m512 pair_scales(__m128 scales) {
  const __m512i index = _mm512_set_epi32(k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k,
                                         k, k, k, k, k, k, k);
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(scales));
}

// One kernel per weight type: pair_dot(w, a) gives the int32 lane sums of blocks w[0], w[1]
// (8 lanes each), block_dot those of one block; has_offset types add m_w * s_a per block.
// The scales of four blocks are converted in one vector and spread with vpermps: fewer uops on
// the shuffle port than four scalar conversions and broadcasts, and the 512-bit integer work
// (inserts, broadcasts, masked shifts) already leans on that port.
// The block scales d_w * d_a of blocks 0..3 (fp16 d, or MXFP4's exponent 2^(e - 128)), and
// of one block.
template <typename WBlock, typename ABlock>
__m128 block_scales4(const WBlock* w, const ABlock* a) {
  return half_products(w[0].d, w[1].d, w[2].d, w[3].d, a[0].d, a[1].d, a[2].d, a[3].d);
}
__m128 block_scales4(const BlockMXFP4* w, const BlockQ8_0* a) {
  const __m128i e = _mm_setr_epi32(w[0].e, w[1].e, w[2].e, w[3].e);
  const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
  const __m128i subnormal = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
  const __m128i bits = _mm_blendv_epi8(normal, subnormal, _mm_cmplt_epi32(e, _mm_set1_epi32(2)));
  const uint64_t ds =
      uint64_t(a[0].d) | uint64_t(a[1].d) << 16 | uint64_t(a[2].d) << 32 | uint64_t(a[3].d) << 48;
  return _mm_mul_ps(_mm_castsi128_ps(bits), _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(ds))));
}
template <typename WBlock, typename ABlock>
float block_scale(const WBlock& w, const ABlock& a) {
  return half_to_float(w.d) * half_to_float(a.d);
}
float block_scale(const BlockMXFP4& w, const BlockQ8_0& a) {
  return e8m0_half(w.e) * half_to_float(a.d);
}

template <typename WBlock, typename ABlock, __m512i (*pair_dot)(const WBlock*, const ABlock*),
          __m256i (*block_dot)(const WBlock&, const ABlock&), bool has_offset>
float dot_quant(int64_t n, const void* wv, const void* av) {
  const WBlock* w = static_cast<const WBlock*>(wv);
  const ABlock* a = static_cast<const ABlock*>(av);
  const int64_t nb = n / 32;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m128 offsets = _mm_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const __m128 scales = block_scales4(w + b, a + b);
    acc0 =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(pair_dot(w + b, a + b)), pair_scales<0>(scales), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pair_dot(w + b + 2, a + b + 2)),
                           pair_scales<2>(scales), acc1);
    if constexpr (has_offset) {
      offsets = _mm_add_ps(offsets, half_products(w[b].m, w[b + 1].m, w[b + 2].m, w[b + 3].m,
                                                  a[b].s, a[b + 1].s, a[b + 2].s, a[b + 3].s));
    }
  }
  __m256 tail = _mm256_setzero_ps();
  float tail_offsets = 0;
  for (; b < nb; ++b) {
    const float scale = block_scale(w[b], a[b]);
    tail = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot(w[b], a[b])), _mm256_set1_ps(scale), tail);
    if constexpr (has_offset) tail_offsets += half_to_float(w[b].m) * half_to_float(a[b].s);
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + hsum(tail);
  if constexpr (has_offset) sum += hsum(offsets) + tail_offsets;
  return sum;
}

__m512i pair_q8_0(const BlockQ8_0* w, const BlockQ8_0* a) {
  return dot_i8_i8(load_pair(w[0].qs, w[1].qs), load_pair(a[0].qs, a[1].qs));
}
__m256i block_q8_0(const BlockQ8_0& w, const BlockQ8_0& a) {
  return dot_i8_i8(load_block(w.qs), load_block(a.qs));
}

__m512i pair_q4_0(const BlockQ4_0* w, const BlockQ8_0* a) {
  return dot_u8_i8_offset(unpack_nibbles_pair(w[0].qs, w[1].qs), load_pair(a[0].qs, a[1].qs), 8);
}
__m256i block_q4_0(const BlockQ4_0& w, const BlockQ8_0& a) {
  return dot_u8_i8_offset(unpack_nibbles(w.qs), load_block(a.qs), 8);
}

__m512i pair_q5_0(const BlockQ5_0* w, const BlockQ8_0* a) {
  const __m512i q = with_fifth_bits_pair(unpack_nibbles_pair(w[0].qs, w[1].qs), w[0].qh, w[1].qh);
  return dot_u8_i8_offset(q, load_pair(a[0].qs, a[1].qs), 16);
}
__m256i block_q5_0(const BlockQ5_0& w, const BlockQ8_0& a) {
  return dot_u8_i8_offset(with_fifth_bits(unpack_nibbles(w.qs), w.qh), load_block(a.qs), 16);
}

__m512i pair_q4_1(const BlockQ4_1* w, const BlockQ8_1* a) {
  return dot_u8_i8(unpack_nibbles_pair(w[0].qs, w[1].qs), load_pair(a[0].qs, a[1].qs));
}
__m256i block_q4_1(const BlockQ4_1& w, const BlockQ8_1& a) {
  return dot_u8_i8(unpack_nibbles(w.qs), load_block(a.qs));
}

__m512i pair_q5_1(const BlockQ5_1* w, const BlockQ8_1* a) {
  const __m512i q = with_fifth_bits_pair(unpack_nibbles_pair(w[0].qs, w[1].qs), w[0].qh, w[1].qh);
  return dot_u8_i8(q, load_pair(a[0].qs, a[1].qs));
}
__m256i block_q5_1(const BlockQ5_1& w, const BlockQ8_1& a) {
  return dot_u8_i8(with_fifth_bits(unpack_nibbles(w.qs), w.qh), load_block(a.qs));
}

// The codebook types: the nibbles index a 16-byte table (vpshufb in each 128-bit lane), then
// as Q8_0.
__m512i codebook512(const int8_t* values) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}
__m256i codebook256(const int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}
// IQ4_NL and MXFP4 blocks differ in their table (and scale) only.
template <typename WBlock, const int8_t* kValues>
__m512i pair_codebook(const WBlock* w, const BlockQ8_0* a) {
  const __m512i q =
      _mm512_shuffle_epi8(codebook512(kValues), unpack_nibbles_pair(w[0].qs, w[1].qs));
  return dot_i8_i8(q, load_pair(a[0].qs, a[1].qs));
}
template <typename WBlock, const int8_t* kValues>
__m256i block_codebook(const WBlock& w, const BlockQ8_0& a) {
  return dot_i8_i8(_mm256_shuffle_epi8(codebook256(kValues), unpack_nibbles(w.qs)),
                   load_block(a.qs));
}

// IQ4_XS: a super-block's 8 sub-blocks as 4 pairs against activation blocks 8 b .. 8 b + 7;
// the 8 scales (d * (l - 32)) * d_a made in one vector.
float dot_iq4_xs(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  const auto* a = static_cast<const BlockQ8_0*>(av);
  const __m512i table = codebook512(kIq4nlValues);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const BlockQ8_0* ab = a + b * (QK_K / 32);
    alignas(32) float ls[8];
    alignas(16) uint16_t ad[8];
    for (int ib = 0; ib < 8; ++ib) {
      ls[ib] = float(iq4_xs_sub_scale(w[b], ib));
      ad[ib] = ab[ib].d;
    }
    const __m256 d = _mm256_set1_ps(half_to_float(w[b].d));
    const __m256 scales =
        _mm256_mul_ps(_mm256_mul_ps(d, _mm256_load_ps(ls)),
                      _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(ad))));
    const __m512 sc = _mm512_castps256_ps512(scales);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i q =
          _mm512_shuffle_epi8(table, unpack_nibbles_pair(w[b].qs + 32 * k, w[b].qs + 32 * k + 16));
      const __m512i sums = dot_i8_i8(q, load_pair(ab[2 * k].qs, ab[2 * k + 1].qs));
      const __m512i index = _mm512_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                             2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k,
                                             2 * k, 2 * k, 2 * k, 2 * k, 2 * k);
      const __m512 pair = _mm512_permutexvar_ps(index, sc);
      if (k % 2 == 0)
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), pair, acc0);
      else
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), pair, acc1);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// ---- activation quantization --------------------------------------------------------------

// std::round (halves away from zero) for |v| < 2^31, exactly: with t = trunc(v), v - t is
// exact and trunc(2 (v - t)) is +-1 precisely when the fraction reaches one half.
__m512i round_half_away(__m512 v) {
  const __m512i t = _mm512_cvttps_epi32(v);
  const __m512 frac = _mm512_sub_ps(v, _mm512_cvtepi32_ps(t));
  return _mm512_add_epi32(t, _mm512_cvttps_epi32(_mm512_add_ps(frac, frac)));
}

// Bit-identical to the scalar quantizers: the same max, the same d = amax / 127 and 1 / d in
// scalar float, the same product x * id and rounding, and vcvtps2ph rounds to nearest even as
// f32_to_fp16 does. vpmovsdb narrows without the lane shuffles of the pack ops.
template <typename Block, bool with_sum>
void quantize_act(const float* x, void* dst, int64_t n) {
  Block* y = static_cast<Block*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const __m512 mul = _mm512_set1_ps(id);
    const __m512i i0 = round_half_away(_mm512_mul_ps(v0, mul));
    const __m512i i1 = round_half_away(_mm512_mul_ps(v1, mul));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs), _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16), _mm512_cvtsepi32_epi8(i1));
    y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    if constexpr (with_sum) {
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
      y[b].s = _cvtss_sh(float(sum) * d, _MM_FROUND_TO_NEAREST_INT);
    }
  }
}

constexpr ActFromF32Fn kActQ8_0 = quantize_act<BlockQ8_0, false>;
constexpr ActFromF32Fn kActQ8_1 = quantize_act<BlockQ8_1, true>;
constexpr DotKernel kF32{DType::F32, act_copy_f32, dot_float<LoadF32>, weighted_sum<LoadF32>};
constexpr DotKernel kF16{DType::F32, act_copy_f32, dot_float<LoadF16>, weighted_sum<LoadF16>};
constexpr DotKernel kBF16{DType::F32, act_copy_f32, dot_float<LoadBF16>, weighted_sum<LoadBF16>};
constexpr DotKernel kQ8_0{DType::Q8_0, kActQ8_0,
                          dot_quant<BlockQ8_0, BlockQ8_0, pair_q8_0, block_q8_0, false>};
constexpr DotKernel kQ4_0{DType::Q8_0, kActQ8_0,
                          dot_quant<BlockQ4_0, BlockQ8_0, pair_q4_0, block_q4_0, false>};
constexpr DotKernel kQ5_0{DType::Q8_0, kActQ8_0,
                          dot_quant<BlockQ5_0, BlockQ8_0, pair_q5_0, block_q5_0, false>};
constexpr DotKernel kQ4_1{DType::Q8_1, kActQ8_1,
                          dot_quant<BlockQ4_1, BlockQ8_1, pair_q4_1, block_q4_1, true>};
constexpr DotKernel kQ5_1{DType::Q8_1, kActQ8_1,
                          dot_quant<BlockQ5_1, BlockQ8_1, pair_q5_1, block_q5_1, true>};
constexpr DotKernel kIQ4_NL{
    DType::Q8_0, kActQ8_0,
    dot_quant<BlockIQ4_NL, BlockQ8_0, pair_codebook<BlockIQ4_NL, kIq4nlValues>,
              block_codebook<BlockIQ4_NL, kIq4nlValues>, false>};
constexpr DotKernel kMXFP4{DType::Q8_0, kActQ8_0,
                           dot_quant<BlockMXFP4, BlockQ8_0, pair_codebook<BlockMXFP4, kMxfp4Values>,
                                     block_codebook<BlockMXFP4, kMxfp4Values>, false>};
constexpr DotKernel kIQ4_XS{DType::Q8_0, kActQ8_0, dot_iq4_xs};

}  // namespace

const DotKernel* dot_kernel_avx512(DType w) {
  switch (w) {
    POLYSTACK_CPU_WEIGHT_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    POLYSTACK_CPU_TABLE_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    default:
      return nullptr;
  }
}

}  // namespace ps::cpu

#else

namespace ps::cpu {
const DotKernel* dot_kernel_avx512(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
