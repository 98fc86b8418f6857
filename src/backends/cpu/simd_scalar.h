#pragma once
// Scalar helpers that the SIMD kernel headers (simd_avx2.h, simd_avx512.h) share. Like them, it
// is for files compiled with a level's flags: everything here has internal linkage, so each of
// those files gets its own copy, compiled for its level, and none stands in for another's.
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace ps::cpu {
namespace {

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

}  // namespace
}  // namespace ps::cpu
