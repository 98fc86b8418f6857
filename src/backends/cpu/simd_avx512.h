#pragma once
// Building blocks shared by the AVX-512 kernel files (vec_dot_avx512.cpp, gemm_avx512.cpp).
// Include it only from files compiled with that level's flags: everything here has internal
// linkage, so each of those files gets its own copy and no code built for this level can
// stand in for a baseline function at link time.
#if !defined(__AVX512F__)
#error "simd_avx512.h is for files compiled with the AVX-512 flags only"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace ps::cpu {
namespace {

float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// An MXFP4 block's scale 2^(e - 128) (as core/dtype.h's e8m0_half_to_f32).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// IQ4_XS sub-block ib's 6-bit scale, minus 32 (as core/dtype.h's iq4_xs_scale).
inline int iq4_xs_sub_scale(const BlockIQ4_XS& b, int ib) {
  const int lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
  const int hi = (b.scales_h >> (2 * ib)) & 3;
  return (lo | (hi << 4)) - 32;
}

// Converts 16 weights starting at p to float; the masked form reads only the lanes in mask.
struct LoadF32 {
  using Elem = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
};

struct LoadF16 {
  using Elem = uint16_t;
  static __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load(const uint16_t* p, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
  }
};

struct LoadBF16 {
  using Elem = uint16_t;
  static __m512 widen(__m256i bits) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  static __m512 load(const uint16_t* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load(const uint16_t* p, __mmask16 mask) {
    return widen(_mm256_maskz_loadu_epi16(mask, p));
  }
};

}  // namespace
}  // namespace ps::cpu
