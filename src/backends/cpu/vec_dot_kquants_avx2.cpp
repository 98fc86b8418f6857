// AVX2 dot products of k-quant weight rows (Q2_K .. Q6_K) with Q8_K activations. Each 32 weights
// meet 32 activations in one vpmaddubsw (weights as unsigned bytes, activations signed) and one
// vpmaddwd that also applies the sub-block scales, so a super-block's sum stays in int32 lanes
// until one conversion and one FMA with its scale. Q6_K's levels are stored with +32 and Q3_K's
// with +4; the offsets come off through the activation sums Q8_K keeps per 16, as Q2_K's and Q4_K's
// mins do. Compiled with -mavx2 -mfma -mf16c (see vec_dot_avx2.cpp).
#include "backends/cpu/vec_dot.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "backends/cpu/simd_avx2.h"
#include "core/kquants.h"

namespace ps::cpu {
namespace {

__m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 32 unsigned levels (0..63) times 32 signed activations, summed in pairs, then the first 16
// and last 16 scaled by s0 and s1 and summed in pairs again: 8 int32.
__m256i scaled_dot(__m256i q, __m256i a, int16_t s0, int16_t s1) {
  const __m256i pairs = _mm256_maddubs_epi16(q, a);
  return _mm256_madd_epi16(pairs, _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0)));
}

// Q4_K and Q5_K (with_high: a fifth bit per element, bit j of qh[l] for element 32 j + l).
template <typename Block, bool with_high>
float dot_k4(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const Block*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    uint8_t sm[16];  // 8 scales, then 8 mins
    kquants::unpack_k4_scales_mins(w[b].scales, sm);
    const uint8_t* sc = sm;
    int32_t min_sum = 0;
    for (int j = 0; j < 8; ++j) min_sum += sm[8 + j] * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
    __m256i isum = _mm256_setzero_si256();
    // 32 bytes of qs hold sub-blocks 2g (low nibbles) and 2g + 1 (high nibbles).
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load32(w[b].qs + 32 * g);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (with_high) {
        // Bit 2g (2g + 1) of each qh byte to bit 4 of the same byte.
        const __m256i qh = load32(w[b].qh), one = _mm256_set1_epi8(1);
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one), 4));
      }
      isum = _mm256_add_epi32(isum, scaled_dot(lo, load32(a[b].qs + 64 * g), sc[2 * g], sc[2 * g]));
      isum = _mm256_add_epi32(
          isum, scaled_dot(hi, load32(a[b].qs + 64 * g + 32), sc[2 * g + 1], sc[2 * g + 1]));
    }
    const float d = half_to_float(w[b].d) * a[b].d;
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), acc);
    mins += half_to_float(w[b].dmin) * a[b].d * float(min_sum);
  }
  return hsum(acc) - mins;
}

// Q2_K and Q3_K: 2-bit levels, element 128 h + 32 k + l in bits 2k of qs byte 32 h + l
// (sub-blocks 8 h + 2 k and + 1). Q2_K subtracts a min per sub-block; Q3_K adds a high bit
// per element (bit 4 h + k of hmask byte l; clear means -4) and has signed 6-bit scales.
template <typename Block>
float dot_k2(int64_t n, const void* wv, const void* av) {
  constexpr bool q3 = std::is_same_v<Block, BlockQ3_K>;
  const auto* w = static_cast<const Block*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i low2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int16_t sc[16];
    int32_t offset = 0;  // Q2_K: sum of min * activation sum; Q3_K: of 4 * scale * sum
    if constexpr (q3) {
      uint8_t raw[16];
      kquants::unpack_q3_k_scales(w[b].scales, raw);
      for (int s = 0; s < 16; ++s) {
        sc[s] = int16_t(raw[s] - 32);
        offset += 4 * sc[s] * a[b].bsums[s];
      }
    } else {
      for (int s = 0; s < 16; ++s) {
        sc[s] = int16_t(w[b].scales[s] & 0xF);
        offset += (w[b].scales[s] >> 4) * a[b].bsums[s];
      }
    }
    __m256i hm = _mm256_setzero_si256();
    if constexpr (q3) hm = load32(w[b].hmask);
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = load32(w[b].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), low2);
        if constexpr (q3)
          q = _mm256_or_si256(
              q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), one), 2));
        const int s = 8 * h + 2 * k;
        isum = _mm256_add_epi32(
            isum, scaled_dot(q, load32(a[b].qs + 128 * h + 32 * k), sc[s], sc[s + 1]));
      }
    }
    if constexpr (q3) {
      isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(offset, 0, 0, 0, 0, 0, 0, 0));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                            _mm256_set1_ps(half_to_float(w[b].d) * a[b].d), acc);
    } else {
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                            _mm256_set1_ps(half_to_float(w[b].d) * a[b].d), acc);
      mins += half_to_float(w[b].dmin) * a[b].d * float(offset);
    }
  }
  return hsum(acc) - mins;
}

float dot_q6_k(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const int8_t* sc = w[b].scales;
    int32_t offset = 0;  // 32 * sum of scale * activation sum, per 16
    for (int s = 0; s < 16; ++s) offset += sc[s] * a[b].bsums[s];
    __m256i isum = _mm256_setzero_si256();
    // Half h: element 128 h + 32 k + l takes a nibble of ql (bytes 64 h + 32 (k % 2) + l, low
    // for k < 2) and bits 2k of qh byte 32 h + l; sub-blocks 8 h + 2 k and + 1.
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load32(w[b].ql + 64 * h), ql1 = load32(w[b].ql + 64 * h + 32);
      const __m256i qh = load32(w[b].qh + 32 * h);
      const __m256i q[4] = {_mm256_or_si256(_mm256_and_si256(ql0, low4),
                                            _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
                            _mm256_or_si256(_mm256_and_si256(ql1, low4),
                                            _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                            _mm256_and_si256(qh, bits45)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45))};
      for (int k = 0; k < 4; ++k) {
        const int s = 8 * h + 2 * k;
        isum = _mm256_add_epi32(
            isum, scaled_dot(q[k], load32(a[b].qs + 128 * h + 32 * k), sc[s], sc[s + 1]));
      }
    }
    isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(32 * offset, 0, 0, 0, 0, 0, 0, 0));
    const float d = half_to_float(w[b].d) * a[b].d;
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), acc);
  }
  return hsum(acc);
}

// Q8_K activations, value for value those of the scalar quantizer (core/kquants.cpp) as the
// AVX-512 conversion gives them: the first element of the largest magnitude sets d = max / -127,
// each element is rounded to nearest even (0 when its scaled value is not finite), and bsums
// are the sums of each 16.
void act_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    // vmaxps returns its second operand when either is NaN: NaN elements never win.
    __m256 top = _mm256_setzero_ps();
    for (int i = 0; i < QK_K; i += 8)
      top = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), top);
    __m128 t4 = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
    t4 = _mm_max_ps(t4, _mm_movehl_ps(t4, t4));
    t4 = _mm_max_ss(t4, _mm_shuffle_ps(t4, t4, 1));
    const float amax = _mm_cvtss_f32(t4);
    if (!(amax > 0)) {
      std::memset(&y[b], 0, sizeof(y[b]));
      continue;
    }
    float max = 0;
    const __m256 vmax = _mm256_set1_ps(amax);
    for (int i = 0; i < QK_K; i += 8) {
      const int hit = _mm256_movemask_ps(
          _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), vmax, _CMP_EQ_OQ));
      if (hit) {
        max = x[i + __builtin_ctz(unsigned(hit))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 scale = _mm256_set1_ps(iscale), limit = _mm256_set1_ps(4194304.f);
    const __m256i top_q = _mm256_set1_epi32(127);
    for (int j = 0; j < QK_K / 16; ++j) {
      __m256i q[2];
      for (int h = 0; h < 2; ++h) {
        const __m256 v = _mm256_mul_ps(scale, _mm256_loadu_ps(x + 16 * j + 8 * h));
        const __m256 ok = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), limit, _CMP_LT_OQ);
        q[h] = _mm256_min_epi32(_mm256_and_si256(_mm256_cvtps_epi32(v), _mm256_castps_si256(ok)),
                                top_q);
      }
      // int32 -> int16 (saturating, by 128-bit lanes) back in element order, then -> int8.
      const __m256i w =
          _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), _MM_SHUFFLE(3, 1, 2, 0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16 * j),
                       _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(_mm256_add_epi32(q[0], q[1])),
                                _mm256_extracti128_si256(_mm256_add_epi32(q[0], q[1]), 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
      y[b].bsums[j] = int16_t(_mm_cvtsi128_si32(s));
    }
    y[b].d = 1 / iscale;
  }
}

constexpr DotKernel kQ2_K{DType::Q8_K, act_q8_k, dot_k2<BlockQ2_K>};
constexpr DotKernel kQ3_K{DType::Q8_K, act_q8_k, dot_k2<BlockQ3_K>};
constexpr DotKernel kQ4_K{DType::Q8_K, act_q8_k, dot_k4<BlockQ4_K, false>};
constexpr DotKernel kQ5_K{DType::Q8_K, act_q8_k, dot_k4<BlockQ5_K, true>};
constexpr DotKernel kQ6_K{DType::Q8_K, act_q8_k, dot_q6_k};

}  // namespace

const DotKernel* dot_kernel_kquants_avx2(DType w) {
  switch (w) {
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
const DotKernel* dot_kernel_kquants_avx2(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
