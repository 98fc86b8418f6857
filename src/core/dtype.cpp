#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "core/kquants.h"

namespace ps {
namespace {

constexpr std::array<DTypeInfo, 31> kTypes = {{
    {DType::F32, "F32", 1, 4, true},
    {DType::F16, "F16", 1, 2, true},
    {DType::Q4_0, "Q4_0", 32, 18, true},
    {DType::Q4_1, "Q4_1", 32, 20, true},
    {DType::Q5_0, "Q5_0", 32, 22, true},
    {DType::Q5_1, "Q5_1", 32, 24, true},
    {DType::Q8_0, "Q8_0", 32, 34, true},
    {DType::Q8_1, "Q8_1", 32, 36, false},
    {DType::Q2_K, "Q2_K", 256, 84, true},
    {DType::Q3_K, "Q3_K", 256, 110, true},
    {DType::Q4_K, "Q4_K", 256, 144, true},
    {DType::Q5_K, "Q5_K", 256, 176, true},
    {DType::Q6_K, "Q6_K", 256, 210, true},
    {DType::Q8_K, "Q8_K", 256, 292, false},
    {DType::IQ2_XXS, "IQ2_XXS", 256, 66, false},
    {DType::IQ2_XS, "IQ2_XS", 256, 74, false},
    {DType::IQ3_XXS, "IQ3_XXS", 256, 98, false},
    {DType::IQ1_S, "IQ1_S", 256, 50, false},
    {DType::IQ4_NL, "IQ4_NL", 32, 18, true},
    {DType::IQ3_S, "IQ3_S", 256, 110, false},
    {DType::IQ2_S, "IQ2_S", 256, 82, false},
    {DType::IQ4_XS, "IQ4_XS", 256, 136, true},
    {DType::I8, "I8", 1, 1, false},
    {DType::I16, "I16", 1, 2, false},
    {DType::I32, "I32", 1, 4, false},
    {DType::I64, "I64", 1, 8, false},
    {DType::F64, "F64", 1, 8, false},
    {DType::IQ1_M, "IQ1_M", 256, 56, false},
    {DType::BF16, "BF16", 1, 2, true},
    {DType::TQ1_0, "TQ1_0", 256, 54, false},
    {DType::TQ2_0, "TQ2_0", 256, 66, false},
}};
constexpr DTypeInfo kMxfp4 = {DType::MXFP4, "MXFP4", 32, 17, true};

template <typename Block>
const Block* blocks(const void* p) {
  return static_cast<const Block*>(p);
}

// Largest-magnitude value of a block, keeping its sign (Q4_0 / Q5_0 put it at -8 / -16).
float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// int8_t(v), truncating toward zero, for any float: NaN gives 0 and values beyond the int8 range
// its ends (a plain cast of either is undefined; a file's NaN or a subnormal scale makes them).
int8_t trunc_i8(float v) { return v == v ? int8_t(std::clamp(v, -128.0f, 127.0f)) : int8_t(0); }

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK4_0) {
    const float max = signed_absmax(x, QK4_0);
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const uint8_t a = uint8_t(std::min(15, int(trunc_i8(x[j] * id + 8.5f))));
      const uint8_t b = uint8_t(std::min(15, int(trunc_i8(x[j + QK4_0 / 2] * id + 8.5f))));
      y[i].qs[j] = uint8_t(a | (b << 4));
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK4_1) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < QK4_1; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    const float d = (mx - mn) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(mn);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const uint8_t a = uint8_t(std::min(15, int(trunc_i8((x[j] - mn) * id + 0.5f))));
      const uint8_t b = uint8_t(std::min(15, int(trunc_i8((x[j + QK4_1 / 2] - mn) * id + 0.5f))));
      y[i].qs[j] = uint8_t(a | (b << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK5_0) {
    const float max = signed_absmax(x, QK5_0);
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const uint8_t a = uint8_t(std::min(31, int(trunc_i8(x[j] * id + 16.5f))));
      const uint8_t b = uint8_t(std::min(31, int(trunc_i8(x[j + QK5_0 / 2] * id + 16.5f))));
      y[i].qs[j] = uint8_t((a & 0x0f) | ((b & 0x0f) << 4));
      qh |= uint32_t((a & 0x10) >> 4) << j;
      qh |= uint32_t((b & 0x10) >> 4) << (j + QK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK5_1) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < QK5_1; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    const float d = (mx - mn) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const uint8_t a = uint8_t(std::min(31, int(trunc_i8((x[j] - mn) * id + 0.5f))));
      const uint8_t b = uint8_t(std::min(31, int(trunc_i8((x[j + QK5_1 / 2] - mn) * id + 0.5f))));
      y[i].qs[j] = uint8_t((a & 0x0f) | ((b & 0x0f) << 4));
      qh |= uint32_t((a & 0x10) >> 4) << j;
      qh |= uint32_t((b & 0x10) >> 4) << (j + QK5_1 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK8_0) {
    // A NaN (the activations of a model whose weights overflow) makes the block's scale NaN, so
    // its dot products are NaN as on the float path; NaN has no int8 value, its quant is 0. A
    // subnormal scale is inexact, so quants are clamped to the int8 range.
    float amax = 0;
    for (int j = 0; j < QK8_0; ++j)
      if (const float a = std::fabs(x[j]); !(a <= amax)) amax = a;
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < QK8_0; ++j) {
      const float q = std::round(x[j] * id);  // halves away from zero, as llama.cpp
      y[i].qs[j] = q == q ? int8_t(std::clamp(q, -127.0f, 127.0f)) : int8_t(0);
    }
  }
}

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK4_0) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0x0f) - 8) * d;
      y[j + QK4_0 / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK4_1) {
    const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      y[j] = float(x[i].qs[j] & 0x0f) * d + m;
      y[j + QK4_1 / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK5_0) {
    const float d = fp16_to_f32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int a = (x[i].qs[j] & 0x0f) | int(((qh >> j) & 1) << 4);
      const int b = (x[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      y[j] = float(a - 16) * d;
      y[j + QK5_0 / 2] = float(b - 16) * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK5_1) {
    const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int a = (x[i].qs[j] & 0x0f) | int(((qh >> j) & 1) << 4);
      const int b = (x[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      y[j] = float(a) * d + m;
      y[j + QK5_1 / 2] = float(b) * d + m;
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK8_0) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

template <typename Block>
void dequantize_table4(const Block* x, float* y, int64_t nb, const int8_t* table,
                       float (*scale)(const Block&)) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = scale(x[i]);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * float(table[x[i].qs[j] & 0x0f]);
      y[j + 16] = d * float(table[x[i].qs[j] >> 4]);
    }
  }
}
float iq4_nl_scale(const BlockIQ4_NL& b) { return fp16_to_f32(b.d); }
float mxfp4_scale(const BlockMXFP4& b) { return e8m0_half_to_f32(b.e); }

void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < QK_K / 32; ++ib, y += 32) {
      const float dl = d * float(iq4_xs_scale(x[i], ib));
      const uint8_t* qs = x[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * float(kIq4nlValues[qs[j] & 0x0f]);
        y[j + 16] = dl * float(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

// The index of the table value nearest x (the first of equals); table ascending when sorted is
// not assumed (MXFP4's is not).
int nearest_index(const int8_t* table, float x) {
  int best = 0;
  float err = std::fabs(float(table[0]) - x);
  for (int k = 1; k < 16; ++k)
    if (const float e = std::fabs(float(table[k]) - x); e < err) {
      err = e;
      best = k;
    }
  return best;
}

// MXFP4 as ggml's reference quantizer (and the gguf package's): the exponent puts the block's
// largest magnitude in [8, 16) times the scale (so values beyond 12 saturate), then each element
// takes the nearest of the 16 values. (floor(log2) is taken exactly, from the float's own
// exponent.) A NaN leaves the exponent 0, an infinity makes it 255; neither can crash it.
void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j)
      if (const float a = std::fabs(x[j]); !(a <= amax)) amax = a;
    int e = 0;
    if (amax > 0 && std::isfinite(amax)) {
      int exp2 = 0;
      std::frexp(amax, &exp2);  // amax = m 2^exp2, m in [0.5, 1): floor(log2(amax)) = exp2 - 1
      e = exp2 - 1 - 2 + 127;
    } else if (amax > 0) {
      e = 255;
    }
    y[i].e = uint8_t(std::clamp(e, 0, 255));
    const float d = e8m0_half_to_f32(y[i].e);
    for (int j = 0; j < 16; ++j) {
      const int lo = nearest_index(kMxfp4Values, x[j] / d);
      const int hi = nearest_index(kMxfp4Values, x[j + 16] / d);
      y[i].qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}

// One block of n (32) values against IQ4_NL's table: the scale that minimizes the error weighted
// by w over a few candidate scales around the one that maps the largest magnitude to an end of
// the table, refitted by least squares; the indices into L. Returns the scale.
float fit_iq4(const float* x, const float* w, int n, uint8_t* L) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  if (!(amax > 1e-30f) || !std::isfinite(amax)) {
    for (int j = 0; j < n; ++j) L[j] = uint8_t(nearest_index(kIq4nlValues, 0.0f));
    return 0.0f;
  }
  float best_d = 0, best_score = -1;
  uint8_t trial[32];
  for (int t = -7; t <= 7; ++t) {
    // Candidate: the largest magnitude lands on -127 + t (the table's long end).
    const float id = (float(kIq4nlValues[0]) + float(t)) / max;
    double sumqx = 0, sumq2 = 0;
    for (int j = 0; j < n; ++j) {
      trial[j] = uint8_t(nearest_index(kIq4nlValues, id * x[j]));
      const double q = kIq4nlValues[trial[j]];
      sumqx += double(w[j]) * q * x[j];
      sumq2 += double(w[j]) * q * q;
    }
    // With the least-squares scale d = sumqx / sumq2 the error falls by sumqx^2 / sumq2.
    const double score = sumq2 > 0 ? sumqx * sumqx / sumq2 : 0;
    if (score > best_score || t == -7) {  // the first always (a NaN score compares false)
      best_score = score;
      best_d = sumq2 > 0 ? float(sumqx / sumq2) : 0.0f;
      std::memcpy(L, trial, size_t(n));
    }
  }
  return best_d;
}

void importance(const float* x, float* w, int n) {
  float sigma2 = 0;
  for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
  sigma2 = 2 * sigma2 / float(n);
  for (int j = 0; j < n; ++j) w[j] = std::sqrt(sigma2 + x[j] * x[j]);
}

void pack_nibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(L[j] | (L[j + 16] << 4));
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float w[32];
    uint8_t L[32];
    importance(x, w, 32);
    y[i].d = f32_to_fp16(fit_iq4(x, w, 32, L));
    // Each element again against the scale as stored.
    const float d = fp16_to_f32(y[i].d);
    if (d != 0)
      for (int j = 0; j < 32; ++j) L[j] = uint8_t(nearest_index(kIq4nlValues, x[j] / d));
    pack_nibbles(L, y[i].qs);
  }
}

// IQ4_XS: each sub-block's scale fitted as for IQ4_NL, the eight scales quantized to 6 bits
// against the super-block's d (the largest magnitude at -32), then each element re-indexed
// against its sub-block's rounded scale.
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float w[QK_K], scales[QK_K / 32];
    uint8_t L[QK_K];
    importance(x, w, QK_K);
    float amax = 0, max = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      scales[ib] = fit_iq4(x + 32 * ib, w + 32 * ib, 32, L + 32 * ib);
      if (std::fabs(scales[ib]) > amax) {
        amax = std::fabs(scales[ib]);
        max = scales[ib];
      }
    }
    std::memset(&y[i], 0, sizeof(BlockIQ4_XS));
    const float d = amax > 0 ? -max / 32 : 0.0f;
    y[i].d = f32_to_fp16(d);
    const float dr = fp16_to_f32(y[i].d);
    const float id = dr != 0 ? 1.0f / dr : 0.0f;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const int l = std::clamp(int(std::lround(id * scales[ib])), -32, 31);
      const float dl = dr * float(l);
      const float* xb = x + 32 * ib;
      uint8_t* Lb = L + 32 * ib;
      for (int j = 0; j < 32; ++j)
        Lb[j] = uint8_t(nearest_index(kIq4nlValues, dl != 0 ? xb[j] / dl : 0.0f));
      const int u = l + 32;
      y[i].scales_l[ib / 2] |= uint8_t((u & 0x0f) << (4 * (ib % 2)));
      y[i].scales_h |= uint16_t((u >> 4) << (2 * ib));
      pack_nibbles(Lb, y[i].qs + 16 * ib);
    }
  }
}

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (uint32_t(t.type) == id) return t;
  if (id == uint32_t(DType::MXFP4)) return kMxfp4;
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i;
  if (t == DType::MXFP4) return kMxfp4;
  throw Error("unknown dtype id " + std::to_string(uint32_t(t)));
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  auto eq = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::toupper(static_cast<unsigned char>(x)) ==
                    std::toupper(static_cast<unsigned char>(y));
           });
  };
  for (const auto& t : kTypes)
    if (eq(t.name, name)) return t.type;
  if (eq(kMxfp4.name, name)) return DType::MXFP4;
  return std::nullopt;
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const int64_t nb = n / block_size(t);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::F16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
      return;
    }
    case DType::BF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::Q4_0:
      return dequantize_q4_0(blocks<BlockQ4_0>(src), dst, nb);
    case DType::Q4_1:
      return dequantize_q4_1(blocks<BlockQ4_1>(src), dst, nb);
    case DType::Q5_0:
      return dequantize_q5_0(blocks<BlockQ5_0>(src), dst, nb);
    case DType::Q5_1:
      return dequantize_q5_1(blocks<BlockQ5_1>(src), dst, nb);
    case DType::Q8_0:
      return dequantize_q8_0(blocks<BlockQ8_0>(src), dst, nb);
    case DType::Q2_K:
      return kquants::dequantize_q2_k(blocks<BlockQ2_K>(src), dst, nb);
    case DType::Q3_K:
      return kquants::dequantize_q3_k(blocks<BlockQ3_K>(src), dst, nb);
    case DType::Q4_K:
      return kquants::dequantize_q4_k(blocks<BlockQ4_K>(src), dst, nb);
    case DType::Q5_K:
      return kquants::dequantize_q5_k(blocks<BlockQ5_K>(src), dst, nb);
    case DType::Q6_K:
      return kquants::dequantize_q6_k(blocks<BlockQ6_K>(src), dst, nb);
    case DType::Q8_K:
      return kquants::dequantize_q8_k(blocks<BlockQ8_K>(src), dst, nb);
    case DType::IQ4_NL:
      return dequantize_table4(blocks<BlockIQ4_NL>(src), dst, nb, kIq4nlValues, iq4_nl_scale);
    case DType::MXFP4:
      return dequantize_table4(blocks<BlockMXFP4>(src), dst, nb, kMxfp4Values, mxfp4_scale);
    case DType::IQ4_XS:
      return dequantize_iq4_xs(blocks<BlockIQ4_XS>(src), dst, nb);
    default:
      throw Error("dequantize: dtype " + std::string(dtype_name(t)) + " is not supported");
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  const int64_t nb = n / block_size(t);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::Q4_0:
      return quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case DType::Q4_1:
      return quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), nb);
    case DType::Q5_0:
      return quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case DType::Q5_1:
      return quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), nb);
    case DType::Q8_0:
      return quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case DType::Q2_K:
      return kquants::quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), nb);
    case DType::Q3_K:
      return kquants::quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), nb);
    case DType::Q4_K:
      return kquants::quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), nb);
    case DType::Q5_K:
      return kquants::quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), nb);
    case DType::Q6_K:
      return kquants::quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
    case DType::Q8_K:
      return kquants::quantize_q8_k(src, static_cast<BlockQ8_K*>(dst), nb);
    case DType::IQ4_NL:
      return quantize_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), nb);
    case DType::MXFP4:
      return quantize_mxfp4(src, static_cast<BlockMXFP4*>(dst), nb);
    case DType::IQ4_XS:
      return quantize_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), nb);
    default:
      throw Error("quantize: dtype " + std::string(dtype_name(t)) + " is not supported");
  }
}

}  // namespace ps
