// AVX2 + FMA + F16C kernels over packed weights (packed.h). For Q4_0x8, one block of a group is
// four 32-byte loads; masking and shifting them gives eight vectors of unsigned nibbles, each
// holding 4 elements of the 8 rows. vpmaddubsw against the matching 4 activations broadcast to
// every lane leaves pairs of products in int16; eight of those vectors sum without overflow
// (8 x 2 x 15 x 127 < 2^15), and one vpmaddwd turns them into the 8 rows' dots of the block.
// The offset of 8 comes off as 8 * s of the activation block, and the 8 weight scales are one
// vcvtph2ps: about 5 vector instructions per 32 weights, against about 18 for a row dot.
//
// This file is compiled with -mavx2 -mfma -mf16c: it calls no inline function of a header that
// baseline files include (simd_avx2.h is for AVX2 files only and has internal linkage), so no
// out-of-line copy built with these flags can replace the baseline one at link.
#include "backends/cpu/packed.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <utility>

#include "backends/cpu/simd_avx2.h"

namespace ps::cpu {
namespace {

void act_q8s(const float* x, void* dst, int64_t n) {
  BlockQ8S* y = static_cast<BlockQ8S*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    const Q8Block q = quantize_q8_block(x, y[b].qs);
    // The fp16-rounded scale, so the values are exactly those of a Q8_0 block.
    y[b].d = half_to_float(_cvtss_sh(q.d, _MM_FROUND_TO_NEAREST_INT));
    y[b].s = y[b].d * float(q.sum);
  }
}

// A GGUF-layout Q4_0 row against BlockQ8S activations (the rows after the last whole group).
float tail_dot_q4_0(int64_t n, const void* wv, const void* av) {
  const BlockQ4_0* w = static_cast<const BlockQ4_0*>(wv);
  const BlockQ8S* a = static_cast<const BlockQ8S*>(av);
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    const __m256i p = _mm256_maddubs_epi16(unpack_nibbles(w[b].qs), load_bytes(a[b].qs));
    const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    const float dw = half_to_float(w[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * a[b].d), f, acc);
    offset += dw * a[b].s;
  }
  return hsum(acc) - 8 * offset;
}

// The 8 rows' dots of one block against one column, unscaled, as floats.
inline __attribute__((always_inline)) __m256 block_dots(const __m256i (&q)[8], const BlockQ8S& a) {
  int32_t x[8];
  std::memcpy(x, a.qs, sizeof(x));
  __m256i s0 = _mm256_maddubs_epi16(q[0], _mm256_set1_epi32(x[0]));
  __m256i s1 = _mm256_maddubs_epi16(q[1], _mm256_set1_epi32(x[1]));
  s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[2], _mm256_set1_epi32(x[2])));
  s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[3], _mm256_set1_epi32(x[3])));
  s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[4], _mm256_set1_epi32(x[4])));
  s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[5], _mm256_set1_epi32(x[5])));
  s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[6], _mm256_set1_epi32(x[6])));
  s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[7], _mm256_set1_epi32(x[7])));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_add_epi16(s0, s1), _mm256_set1_epi16(1)));
}

// Vector v's low nibbles are elements 4v..4v+3 (matching activation dword v), its high nibbles
// elements 16+4v.. (activation dword 4+v).
inline __attribute__((always_inline)) void unpack_block(const BlockQ4_0x8& b, __m256i (&q)[8]) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * v));
    q[v] = _mm256_and_si256(raw, mask);
    q[v + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
  }
}

// One block's contribution to a column: dw * (d * dots - 8 * s).
inline __attribute__((always_inline)) __m256 accumulate(__m256 acc, __m256 dots, __m256 dw,
                                                        const BlockQ8S& a) {
  const __m256 t = _mm256_fmadd_ps(dots, _mm256_set1_ps(a.d), _mm256_set1_ps(-8 * a.s));
  return _mm256_fmadd_ps(t, dw, acc);
}

// 8 rows x C columns; y[c * y_stride + j] for row j of the group.
template <int C>
void q4_0x8_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                 size_t y_stride) {
  const BlockQ4_0x8* w = static_cast<const BlockQ4_0x8*>(wv);
  const BlockQ8S* a[C];
  for (int c = 0; c < C; ++c)
    a[c] = reinterpret_cast<const BlockQ8S*>(static_cast<const char*>(av) + size_t(c) * a_stride);
  const int64_t nb = k / QK4_0;
  __m256 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  int64_t b = 0;
  if constexpr (C == 1) {
    // Two blocks per step on two accumulators: one column alone would wait on the FMA latency.
    __m256 acc1 = _mm256_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
      __m256i q[8];
      unpack_block(w[b], q);
      const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d)));
      acc[0] = accumulate(acc[0], block_dots(q, a[0][b]), dw0, a[0][b]);
      unpack_block(w[b + 1], q);
      const __m256 dw1 =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b + 1].d)));
      acc1 = accumulate(acc1, block_dots(q, a[0][b + 1]), dw1, a[0][b + 1]);
    }
    acc[0] = _mm256_add_ps(acc[0], acc1);
  }
  for (; b < nb; ++b) {
    __m256i q[8];
    unpack_block(w[b], q);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d)));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = accumulate(acc[c], block_dots(q, a[c][b]), dw, a[c][b]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * y_stride, acc[c]);
}

constexpr int kTileCols = 4;

template <int... I>
constexpr GemmKernel make_q4_0x8(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRows, kTileCols, {q4_0x8_tile<I + 1>...}};
}

constexpr PackedKernel kQ4_0{QK8_0, sizeof(BlockQ8S), act_q8s, tail_dot_q4_0,
                             make_q4_0x8(std::make_integer_sequence<int, kTileCols>{})};

}  // namespace

const PackedKernel* packed_kernel_avx2(DType w) { return w == DType::Q4_0 ? &kQ4_0 : nullptr; }

}  // namespace ps::cpu

#else

namespace ps::cpu {
const PackedKernel* packed_kernel_avx2(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
