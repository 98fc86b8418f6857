// AVX2 + FMA + F16C tile kernels: R weight rows x C activation columns per call, with R x C
// float accumulators of 8 lanes each held for the whole row. 4 x 3 tiles: the float kernels
// then use exactly the 16 ymm registers (12 accumulators, 3 activation vectors, 1 converted
// weight vector); the quantized ones, with more operands, let the compiler keep a few of them
// in L1 instead, which static analysis (llvm-mca, znver3) and measurement both found no slower
// than the narrower tiles that fit.
//
// Quantized types work one 32-element block at a time as the row dots do (vpmaddubsw to int16
// pairs, vpmaddwd to int32 lanes, then scaled in float), but a row's block is unpacked once for
// C columns, a column's block loaded once for R rows, and the offset term of Q4_0/Q5_0
// (offset . a) computed once per column. Float types convert each weight vector to F32 once
// for C columns.
//
// This file is compiled with -mavx2 -mfma -mf16c: it calls no inline function of a header that
// baseline files include (simd_avx2.h is for AVX2 files only and has internal linkage), so no
// out-of-line copy built with these flags can replace the baseline one at link.
#include "backends/cpu/gemm.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <utility>

#include "backends/cpu/simd_avx2.h"

namespace ps::cpu {
namespace {

constexpr int kTileRows = 4;
constexpr int kTileCols = 3;

// [sum(a0), sum(a1), sum(a2), sum(a3)].
__m128 sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// out[r] = sum(acc[r]) + extra[r] for r < R: one output column of a tile, whose rows are
// contiguous floats.
template <int R>
void store_column(const __m256 (&acc)[R], __m128 extra, float* out) {
  static_assert(R >= 1 && R <= 4);
  const __m256 zero = _mm256_setzero_ps();
  const auto at = [&](int r) { return r < R ? acc[r < R ? r : 0] : zero; };
  const __m128 s = _mm_add_ps(sum4(at(0), at(1), at(2), at(3)), extra);
  if constexpr (R == 4) {
    _mm_storeu_ps(out, s);
  } else {
    float sums[4];
    _mm_storeu_ps(sums, s);
    std::memcpy(out, sums, R * sizeof(float));
  }
}

// ---- float weights ----------------------------------------------------------------------

// Eight elements of every row against eight of every column.
template <typename Load, int R, int C>
inline __attribute__((always_inline)) void float_step(__m256 (&acc)[C][R],
                                                      const typename Load::Elem* const (&w)[R],
                                                      const float* const (&a)[C], int64_t i) {
  __m256 av[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) av[c] = _mm256_loadu_ps(a[c] + i);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m256 wv = Load::load(w[r] + i);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c][r] = _mm256_fmadd_ps(wv, av[c], acc[c][r]);
  }
}

template <typename Load>
struct FloatTile {
  template <int R, int C>
  static void run(int64_t k, const void* wv, size_t w_stride, const void* av, size_t a_stride,
                  float* y, size_t y_stride) {
    using Elem = typename Load::Elem;
    const Elem* w[R];
    const float* a[C];
    for (int r = 0; r < R; ++r)
      w[r] = reinterpret_cast<const Elem*>(static_cast<const char*>(wv) + size_t(r) * w_stride);
    for (int c = 0; c < C; ++c)
      a[c] = reinterpret_cast<const float*>(static_cast<const char*>(av) + size_t(c) * a_stride);
    __m256 acc[C][R];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[c][r] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) float_step<Load, R, C>(acc, w, a, i);
    if (i < k) {
      // AVX2 has no masked 16-bit load; zero-padded copies of the tails keep them in vector
      // code, and zeros add nothing.
      const size_t rest = size_t(k - i);
      Elem w_tail[R][8] = {};
      float a_tail[C][8] = {};
      const Elem* wt[R];
      const float* at[C];
      for (int r = 0; r < R; ++r) {
        std::memcpy(w_tail[r], w[r] + i, rest * sizeof(Elem));
        wt[r] = w_tail[r];
      }
      for (int c = 0; c < C; ++c) {
        std::memcpy(a_tail[c], a[c] + i, rest * sizeof(float));
        at[c] = a_tail[c];
      }
      float_step<Load, R, C>(acc, wt, at, 0);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) store_column<R>(acc[c], _mm_setzero_ps(), y + size_t(c) * y_stride);
  }
};

// ---- quantized weights ------------------------------------------------------------------

// Per weight type: the block layouts, how a block's 32 weights become bytes, and how those
// bytes multiply activation bytes. `offset` is subtracted from unsigned weights (w - offset)
// as offset . a per column; `is_signed` weights move their sign onto the activations;
// `has_min` types add m_w * s_a per block.
struct Q8_0Traits {
  using WBlock = BlockQ8_0;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 0;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i unpack(const WBlock& b) { return load_bytes(b.qs); }
};
struct Q4_0Traits {
  using WBlock = BlockQ4_0;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 8;
  static constexpr bool is_signed = false, has_min = false;
  static __m256i unpack(const WBlock& b) { return unpack_nibbles(b.qs); }
};
struct Q5_0Traits {
  using WBlock = BlockQ5_0;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 16;
  static constexpr bool is_signed = false, has_min = false;
  static __m256i unpack(const WBlock& b) {
    return _mm256_or_si256(unpack_nibbles(b.qs), unpack_fifth_bits(b.qh));
  }
};
struct Q4_1Traits {
  using WBlock = BlockQ4_1;
  using ABlock = BlockQ8_1;
  static constexpr int offset = 0;
  static constexpr bool is_signed = false, has_min = true;
  static __m256i unpack(const WBlock& b) { return unpack_nibbles(b.qs); }
};
struct Q5_1Traits {
  using WBlock = BlockQ5_1;
  using ABlock = BlockQ8_1;
  static constexpr int offset = 0;
  static constexpr bool is_signed = false, has_min = true;
  static __m256i unpack(const WBlock& b) {
    return _mm256_or_si256(unpack_nibbles(b.qs), unpack_fifth_bits(b.qh));
  }
};

// One fp16 field of block b of each of R rows, as floats in lanes 0..R-1 (zeros above).
template <typename WBlock, int R, typename Field>
__m128 row_halves(const WBlock* const (&w)[R], int64_t b, Field field) {
  uint64_t bits = 0;
  for (int r = 0; r < R; ++r) bits |= uint64_t(field(w[r][b])) << (16 * r);
  return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(bits)));
}

template <typename T>
struct QuantTile {
  template <int R, int C>
  static void run(int64_t k, const void* wv, size_t w_stride, const void* av, size_t a_stride,
                  float* y, size_t y_stride) {
    using WBlock = typename T::WBlock;
    using ABlock = typename T::ABlock;
    const WBlock* w[R];
    const ABlock* a[C];
    for (int r = 0; r < R; ++r)
      w[r] = reinterpret_cast<const WBlock*>(static_cast<const char*>(wv) + size_t(r) * w_stride);
    for (int c = 0; c < C; ++c)
      a[c] = reinterpret_cast<const ABlock*>(static_cast<const char*>(av) + size_t(c) * a_stride);
    __m256 acc[C][R];
    __m128 mins[C];  // per column, the m_w * s_a terms of the R rows
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      mins[c] = _mm_setzero_ps();
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[c][r] = _mm256_setzero_ps();
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t nb = k / 32;
    for (int64_t b = 0; b < nb; ++b) {
      // The R x C block scales d_w * d_a, rounded to float as the row dots do, are stored and
      // broadcast back from L1 for each pair: a load costs no vector ALU slot, and the ALU
      // ports are what bounds this loop.
      alignas(16) float scales[C][4];
      alignas(32) __m256i a_offset[C];
      const __m128 dw = row_halves<WBlock, R>(w, b, [](const WBlock& blk) { return blk.d; });
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        _mm_store_ps(scales[c], _mm_mul_ps(dw, _mm_set1_ps(half_to_float(a[c][b].d))));
        // (q - offset) . a = q . a - offset . a, the second term once per column; no int16
        // pair saturates (2 * 31 * 127).
        if constexpr (T::offset != 0)
          _mm256_store_si256(&a_offset[c], _mm256_maddubs_epi16(_mm256_set1_epi8(T::offset),
                                                                load_bytes(a[c][b].qs)));
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i q = T::unpack(w[r][b]);
        // vpmaddubsw multiplies unsigned by signed bytes: signed weights give their sign to
        // the activations (|-128| reads as unsigned 128, still exact).
        const __m256i q_unsigned = T::is_signed ? _mm256_sign_epi8(q, q) : q;
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256i aq = load_bytes(a[c][b].qs);
          __m256i pairs =
              _mm256_maddubs_epi16(q_unsigned, T::is_signed ? _mm256_sign_epi8(aq, q) : aq);
          if constexpr (T::offset != 0)
            pairs = _mm256_sub_epi16(pairs, _mm256_load_si256(&a_offset[c]));
          const __m256 lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
          acc[c][r] = _mm256_fmadd_ps(lanes, _mm256_broadcast_ss(&scales[c][r]), acc[c][r]);
        }
      }
      if constexpr (T::has_min) {
        const __m128 m = row_halves<WBlock, R>(w, b, [](const WBlock& blk) { return blk.m; });
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c)
          mins[c] = _mm_fmadd_ps(m, _mm_set1_ps(half_to_float(a[c][b].s)), mins[c]);
      }
    }
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
constexpr GemmKernel kQ5_1 = make_kernel<QuantTile<Q5_1Traits>, kTileRows, kTileCols>();

}  // namespace

const GemmKernel* gemm_kernel_avx2(DType w) {
  switch (w) {
    POLYSTACK_CPU_WEIGHT_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    default:
      return nullptr;
  }
}

}  // namespace ps::cpu

#else

namespace ps::cpu {
const GemmKernel* gemm_kernel_avx2(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
