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
    {DType::IQ4_NL, "IQ4_NL", 32, 18, false},
    {DType::IQ3_S, "IQ3_S", 256, 110, false},
    {DType::IQ2_S, "IQ2_S", 256, 82, false},
    {DType::IQ4_XS, "IQ4_XS", 256, 136, false},
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
constexpr DTypeInfo kMxfp4 = {DType::MXFP4, "MXFP4", 32, 17, false};

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
    default:
      throw Error("quantize: dtype " + std::string(dtype_name(t)) + " is not supported");
  }
}

}  // namespace ps
