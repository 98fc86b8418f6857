#pragma once
// IEEE half and bfloat16 conversions without relying on compiler extensions, so the scalar
// reference kernels and the GGUF block layouts agree bit for bit everywhere.
#include <cstdint>
#include <cstring>

namespace ps {

inline float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return bits_to_f32(sign);
    // Subnormal half: renormalize.
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400) == 0);
    mant &= 0x3ff;
    return bits_to_f32(sign | uint32_t(127 - 15 - e) << 23 | mant << 13);
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | mant << 13);
  return bits_to_f32(sign | (exp + 127 - 15) << 23 | mant << 13);
}

// Round to nearest even, like numpy's float16 cast and F16C's vcvtps2ph.
inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = f32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000u) {  // inf or nan
    return uint16_t(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
  }
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to inf
  if (absx < 0x38800000u) {                                 // subnormal or zero in half
    if (absx < 0x33000000u) return uint16_t(sign);
    const uint32_t e = absx >> 23;
    const uint32_t mant = (absx & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = ((absx >> 13) - ((127 - 15) << 10));
  const uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}

// Branch-free half -> float (exact for every input, subnormals and inf/nan included), written
// so the compiler can vectorize loops over it at the baseline ISA.
inline float fp16_to_f32_fast(uint16_t h) {
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = bits_to_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = bits_to_f32((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t r = two_w < (1u << 27) ? f32_to_bits(denormalized) : f32_to_bits(normalized);
  return bits_to_f32(sign | r);
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }

// Round to nearest even; NaNs stay NaN (quiet bit forced), as the gguf package does.
inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000u) return uint16_t((x >> 16) | 64);
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

}  // namespace ps
