// AVX-512 BF16 kernels over packed BF16 weights (packed.h): BF16x16 puts each consecutive pair
// of a row's elements in one 32-bit lane, 16 rows to a 64-byte vector, so one vdpbf16ps
// against a pair of activations broadcast to every lane adds two products to each of the 16
// rows' sums in float. The activations are rounded to BF16 once per matmul (to nearest even),
// the way llama.cpp computes BF16 weights; the products and sums stay in float.
//
// Only called on CPUs with AVX512_BF16 (packed_kernel checks cpuid): this file is compiled with
// the AVX-512 flags and -mavx512bf16, and calls no inline function of a header that baseline
// files include.
#include "backends/cpu/packed.h"

#if defined(__x86_64__)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstring>
#include <utility>

namespace ps::cpu {
namespace {

int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// n floats to n BF16 values (n even), rounded to nearest even as vcvtne2ps2bf16 does.
void act_bf16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(y + i, __m512i(v));
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + i));
    _mm256_mask_storeu_epi16(y + i, mask, __m256i(v));
  }
}

// A GGUF-layout BF16 row (past the last whole group) against BF16 activations.
float tail_dot_bf16(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const uint16_t*>(wv);
  const auto* a = static_cast<const uint16_t*>(av);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 mask = n - i >= 32 ? ~__mmask32(0) : __mmask32((1u << (n - i)) - 1);
    acc = _mm512_dpbf16_ps(acc, __m512bh(_mm512_maskz_loadu_epi16(mask, w + i)),
                           __m512bh(_mm512_maskz_loadu_epi16(mask, a + i)));
  }
  return _mm512_reduce_add_ps(acc);
}

// 16 rows x C columns: y[c * y_stride + j] for row j of the group. Two chains of accumulators
// over alternate pairs: with one, a tile of 8 columns has 8 vdpbf16ps in flight, fewer than its
// latency times its throughput on CPUs that issue two a cycle.
template <int C>
void bf16x16_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                  size_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const uint16_t* a[C];
  for (int c = 0; c < C; ++c)
    a[c] = reinterpret_cast<const uint16_t*>(static_cast<const char*>(av) + size_t(c) * a_stride);
  constexpr int kChains = 2;
  __m512 acc[kChains][C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
    for (int s = 0; s < kChains; ++s) acc[s][c] = _mm512_setzero_ps();
  const int64_t pairs = k / 2;
  for (int64_t p = 0; p < pairs; p += kChains) {
    _mm_prefetch(reinterpret_cast<const char*>(w + 64 * (p + 32)), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int s = 0; s < kChains; ++s) {
      if (kChains > 1 && p + s >= pairs) break;
      const __m512bh q = __m512bh(_mm512_loadu_si512(w + 64 * (p + s)));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        acc[s][c] = _mm512_dpbf16_ps(acc[s][c], q,
                                     __m512bh(_mm512_set1_epi32(load_i32(a[c] + 2 * (p + s)))));
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    __m512 sum = acc[0][c];
    if constexpr (kChains > 1) sum = _mm512_add_ps(sum, acc[kChains - 1][c]);
    _mm512_storeu_ps(y + size_t(c) * y_stride, sum);
  }
}

constexpr int kTileCols = 8;

template <int... I>
constexpr GemmKernel make_bf16x16(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRowsK, kTileCols, {bf16x16_tile<I + 1>...}};
}

// Activation "blocks" are pairs of BF16 values.
constexpr PackedKernel kBF16{2, 4, act_bf16, tail_dot_bf16,
                             make_bf16x16(std::make_integer_sequence<int, kTileCols>{})};

}  // namespace

const PackedKernel* packed_kernel_avx512_bf16(DType w) {
  return w == DType::BF16 ? &kBF16 : nullptr;
}

}  // namespace ps::cpu

#else

namespace ps::cpu {
const PackedKernel* packed_kernel_avx512_bf16(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
