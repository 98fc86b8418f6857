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
// At the avxvnni level this file is compiled again with -mavxvnni (__AVXVNNI__, entry point
// gemm_kernel_avxvnni): the 32-element block products go to int32 lanes in one vpdpbusd, which
// starts from the offset term, and the k-quants' scaled pairs add in one vpdpwssd.
//
// This file is compiled with -mavx2 -mfma -mf16c: it calls no inline function of a header that
// baseline files include (simd_avx2.h is for AVX2 files only and has internal linkage), so no
// out-of-line copy built with these flags can replace the baseline one at link.
#include "backends/cpu/gemm.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "backends/cpu/simd_avx2.h"
#include "core/kquants.h"

namespace ps::cpu {
namespace {

// out[i] = the i-th of N rows `stride` bytes apart from base, typed.
template <typename T, int N>
inline void strided_rows(const T* (&out)[N], const void* base, size_t stride) {
  for (int i = 0; i < N; ++i)
    out[i] = reinterpret_cast<const T*>(static_cast<const char*>(base) + size_t(i) * stride);
}

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
    strided_rows(w, wv, w_stride);
    strided_rows(a, av, a_stride);
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

// The codebook types: signed values looked up per nibble; MXFP4's scale is its exponent's.
struct IQ4_NLTraits {
  using WBlock = BlockIQ4_NL;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 0;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i unpack(const WBlock& b) { return looked_up(b.qs, codebook(kIq4nlValues)); }
};
struct MXFP4Traits {
  using WBlock = BlockMXFP4;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 0;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i unpack(const WBlock& b) { return looked_up(b.qs, codebook(kMxfp4Values)); }
  static float scale(const WBlock& b) { return e8m0_half(b.e); }
};

// IQ4_XS: each super-block is 8 blocks of 32 for the tile (block b is sub-block b % 8 of
// super-block b / 8, against activation block b), each with its scale d * (l - 32).
struct IQ4_XSTraits {
  using WBlock = BlockIQ4_XS;
  using ABlock = BlockQ8_0;
  static constexpr int offset = 0;
  static constexpr bool is_signed = true, has_min = false;
  static __m256i unpack_sub(const WBlock* row, int64_t b) {
    return looked_up(row[b / 8].qs + 16 * (b % 8), codebook(kIq4nlValues));
  }
  static float scale_sub(const WBlock* row, int64_t b) {
    const WBlock& x = row[b / 8];
    return half_to_float(x.d) * float(iq4_xs_sub_scale(x, int(b % 8)));
  }
};

// Block b of a row as bytes: T::unpack of the block, or T::unpack_sub where blocks of 32 are
// parts of larger ones.
template <typename T>
__m256i unpack_at(const typename T::WBlock* row, int64_t b) {
  if constexpr (requires { T::unpack_sub(row, b); })
    return T::unpack_sub(row, b);
  else
    return T::unpack(row[b]);
}

// One fp16 field of block b of each of R rows, as floats in lanes 0..R-1 (zeros above).
template <typename WBlock, int R, typename Field>
__m128 row_halves(const WBlock* const (&w)[R], int64_t b, Field field) {
  uint64_t bits = 0;
  for (int r = 0; r < R; ++r) bits |= uint64_t(field(w[r][b])) << (16 * r);
  return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(bits)));
}

// Block b's weight scales of the R rows in lanes 0..R-1: fp16 d, or T::scale where the type
// has one.
template <typename T, int R>
__m128 weight_scales(const typename T::WBlock* const (&w)[R], int64_t b) {
  using WBlock = typename T::WBlock;
  if constexpr (requires(const WBlock* x) { T::scale_sub(x, b); }) {
    alignas(16) float s[4] = {};
    for (int r = 0; r < R; ++r) s[r] = T::scale_sub(w[r], b);
    return _mm_load_ps(s);
  } else if constexpr (requires(const WBlock& x) { T::scale(x); }) {
    alignas(16) float s[4] = {};
    for (int r = 0; r < R; ++r) s[r] = T::scale(w[r][b]);
    return _mm_load_ps(s);
  } else {
    return row_halves<WBlock, R>(w, b, [](const WBlock& blk) { return blk.d; });
  }
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
    strided_rows(w, wv, w_stride);
    strided_rows(a, av, a_stride);
    __m256 acc[C][R];
    __m128 mins[C];  // per column, the m_w * s_a terms of the R rows
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      mins[c] = _mm_setzero_ps();
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[c][r] = _mm256_setzero_ps();
    }
    [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
    const int64_t nb = k / 32;
    for (int64_t b = 0; b < nb; ++b) {
      // The R x C block scales d_w * d_a, rounded to float as the row dots do, are stored and
      // broadcast back from L1 for each pair: a load costs no vector ALU slot, and the ALU
      // ports are what bounds this loop.
      alignas(16) float scales[C][4];
      alignas(32) __m256i a_offset[C];  // VNNI: -(offset . a) in int32 lanes
      const __m128 dw = weight_scales<T, R>(w, b);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        _mm_store_ps(scales[c], _mm_mul_ps(dw, _mm_set1_ps(half_to_float(a[c][b].d))));
        // (q - offset) . a = q . a - offset . a, the second term once per column; no int16
        // pair saturates (2 * 31 * 127).
#if defined(__AVXVNNI__)
        if constexpr (T::offset != 0)
          _mm256_store_si256(&a_offset[c],
                             _mm256_sub_epi32(_mm256_setzero_si256(),
                                              _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(),
                                                                      _mm256_set1_epi8(T::offset),
                                                                      load_bytes(a[c][b].qs))));
#else
        if constexpr (T::offset != 0)
          _mm256_store_si256(&a_offset[c], _mm256_maddubs_epi16(_mm256_set1_epi8(T::offset),
                                                                load_bytes(a[c][b].qs)));
#endif
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i q = unpack_at<T>(w[r], b);
        // vpmaddubsw multiplies unsigned by signed bytes: signed weights give their sign to
        // the activations (|-128| reads as unsigned 128, still exact).
        const __m256i q_unsigned = T::is_signed ? _mm256_sign_epi8(q, q) : q;
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256i aq = load_bytes(a[c][b].qs);
          const __m256i as = T::is_signed ? _mm256_sign_epi8(aq, q) : aq;
#if defined(__AVXVNNI__)
          __m256i start = _mm256_setzero_si256();
          if constexpr (T::offset != 0) start = _mm256_load_si256(&a_offset[c]);
          const __m256 lanes = _mm256_cvtepi32_ps(_mm256_dpbusd_avx_epi32(start, q_unsigned, as));
#else
          __m256i pairs = _mm256_maddubs_epi16(q_unsigned, as);
          if constexpr (T::offset != 0)
            pairs = _mm256_sub_epi16(pairs, _mm256_load_si256(&a_offset[c]));
          const __m256 lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
#endif
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

// ---- k-quant weights ----------------------------------------------------------------------

// A k-quant super-block of one row made ready for C columns of Q8_K activations: the 256
// levels as 8 vectors of unsigned bytes (vector v meets activations 32 v .. 32 v + 31), the
// int16 scales of each vector's two halves of 16, and a per-16 term `corr` that meets the
// activations' per-16 sums: an offset already multiplied by the scale (levels stored with
// +4 or +32) that comes off in int32, or a min that comes off scaled by dmin.
struct KSuper {
  __m256i q[8];
  __m256i sc[8];
  __m256i corr;  // 16 int16
  float d, dmin;
};

__m256i scale_pair(int s0, int s1) {
  return _mm256_set_m128i(_mm_set1_epi16(int16_t(s1)), _mm_set1_epi16(int16_t(s0)));
}
__m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Q4_K and Q5_K: 32 bytes of qs per pair of sub-blocks (low nibbles first), 6-bit scales and
// mins per 32; Q5_K's fifth bit of element 32 v + l is bit v of qh byte l.
template <typename Block, bool with_high>
struct K4Traits {
  using WBlock = Block;
  static constexpr bool has_min = true;
  static void unpack(const Block& x, KSuper& s) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    alignas(32) int16_t mins[16];
    uint8_t sm[16];  // 8 scales, then 8 mins
    kquants::unpack_k4_scales_mins(x.scales, sm);
    for (int j = 0; j < 8; ++j) {
      s.sc[j] = _mm256_set1_epi16(sm[j]);
      mins[2 * j] = mins[2 * j + 1] = sm[8 + j];
    }
    s.corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(mins));
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load32(x.qs + 32 * g);
      s.q[2 * g] = _mm256_and_si256(q, low4);
      s.q[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    }
    if constexpr (with_high) {
      const __m256i qh = load32(x.qh);
      for (int v = 0; v < 8; ++v)
        s.q[v] = _mm256_or_si256(
            s.q[v], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, v), one), 4));
    }
    s.d = half_to_float(x.d);
    s.dmin = half_to_float(x.dmin);
  }
};

// Q2_K and Q3_K: element 128 h + 32 k + l in bits 2k of qs byte 32 h + l (vector 4 h + k).
// Q2_K: 4-bit scales and mins per 16. Q3_K: the high bit is bit 4 h + k of hmask byte l (clear
// means -4, so levels are stored +4), signed 6-bit scales per 16.
template <typename Block>
struct K2Traits {
  using WBlock = Block;
  static constexpr bool q3 = std::is_same_v<Block, BlockQ3_K>;
  static constexpr bool has_min = !q3;
  static void unpack(const Block& x, KSuper& s) {
    const __m256i low2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    alignas(32) int16_t sc[16], corr[16];
    if constexpr (q3) {
      uint8_t raw[16];
      kquants::unpack_q3_k_scales(x.scales, raw);
      for (int j = 0; j < 16; ++j) {
        sc[j] = int16_t(raw[j] - 32);
        corr[j] = int16_t(4 * sc[j]);
      }
      s.dmin = 0;
    } else {
      for (int j = 0; j < 16; ++j) {
        sc[j] = int16_t(x.scales[j] & 0xF);
        corr[j] = int16_t(x.scales[j] >> 4);
      }
      s.dmin = half_to_float(x.dmin);
    }
    s.corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(corr));
    __m256i hm = _mm256_setzero_si256();
    if constexpr (q3) hm = load32(x.hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = load32(x.qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), low2);
        if constexpr (q3)
          q = _mm256_or_si256(
              q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), one), 2));
        s.q[4 * h + k] = q;
        s.sc[4 * h + k] = scale_pair(sc[8 * h + 2 * k], sc[8 * h + 2 * k + 1]);
      }
    }
    s.d = half_to_float(x.d);
  }
};

// Q6_K: element 128 h + 32 k + l takes a nibble of ql (byte 64 h + 32 (k % 2) + l, low for
// k < 2) and bits 2k of qh byte 32 h + l; levels stored +32, signed 8-bit scales per 16.
struct Q6KTraits {
  using WBlock = BlockQ6_K;
  static constexpr bool has_min = false;
  static void unpack(const BlockQ6_K& x, KSuper& s) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    alignas(32) int16_t corr[16];
    for (int j = 0; j < 16; ++j) corr[j] = int16_t(32 * x.scales[j]);
    s.corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(corr));
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load32(x.ql + 64 * h), ql1 = load32(x.ql + 64 * h + 32);
      const __m256i qh = load32(x.qh + 32 * h);
      s.q[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, low4),
                                   _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
      s.q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, low4),
                                       _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
      s.q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                       _mm256_and_si256(qh, bits45));
      s.q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
      for (int k = 0; k < 4; ++k)
        s.sc[4 * h + k] = scale_pair(x.scales[8 * h + 2 * k], x.scales[8 * h + 2 * k + 1]);
    }
    s.d = half_to_float(x.d);
    s.dmin = 0;
  }
};

// R x C outputs over Q8_K activations: each row's super-block is unpacked once for C columns.
// Per pair, the exact int32 sum of scale x level x activation (minus the stored offset, in
// int32 as the row dots do) is converted once per super-block and scaled by d_w d_a; min types
// take dmin_w d_a x (mins . per-16 sums) off separately.
template <typename T>
struct KQuantTile {
  template <int R, int C>
  static void run(int64_t k, const void* wv, size_t w_stride, const void* av, size_t a_stride,
                  float* y, size_t y_stride) {
    using WBlock = typename T::WBlock;
    const WBlock* w[R];
    const BlockQ8_K* a[C];
    strided_rows(w, wv, w_stride);
    strided_rows(a, av, a_stride);
    __m256 acc[C][R];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[c][r] = _mm256_setzero_ps();
    }
    const int64_t nb = k / QK_K;
    for (int64_t b = 0; b < nb; ++b) {
      for (int r = 0; r < R; ++r) {
        KSuper s;
        T::unpack(w[r][b], s);
        __m256i isum[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
        for (int v = 0; v < 8; ++v) {
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            const __m256i pairs = _mm256_maddubs_epi16(s.q[v], load32(a[c][b].qs + 32 * v));
#if defined(__AVXVNNI__)
            isum[c] = _mm256_dpwssd_avx_epi32(isum[c], pairs, s.sc[v]);
#else
            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(pairs, s.sc[v]));
#endif
          }
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256i corr = _mm256_madd_epi16(s.corr, load32(a[c][b].bsums));
          if constexpr (!T::has_min) isum[c] = _mm256_sub_epi32(isum[c], corr);
          acc[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(s.d * a[c][b].d),
                                      acc[c][r]);
          if constexpr (T::has_min)
            acc[c][r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(corr),
                                         _mm256_set1_ps(s.dmin * a[c][b].d), acc[c][r]);
        }
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) store_column<R>(acc[c], _mm_setzero_ps(), y + size_t(c) * y_stride);
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
constexpr GemmKernel kIQ4_NL = make_kernel<QuantTile<IQ4_NLTraits>, kTileRows, kTileCols>();
constexpr GemmKernel kMXFP4 = make_kernel<QuantTile<MXFP4Traits>, kTileRows, kTileCols>();
constexpr GemmKernel kIQ4_XS = make_kernel<QuantTile<IQ4_XSTraits>, kTileRows, kTileCols>();
constexpr GemmKernel kQ2_K = make_kernel<KQuantTile<K2Traits<BlockQ2_K>>, kTileRows, kTileCols>();
constexpr GemmKernel kQ3_K = make_kernel<KQuantTile<K2Traits<BlockQ3_K>>, kTileRows, kTileCols>();
constexpr GemmKernel kQ4_K =
    make_kernel<KQuantTile<K4Traits<BlockQ4_K, false>>, kTileRows, kTileCols>();
constexpr GemmKernel kQ5_K =
    make_kernel<KQuantTile<K4Traits<BlockQ5_K, true>>, kTileRows, kTileCols>();
constexpr GemmKernel kQ6_K = make_kernel<KQuantTile<Q6KTraits>, kTileRows, kTileCols>();

}  // namespace

#if defined(__AVXVNNI__)
const GemmKernel* gemm_kernel_avxvnni(DType w) {
#else
const GemmKernel* gemm_kernel_avx2(DType w) {
#endif
  switch (w) {
    POLYSTACK_CPU_WEIGHT_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    POLYSTACK_CPU_KQUANT_TYPES(POLYSTACK_CPU_KERNEL_CASE)
    case DType::IQ4_NL:
      return &kIQ4_NL;
    case DType::MXFP4:
      return &kMXFP4;
    case DType::IQ4_XS:
      return &kIQ4_XS;
    default:
      return nullptr;
  }
}

}  // namespace ps::cpu

#else

namespace ps::cpu {
const GemmKernel* gemm_kernel_avx2(DType) { return nullptr; }
const GemmKernel* gemm_kernel_avxvnni(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
