#pragma once
// The k-quant block codecs behind dequantize_row / quantize_row (core/dtype.h).
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace ps::kquants {

// A k-quant super-block as integer levels and one affine map per sub-block: element e of
// sub-block s = e / (QK_K / subs) is scale[s] * q[e] - min[s], computed in that order (the
// reference's), so dequantization is bit-exact. Dot products use the same form.
struct KLevels {
  int8_t q[QK_K];
  float scale[16];
  float min[16];
  int subs;  // 16 sub-blocks of 16 or 8 of 32
};
void levels(const BlockQ2_K& x, KLevels& out);
void levels(const BlockQ3_K& x, KLevels& out);
void levels(const BlockQ4_K& x, KLevels& out);
void levels(const BlockQ5_K& x, KLevels& out);
void levels(const BlockQ6_K& x, KLevels& out);

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb);
void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb);
void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb);
void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb);
void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb);
void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb);

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb);

// Scale and min j (0..7) of a Q4_K / Q5_K block: 6 bits each, packed in 12 bytes. Bytes 0-3
// hold scales 0-3 and bytes 4-7 mins 0-3 in their low 6 bits; scales and mins 4-7 take their
// low 4 bits from bytes 8-11 (scale: low nibble, min: high nibble) and their top 2 bits from the
// top bits of bytes 0-3 (scales) and 4-7 (mins).
// These helpers are also called from files built for AVX2: always inlined, so no copy of them
// built with those flags can stand in for the baseline one at link time.
[[gnu::always_inline]] inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* scale,
                                                    uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// All 8 scales (out[0..7]) and 8 mins (out[8..15]) of a Q4_K / Q5_K block at once, with
// 32-bit operations on the 12 packed bytes (the same layout as get_scale_min_k4).
[[gnu::always_inline]] inline void unpack_k4_scales_mins(const uint8_t* q, uint8_t out[16]) {
  constexpr uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  uint32_t b[3];
  std::memcpy(b, q, 12);
  const uint32_t u[4] = {b[0] & low6, (b[2] & low4) | (((b[0] >> 6) & low2) << 4), b[1] & low6,
                         ((b[2] >> 4) & low4) | (((b[1] >> 6) & low2) << 4)};
  std::memcpy(out, u, 16);
}

// The 16 scales of a Q3_K block, 6 bits each, as stored (subtract 32 for the signed value):
// scale j has its low 4 bits in byte j % 8 (low nibble for j < 8, high nibble after) and its
// top 2 bits in byte 8 + j % 4, at bit 2 * (j / 4).
[[gnu::always_inline]] inline void unpack_q3_k_scales(const uint8_t* s, uint8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = (s[j % 8] >> (4 * (j / 8))) & 0xF;
    const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = uint8_t(low | (high << 4));
  }
}

}  // namespace ps::kquants
