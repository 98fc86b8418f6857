// AVX-512 (F, BW, VL, DQ, VNNI) tile kernels: the AVX2 tiling with 32 zmm registers, so a
// 4 x 4 tile keeps its 16 accumulators and most column operands in registers.
//
// Quantized types put two consecutive 32-element blocks in one 512-bit vector (one per 256-bit
// half) and sum their 8-bit products straight into int32 lanes with vpdpbusd (unsigned x
// signed bytes). Offsets ride in the accumulator vpdpbusd starts from: (q - c) . a is
// q . a + (-c . a), and -c . a is computed once per column and block pair. Q8_0's signed
// weights become unsigned as q + 128 (one xor per row) with c = 128, since vpdpbusd sums into
// 32 bits and cannot saturate. Each half is then scaled in float by its block's d_w * d_a.
// A row with an odd block count ends with one block and a zero upper half, whose scale is 0.
//
// This file is compiled with the AVX-512 flags: it calls no inline function of a header that
// baseline files include (simd_avx512.h is for AVX-512 files only and has internal linkage), so
// no out-of-line copy built with these flags can replace the baseline one at link.
#include "backends/cpu/gemm.h"

#if defined(__x86_64__)

// GCC 12's AVX-512 headers build "undefined" placeholder vectors as `__Y = __Y`, which its
// uninitialized-use warnings flag once inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backends/cpu/simd_avx512.h"
#pragma GCC diagnostic pop

#include <cstring>
#include <utility>

namespace ps::cpu {
namespace {

// out[i] = the i-th of N rows `stride` bytes apart from base, typed.
template <typename T, int N>
inline void strided_rows(const T* (&out)[N], const void* base, size_t stride) {
  for (int i = 0; i < N; ++i)
    out[i] = reinterpret_cast<const T*>(static_cast<const char*>(base) + size_t(i) * stride);
}

constexpr int kTileRows = 4;
constexpr int kTileCols = 4;

// [sum(a0), sum(a1), sum(a2), sum(a3)].
__m128 sum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const auto fold = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  };
  const __m256 t =
      _mm256_hadd_ps(_mm256_hadd_ps(fold(a0), fold(a1)), _mm256_hadd_ps(fold(a2), fold(a3)));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// out[r] = sum(acc[r]) + extra[r] for r < R: one output column of a tile.
template <int R>
void store_column(const __m512 (&acc)[R], __m128 extra, float* out) {
  static_assert(R >= 1 && R <= 4);
  const __m512 zero = _mm512_setzero_ps();
  const auto at = [&](int r) { return r < R ? acc[r < R ? r : 0] : zero; };
  const __m128 s = _mm_add_ps(sum4(at(0), at(1), at(2), at(3)), extra);
  _mm_mask_storeu_ps(out, __mmask8((1u << R) - 1), s);
}

// ---- float weights ----------------------------------------------------------------------

template <typename Load>
struct FloatTile {
  template <int R, int C>
  static void run(int64_t k, const void* wv, size_t w_stride, const void* av, size_t a_stride,
                  float* y, size_t y_stride) {
    using Elem = typename Load::Elem;
    const Elem* w[R];
    const float* a[C];
    strided_rows(w, wv, w_stride);
    strided_rows(a, av, a_stride);
    __m512 acc[C][R];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[c][r] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      __m512 x[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) x[c] = _mm512_loadu_ps(a[c] + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 wr = Load::load(w[r] + i);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[c][r] = _mm512_fmadd_ps(wr, x[c], acc[c][r]);
      }
    }
    if (i < k) {
      const __mmask16 mask = __mmask16((1u << (k - i)) - 1);
      __m512 x[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) x[c] = _mm512_maskz_loadu_ps(mask, a[c] + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 wr = Load::load(w[r] + i, mask);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[c][r] = _mm512_fmadd_ps(wr, x[c], acc[c][r]);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) store_column<R>(acc[c], _mm_setzero_ps(), y + size_t(c) * y_stride);
  }
};

// ---- quantized weights ------------------------------------------------------------------

__m256i load_block(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Blocks b and b + 1 (or b and zeros) of 32 bytes, one per 256-bit half.
template <bool single>
__m512i load_pair(const int8_t* p0, const int8_t* p1) {
  if constexpr (single) {
    return _mm512_zextsi256_si512(load_block(p0));
  } else {
    return _mm512_inserti64x4(_mm512_castsi256_si512(load_block(p0)), load_block(p1), 1);
  }
}

// 32 packed nibbles as bytes in element order: element j is the low nibble of qs[j], element
// j+16 the high one.
__m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Two blocks' nibbles, one block per 256-bit half: 128-bit lanes [qs0, qs0 >> 4, qs1, qs1 >> 4]
// masked to 4 bits.
template <bool single>
__m512i unpack_nibbles_pair(const uint8_t* qs0, const uint8_t* qs1) {
  if constexpr (single) {
    return _mm512_zextsi256_si512(unpack_nibbles(qs0));
  } else {
    __m512i z = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0)));
    z = _mm512_mask_broadcast_i32x4(z, 0xff00,
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)));
    z = _mm512_mask_srli_epi16(z, 0xff00ff00u, z, 4);
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
  }
}

uint32_t fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return bits;
}

// Adds 16 to byte j of the pair where bit j of the blocks' qh is set.
template <bool single>
__m512i with_fifth_bits(__m512i q, const uint8_t* qh0, const uint8_t* qh1) {
  const uint64_t high = single ? 0 : uint64_t(fifth_bits(qh1)) << 32;
  const uint64_t bits = uint64_t(fifth_bits(qh0)) | high;
  return _mm512_mask_add_epi8(q, _cvtu64_mask64(bits), q, _mm512_set1_epi8(16));
}

// Per weight type: the block layouts, the unsigned bytes of a block pair (`single`: block b
// only), the constant c those bytes exceed the true weights by, and whether blocks carry m.
struct Q8_0Traits {
  using WBlock = BlockQ8_0;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 128;
  static constexpr bool has_min = false;
  template <bool single>
  static __m512i unpack(const WBlock* b) {
    return _mm512_xor_si512(load_pair<single>(b[0].qs, single ? b[0].qs : b[1].qs),
                            _mm512_set1_epi8(char(0x80)));
  }
};
struct Q4_0Traits {
  using WBlock = BlockQ4_0;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 8;
  static constexpr bool has_min = false;
  template <bool single>
  static __m512i unpack(const WBlock* b) {
    return unpack_nibbles_pair<single>(b[0].qs, single ? b[0].qs : b[1].qs);
  }
};
struct Q5_0Traits {
  using WBlock = BlockQ5_0;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 16;
  static constexpr bool has_min = false;
  template <bool single>
  static __m512i unpack(const WBlock* b) {
    const WBlock& b1 = single ? b[0] : b[1];
    return with_fifth_bits<single>(unpack_nibbles_pair<single>(b[0].qs, b1.qs), b[0].qh, b1.qh);
  }
};
struct Q4_1Traits {
  using WBlock = BlockQ4_1;
  using ABlock = BlockQ8_1;
  static constexpr int offset = 0;
  static constexpr bool has_min = true;
  template <bool single>
  static __m512i unpack(const WBlock* b) {
    return unpack_nibbles_pair<single>(b[0].qs, single ? b[0].qs : b[1].qs);
  }
};
struct Q5_1Traits {
  using WBlock = BlockQ5_1;
  using ABlock = BlockQ8_1;
  static constexpr int offset = 0;
  static constexpr bool has_min = true;
  template <bool single>
  static __m512i unpack(const WBlock* b) {
    const WBlock& b1 = single ? b[0] : b[1];
    return with_fifth_bits<single>(unpack_nibbles_pair<single>(b[0].qs, b1.qs), b[0].qh, b1.qh);
  }
};

// The codebook types: the nibbles index their table with 128 added (vpshufb per 128-bit lane),
// which makes the bytes unsigned with c = 128, as Q8_0's. MXFP4's scale is 2^(e - 128); an
// IQ4_XS super-block is 8 blocks of 32 for the tile (pairs never straddle two).
template <bool single>
__m512i looked_up_pair(const int8_t* table, const uint8_t* qs0, const uint8_t* qs1) {
  const __m512i t =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  return _mm512_shuffle_epi8(t, unpack_nibbles_pair<single>(qs0, qs1));
}
// Floats f0 and f1 over lanes 0..7 and 8..15.
__m512 float_pair(float f0, float f1) {
  return _mm512_insertf32x8(_mm512_set1_ps(f0), _mm256_set1_ps(f1), 1);
}
struct IQ4_NLTraits {
  using WBlock = BlockIQ4_NL;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 128;
  static constexpr bool has_min = false;
  template <bool single>
  static __m512i unpack(const WBlock* b) {
    return looked_up_pair<single>(kIq4nlBiased, b[0].qs, single ? b[0].qs : b[1].qs);
  }
};
struct MXFP4Traits {
  using WBlock = BlockMXFP4;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 128;
  static constexpr bool has_min = false;
  template <bool single>
  static __m512i unpack(const WBlock* b) {
    return looked_up_pair<single>(kMxfp4Biased, b[0].qs, single ? b[0].qs : b[1].qs);
  }
  template <bool single>
  static __m512 scales(const WBlock* b) {
    return float_pair(e8m0_half(b[0].e), single ? 0.0f : e8m0_half(b[1].e));
  }
};
struct IQ4_XSTraits {
  using WBlock = BlockIQ4_XS;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 128;
  static constexpr bool has_min = false;
  static float sub_scale(const WBlock& x, int ib) {
    return half_to_float(x.d) * float(iq4_xs_sub_scale(x, ib));
  }
  template <bool single>
  static __m512i unpack_at(const WBlock* row, int64_t b) {
    const uint8_t* qs = row[b / 8].qs + 16 * (b % 8);
    return looked_up_pair<single>(kIq4nlBiased, qs, single ? qs : qs + 16);
  }
  template <bool single>
  static __m512 scales_at(const WBlock* row, int64_t b) {
    const WBlock& x = row[b / 8];
    const int ib = int(b % 8);
    return float_pair(sub_scale(x, ib), single ? 0.0f : sub_scale(x, ib + 1));
  }
};

// fp16 values h0 and h1 as floats over lanes 0..7 and 8..15.
__m512 half_pair(uint16_t h0, uint16_t h1) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(int32_t(uint32_t(h0) | uint32_t(h1) << 16)));
  const __m512i index = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(f));
}

// One fp16 field of block b of each of R rows, as floats in lanes 0..R-1 (zeros above).
template <typename WBlock, int R, typename Field>
__m128 row_halves(const WBlock* const (&w)[R], int64_t b, Field field) {
  uint64_t bits = 0;
  for (int r = 0; r < R; ++r) bits |= uint64_t(field(w[r][b])) << (16 * r);
  return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(bits)));
}

template <typename T>
struct QuantTile {
  using WBlock = typename T::WBlock;
  using ABlock = typename T::ABlock;

  // Blocks b and b + 1 (b alone if single) of every row and column into the accumulators.
  template <int R, int C, bool single>
  static inline __attribute__((always_inline)) void step(const WBlock* const (&w)[R],
                                                         const ABlock* const (&a)[C], int64_t b,
                                                         __m512 (&acc)[C][R], __m128 (&mins)[C]) {
    __m512i aq[C], start[C];
    __m512 da[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const ABlock* blocks = a[c] + b;
      const ABlock& second = single ? blocks[0] : blocks[1];
      aq[c] = load_pair<single>(blocks[0].qs, second.qs);
      da[c] = half_pair(blocks[0].d, single ? uint16_t(0) : second.d);
      start[c] = _mm512_setzero_si512();
      if constexpr (T::offset != 0) {
        start[c] = _mm512_sub_epi32(
            start[c],
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(char(T::offset)), aq[c]));
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      // The pair's bytes and weight scales: the type's own where it has them (MXFP4's
      // exponents, IQ4_XS's blocks inside super-blocks), else fp16 d.
      __m512i q;
      __m512 dw;
      if constexpr (requires { T::template unpack_at<single>(w[r], b); }) {
        q = T::template unpack_at<single>(w[r], b);
        dw = T::template scales_at<single>(w[r], b);
      } else {
        const WBlock* blocks = w[r] + b;
        q = T::template unpack<single>(blocks);
        if constexpr (requires { T::template scales<single>(blocks); })
          dw = T::template scales<single>(blocks);
        else
          dw = half_pair(blocks[0].d, single ? uint16_t(0) : blocks[1].d);
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m512 lanes = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start[c], q, aq[c]));
        acc[c][r] = _mm512_fmadd_ps(lanes, _mm512_mul_ps(dw, da[c]), acc[c][r]);
      }
    }
    if constexpr (T::has_min) {
#pragma GCC unroll 2
      for (int half = 0; half < (single ? 1 : 2); ++half) {
        const __m128 m =
            row_halves<WBlock, R>(w, b + half, [](const WBlock& blk) { return blk.m; });
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c)
          mins[c] = _mm_fmadd_ps(m, _mm_set1_ps(half_to_float(a[c][b + half].s)), mins[c]);
      }
    }
  }

  template <int R, int C>
  static void run(int64_t k, const void* wv, size_t w_stride, const void* av, size_t a_stride,
                  float* y, size_t y_stride) {
    const WBlock* w[R];
    const ABlock* a[C];
    strided_rows(w, wv, w_stride);
    strided_rows(a, av, a_stride);
    __m512 acc[C][R];
    __m128 mins[C];  // per column, the m_w * s_a terms of the R rows
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      mins[c] = _mm_setzero_ps();
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[c][r] = _mm512_setzero_ps();
    }
    const int64_t nb = k / 32;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) step<R, C, false>(w, a, b, acc, mins);
    if (b < nb) step<R, C, true>(w, a, b, acc, mins);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) store_column<R>(acc[c], mins[c], y + size_t(c) * y_stride);
  }
};

// tiles[j] = Tile::run<R, j + 1>.
template <typename Tile, int R, int C>
constexpr GemmKernel make_kernel() {
  static_assert(C <= kMaxTileCols);
  return [&]<int... J>(std::integer_sequence<int, J...>) {
    return GemmKernel{R, C, {&Tile::template run<R, J + 1>...}};
  }
  (std::make_integer_sequence<int, C>{});
}

constexpr GemmKernel kF32 = make_kernel<FloatTile<LoadF32>, kTileRows, kTileCols>();
constexpr GemmKernel kF16 = make_kernel<FloatTile<LoadF16>, kTileRows, kTileCols>();
constexpr GemmKernel kBF16 = make_kernel<FloatTile<LoadBF16>, kTileRows, kTileCols>();
constexpr GemmKernel kQ8_0 = make_kernel<QuantTile<Q8_0Traits>, kTileRows, kTileCols>();
constexpr GemmKernel kQ4_0 = make_kernel<QuantTile<Q4_0Traits>, kTileRows, kTileCols>();
constexpr GemmKernel kQ5_0 = make_kernel<QuantTile<Q5_0Traits>, kTileRows, kTileCols>();
constexpr GemmKernel kQ4_1 = make_kernel<QuantTile<Q4_1Traits>, kTileRows, kTileCols>();
constexpr GemmKernel kIQ4_NL = make_kernel<QuantTile<IQ4_NLTraits>, kTileRows, kTileCols>();
constexpr GemmKernel kMXFP4 = make_kernel<QuantTile<MXFP4Traits>, kTileRows, kTileCols>();
constexpr GemmKernel kIQ4_XS = make_kernel<QuantTile<IQ4_XSTraits>, kTileRows, kTileCols>();
constexpr GemmKernel kQ5_1 = make_kernel<QuantTile<Q5_1Traits>, kTileRows, kTileCols>();

}  // namespace

const GemmKernel* gemm_kernel_avx512(DType w) {
  switch (w) {
    POLYSTACK_CPU_WEIGHT_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    POLYSTACK_CPU_TABLE_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    default:
      return nullptr;
  }
}

}  // namespace ps::cpu

#else

namespace ps::cpu {
const GemmKernel* gemm_kernel_avx512(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
