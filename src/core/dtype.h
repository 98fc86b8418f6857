#pragma once
// Tensor element types with the exact GGUF (ggml) type ids and block layouts.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ps {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct DTypeInfo {
  DType type;
  std::string_view name;
  int64_t block_size;  // elements per block
  size_t block_bytes;  // bytes per block
  bool computable;     // polystack has kernels for it
};

// Facts about a GGUF type id, or nullopt for ids no GGUF writer produces.
std::optional<DTypeInfo> dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive

inline int64_t block_size(DType t) { return dtype_info(t).block_size; }
// Bytes of one row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(DType t, int64_t n) {
  const auto& i = dtype_info(t);
  return size_t(n / i.block_size) * i.block_bytes;
}

// GGUF block layouts (packed; every field little-endian). fp16 fields are raw half bits.
inline constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[QK4_0 / 2];  // element j in the low nibble of qs[j], element j+16 in the high one
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[QK4_1 / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j = 5th bit of element j
  uint8_t qs[QK5_0 / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[QK8_0];
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);

// The k-quants: super-blocks of QK_K elements in 16 or 8 sub-blocks with their own scales.
inline constexpr int QK_K = 256, K_SCALE_SIZE = 12;

// 16 sub-blocks of 16: w = d * (scales & 15) * q - dmin * (scales >> 4), q in 0..3.
struct BlockQ2_K {
  uint8_t scales[QK_K / 16];  // low nibble: scale, high nibble: min, of each sub-block
  uint8_t qs[QK_K / 4];       // 2 bits each: byte l of a 32-byte group holds 4 elements, 32 apart
  uint16_t d, dmin;
};
// 16 sub-blocks of 16: w = d * (scale - 32) * (q - 4 * !hbit), q in 0..3, 6-bit scales.
struct BlockQ3_K {
  uint8_t hmask[QK_K / 8];  // bit b of byte l: the high bit of element 32 b + l
  uint8_t qs[QK_K / 4];     // low 2 bits, laid out as in Q2_K
  uint8_t scales[12];       // 16 scales of 6 bits: low nibbles in bytes 0-7, high pairs in 8-11
  uint16_t d;
};
// 8 sub-blocks of 32: w = d * scale * q - dmin * min, q in 0..15, 6-bit scales and mins.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];  // 8 scales and 8 mins of 6 bits (see get_scale_min_k4)
  uint8_t qs[QK_K / 2];          // a 32-byte group holds two sub-blocks: low nibbles, then high
};
// As Q4_K with a fifth bit per element: bit b of qh[l] is the high bit of element 32 b + l.
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
// 16 sub-blocks of 16: w = d * scale * (q - 32), q in 0..63 (4 low bits in ql, 2 in qh).
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
// Activations for k-quant dot products: w = d * q, with the sums of each 16 q.
struct BlockQ8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

// The 4-bit codebook types: each element is an index into a table of 16 int8 values, times
// the scale of its block of 32.
//   IQ4_NL: fp16 scale; a non-linear table.
//   MXFP4 (OCP microscaling FP4): E2M1 values doubled (0, 1, 2, 3, 4, 6, 8, 12 and their
//          negatives), times 2^(e - 128) for the block's 8-bit exponent e (E8M0, halved).
//   IQ4_XS: super-blocks of 256 as 8 sub-blocks of 32 with IQ4_NL's table, each scaled by
//          d * (l - 32) for a 6-bit l (4 low bits in scales_l, 2 high in scales_h).
// Element j of a 32-block is the low nibble of qs[j], element j + 16 the high one.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// The same tables with 128 added, as bytes (two's complement): the SIMD kernels look levels up
// unsigned, with an offset of 128, as Q8_0's levels made unsigned.
inline constexpr int8_t kIq4nlBiased[16] = {1,    24,   45,   63,  79,  93,  106, 118,
                                            -127, -115, -103, -90, -75, -59, -39, -15};
inline constexpr int8_t kMxfp4Biased[16] = {-128, -127, -126, -125, -124, -122, -120, -116,
                                            -128, 127,  126,  125,  124,  122,  120,  116};
static_assert([] {
  for (int i = 0; i < 16; ++i)
    if (uint8_t(kIq4nlBiased[i]) != kIq4nlValues[i] + 128 ||
        uint8_t(kMxfp4Biased[i]) != kMxfp4Values[i] + 128)
      return false;
  return true;
}());
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;            // bits 2 ib, 2 ib + 1: the high bits of sub-block ib's scale
  uint8_t scales_l[QK_K / 64];  // nibble ib % 2 of byte ib / 2: its low bits
  uint8_t qs[QK_K / 2];         // 16 bytes per sub-block
};
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockMXFP4) == 17 && sizeof(BlockIQ4_XS) == 136);

// 2^(e - 128): an MXFP4 block's scale (ggml's E8M0 "half" conversion; e = 0 and 1 give the
// subnormals 2^-128 and 2^-127).
inline float e8m0_half_to_f32(uint8_t e) {
  return std::bit_cast<float>(e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23);
}
// IQ4_XS sub-block ib's 6-bit scale, minus 32.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int ib) {
  const int lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
  const int hi = (b.scales_h >> (2 * ib)) & 3;
  return (lo | (hi << 4)) - 32;
}

// Conversions between a row of F32 values and a row of type t (n a multiple of its block).
// Supported for every computable type and Q8_K (the k-quants' activation type).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace ps
