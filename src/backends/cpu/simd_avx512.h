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

#include "backends/cpu/simd_scalar.h"

namespace ps::cpu {
namespace {

float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

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
