// AVX2 + FMA + F16C row loops (row_ops.h). The sigmoid of the activations takes e^-|v|, whose
// argument is never positive, so e^x needs no overflow handling: x = n ln 2 + r with
// |r| <= ln 2 / 2, e^r from a degree-7 polynomial (Cephes' expf coefficients), 2^n put into the
// exponent bits, and 0 below -87.34 where e^x leaves the normal floats (an absolute error under
// 1.2e-38). Then sigmoid(v) = 1 / (1 + e) for v >= 0 and e / (1 + e) below, with e = e^-|v|:
// within a few ulp of the scalar level, and NaN stays NaN. A row's last n % 8 elements go
// through the same vector code from a padded copy, so an element's result does not depend on
// where it sits in the row.
//
// Compiled with -mavx2 -mfma -mf16c; it calls no inline function of a header that baseline files
// include.
#include "backends/cpu/row_ops.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

namespace ps::cpu {
namespace {

// e^x for x <= 0 (and NaN, which stays NaN).
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(lo, x);  // a NaN x is kept (max returns its second operand)
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // n is in [-126, 0]: 2^n is a normal float.
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

inline __m256 sigmoid(__m256 v) {
  const __m256 abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_setzero_ps(), abs));
  const __m256 d = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  return _mm256_blendv_ps(_mm256_mul_ps(e, d), d,
                          _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ));
}

inline __m256 gelu(__m256 v) {
  const __m256 v2 = _mm256_mul_ps(v, v);
  const __m256 inner = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), v2, _mm256_set1_ps(1.0f));
  const __m256 z =
      _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f * 0.79788456080286535588f), v), inner);
  return _mm256_mul_ps(v, sigmoid(z));
}

// Runs op on every 8 elements of n, the last n % 8 through a zero-padded copy.
template <typename Op>
inline void rows_of_8(int64_t n, Op op) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) op(i, 8);
  if (i < n) op(i, int(n - i));
}

inline __m256 load(const float* p, int count) {
  if (count == 8) return _mm256_loadu_ps(p);
  float buf[8] = {};
  std::memcpy(buf, p, size_t(count) * sizeof(float));
  return _mm256_loadu_ps(buf);
}

inline void store(float* p, __m256 v, int count) {
  if (count == 8) return _mm256_storeu_ps(p, v);
  float buf[8];
  _mm256_storeu_ps(buf, v);
  std::memcpy(p, buf, size_t(count) * sizeof(float));
}

void silu_row(const float* x, const float* g, float* out, int64_t n) {
  rows_of_8(n, [&](int64_t i, int count) {
    const __m256 v = load(x + i, count);
    __m256 s = _mm256_mul_ps(v, sigmoid(v));
    if (g) s = _mm256_mul_ps(s, load(g + i, count));
    store(out + i, s, count);
  });
}

void gelu_row(const float* x, float* out, int64_t n) {
  rows_of_8(n, [&](int64_t i, int count) { store(out + i, gelu(load(x + i, count)), count); });
}

// The sum in 8 float lanes, added up in double at the end.
double exp_sum_row(const float* x, float scale, float shift, float* out, int64_t n) {
  const __m256 vs = _mm256_set1_ps(scale), vshift = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  rows_of_8(n, [&](int64_t i, int count) {
    // A rounding may leave an argument a hair above 0: clamp it (a NaN is kept).
    const __m256 arg = _mm256_fmsub_ps(load(x + i, count), vs, vshift);
    __m256 e = exp_nonpositive(_mm256_min_ps(_mm256_setzero_ps(), arg));
    if (count < 8) {  // the padding's lanes are not part of the row
      alignas(32) int32_t keep[8];
      for (int l = 0; l < 8; ++l) keep[l] = l < count ? -1 : 0;
      e = _mm256_and_ps(e,
                        _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<__m256i*>(keep))));
    }
    sum = _mm256_add_ps(sum, e);
    store(out + i, e, count);
  });
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  double total = 0;
  for (float l : lanes) total += l;
  return total;
}

// Four chains of 4 doubles; the padding's lanes are zeros and add nothing.
double sum_squares_row(const float* x, int64_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  int chain = 0;
  rows_of_8(n, [&](int64_t i, int count) {
    const __m256 v = load(x + i, count);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc[chain] = _mm256_fmadd_pd(lo, lo, acc[chain]);
    acc[chain + 1] = _mm256_fmadd_pd(hi, hi, acc[chain + 1]);
    chain ^= 2;
  });
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes,
                  _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3])));
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

void f32_to_f16_row(const float* x, uint16_t* out, int64_t n) {
  rows_of_8(n, [&](int64_t i, int count) {
    const __m128i h = _mm256_cvtps_ph(load(x + i, count), _MM_FROUND_TO_NEAREST_INT);
    if (count == 8) return _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    uint16_t buf[8];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(buf), h);
    std::memcpy(out + i, buf, size_t(count) * sizeof(uint16_t));
  });
}

constexpr RowOps kAvx2{silu_row, gelu_row, exp_sum_row, sum_squares_row, f32_to_f16_row};

}  // namespace

const RowOps* row_ops_avx2() { return &kAvx2; }

}  // namespace ps::cpu

#else

namespace ps::cpu {
const RowOps* row_ops_avx2() { return nullptr; }
}  // namespace ps::cpu

#endif
