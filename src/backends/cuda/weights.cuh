#pragma once
// Reading weights of every dtype the engine runs, in groups of 32 consecutive elements of a row:
// the unit every CUDA/HIP kernel that reads weights (matmul, get_rows) works in. Group g holds
// elements 32 g .. 32 g + 31; a k-quant super-block is 8 groups. Each value is computed in the
// float operation order of core/dtype.cpp and core/kquants.cpp, so the decoders here give the
// CPU backend's values bit for bit (tests/unit/cuda_weights_test.cpp runs them on the host).
#include <cstdint>
#include <cstring>

#include "backends/cuda/vendor.h"
#include "core/dtype.h"
#include "core/fp16.h"

namespace ps::gpu {

PS_HD inline float f32_from_bits(uint32_t b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

// IEEE half to float: the hardware's conversion on the GPU, core/fp16.h's on the host (both
// exact for every half, subnormals included).
PS_HD inline float half_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __half2float(__ushort_as_half(h));
#else
  return fp16_to_f32(h);
#endif
}

PS_HD inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
// Two bytes at an even address (every block type's fields, in rows that start even): one load
// on the GPU.
PS_HD inline uint16_t load_u16_aligned(const uint8_t* p) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  return load_u16(p);
#endif
}
PS_HD inline float load_half(const uint8_t* p) { return half_to_f32(load_u16_aligned(p)); }

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (core/kquants.h get_scale_min_k4).
// s: the 12 bytes of scales, a pointer or anything that gives byte i as s[i].
template <typename Bytes>
PS_HD inline void scale_min_k4(int j, const Bytes& s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q3_K: the 6-bit scale of sub-block s (16 elements), without the bias of 32.
PS_HD inline int scale_q3_k(int s, const uint8_t* scales) {
  const int low = s < 8 ? scales[s] & 0xF : scales[s - 8] >> 4;
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return low | (high << 4);
}

// Elements 32 g .. 32 g + 31 of a row of n elements (n matters only for the float types, whose
// rows need not be whole groups: missing elements read as 0).
template <DType T>
PS_HD inline void decode32(const uint8_t* row, int64_t g, int64_t n, float* out) {
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16) {
    const int64_t first = 32 * g;
    for (int i = 0; i < 32; ++i) {
      const int64_t e = first + i;
      float v = 0.0f;
      if (e < n) {
        if constexpr (T == DType::F32) {
          const uint8_t* p = row + 4 * e;
          v = f32_from_bits(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                            uint32_t(p[3]) << 24);
        } else if constexpr (T == DType::F16) {
          v = load_half(row + 2 * e);
        } else {
          v = f32_from_bits(uint32_t(load_u16(row + 2 * e)) << 16);
        }
      }
      out[i] = v;
    }
  } else if constexpr (T == DType::Q8_0) {
    // Blocks and their fields start at even offsets: quantized bytes are read in pairs.
    const uint8_t* b = row + 34 * g;
    const float d = load_half(b);
    for (int i = 0; i < 32; i += 2) {
      const uint16_t q = load_u16_aligned(b + 2 + i);
      out[i] = float(int8_t(q & 0xff)) * d;
      out[i + 1] = float(int8_t(q >> 8)) * d;
    }
  } else if constexpr (T == DType::Q4_0 || T == DType::Q4_1) {
    constexpr bool kMin = T == DType::Q4_1;
    const uint8_t* b = row + (kMin ? 20 : 18) * g;
    const float d = load_half(b), m = kMin ? load_half(b + 2) : 0.0f;
    const uint8_t* qs = b + (kMin ? 4 : 2);
    for (int i = 0; i < 16; i += 2) {
      const uint16_t pair = load_u16_aligned(qs + i);
      for (int k = 0; k < 2; ++k) {
        const int q = (pair >> (8 * k)) & 0xff;
        if constexpr (kMin) {
          out[i + k] = float(q & 0x0f) * d + m;
          out[i + k + 16] = float(q >> 4) * d + m;
        } else {
          out[i + k] = float((q & 0x0f) - 8) * d;
          out[i + k + 16] = float((q >> 4) - 8) * d;
        }
      }
    }
  } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    constexpr bool kMin = T == DType::Q5_1;
    const uint8_t* b = row + (kMin ? 24 : 22) * g;
    const float d = load_half(b), m = kMin ? load_half(b + 2) : 0.0f;
    const uint8_t* qh8 = b + (kMin ? 4 : 2);
    const uint32_t qh =
        uint32_t(qh8[0]) | uint32_t(qh8[1]) << 8 | uint32_t(qh8[2]) << 16 | uint32_t(qh8[3]) << 24;
    const uint8_t* qs = qh8 + 4;
    for (int i = 0; i < 16; ++i) {
      const int a = (qs[i] & 0x0f) | int(((qh >> i) & 1) << 4);
      const int c = (qs[i] >> 4) | int(((qh >> (i + 16)) & 1) << 4);
      if constexpr (kMin) {
        out[i] = float(a) * d + m;
        out[i + 16] = float(c) * d + m;
      } else {
        out[i] = float(a - 16) * d;
        out[i + 16] = float(c - 16) * d;
      }
    }
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    // Group j of a super-block is bit pair j % 4 of the 32 qs bytes of half j / 4; its two
    // sub-blocks of 16 have their own scales.
    constexpr bool kQ3 = T == DType::Q3_K;
    const uint8_t* b = row + (kQ3 ? 110 : 84) * (g / 8);
    const int j = int(g % 8), half = j / 4, pair = j % 4;
    const uint8_t* qs = b + (kQ3 ? 32 : 16) + 32 * half;
    for (int s2 = 0; s2 < 2; ++s2) {
      const int s = 8 * half + 2 * pair + s2;
      float scale, min = 0.0f;
      if constexpr (kQ3) {
        scale = load_half(b + 108) * float(scale_q3_k(s, b + 96) - 32);
      } else {
        scale = load_half(b + 80) * float(b[s] & 0xF);
        min = load_half(b + 82) * float(b[s] >> 4);
      }
      for (int l = 16 * s2; l < 16 * s2 + 16; ++l) {
        int q = (qs[l] >> (2 * pair)) & 3;
        if constexpr (kQ3) q -= (b[l] & (1u << (4 * half + pair))) ? 0 : 4;
        out[l] = scale * float(q) - min;
      }
    }
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    constexpr bool kQ5 = T == DType::Q5_K;
    const uint8_t* b = row + (kQ5 ? 176 : 144) * (g / 8);
    const int j = int(g % 8);
    int sc, m;
    scale_min_k4(j, b + 4, sc, m);
    const float scale = load_half(b) * float(sc), min = load_half(b + 2) * float(m);
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (kQ5 ? 48 : 16) + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int q = (qs[l] >> shift) & 0xF;
      if constexpr (kQ5) q |= ((qh[l] >> j) & 1) << 4;
      out[l] = scale * float(q) - min;
    }
  } else if constexpr (T == DType::IQ4_NL || T == DType::MXFP4) {
    // The codebook types: a nibble indexes 16 int8 values (core/dtype.h). MXFP4 blocks are 17
    // bytes, so its fields are read byte by byte.
    constexpr bool kMx = T == DType::MXFP4;
    const int8_t table[16] = {kMx ? 0 : -127, kMx ? 1 : -104, kMx ? 2 : -83, kMx ? 3 : -65,
                              kMx ? 4 : -49,  kMx ? 6 : -35,  kMx ? 8 : -22, kMx ? 12 : -10,
                              kMx ? 0 : 1,    kMx ? -1 : 13,  kMx ? -2 : 25, kMx ? -3 : 38,
                              kMx ? -4 : 53,  kMx ? -6 : 69,  kMx ? -8 : 89, kMx ? -12 : 113};
    const uint8_t* b = row + (kMx ? 17 : 18) * g;
    float d;
    if constexpr (kMx)
      d = f32_from_bits(b[0] < 2 ? uint32_t(0x00200000) << b[0] : uint32_t(b[0] - 1) << 23);
    else
      d = load_half(b);
    const uint8_t* qs = b + (kMx ? 1 : 2);
    for (int i = 0; i < 16; ++i) {
      out[i] = d * float(table[qs[i] & 0x0f]);
      out[i + 16] = d * float(table[qs[i] >> 4]);
    }
  } else if constexpr (T == DType::IQ4_XS) {
    const int8_t table[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                              1,    13,   25,  38,  53,  69,  89,  113};
    const uint8_t* b = row + 136 * (g / 8);
    const int j = int(g % 8);
    const int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 0x0f;
    const int hi = (load_u16_aligned(b + 2) >> (2 * j)) & 3;
    const float dl = load_half(b) * float((lo | (hi << 4)) - 32);
    const uint8_t* qs = b + 8 + 16 * j;
    for (int i = 0; i < 16; ++i) {
      out[i] = dl * float(table[qs[i] & 0x0f]);
      out[i + 16] = dl * float(table[qs[i] >> 4]);
    }
  } else if constexpr (T == DType::Q6_K) {
    const uint8_t* b = row + 210 * (g / 8);
    const int j = int(g % 8), h = j / 4, k = j % 4;
    const float d = load_half(b + 208);
    const uint8_t* ql = b + 64 * h + 32 * (k % 2);
    const uint8_t* qh = b + 128 + 32 * h;
    for (int l = 0; l < 32; ++l) {
      const int lo = (ql[l] >> (4 * (k / 2))) & 0xF, hi = (qh[l] >> (2 * k)) & 3;
      const float scale = d * float(int8_t(b[192 + 8 * h + 2 * k + l / 16]));
      out[l] = scale * float((lo | (hi << 4)) - 32) - 0.0f;
    }
  }
}

// Calls f.template operator()<T>() with the dtype as a template argument; false for dtypes
// without a decoder.
template <typename F>
bool with_weight_type(DType t, F&& f) {
  switch (t) {
#define PS_WEIGHT_CASE(T)              \
  case DType::T:                       \
    f.template operator()<DType::T>(); \
    return true;
    PS_WEIGHT_CASE(F32)
    PS_WEIGHT_CASE(F16)
    PS_WEIGHT_CASE(BF16)
    PS_WEIGHT_CASE(Q8_0)
    PS_WEIGHT_CASE(Q4_0)
    PS_WEIGHT_CASE(Q4_1)
    PS_WEIGHT_CASE(Q5_0)
    PS_WEIGHT_CASE(Q5_1)
    PS_WEIGHT_CASE(Q2_K)
    PS_WEIGHT_CASE(Q3_K)
    PS_WEIGHT_CASE(Q4_K)
    PS_WEIGHT_CASE(Q5_K)
    PS_WEIGHT_CASE(Q6_K)
    PS_WEIGHT_CASE(IQ4_NL)
    PS_WEIGHT_CASE(MXFP4)
    PS_WEIGHT_CASE(IQ4_XS)
#undef PS_WEIGHT_CASE
    default:
      return false;
  }
}

}  // namespace ps::gpu
