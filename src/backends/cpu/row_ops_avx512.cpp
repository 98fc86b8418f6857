// AVX-512 row loops (row_ops.h): the AVX2 file's arithmetic on 16 lanes, with masks for
// comparisons and a row's last n % 16 elements loaded and stored under a mask.
//
// Compiled with the AVX-512 flags; it calls no inline function of a header that baseline files
// include.
#include "backends/cpu/row_ops.h"

#if defined(__x86_64__)

#include <immintrin.h>

namespace ps::cpu {
namespace {

// e^x for x <= 0 (and NaN, which stays NaN); 0 below -87.34.
inline __m512 exp_nonpositive(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);  // x >= lo, or NaN
  // (The maskz forms, here and below, keep GCC from warning of an undefined pass-through.)
  const __m512 n =
      _mm512_maskz_roundscale_ps(keep, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(keep, p, n);  // p 2^n
}

inline __m512 sigmoid(__m512 v) {
  const __m512 abs = _mm512_abs_ps(v);
  const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), abs));
  const __m512 d = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  const __mmask16 nonneg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_blend_ps(nonneg, _mm512_mul_ps(e, d), d);
}

inline __m512 gelu(__m512 v) {
  const __m512 v2 = _mm512_mul_ps(v, v);
  const __m512 inner = _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), v2, _mm512_set1_ps(1.0f));
  const __m512 z =
      _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(2.0f * 0.79788456080286535588f), v), inner);
  return _mm512_mul_ps(v, sigmoid(z));
}

// Runs op on every 16 elements of n with the mask of those present.
template <typename Op>
inline void rows_of_16(int64_t n, Op op) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) op(i, __mmask16(0xffff));
  if (i < n) op(i, __mmask16((1u << (n - i)) - 1));
}

void silu_row(const float* x, const float* g, float* out, int64_t n) {
  rows_of_16(n, [&](int64_t i, __mmask16 m) {
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512 s = _mm512_mul_ps(v, sigmoid(v));
    if (g) s = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, g + i));
    _mm512_mask_storeu_ps(out + i, m, s);
  });
}

void gelu_row(const float* x, float* out, int64_t n) {
  rows_of_16(n, [&](int64_t i, __mmask16 m) {
    _mm512_mask_storeu_ps(out + i, m, gelu(_mm512_maskz_loadu_ps(m, x + i)));
  });
}

// The sum in 16 float lanes, added up in double at the end.
double exp_sum_row(const float* x, float scale, float shift, float* out, int64_t n) {
  const __m512 vs = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  rows_of_16(n, [&](int64_t i, __mmask16 m) {
    const __m512 arg = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + i), vs, vshift);
    // A rounding may leave an argument a hair above 0: clamp it (a NaN is kept).
    const __m512 e =
        _mm512_maskz_mov_ps(m, exp_nonpositive(_mm512_maskz_min_ps(m, _mm512_setzero_ps(), arg)));
    sum = _mm512_add_ps(sum, e);
    _mm512_mask_storeu_ps(out + i, m, e);
  });
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  double total = 0;
  for (float l : lanes) total += l;
  return total;
}

// Four chains of 8 doubles; lanes past the row load as zeros and add nothing.
double sum_squares_row(const float* x, int64_t n) {
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(),
                    _mm512_setzero_pd()};
  int chain = 0;
  rows_of_16(n, [&](int64_t i, __mmask16 m) {
    const __m512d lo = _mm512_maskz_cvtps_pd(0xff, _mm256_maskz_loadu_ps(__mmask8(m), x + i));
    const __m512d hi =
        _mm512_maskz_cvtps_pd(0xff, _mm256_maskz_loadu_ps(__mmask8(m >> 8), x + i + 8));
    acc[chain] = _mm512_fmadd_pd(lo, lo, acc[chain]);
    acc[chain + 1] = _mm512_fmadd_pd(hi, hi, acc[chain + 1]);
    chain ^= 2;
  });
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes,
                  _mm512_add_pd(_mm512_add_pd(acc[0], acc[1]), _mm512_add_pd(acc[2], acc[3])));
  double total = 0;
  for (double l : lanes) total += l;
  return total;
}

void f32_to_f16_row(const float* x, uint16_t* out, int64_t n) {
  rows_of_16(n, [&](int64_t i, __mmask16 m) {
    const __m256i h =
        _mm512_maskz_cvtps_ph(m, _mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(out + i, m, h);
  });
}

constexpr RowOps kAvx512{silu_row, gelu_row, exp_sum_row, sum_squares_row, f32_to_f16_row};

}  // namespace

const RowOps* row_ops_avx512() { return &kAvx512; }

}  // namespace ps::cpu

#else

namespace ps::cpu {
const RowOps* row_ops_avx512() { return nullptr; }
}  // namespace ps::cpu

#endif
