// k-quant dequantization: the exact GGUF layouts, in the float operation order of the reference
// (a sub-block's scale product first, then one multiply and one subtract per element), so that
// results match llama.cpp and the gguf package bit for bit.
#include "core/kquants.h"

#include "core/fp16.h"

namespace ps::kquants {

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
    // Sub-block s (16 elements) is group s / 8 (128 elements, 32 bytes of qs), bit pair
    // (s % 8) / 2, bytes 16 * (s % 2) .. + 15 of the group.
    for (int s = 0; s < QK_K / 16; ++s) {
      const uint8_t* q = x[i].qs + 32 * (s / 8) + 16 * (s % 2);
      const int shift = 2 * ((s % 8) / 2);
      const float dl = d * float(x[i].scales[s] & 0xF), ml = dmin * float(x[i].scales[s] >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l] >> shift) & 3) - ml;
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    uint8_t scales[16];
    unpack_q3_k_scales(x[i].scales, scales);
    // As Q2_K; the high bit of element e of group g comes from hmask bit 4 g + pair.
    for (int s = 0; s < QK_K / 16; ++s) {
      const int g = s / 8, pair = (s % 8) / 2, off = 16 * (s % 2);
      const uint8_t* q = x[i].qs + 32 * g + off;
      const uint8_t* hm = x[i].hmask + off;
      const uint8_t bit = uint8_t(1u << (4 * g + pair));
      const float dl = d * float(int(scales[s]) - 32);
      for (int l = 0; l < 16; ++l) {
        const int v = int((q[l] >> (2 * pair)) & 3) - ((hm[l] & bit) ? 0 : 4);
        *y++ = dl * float(v);
      }
    }
  }
}

namespace {
// Q4_K and Q5_K: sub-block j (32 elements) is the low (j even) or high nibbles of qs bytes
// 32 (j / 2) .. + 31; with_high: the fifth bit from qh bit j.
template <typename Block, bool with_high>
void dequantize_k4(const Block* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
    for (int j = 0; j < QK_K / 32; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const float dl = d * float(sc), ml = dmin * float(m);
      const uint8_t* q = x[i].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        int v = (q[l] >> shift) & 0xF;
        if constexpr (with_high) v |= ((x[i].qh[l] >> j) & 1) << 4;
        *y++ = dl * float(v) - ml;
      }
    }
  }
}
}  // namespace

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  dequantize_k4<BlockQ4_K, false>(x, y, nb);
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  dequantize_k4<BlockQ5_K, true>(x, y, nb);
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    // Element e = 128 h + 32 k + l (h half, k quarter): low 4 bits from ql byte 64 h + l + 32
    // (k % 2), nibble k / 2; top 2 bits from qh byte 32 h + l, bits 2k; scale 8 h + 2 k + l / 16.
    for (int e = 0; e < QK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int lo = (x[i].ql[64 * h + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
      const int hi = (x[i].qh[32 * h + l] >> (2 * k)) & 3;
      const float dl = d * float(x[i].scales[8 * h + 2 * k + l / 16]);
      y[e] = dl * float((lo | (hi << 4)) - 32);
    }
    y += QK_K;
  }
}

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * float(x[i].qs[j]);
}

}  // namespace ps::kquants
