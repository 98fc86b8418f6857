// AVX-512 (F, BW, VL, DQ, VNNI) kernels over packed weights (packed.h).
//
// Q4_Kx16: one 64-byte load holds 4 consecutive bytes of each of 16 rows, one row per 32-bit
// lane; masked and shifted it is 4 elements of one sub-block (low nibbles) and 4 of the next
// (high nibbles) of every row. vpdpbusd against the matching 4 activations, broadcast from
// memory to every lane, adds the 16 rows' 4-element dots into int32 lanes. Eight of those make
// a sub-block's exact dot per row, which one vpmulld by the 16 rows' scales (unpacked at load,
// so a byte each) turns into its share of the super-block sum. The mins meet Q8_K's per-16
// activation sums: a lane holding the int16 pair (min, min) times the pair of sums of one
// sub-block is min x (sum of its 32 activations), one vpdpwssd per sub-block. A super-block
// ends with two conversions and two FMAs per column: d d_a and dmin d_a for the 16 rows at once.
// Per 32 weights of 16 rows that is about one instruction, where a row dot spends about 10;
// decode is left bound by the weight stream, and a tile of C columns shares each unpacked
// vector among C vpdpbusd.
//
// This file is compiled with the AVX-512 flags: it calls no inline function of a header that
// baseline files include, so no out-of-line copy built with these flags can replace the
// baseline one at link.
#include "backends/cpu/packed.h"

#if defined(__x86_64__)

// GCC 12's AVX-512 headers build "undefined" placeholder vectors as `__Y = __Y`, which its
// uninitialized-use warnings flag once inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstring>
#include <type_traits>
#include <utility>

#include "backends/cpu/simd_avx2.h"

namespace ps::cpu {
namespace {

// How far ahead the 32-element tiles ask for weights: as many blocks of 16 rows as make about
// 2 KiB. The k-quant tiles ask for the next super-block of 16 rows (1344 to 3360 bytes).
constexpr size_t kPrefetchBytes = 2304;

int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Q8_K activations, value for value those of the scalar quantizer (core/kquants.cpp): the
// first element of the largest magnitude sets d = max / -127, each element is rounded to
// nearest even (0 when its scaled value is not finite), and bsums are the sums of each 16.
void act_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    // vmaxps returns its second operand when either is NaN: NaN elements never win.
    __m512 top = _mm512_setzero_ps();
    for (int i = 0; i < QK_K; i += 16)
      top = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)), top);
    const float amax = _mm512_reduce_max_ps(top);
    if (!(amax > 0)) {
      std::memset(&y[b], 0, sizeof(y[b]));
      continue;
    }
    float max = 0;
    const __m512 vmax = _mm512_set1_ps(amax);
    for (int i = 0; i < QK_K; i += 16) {
      const __mmask16 hit =
          _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)), vmax, _CMP_EQ_OQ);
      if (hit) {
        max = x[i + __builtin_ctz(unsigned(hit))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m512 scale = _mm512_set1_ps(iscale), limit = _mm512_set1_ps(4194304.f);
    const __m512i top_q = _mm512_set1_epi32(127);
    for (int j = 0; j < QK_K / 16; ++j) {
      const __m512 v = _mm512_mul_ps(scale, _mm512_loadu_ps(x + 16 * j));
      const __mmask16 ok = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, v), limit, _CMP_LT_OQ);
      const __m512i q = _mm512_min_epi32(
          _mm512_maskz_cvt_roundps_epi32(ok, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
          top_q);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16 * j), _mm512_cvtsepi32_epi8(q));
      y[b].bsums[j] = int16_t(_mm512_reduce_add_epi32(q));
    }
    y[b].d = 1 / iscale;
  }
}

// A GGUF-layout row (past the last whole group) against Q8_K activations.
template <DType T>
float tail_dot(int64_t n, const void* w, const void* a) {
  return dot_kernel_kquants_avx2(T)->dot(n, w, a);
}

// 16 rows x C columns of Q4_Kx16 or Q5_Kx16; y[c * y_stride + j] for row j of the group.
// Q5_K's fifth bit adds 16 to the nibbles whose qh bit is set (a byte mask and a masked add).
template <typename Block, int C>
void k4x16_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                size_t y_stride) {
  constexpr bool five = std::is_same_v<Block, BlockQ5_Kx16>;
  const auto* w = static_cast<const Block*>(wv);
  const BlockQ8_K* a[C];
  for (int c = 0; c < C; ++c)
    a[c] = reinterpret_cast<const BlockQ8_K*>(static_cast<const char*>(av) + size_t(c) * a_stride);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const int64_t nb = k / QK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const Block& x = w[b];
    // Prompts (several columns) spend longer per super-block: one burst at its start is enough.
    if constexpr (C > 1) prefetch_block(w + b, 1);
    __m512i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      // Sub-blocks 2p (low nibbles, activations 64p..) and 2p + 1 (high, 64p + 32..).
      __m512i lo[C], hi[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) lo[c] = hi[c] = _mm512_setzero_si512();
      const __m512i bit_lo = _mm512_set1_epi8(char(1 << (2 * p)));
      const __m512i bit_hi = _mm512_set1_epi8(char(2 << (2 * p)));
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u) {
        if constexpr (C == 1) prefetch_next_part(&x, 8 * p + u, 32);
        const __m512i raw = _mm512_loadu_si512(x.qs[p][u]);
        __m512i ql = _mm512_and_si512(raw, low4);
        __m512i qh = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
        if constexpr (five) {
          const __m512i fifth = _mm512_loadu_si512(x.qh[u]);
          const __m512i sixteen = _mm512_set1_epi8(16);
          ql = _mm512_mask_add_epi8(ql, _mm512_test_epi8_mask(fifth, bit_lo), ql, sixteen);
          qh = _mm512_mask_add_epi8(qh, _mm512_test_epi8_mask(fifth, bit_hi), qh, sixteen);
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const int8_t* qa = a[c][b].qs + 64 * p + 4 * u;
          lo[c] = _mm512_dpbusd_epi32(lo[c], ql, _mm512_set1_epi32(load_i32(qa)));
          hi[c] = _mm512_dpbusd_epi32(hi[c], qh, _mm512_set1_epi32(load_i32(qa + 32)));
        }
      }
      const __m512i s_lo =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[2 * p])));
      const __m512i s_hi = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[2 * p + 1])));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        isum[c] = _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(lo[c], s_lo),
                                                             _mm512_mullo_epi32(hi[c], s_hi)));
    }
    __m512i msum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) msum[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m512i m =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.mins[s])));
      const __m512i mm = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));  // (min, min)
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        msum[c] =
            _mm512_dpwssd_epi32(msum[c], mm, _mm512_set1_epi32(load_i32(a[c][b].bsums + 2 * s)));
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.d)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.dmin)));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 da = _mm512_set1_ps(a[c][b].d);
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, da), acc[c]);
      acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[c]), _mm512_mul_ps(dmin, da), acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * y_stride, acc[c]);
}

// 16 rows x C columns of Q6_Kx16. Levels are 6 bits stored + 32: a sub-block's products sum
// unsigned levels, and 32 x (scales . per-16 activation sums) comes off in the same int32
// accumulator, one vpdpwssd per pair of sub-blocks.
template <int C>
void q6_kx16_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                  size_t y_stride) {
  const auto* w = static_cast<const BlockQ6_Kx16*>(wv);
  const BlockQ8_K* a[C];
  for (int c = 0; c < C; ++c)
    a[c] = reinterpret_cast<const BlockQ8_K*>(static_cast<const char*>(av) + size_t(c) * a_stride);
  const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const int64_t nb = k / QK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_Kx16& x = w[b];
    // Prompts (several columns) spend longer per super-block: one burst at its start is enough.
    if constexpr (C > 1) prefetch_block(w + b, 1);
    __m512i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {
        // Sub-blocks 8h + 2kk (u < 4) and + 1 (u >= 4): scale pair t = 4h + kk.
        const int t = 4 * h + kk;
        const __m512i pair =
            _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.scales[t])));
        const __m512i s_first = _mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16);
        const __m512i s_second = _mm512_srai_epi32(pair, 16);
        // The stored offset: -32 x the scale pair (at most 4096 in magnitude), against the
        // pair of per-16 activation sums.
        const __m512i offset = _mm512_mullo_epi16(pair, _mm512_set1_epi16(-32));
        __m512i first[C], second[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) first[c] = second[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) {
          if constexpr (C == 1) prefetch_next_part(&x, 8 * t + u, 64);
          const __m512i ql = _mm512_loadu_si512(x.ql[h][kk % 2][u]);
          const __m512i qh = _mm512_loadu_si512(x.qh[h][u]);
          const __m512i lo = kk < 2 ? ql : _mm512_srli_epi16(ql, 4);
          const __m512i hb = kk == 0   ? _mm512_slli_epi16(qh, 4)
                             : kk == 1 ? _mm512_slli_epi16(qh, 2)
                             : kk == 2 ? qh
                                       : _mm512_srli_epi16(qh, 2);
          // (lo & 0x0f) | (hb & 0x30)
          const __m512i q = _mm512_ternarylogic_epi32(lo, low4, _mm512_and_si512(hb, bits45), 0xEA);
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            const __m512i qa = _mm512_set1_epi32(load_i32(a[c][b].qs + 128 * h + 32 * kk + 4 * u));
            if (u < 4)
              first[c] = _mm512_dpbusd_epi32(first[c], q, qa);
            else
              second[c] = _mm512_dpbusd_epi32(second[c], q, qa);
          }
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          isum[c] =
              _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(first[c], s_first),
                                                         _mm512_mullo_epi32(second[c], s_second)));
          isum[c] = _mm512_dpwssd_epi32(isum[c], offset,
                                        _mm512_set1_epi32(load_i32(a[c][b].bsums + 2 * t)));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.d)));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512i total = isum[c];
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total),
                               _mm512_mul_ps(d, _mm512_set1_ps(a[c][b].d)), acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * y_stride, acc[c]);
}

// 16 rows x C columns of Q2_Kx16 or Q3_Kx16: sub-blocks of 16 like Q6_K, 2-bit levels. Q2_K's
// mins meet the per-16 activation sums as Q4_K's do per 32; Q3_K's high bit adds 4 to a level
// (byte mask, masked add) and its stored offset of 4 comes off in the main accumulator.
template <typename Block, int C>
void k2x16_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                size_t y_stride) {
  constexpr bool q3 = std::is_same_v<Block, BlockQ3_Kx16>;
  const auto* w = static_cast<const Block*>(wv);
  const BlockQ8_K* a[C];
  for (int c = 0; c < C; ++c)
    a[c] = reinterpret_cast<const BlockQ8_K*>(static_cast<const char*>(av) + size_t(c) * a_stride);
  const __m512i low2 = _mm512_set1_epi8(3), low4w = _mm512_set1_epi32(0x0f);
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const int64_t nb = k / QK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const Block& x = w[b];
    // Prompts (several columns) spend longer per super-block: one burst at its start is enough.
    if constexpr (C > 1) prefetch_block(w + b, 1);
    __m512i isum[C], msum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = msum[c] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {
        // Sub-blocks 8h + 2kk (u < 4) and + 1 (u >= 4): scale pair t = 4h + kk.
        const int t = 4 * h + kk;
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.scales[t]));
        __m512i s_first, s_second, pair_term;
        if constexpr (q3) {
          const __m512i pair = _mm512_cvtepi8_epi16(bytes);
          s_first = _mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16);
          s_second = _mm512_srai_epi32(pair, 16);
          pair_term = _mm512_mullo_epi16(pair, _mm512_set1_epi16(-4));  // the offset of 4
        } else {
          const __m512i pair = _mm512_cvtepu8_epi16(bytes);
          s_first = _mm512_and_si512(pair, low4w);
          s_second = _mm512_and_si512(_mm512_srli_epi32(pair, 16), low4w);
          pair_term = _mm512_srli_epi16(pair, 4);  // the mins
        }
        const __m512i high_bit = _mm512_set1_epi8(char(1 << (4 * h + kk)));
        __m512i first[C], second[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) first[c] = second[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) {
          if constexpr (C == 1) prefetch_next_part(&x, 8 * t + u, 64);
          const __m512i raw = _mm512_loadu_si512(x.qs[h][u]);
          __m512i q = _mm512_and_si512(kk == 0 ? raw : _mm512_srli_epi16(raw, 2 * kk), low2);
          if constexpr (q3) {
            const __mmask64 set = _mm512_test_epi8_mask(_mm512_loadu_si512(x.hmask[u]), high_bit);
            q = _mm512_mask_add_epi8(q, set, q, _mm512_set1_epi8(4));
          }
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            const __m512i qa = _mm512_set1_epi32(load_i32(a[c][b].qs + 128 * h + 32 * kk + 4 * u));
            if (u < 4)
              first[c] = _mm512_dpbusd_epi32(first[c], q, qa);
            else
              second[c] = _mm512_dpbusd_epi32(second[c], q, qa);
          }
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          isum[c] =
              _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(first[c], s_first),
                                                         _mm512_mullo_epi32(second[c], s_second)));
          const __m512i sums = _mm512_set1_epi32(load_i32(a[c][b].bsums + 2 * t));
          if constexpr (q3)
            isum[c] = _mm512_dpwssd_epi32(isum[c], pair_term, sums);
          else
            msum[c] = _mm512_dpwssd_epi32(msum[c], pair_term, sums);
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.d)));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 da = _mm512_set1_ps(a[c][b].d);
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, da), acc[c]);
      if constexpr (!q3) {
        const __m512 dmin =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.dmin)));
        acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[c]), _mm512_mul_ps(dmin, da), acc[c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * y_stride, acc[c]);
}

// ---- Q4_0x16, Q5_0x16, Q8_0x16 ------------------------------------------------------------

// Per type: the level offset (levels are stored unsigned, value + offset) and how a block's
// levels are read (see packed.h).
template <typename Block>
struct Small;
template <>
struct Small<BlockQ4_0x16> {
  using Row = BlockQ4_0;
  static constexpr int offset = 8;
};
template <>
struct Small<BlockQ5_0x16> {
  using Row = BlockQ5_0;
  static constexpr int offset = 16;
};
template <>
struct Small<BlockQ8_0x16> {
  using Row = BlockQ8_0;
  static constexpr int offset = 128;
};
// The codebook types: the nibbles index the table with 128 added (simd_avx512.h).
template <>
struct Small<BlockIQ4_NLx16> {
  using Row = BlockIQ4_NL;
  static constexpr int offset = 128;
  static constexpr const int8_t* table = kIq4nlBiased;
};
template <>
struct Small<BlockMXFP4x16> {
  using Row = BlockMXFP4;
  static constexpr int offset = 128;
  static constexpr const int8_t* table = kMxfp4Biased;
};
template <>
struct Small<BlockIQ4_XSx16> {
  using Row = BlockIQ4_XS;
  static constexpr int offset = 128;
  static constexpr const int8_t* table = kIq4nlBiased;
  static constexpr int subs = QK_K / 32;  // blocks of 32 per packed block
};
template <typename Block>
constexpr int kSubs = [] {
  if constexpr (requires { Small<Block>::subs; })
    return Small<Block>::subs;
  else
    return 1;
}();
template <typename Block>
constexpr bool kCodebook = requires {
  Small<Block>::table;
};

// A GGUF-layout row block's scale: fp16 d, or MXFP4's exponent.
template <typename Row>
float row_scale(const Row& r) {
  if constexpr (std::is_same_v<Row, BlockMXFP4>)
    return e8m0_half(r.e);
  else
    return half_to_float(r.d);
}

// Q8_0 activations with the float scale and -offset x sum(qs), the integer a block's dot
// products start from.
template <typename Block>
void act_q8o(const float* x, void* dst, int64_t n) {
  BlockQ8O* y = static_cast<BlockQ8O*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    const Q8Block q = quantize_q8_block(x, y[b].qs);
    // The fp16-rounded scale, so the values are exactly those of a Q8_0 block.
    y[b].d = half_to_float(_cvtss_sh(q.d, _MM_FROUND_TO_NEAREST_INT));
    y[b].offset = -Small<Block>::offset * q.sum;
  }
}

// A GGUF-layout row (past the last whole group) against BlockQ8O activations: its 32 levels,
// unsigned, as bytes.
template <typename Block>
__m256i row_levels(const typename Small<Block>::Row& r) {
  if constexpr (std::is_same_v<Block, BlockQ8_0x16>)
    return _mm256_xor_si256(load_bytes(r.qs), _mm256_set1_epi8(char(0x80)));
  else if constexpr (kCodebook<Block>)
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(
                                   reinterpret_cast<const __m128i*>(Small<Block>::table))),
                               unpack_nibbles(r.qs));
  else if constexpr (std::is_same_v<Block, BlockQ5_0x16>)
    return _mm256_or_si256(unpack_nibbles(r.qs), unpack_fifth_bits(r.qh));
  else
    return unpack_nibbles(r.qs);
}

template <typename Block>
float tail_dot_small(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const typename Small<Block>::Row*>(wv);
  const BlockQ8O* a = static_cast<const BlockQ8O*>(av);
  __m256 acc = _mm256_setzero_ps();
  if constexpr (kSubs < Block >> 1) {  // IQ4_XS: the sub-blocks of super-blocks
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(Small<Block>::table)));
    for (int64_t b = 0; b < n / QK8_0; ++b) {
      const BlockIQ4_XS& r = w[b / 8];
      const int ib = int(b % 8);
      const __m256i levels = _mm256_shuffle_epi8(table, unpack_nibbles(r.qs + 16 * ib));
      const __m256i dot = _mm256_dpbusd_epi32(_mm256_setr_epi32(a[b].offset, 0, 0, 0, 0, 0, 0, 0),
                                              levels, load_bytes(a[b].qs));
      acc = _mm256_fmadd_ps(
          _mm256_set1_ps(half_to_float(r.d) * float(iq4_xs_sub_scale(r, ib)) * a[b].d),
          _mm256_cvtepi32_ps(dot), acc);
    }
  } else {
    for (int64_t b = 0; b < n / QK8_0; ++b) {
      const __m256i dot = _mm256_dpbusd_epi32(_mm256_setr_epi32(a[b].offset, 0, 0, 0, 0, 0, 0, 0),
                                              row_levels<Block>(w[b]), load_bytes(a[b].qs));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(row_scale(w[b]) * a[b].d), _mm256_cvtepi32_ps(dot), acc);
    }
  }
  return hsum(acc);
}

// 16 rows x C columns of 32-element blocks: per block and column, eight vpdpbusd from the
// activations' offset term (two chains), one conversion and one FMA with d_w d_a. Q4_0 and
// Q5_0 take two 32-bit lanes' worth of levels from each load (low and high nibbles), Q8_0 one
// (its signed levels made unsigned by an xor with 0x80); IQ4_NL, MXFP4 and IQ4_XS look their
// nibbles up in their table (vpshufb), MXFP4's 16 exponents become scales in one vector, and
// IQ4_XS's blocks of 32 are the sub-blocks of its super-blocks, each scaled by d (l - 32).
template <typename Block, int C>
void small_x16_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                    size_t y_stride) {
  constexpr bool q8 = std::is_same_v<Block, BlockQ8_0x16>;
  constexpr bool five = std::is_same_v<Block, BlockQ5_0x16>;
  const auto* w = static_cast<const Block*>(wv);
  const BlockQ8O* a[C];
  for (int c = 0; c < C; ++c)
    a[c] = reinterpret_cast<const BlockQ8O*>(static_cast<const char*>(av) + size_t(c) * a_stride);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512i table = _mm512_setzero_si512();
  if constexpr (kCodebook<Block>)
    table = _mm512_broadcast_i32x4(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(Small<Block>::table)));
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  constexpr int subs = kSubs<Block>;
  const int64_t nb = k / QK8_0;
  for (int64_t b = 0; b < nb; ++b) {
    const Block& x = w[b / subs];
    const int sub = int(b % subs);
    if constexpr (subs == 1)
      prefetch_block(w + b, int(kPrefetchBytes / sizeof(Block)));
    else if (sub == 0)
      prefetch_block(&x, 1);
    __m512i lo[C], hi[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      lo[c] = _mm512_set1_epi32(a[c][b].offset);
      hi[c] = _mm512_setzero_si512();
    }
    if constexpr (q8) {
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m512i q =
            _mm512_xor_si512(_mm512_loadu_si512(x.qs[v]), _mm512_set1_epi8(char(0x80)));
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m512i qa = _mm512_set1_epi32(load_i32(a[c][b].qs + 4 * v));
          if (v % 2 == 0)
            lo[c] = _mm512_dpbusd_epi32(lo[c], q, qa);
          else
            hi[c] = _mm512_dpbusd_epi32(hi[c], q, qa);
        }
      }
    } else {
      __m512i fifth = _mm512_setzero_si512();
      if constexpr (five) fifth = _mm512_loadu_si512(x.qh);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        __m512i raw;
        if constexpr (subs > 1)
          raw = _mm512_loadu_si512(x.qs[sub][v]);
        else
          raw = _mm512_loadu_si512(x.qs[v]);
        __m512i ql = _mm512_and_si512(raw, low4);
        __m512i qh = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
        if constexpr (kCodebook<Block>) {
          ql = _mm512_shuffle_epi8(table, ql);
          qh = _mm512_shuffle_epi8(table, qh);
        }
        if constexpr (five) {
          const __m512i sixteen = _mm512_set1_epi8(16);
          ql = _mm512_mask_add_epi8(
              ql, _mm512_test_epi8_mask(fifth, _mm512_set1_epi8(char(1 << v))), ql, sixteen);
          qh = _mm512_mask_add_epi8(
              qh, _mm512_test_epi8_mask(fifth, _mm512_set1_epi8(char(16 << v))), qh, sixteen);
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          lo[c] = _mm512_dpbusd_epi32(lo[c], ql, _mm512_set1_epi32(load_i32(a[c][b].qs + 4 * v)));
          hi[c] =
              _mm512_dpbusd_epi32(hi[c], qh, _mm512_set1_epi32(load_i32(a[c][b].qs + 16 + 4 * v)));
        }
      }
    }
    __m512 d;
    if constexpr (std::is_same_v<Block, BlockMXFP4x16>) {  // 2^(e - 128), as e8m0_half
      const __m512i e =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.e)));
      const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
      const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
      d = _mm512_castsi512_ps(_mm512_mask_blend_epi32(
          _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2)), normal, subnormal));
    } else {
      d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.d)));
    }
    if constexpr (subs > 1)  // IQ4_XS: d (l - 32) of the sub-block
      d = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[sub])))));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo[c], hi[c])),
                               _mm512_mul_ps(d, _mm512_set1_ps(a[c][b].d)), acc[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * y_stride, acc[c]);
}

constexpr int kTileCols = 6;
constexpr int kTileColsSmall = 8;
constexpr int kTileColsQ6_K = 6;
constexpr int kTileColsQ2_K = 4;  // five accumulators a column
constexpr int kTileColsQ3_K = 6;

template <typename Block, int... I>
constexpr GemmKernel make_small_x16(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRowsK, kTileColsSmall, {small_x16_tile<Block, I + 1>...}};
}
template <typename Block>
constexpr PackedKernel small_kernel() {
  return PackedKernel{QK8_0, sizeof(BlockQ8O), act_q8o<Block>, tail_dot_small<Block>,
                      make_small_x16<Block>(std::make_integer_sequence<int, kTileColsSmall>{})};
}

constexpr PackedKernel kQ4_0 = small_kernel<BlockQ4_0x16>();
constexpr PackedKernel kQ5_0 = small_kernel<BlockQ5_0x16>();
constexpr PackedKernel kQ8_0 = small_kernel<BlockQ8_0x16>();
constexpr PackedKernel kIQ4_NL = small_kernel<BlockIQ4_NLx16>();
constexpr PackedKernel kMXFP4 = small_kernel<BlockMXFP4x16>();
constexpr PackedKernel kIQ4_XS = small_kernel<BlockIQ4_XSx16>();

template <typename Block, int... I>
constexpr GemmKernel make_k4x16(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRowsK, kTileCols, {k4x16_tile<Block, I + 1>...}};
}
template <int... I>
constexpr GemmKernel make_q6_kx16(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRowsK, kTileColsQ6_K, {q6_kx16_tile<I + 1>...}};
}

template <typename Block, int C, int... I>
constexpr GemmKernel make_k2x16(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRowsK, C, {k2x16_tile<Block, I + 1>...}};
}

constexpr PackedKernel kQ2_K{
    QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot<DType::Q2_K>,
    make_k2x16<BlockQ2_Kx16, kTileColsQ2_K>(std::make_integer_sequence<int, kTileColsQ2_K>{})};
constexpr PackedKernel kQ3_K{
    QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot<DType::Q3_K>,
    make_k2x16<BlockQ3_Kx16, kTileColsQ3_K>(std::make_integer_sequence<int, kTileColsQ3_K>{})};
constexpr PackedKernel kQ4_K{
    QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot<DType::Q4_K>,
    make_k4x16<BlockQ4_Kx16>(std::make_integer_sequence<int, kTileCols>{})};
constexpr PackedKernel kQ5_K{
    QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot<DType::Q5_K>,
    make_k4x16<BlockQ5_Kx16>(std::make_integer_sequence<int, kTileCols>{})};
constexpr PackedKernel kQ6_K{QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot<DType::Q6_K>,
                             make_q6_kx16(std::make_integer_sequence<int, kTileColsQ6_K>{})};

}  // namespace

const PackedKernel* packed_kernel_avx512(DType w) {
  switch (w) {
    case DType::Q4_0:
      return &kQ4_0;
    case DType::Q5_0:
      return &kQ5_0;
    case DType::Q8_0:
      return &kQ8_0;
    case DType::IQ4_NL:
      return &kIQ4_NL;
    case DType::MXFP4:
      return &kMXFP4;
    case DType::IQ4_XS:
      return &kIQ4_XS;
    case DType::Q2_K:
      return &kQ2_K;
    case DType::Q3_K:
      return &kQ3_K;
    case DType::Q4_K:
      return &kQ4_K;
    case DType::Q5_K:
      return &kQ5_K;
    case DType::Q6_K:
      return &kQ6_K;
    default:
      return nullptr;
  }
}

}  // namespace ps::cpu

#else

namespace ps::cpu {
const PackedKernel* packed_kernel_avx512(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
