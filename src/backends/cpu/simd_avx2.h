#pragma once
// Building blocks shared by the AVX2 + FMA + F16C kernel files (vec_dot_avx2.cpp, gemm_avx2.cpp).
// Include it only from files compiled with that level's flags: everything here has internal
// linkage, so each of those files gets its own copy and no code built for this level can
// stand in for a baseline function at link time.
#if !defined(__AVX2__)
#error "simd_avx2.h is for files compiled with the AVX2 + FMA + F16C flags only"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace ps::cpu {
namespace {

float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// Converts 8 weights starting at p to float.
struct LoadF32 {
  using Elem = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
};

struct LoadF16 {
  using Elem = uint16_t;
  static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

struct LoadBF16 {
  using Elem = uint16_t;
  static __m256 load(const uint16_t* p) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
};

// 32 packed nibbles as 32 bytes in element order: element j is the low nibble of qs[j] and
// element j+16 the high one.
__m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Bit j of qh as 0x10 in byte j (the fifth bit of a Q5 element).
__m256i unpack_fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int32_t(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  // Byte j now holds bits 8*(j/8)..+7; setting every bit but j%8 makes it all-ones iff bit
  // j%8 was set.
  const __m256i probe = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(probe, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

__m256i load_bytes(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

}  // namespace
}  // namespace ps::cpu
