#pragma once
// Building blocks shared by the AVX2 + FMA + F16C kernel files (*_avx2.cpp).
// Include it only from files compiled with that level's flags: everything here has internal
// linkage, so each of those files gets its own copy and no code built for this level can
// stand in for a baseline function at link time.
#if !defined(__AVX2__)
#error "simd_avx2.h is for files compiled with the AVX2 + FMA + F16C flags only"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/simd_scalar.h"

namespace ps::cpu {
namespace {

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// The sum of the 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

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
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Bit j of qh as 0x10 in byte j (the fifth bit of a Q5 element).
inline __m256i unpack_fifth_bits(const uint8_t* qh) {
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

// A 16-entry int8 codebook in both 128-bit lanes, and the 32 values a block's nibbles index
// in it (vpshufb), in element order.
inline __m256i codebook(const int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}
inline __m256i looked_up(const uint8_t* qs, __m256i table) {
  return _mm256_shuffle_epi8(table, unpack_nibbles(qs));
}

inline __m256i load_bytes(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// std::round (halves away from zero) for |v| < 2^31, exactly: with t = trunc(v), v - t is
// exact and trunc(2 (v - t)) is +-1 precisely when the fraction reaches one half. No SIMD
// rounding mode rounds ties away from zero.
inline __m256i round_half_away(__m256 v) {
  const __m256i t = _mm256_cvttps_epi32(v);
  const __m256 frac = _mm256_sub_ps(v, _mm256_cvtepi32_ps(t));
  return _mm256_add_epi32(t, _mm256_cvttps_epi32(_mm256_add_ps(frac, frac)));
}

// One block of 32 activations quantized to 8 bits as the scalar quantizers do it: the same
// max, the same d = amax / 127 and 1 / d in scalar float, the same product x * id and
// rounding. d is returned unrounded (callers store it as fp16, where vcvtps2ph rounds to
// nearest even as f32_to_fp16 does), with the sum of the 32 quantized values.
struct Q8Block {
  float d;
  int32_t sum;
};
inline Q8Block quantize_q8_block(const float* x, int8_t* qs) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  __m256 amax8 = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v0), _mm256_andnot_ps(sign_bit, v1));
  amax8 = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v2), amax8);
  amax8 = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v3), amax8);
  __m128 amax4 = _mm_max_ps(_mm256_extractf128_ps(amax8, 1), _mm256_castps256_ps128(amax8));
  amax4 = _mm_max_ps(_mm_movehl_ps(amax4, amax4), amax4);
  amax4 = _mm_max_ss(_mm_movehdup_ps(amax4), amax4);
  const float amax = _mm_cvtss_f32(amax4);
  const float d = amax / 127;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const __m256 mul = _mm256_set1_ps(id);
  const __m256i i0 = round_half_away(_mm256_mul_ps(v0, mul));
  const __m256i i1 = round_half_away(_mm256_mul_ps(v1, mul));
  const __m256i i2 = round_half_away(_mm256_mul_ps(v2, mul));
  const __m256i i3 = round_half_away(_mm256_mul_ps(v3, mul));
  // The packs work within 128-bit lanes, leaving 4-element groups in the order
  // 0, 2, 4, 6, 1, 3, 5, 7; the permutation puts them back.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), ordered);
  return {d, hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)))};
}

// Prefetches of packed weights, for the tiles of packed_avx2.cpp and packed_avx512.cpp.
//
// Asks for the bytes of the block `ahead` blocks past `block`, one cache line at a time (the
// 32-element tiles, whose blocks of 16 rows take 8 or 9 lines: one block's worth per step).
// The hardware prefetcher starts late on each new stream; this keeps about 2 KiB in flight
// from the first block. Prefetches do not fault, so the last blocks may point past the weights.
template <typename Block>
inline __attribute__((always_inline)) void prefetch_block(const Block* block, int ahead) {
  const char* p = reinterpret_cast<const char*>(block + ahead);
#pragma GCC unroll 64
  for (size_t off = 0; off < sizeof(Block); off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// Part `part` of `parts` of the lines of the super-block after `block`: a decode tile (one
// column) calls it once in each of `parts` steps of its loop over a super-block, so that the
// next one's 21 to 53 lines are asked for a few at a time between the loads, instead of in one
// burst that fills the core's queue of misses at the start of each super-block.
template <typename Block>
inline __attribute__((always_inline)) void prefetch_next_part(const Block* block, int part,
                                                              int parts) {
  constexpr int kLines = int((sizeof(Block) + 63) / 64);
  const char* p = reinterpret_cast<const char*>(block + 1);
  for (int line = part * kLines / parts; line < (part + 1) * kLines / parts; ++line)
    _mm_prefetch(p + 64 * line, _MM_HINT_T0);
}

}  // namespace
}  // namespace ps::cpu
