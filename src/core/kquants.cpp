// k-quant codecs. Dequantization: the exact GGUF layouts, in the float operation order of the
// reference (a sub-block's scale product first, then one multiply and one subtract per element),
// so that results match llama.cpp and the gguf package bit for bit. Quantization: the reference
// quantizer's scale searches and rounding (round to nearest, ties to even, in float), so that a
// file we write holds the bytes llama.cpp's tools would write.
#include "core/kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"

namespace ps::kquants {

void levels(const BlockQ2_K& x, KLevels& out) {
  const float d = fp16_to_f32(x.d), dmin = fp16_to_f32(x.dmin);
  out.subs = 16;
  // Sub-block s (16 elements) is group s / 8 (128 elements, 32 bytes of qs), bit pair
  // (s % 8) / 2, bytes 16 * (s % 2) .. + 15 of the group.
  for (int s = 0; s < 16; ++s) {
    const uint8_t* q = x.qs + 32 * (s / 8) + 16 * (s % 2);
    const int shift = 2 * ((s % 8) / 2);
    out.scale[s] = d * float(x.scales[s] & 0xF);
    out.min[s] = dmin * float(x.scales[s] >> 4);
    for (int l = 0; l < 16; ++l) out.q[16 * s + l] = int8_t((q[l] >> shift) & 3);
  }
}

void levels(const BlockQ3_K& x, KLevels& out) {
  const float d = fp16_to_f32(x.d);
  uint8_t scales[16];
  unpack_q3_k_scales(x.scales, scales);
  out.subs = 16;
  // As Q2_K; the high bit of element e of group g comes from hmask bit 4 g + pair.
  for (int s = 0; s < 16; ++s) {
    const int g = s / 8, pair = (s % 8) / 2, off = 16 * (s % 2);
    const uint8_t* q = x.qs + 32 * g + off;
    const uint8_t* hm = x.hmask + off;
    const uint8_t bit = uint8_t(1u << (4 * g + pair));
    out.scale[s] = d * float(int(scales[s]) - 32);
    out.min[s] = 0.f;
    for (int l = 0; l < 16; ++l)
      out.q[16 * s + l] = int8_t(int((q[l] >> (2 * pair)) & 3) - ((hm[l] & bit) ? 0 : 4));
  }
}

namespace {
// Q4_K and Q5_K: sub-block j (32 elements) is the low (j even) or high nibbles of qs bytes
// 32 (j / 2) .. + 31; with qh, the fifth bit from qh bit j.
void levels_k4(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qs,
               const uint8_t* qh, KLevels& out) {
  const float d = fp16_to_f32(d16), dmin = fp16_to_f32(dmin16);
  out.subs = 8;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales, &sc, &m);
    out.scale[j] = d * float(sc);
    out.min[j] = dmin * float(m);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0xF;
      if (qh) v |= ((qh[l] >> j) & 1) << 4;
      out.q[32 * j + l] = int8_t(v);
    }
  }
}
}  // namespace

void levels(const BlockQ4_K& x, KLevels& out) {
  levels_k4(x.d, x.dmin, x.scales, x.qs, nullptr, out);
}

void levels(const BlockQ5_K& x, KLevels& out) { levels_k4(x.d, x.dmin, x.scales, x.qs, x.qh, out); }

void levels(const BlockQ6_K& x, KLevels& out) {
  const float d = fp16_to_f32(x.d);
  out.subs = 16;
  for (int s = 0; s < 16; ++s) {
    out.scale[s] = d * float(x.scales[s]);
    out.min[s] = 0.f;
  }
  // Element e = 128 h + 32 k + l (h half, k quarter): low 4 bits from ql byte 64 h + l + 32
  // (k % 2), nibble k / 2; top 2 bits from qh byte 32 h + l, bits 2k.
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int lo = (x.ql[64 * h + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
    const int hi = (x.qh[32 * h + l] >> (2 * k)) & 3;
    out.q[e] = int8_t((lo | (hi << 4)) - 32);
  }
}

namespace {
template <typename Block>
void dequantize_levels(const Block* x, float* y, int64_t nb) {
  KLevels L;
  for (int64_t i = 0; i < nb; ++i) {
    levels(x[i], L);
    const int size = QK_K / L.subs;
    for (int e = 0; e < QK_K; ++e) *y++ = L.scale[e / size] * float(L.q[e]) - L.min[e / size];
  }
}
}  // namespace

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb) { dequantize_levels(x, y, nb); }
void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb) { dequantize_levels(x, y, nb); }
void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb) { dequantize_levels(x, y, nb); }
void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb) { dequantize_levels(x, y, nb); }
void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) { dequantize_levels(x, y, nb); }

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * float(x[i].qs[j]);
}

// ---- quantization --------------------------------------------------------------------------

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // below this a group's largest magnitude counts as 0

// Round to nearest, ties to even (what the reference's float trick does for |v| < 2^22). The
// values here are levels, far below that; NaN and infinities (from non-finite input) give 0
// rather than an undefined conversion.
int nearest_int(float v) { return std::fabs(v) < 4194304.f ? int(std::nearbyint(v)) : 0; }

// The value of largest magnitude (the first one found), with its magnitude in *amax.
float signed_max(const float* x, int n, float* amax) {
  float max = 0;
  *amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > *amax) {
      *amax = ax;
      max = x[i];
    }
  }
  return max;
}

// Scale and offset for n values with weights w, as d * L - min with L in 0..nmax: a first
// guess from the range, then nstep more scales around it (rmin + rdelta * step added to nmax),
// each refit by weighted least squares; the best by weighted squared error (or absolute error
// with use_mad). Returns the scale; *neg_min = -min (min <= 0).
float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, size_t(n));
    *neg_min = -min;
    return 0.f;
  }
  const auto error = [&](float scale, float m, const uint8_t* l) {
    float e = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * l[i] + m - x[i];
      e += w[i] * (use_mad ? std::fabs(diff) : diff * diff);
    }
    return e;
  };
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  for (int i = 0; i < n; ++i)
    L[i] = uint8_t(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
  float best_error = error(scale, min, L);
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = uint8_t(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      const float cur_error = error(this_scale, this_min, Laux);
      if (cur_error < best_error) {
        std::memcpy(L, Laux, size_t(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

// Symmetric scale for n values as scale * (L - nmax), L - nmax in -nmax..nmax-1, the scale's
// sign taken from the value of largest magnitude; weights x^2; 18 scales around nmax / max
// tried, kept when they raise (sum w x l)^2 / (sum w l^2).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = signed_max(x, n, &amax);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, size_t(n));
    return 0.f;
  }
  const auto fit = [&](float iscale, float* sumlx, float* suml2, bool store) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = int8_t(l + nmax);
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  float sumlx, suml2;
  fit(-nmax / max, &sumlx, &suml2, true);
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(nmax + 0.1f * is) / max;
    fit(iscale, &sumlx, &suml2, false);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      fit(iscale, &sumlx, &suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's symmetric fit: levels L - nmax in -nmax..nmax-1 for scale * (L - nmax); with
// do_rmse, up to 5 passes move single levels while that raises (sum w x l)^2 / (sum w l^2),
// weights x^2. Returns the scale.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L, bool do_rmse) {
  float amax;
  const float max = signed_max(x, n, &amax);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, size_t(n));
    return 0.f;
  }
  const float iscale = -nmax / max;
  if (!do_rmse) {
    for (int i = 0; i < n; ++i)
      L[i] = int8_t(std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1) + nmax);
    return 1 / iscale;
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return sumlx / suml2;
}

// Q2_K and Q3_K: 2-bit levels of four 32-element runs share a byte (element 128 g + 32 p + l in
// bits 2p of qs[32 g + l]).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int g = 0; g < QK_K / 128; ++g)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* q = L + 128 * g + l;
      qs[32 * g + l] = uint8_t(q[0] | (q[32] << 2) | (q[64] << 4) | (q[96] << 6));
    }
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; the weights of the fit are
// the sub-block's RMS plus each value's magnitude. Returns the element levels in L.
template <typename Block>
void quantize_k4_scales(const float* x, Block& y, uint8_t* L, int nmax, float rmin, int nstep) {
  float scales[QK_K / 32], mins[QK_K / 32], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(y.scales, 0, sizeof(y.scales));
  for (int j = 0; j < QK_K / 32; ++j) {
    const uint8_t ls = uint8_t(std::min(63, nearest_int(inv_scale * scales[j])));
    const uint8_t lm = uint8_t(std::min(63, nearest_int(inv_min * mins[j])));
    if (j < 4) {
      y.scales[j] = ls;
      y.scales[j + 4] = lm;
    } else {
      y.scales[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      y.scales[j - 4] |= uint8_t((ls >> 4) << 6);
      y.scales[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  y.d = f32_to_fp16(max_scale / 63.f);
  y.dmin = f32_to_fp16(max_min / 63.f);
  // The levels again, against the scales as stored.
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, y.scales, &sc, &m);
    const float d = fp16_to_f32(y.d) * sc;
    if (!d) continue;
    const float dm = fp16_to_f32(y.dmin) * m;
    for (int ii = 0; ii < 32; ++ii)
      L[32 * j + ii] = uint8_t(std::clamp(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
  }
}

}  // namespace

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb) {
  constexpr float q4scale = 15.f;
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                   0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    y[i].d = 0;
    y[i].dmin = 0;
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = uint8_t(nearest_int(iscale * scales[j]));
      y[i].d = f32_to_fp16(max_scale / q4scale);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < QK_K / 16; ++j)
        y[i].scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
      y[i].dmin = f32_to_fp16(max_min / q4scale);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float dm = fp16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = uint8_t(std::clamp(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
    }
    pack_2bit(L, y[i].qs);
  }
}

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int j = 0; j < QK_K / 16; ++j)
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
    float amax;
    const float max_scale = signed_max(scales, QK_K / 16, &amax);
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    y[i].d = 0;
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) {
        const int l = std::clamp(nearest_int(iscale * scales[j]), -32, 31) + 32;
        y[i].scales[j % 8] |= uint8_t((l & 0xF) << (4 * (j / 8)));
        y[i].scales[8 + j % 4] |= uint8_t((l >> 4) << (2 * (j / 4)));
      }
      y[i].d = f32_to_fp16(1 / iscale);
    }
    uint8_t sc[16];
    unpack_q3_k_scales(y[i].scales, sc);
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16_to_f32(y[i].d) * float(int(sc[j]) - 32);
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = int8_t(std::clamp(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
    }
    // The high bit of each level into hmask (element e: byte e % 32, bit e / 32), 2 bits to qs.
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    uint8_t low[QK_K];
    for (int e = 0; e < QK_K; ++e) {
      if (L[e] > 3) y[i].hmask[e % 32] |= uint8_t(1u << (e / 32));
      low[e] = uint8_t(L[e] > 3 ? L[e] - 4 : L[e]);
    }
    pack_2bit(low, y[i].qs);
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    uint8_t L[QK_K];
    quantize_k4_scales(x, y[i], L, 15, -1.f, 20);
    for (int j = 0; j < QK_K / 64; ++j)
      for (int l = 0; l < 32; ++l)
        y[i].qs[32 * j + l] = uint8_t(L[64 * j + l] | (L[64 * j + l + 32] << 4));
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    uint8_t L[QK_K];
    quantize_k4_scales(x, y[i], L, 31, -0.5f, 15);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int j = 0; j < QK_K / 64; ++j)
      for (int l = 0; l < 32; ++l) {
        const int l1 = L[64 * j + l], l2 = L[64 * j + l + 32];
        y[i].qh[l] |= uint8_t(((l1 >> 4) << (2 * j)) | ((l2 >> 4) << (2 * j + 1)));
        y[i].qs[32 * j + l] = uint8_t((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int ib = 0; ib < QK_K / 16; ++ib)
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
    float max_abs_scale;
    const float max_scale = signed_max(scales, QK_K / 16, &max_abs_scale);
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(y[i]));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib)
      y[i].scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16_to_f32(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = int8_t(std::clamp(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
    }
    // Element e = 128 h + 32 k + l: the inverse of dequantize_q6_k's layout.
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const int8_t* q = L + 128 * h + l;
        y[i].ql[64 * h + l] = uint8_t((q[0] & 0xF) | ((q[64] & 0xF) << 4));
        y[i].ql[64 * h + l + 32] = uint8_t((q[32] & 0xF) | ((q[96] & 0xF) << 4));
        y[i].qh[32 * h + l] =
            uint8_t((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
      }
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float amax;
    const float max = signed_max(x, QK_K, &amax);
    if (!amax) {
      std::memset(&y[i], 0, sizeof(y[i]));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * j + l];
      y[i].bsums[j] = int16_t(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace ps::kquants
