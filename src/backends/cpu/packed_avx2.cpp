// AVX2 + FMA + F16C kernels over packed weights (packed.h). For Q4_0x8, one block of a group is
// four 32-byte loads; masking and shifting them gives eight vectors of unsigned nibbles, each
// holding 4 elements of the 8 rows. vpmaddubsw against the matching 4 activations broadcast to
// every lane leaves pairs of products in int16; eight of those vectors sum without overflow
// (8 x 2 x 15 x 127 < 2^15), and one vpmaddwd turns them into the 8 rows' dots of the block.
// The offset of 8 comes off as 8 * s of the activation block, and the 8 weight scales are one
// vcvtph2ps: about 5 vector instructions per 32 weights, against about 18 for a row dot.
//
// Q4_Kx16 and Q5_Kx16 (the AVX-512 layouts) are read as two groups of 8 rows: 32 bytes of a
// 64-byte vector hold 4 elements of 8 rows. vpmaddubsw against 4 broadcast activations gives
// int16 pairs; a sub-block's 8 of them (4 for Q5_K, whose levels reach 31) sum without overflow,
// and one vpmaddwd by the rows' scales, each as an int16 pair (s, s), is the scaled dot in int32.
// The mins meet Q8_K's sums per 16 as in the AVX-512 tiles (vpmaddwd by (min, min)).
// Q8_0x16 the same way: a 32-byte half holds 4 signed levels of 8 rows. vpmaddubsw takes their
// magnitudes against the activations given the levels' signs, and each step's int16 pairs
// (up to 2 x 128 x 127) go to int32 at once; with AVX-VNNI the levels are made unsigned (an xor
// with 0x80 adds 128) and the sums start from -128 x the activations' sum.
// Q6_Kx16 the same way: its unsigned 6-bit levels reach 63, so int16 pairs are summed over two
// steps only, each pair then scaled by one vpmaddwd; the stored offset of 32 comes off through
// the activation sums per 16. Q2_Kx16 and Q3_Kx16 likewise, with 2-bit levels (Q3_K's high bit
// adds 4) whose int16 pairs sum over a whole sub-block of 16.
//
// AVX-VNNI (the avxvnni level): the same file compiled a second time with -mavxvnni, which
// defines __AVXVNNI__ and names its entry point packed_kernel_avxvnni. vpdpbusd adds 4 products
// of unsigned by signed bytes into each int32 lane, in place of vpmaddubsw, an int16 add and a
// later vpmaddwd: sums need no int16 headroom, so every sub-block is summed whole and then
// scaled by one vpmulld, and vpdpwssd takes the pairs of int16 (mins, offsets) with their add.
//
// This file is compiled with -mavx2 -mfma -mf16c: it calls no inline function of a header that
// baseline files include (simd_avx2.h is for AVX2 files only and has internal linkage), so no
// out-of-line copy built with these flags can replace the baseline one at link.
#include "backends/cpu/packed.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "backends/cpu/simd_avx2.h"

namespace ps::cpu {
namespace {

// Eight bytes widened to the int32 lanes of one vector, each also copied into the lane's high
// int16: (v, v) pairs for vpmaddwd.
inline __m256i byte_pairs(const uint8_t* p) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

#if defined(__AVXVNNI__)
// acc + the int32 lanes' sums of 4 products u * s (unsigned by signed bytes).
inline __m256i add_products(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_avx_epi32(acc, u, s);
}
// Sums from add_products times the lanes' scales, from scale_lanes.
inline __m256i scale_sums(__m256i sums, __m256i scale) { return _mm256_mullo_epi32(sums, scale); }
inline __m256i scale_lanes(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// acc + the int32 lanes' sums of 2 products of int16.
inline __m256i add_pair_products(__m256i acc, __m256i a, __m256i b) {
  return _mm256_dpwssd_avx_epi32(acc, a, b);
}
constexpr bool kVnni = true;
#else
// acc + the int16 pairs' sums of 2 products u * s: callers bound the steps summed.
inline __m256i add_products(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s));
}
// Int16 pair sums times the lanes' scales as (scale, scale) pairs, in int32 lanes.
inline __m256i scale_sums(__m256i sums, __m256i scale) { return _mm256_madd_epi16(sums, scale); }
inline __m256i scale_lanes(const uint8_t* p) { return byte_pairs(p); }
inline __m256i add_pair_products(__m256i acc, __m256i a, __m256i b) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}
constexpr bool kVnni = false;
#endif

// A lane's pair of signed scales (int16 first, second: Q6_K, Q3_K) as scale_sums takes each:
// int32 lanes with VNNI, (s, s) int16 pairs without.
inline void signed_scales(__m256i pair, __m256i& first, __m256i& second) {
  if constexpr (kVnni) {
    first = _mm256_srai_epi32(_mm256_slli_epi32(pair, 16), 16);
    second = _mm256_srai_epi32(pair, 16);
  } else {
    first = _mm256_blend_epi16(pair, _mm256_slli_epi32(pair, 16), 0xAA);
    second = _mm256_blend_epi16(_mm256_srli_epi32(pair, 16), pair, 0xAA);
  }
}

// The same for Q2_K's bytes (scale in the low nibble, min in the high one), widened to int16:
// the two scales.
inline void q2_scales(__m256i pair, __m256i& first, __m256i& second) {
  const __m256i low4w = _mm256_set1_epi32(0x0f);
  first = _mm256_and_si256(pair, low4w);
  second = _mm256_and_si256(_mm256_srli_epi32(pair, 16), low4w);
  if constexpr (!kVnni) {
    first = _mm256_or_si256(first, _mm256_slli_epi32(first, 16));
    second = _mm256_or_si256(second, _mm256_slli_epi32(second, 16));
  }
}

// q + add in the bytes where `bits` has `bit` set (a level's high bit: Q5_K's fifth, Q3_K's
// third).
inline __m256i add_where(__m256i q, __m256i bits, __m256i bit, __m256i add) {
  return _mm256_add_epi8(
      q, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bits, bit), bit), add));
}

// acc[c] += sums[c] x the 8 rows' F16 scales at d8 x column c's scale, for every column.
template <int C, typename ABlock>
inline void add_scaled(__m256 (&acc)[C], const __m256i (&sums)[C], const void* d8,
                       const ABlock* const (&a)[C], int64_t b) {
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(d8)));
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[c]),
                             _mm256_mul_ps(d, _mm256_set1_ps(a[c][b].d)), acc[c]);
}

void act_q8s(const float* x, void* dst, int64_t n) {
  BlockQ8S* y = static_cast<BlockQ8S*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    const Q8Block q = quantize_q8_block(x, y[b].qs);
    // The fp16-rounded scale, so the values are exactly those of a Q8_0 block.
    y[b].d = half_to_float(_cvtss_sh(q.d, _MM_FROUND_TO_NEAREST_INT));
    y[b].s = y[b].d * float(q.sum);
  }
}

// A GGUF-layout Q4_0 row against BlockQ8S activations (the rows after the last whole group).
float tail_dot_q4_0(int64_t n, const void* wv, const void* av) {
  const BlockQ4_0* w = static_cast<const BlockQ4_0*>(wv);
  const BlockQ8S* a = static_cast<const BlockQ8S*>(av);
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    const __m256i p = _mm256_maddubs_epi16(unpack_nibbles(w[b].qs), load_bytes(a[b].qs));
    const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    const float dw = half_to_float(w[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * a[b].d), f, acc);
    offset += dw * a[b].s;
  }
  return hsum(acc) - 8 * offset;
}

// The 8 rows' dots of one block against one column, unscaled, as floats.
inline __attribute__((always_inline)) __m256 block_dots(const __m256i (&q)[8], const BlockQ8S& a) {
  int32_t x[8];
  std::memcpy(x, a.qs, sizeof(x));
#if defined(__AVXVNNI__)
  __m256i s0 = add_products(_mm256_setzero_si256(), q[0], _mm256_set1_epi32(x[0]));
  __m256i s1 = add_products(_mm256_setzero_si256(), q[1], _mm256_set1_epi32(x[1]));
#pragma GCC unroll 3
  for (int v = 2; v < 8; v += 2) {
    s0 = add_products(s0, q[v], _mm256_set1_epi32(x[v]));
    s1 = add_products(s1, q[v + 1], _mm256_set1_epi32(x[v + 1]));
  }
  return _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1));
#else
  __m256i s0 = _mm256_maddubs_epi16(q[0], _mm256_set1_epi32(x[0]));
  __m256i s1 = _mm256_maddubs_epi16(q[1], _mm256_set1_epi32(x[1]));
  s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[2], _mm256_set1_epi32(x[2])));
  s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[3], _mm256_set1_epi32(x[3])));
  s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[4], _mm256_set1_epi32(x[4])));
  s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[5], _mm256_set1_epi32(x[5])));
  s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(q[6], _mm256_set1_epi32(x[6])));
  s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(q[7], _mm256_set1_epi32(x[7])));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_add_epi16(s0, s1), _mm256_set1_epi16(1)));
#endif
}

// Vector v's low nibbles are elements 4v..4v+3 (matching activation dword v), its high nibbles
// elements 16+4v.. (activation dword 4+v).
inline __attribute__((always_inline)) void unpack_block(const BlockQ4_0x8& b, __m256i (&q)[8]) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * v));
    q[v] = _mm256_and_si256(raw, mask);
    q[v + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
  }
}

// One block's contribution to a column: dw * (d * dots - 8 * s).
inline __attribute__((always_inline)) __m256 accumulate(__m256 acc, __m256 dots, __m256 dw,
                                                        const BlockQ8S& a) {
  const __m256 t = _mm256_fmadd_ps(dots, _mm256_set1_ps(a.d), _mm256_set1_ps(-8 * a.s));
  return _mm256_fmadd_ps(t, dw, acc);
}

// 8 rows x C columns; y[c * y_stride + j] for row j of the group.
template <int C>
void q4_0x8_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                 size_t y_stride) {
  const BlockQ4_0x8* w = static_cast<const BlockQ4_0x8*>(wv);
  const BlockQ8S* a[C];
  for (int c = 0; c < C; ++c)
    a[c] = reinterpret_cast<const BlockQ8S*>(static_cast<const char*>(av) + size_t(c) * a_stride);
  const int64_t nb = k / QK4_0;
  __m256 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  int64_t b = 0;
  if constexpr (C == 1) {
    // Two blocks per step on two accumulators: one column alone would wait on the FMA latency.
    __m256 acc1 = _mm256_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
      __m256i q[8];
      unpack_block(w[b], q);
      const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d)));
      acc[0] = accumulate(acc[0], block_dots(q, a[0][b]), dw0, a[0][b]);
      unpack_block(w[b + 1], q);
      const __m256 dw1 =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b + 1].d)));
      acc1 = accumulate(acc1, block_dots(q, a[0][b + 1]), dw1, a[0][b + 1]);
    }
    acc[0] = _mm256_add_ps(acc[0], acc1);
  }
  for (; b < nb; ++b) {
    __m256i q[8];
    unpack_block(w[b], q);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d)));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = accumulate(acc[c], block_dots(q, a[c][b]), dw, a[c][b]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * y_stride, acc[c]);
}

int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void act_q8_k(const float* x, void* dst, int64_t n) {
  dot_kernel_kquants_avx2(DType::Q4_K)->act_from_f32(x, dst, n);
}

template <DType T>
float tail_dot_k(int64_t n, const void* w, const void* a) {
  return dot_kernel_kquants_avx2(T)->dot(n, w, a);
}

// The C activation columns a tile reads, a_stride bytes apart.
template <typename ABlock, int C>
inline void column_blocks(const void* av, size_t a_stride, const ABlock* (&a)[C]) {
  for (int c = 0; c < C; ++c)
    a[c] = reinterpret_cast<const ABlock*>(static_cast<const char*>(av) + size_t(c) * a_stride);
}

// A 16-row tile's outputs: y[c * y_stride + j] for row j, the halves' 8 rows each.
template <int C>
inline void store_halves(const __m256 (&acc)[2][C], float* y, size_t y_stride) {
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    _mm256_storeu_ps(y + size_t(c) * y_stride, acc[0][c]);
    _mm256_storeu_ps(y + size_t(c) * y_stride + 8, acc[1][c]);
  }
}

// ---- Q8_0x16, as two halves of 8 rows ------------------------------------------------------

// Q8_0 activations with -128 x sum(qs), where the AVX-VNNI dots of the levels made unsigned
// (w + 128, an xor with 0x80) start; the plain AVX2 dots move the weights' signs onto the
// activations instead and leave it unused.
void act_q8o(const float* x, void* dst, int64_t n) {
  BlockQ8O* y = static_cast<BlockQ8O*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    const Q8Block q = quantize_q8_block(x, y[b].qs);
    y[b].d = half_to_float(_cvtss_sh(q.d, _MM_FROUND_TO_NEAREST_INT));
    y[b].offset = -128 * q.sum;
  }
}

// The int32 lanes' sums of 4 products of signed bytes w * a, added to acc (a the activations'
// 4 bytes broadcast; offset their -128 x sum, for this lane's share of the block).
inline __m256i add_signed_products(__m256i acc, __m256i w, __m256i a) {
#if defined(__AVXVNNI__)
  return add_products(acc, _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80))), a);
#else
  // |w| against a with w's sign: |-128| reads as unsigned 128, exact; a pair stays within
  // 2 x 128 x 127 < 2^15.
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}
// Where the sums of a block start: -128 x sum(a) with AVX-VNNI (in one lane for a row dot,
// every lane for a tile), zero otherwise.
inline __m256i signed_start(const BlockQ8O& a, bool every_lane) {
  if constexpr (kVnni)
    return every_lane ? _mm256_set1_epi32(a.offset)
                      : _mm256_setr_epi32(a.offset, 0, 0, 0, 0, 0, 0, 0);
  return _mm256_setzero_si256();
}

// A GGUF-layout Q8_0 row against BlockQ8O activations (the rows after the last whole group).
float tail_dot_q8_0(int64_t n, const void* wv, const void* av) {
  const BlockQ8_0* w = static_cast<const BlockQ8_0*>(wv);
  const BlockQ8O* a = static_cast<const BlockQ8O*>(av);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    const __m256i dot =
        add_signed_products(signed_start(a[b], false), load_bytes(w[b].qs), load_bytes(a[b].qs));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(w[b].d) * a[b].d), _mm256_cvtepi32_ps(dot),
                          acc);
  }
  return hsum(acc);
}

// 16 rows x C columns of Q8_0x16: per half of 8 rows, block and column, eight dots of 4 bytes
// into int32 lanes, one conversion and one FMA with d_w d_a.
template <int C>
void q8_0x16_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                  size_t y_stride) {
  const auto* w = static_cast<const BlockQ8_0x16*>(wv);
  const BlockQ8O* a[C];
  column_blocks(av, a_stride, a);
  __m256 acc[2][C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
  const int64_t nb = k / QK8_0;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_0x16& x = w[b];
    prefetch_block(w + b, 1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int r0 = 8 * h;
      __m256i sum[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) sum[c] = signed_start(a[c][b], true);
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs[v][r0]));
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c)
          sum[c] = add_signed_products(sum[c], q, _mm256_set1_epi32(load_i32(a[c][b].qs + 4 * v)));
      }
      add_scaled(acc[h], sum, x.d + r0, a, b);
    }
  }
  store_halves(acc, y, y_stride);
}

// The frame of the tiles of several columns below: for each half of 8 rows, every
// super-block's share added into the half's float sums by add_block(x, r0, b, acc), which are
// then stored (y[c * y_stride + r0 + j]). One half at a time keeps C floats alive, not 2 C.
template <int C, typename Block, typename AddBlock>
inline void by_halves(int64_t k, const Block* w, float* y, size_t y_stride, AddBlock&& add_block) {
  const int64_t nb = k / QK_K;
  for (int half = 0; half < 2; ++half) {
    const int r0 = 8 * half;
    __m256 acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_block(w + b, 1);
      add_block(w[b], r0, b, acc);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + size_t(c) * y_stride + r0, acc[c]);
  }
}

// A Q4_Kx16 or Q5_Kx16 block's share of 8 rows (from r0) in each column: its level sums isum[c]
// times d, less its mins against the column's sums per 32 times dmin, both times the column's
// scale.
template <typename Block, int C>
inline void k4_add_block(const Block& x, int r0, const BlockQ8_K* const (&a)[C], int64_t b,
                         const __m256i (&isum)[C], __m256 (&acc)[C]) {
  __m256i msum[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) msum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) {
    const __m256i mm = byte_pairs(x.mins[s] + r0);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      msum[c] = add_pair_products(msum[c], mm, _mm256_set1_epi32(load_i32(a[c][b].bsums + 2 * s)));
  }
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.d + r0)));
  const __m256 dmin =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.dmin + r0)));
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    const __m256 da = _mm256_set1_ps(a[c][b].d);
    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, da), acc[c]);
    acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[c]), _mm256_mul_ps(dmin, da), acc[c]);
  }
}

// Steps of k4x16_prompt_tile unrolled: without VNNI eight, with their 32 activation
// broadcasts, spill; four do not. With VNNI all eight measured faster.
constexpr int kK4PromptUnroll = kVnni ? 8 : 4;

// Q4_Kx16 or Q5_Kx16 for several columns, for the reason of q6_kx16_prompt_tile: one half of
// 8 rows over all super-blocks, then the other, and the low nibbles' sub-block of a step before
// the high ones', so that per column one float, two int32 accumulators and one sum of products
// are alive instead of both halves' floats and both sub-blocks' sums. The same integers and
// the same float operations in the same order as the tile below.
template <typename Block, int C>
void k4x16_prompt_tile(int64_t k, const Block* w, const BlockQ8_K* const (&a)[C], float* y,
                       size_t y_stride) {
  constexpr bool five = std::is_same_v<Block, BlockQ5_Kx16>;
  constexpr int kSpan = five && !kVnni ? 4 : 8;  // as in the tile below
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  by_halves<C>(k, w, y, y_stride, [&](const Block& x, int r0, int64_t b, __m256(&acc)[C]) {
    __m256i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
#pragma GCC unroll 2
      for (int part = 0; part < 2; ++part) {  // the low nibbles, then the high ones
        const __m256i scale = scale_lanes(x.scales[2 * p + part] + r0);
        const __m256i bit = _mm256_set1_epi8(char((1 + part) << (2 * p)));
#pragma GCC unroll 1
        for (int u0 = 0; u0 < 8; u0 += kSpan) {
          __m256i s16[C];
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) s16[c] = _mm256_setzero_si256();
#pragma GCC unroll kK4PromptUnroll
          for (int u = u0; u < u0 + kSpan; ++u) {
            const __m256i raw =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs[p][u][r0]));
            __m256i q = _mm256_and_si256(part ? _mm256_srli_epi16(raw, 4) : raw, low4);
            if constexpr (five) {
              const __m256i fifth =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh[u][r0]));
              q = add_where(q, fifth, bit, _mm256_set1_epi8(16));
            }
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) {
              const int8_t* qa = a[c][b].qs + 64 * p + 32 * part + 4 * u;
              s16[c] = add_products(s16[c], q, _mm256_set1_epi32(load_i32(qa)));
            }
          }
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            isum[c] = _mm256_add_epi32(isum[c], scale_sums(s16[c], scale));
        }
      }
    }
    k4_add_block(x, r0, a, b, isum, acc);
  });
}

// 16 rows x C columns of Q4_Kx16 or Q5_Kx16, as two halves of 8 rows; y[c * y_stride + j].
// Several columns go to k4x16_prompt_tile; one (decoding) takes both halves of each
// super-block together, as the weights stream past, and asks for the next one as it goes.
template <typename Block, int C>
void k4x16_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                size_t y_stride) {
  constexpr bool five = std::is_same_v<Block, BlockQ5_Kx16>;
  // u steps whose int16 pair sums stay below 2^15: 2 x 15 x 127 each for Q4_K, 2 x 31 x 127
  // for Q5_K (Q8_K's quants are within +-127); int32 sums (VNNI) take a sub-block whole.
  constexpr int kSpan = five && !kVnni ? 4 : 8;
  const auto* w = static_cast<const Block*>(wv);
  const BlockQ8_K* a[C];
  column_blocks(av, a_stride, a);
  if constexpr (C > 1) return k4x16_prompt_tile<Block, C>(k, w, a, y, y_stride);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc[2][C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
  const int64_t nb = k / QK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const Block& x = w[b];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int r0 = 8 * h;
      __m256i isum[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {
        const __m256i s_lo = scale_lanes(x.scales[2 * p] + r0);
        const __m256i s_hi = scale_lanes(x.scales[2 * p + 1] + r0);
        const __m256i bit_lo = _mm256_set1_epi8(char(1 << (2 * p)));
        const __m256i bit_hi = _mm256_set1_epi8(char(2 << (2 * p)));
#pragma GCC unroll 2
        for (int u0 = 0; u0 < 8; u0 += kSpan) {
          __m256i lo[C], hi[C];
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) lo[c] = hi[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int u = u0; u < u0 + kSpan; ++u) {
            if (h == 0) prefetch_next_part(&x, 8 * p + u, 32);
            const __m256i raw =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs[p][u][r0]));
            __m256i ql = _mm256_and_si256(raw, low4);
            __m256i qh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            if constexpr (five) {
              const __m256i fifth =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh[u][r0]));
              const __m256i sixteen = _mm256_set1_epi8(16);
              ql = add_where(ql, fifth, bit_lo, sixteen);
              qh = add_where(qh, fifth, bit_hi, sixteen);
            }
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) {
              const int8_t* qa = a[c][b].qs + 64 * p + 4 * u;
              lo[c] = add_products(lo[c], ql, _mm256_set1_epi32(load_i32(qa)));
              hi[c] = add_products(hi[c], qh, _mm256_set1_epi32(load_i32(qa + 32)));
            }
          }
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            isum[c] = _mm256_add_epi32(
                isum[c], _mm256_add_epi32(scale_sums(lo[c], s_lo), scale_sums(hi[c], s_hi)));
        }
      }
      k4_add_block(x, r0, a, b, isum, acc[h]);
    }
  }
  store_halves(acc, y, y_stride);
}

// Q6_Kx16 for several columns: one half of 8 rows over all super-blocks, then the other, and
// one of the four level groups (kk) of a step at a time, so that what is summed stays within
// the 16 vector registers: per column one float and one int32 accumulator and one sum of
// products. Taking the four groups together, as the tile below does for its memory stream,
// keeps 16 sums of products and both halves' floats alive and spills them. The sums are the
// same integers and the floats get the same FMAs in the same order, so the results are those
// of the tile below.
template <int C>
void q6_kx16_prompt_tile(int64_t k, const BlockQ6_Kx16* w, const BlockQ8_K* const (&a)[C], float* y,
                         size_t y_stride) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
  by_halves<C>(k, w, y, y_stride, [&](const BlockQ6_Kx16& x, int r0, int64_t b, __m256(&acc)[C]) {
    __m256i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {
        const int t = 4 * h + kk;
        const __m256i pair = _mm256_cvtepi8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[t][r0])));
        __m256i s_first, s_second;
        signed_scales(pair, s_first, s_second);
        const __m256i offset = _mm256_mullo_epi16(pair, _mm256_set1_epi16(-32));
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c)
          isum[c] = add_pair_products(isum[c], offset,
                                      _mm256_set1_epi32(load_i32(a[c][b].bsums + 2 * t)));
        // u steps summed before scaling, as in the tile below.
        constexpr int kSpan = kVnni ? 4 : 2;
        // The ql bytes of this group (kk even: ql[h][0], odd: ql[h][1]; kk >= 2 their high
        // nibbles) and its two bits of qh, shifted to 0x30.
        const int lo = kk & 1, shift = kk >= 2 ? 4 : 0;
#pragma GCC unroll 1
        for (int u0 = 0; u0 < 8; u0 += kSpan) {
          __m256i s16[C];
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) s16[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
          for (int u = u0; u < u0 + kSpan; ++u) {
            const __m256i ql =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.ql[h][lo][u][r0]));
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh[h][u][r0]));
            const __m256i high = kk == 0   ? _mm256_slli_epi16(qh, 4)
                                 : kk == 1 ? _mm256_slli_epi16(qh, 2)
                                 : kk == 2 ? qh
                                           : _mm256_srli_epi16(qh, 2);
            const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, shift), low4),
                                              _mm256_and_si256(high, bits45));
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) {
              const int8_t* qa = a[c][b].qs + 128 * h + 32 * kk + 4 * u;
              s16[c] = add_products(s16[c], q, _mm256_set1_epi32(load_i32(qa)));
            }
          }
          const __m256i scale = u0 < 4 ? s_first : s_second;
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            isum[c] = _mm256_add_epi32(isum[c], scale_sums(s16[c], scale));
        }
      }
    }
    add_scaled(acc, isum, x.d + r0, a, b);
  });
}

// 16 rows x C columns of Q6_Kx16, as two halves of 8 rows. Several columns go to
// q6_kx16_prompt_tile; one (decoding) takes both halves of each super-block together.
template <int C>
void q6_kx16_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                  size_t y_stride) {
  const auto* w = static_cast<const BlockQ6_Kx16*>(wv);
  const BlockQ8_K* a[C];
  column_blocks(av, a_stride, a);
  if constexpr (C > 1) return q6_kx16_prompt_tile<C>(k, w, a, y, y_stride);
  const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
  __m256 acc[2][C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
  const int64_t nb = k / QK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_Kx16& x = w[b];
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const int r0 = 8 * half;
      __m256i isum[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        // Sub-blocks 8h + 2kk (u < 4) and + 1 (u >= 4), kk < 4: scale pair t = 4h + kk, each
        // lane the int16 pair (first, second) of one row. One load of ql and qh per u serves
        // the four kk.
        __m256i s_first[4], s_second[4];
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; ++kk) {
          const int t = 4 * h + kk;
          const __m256i pair = _mm256_cvtepi8_epi16(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[t][r0])));
          signed_scales(pair, s_first[kk], s_second[kk]);
          // -32 x the scale pair (at most 4096 in magnitude) against the per-16 sums.
          const __m256i offset = _mm256_mullo_epi16(pair, _mm256_set1_epi16(-32));
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            isum[c] = add_pair_products(isum[c], offset,
                                        _mm256_set1_epi32(load_i32(a[c][b].bsums + 2 * t)));
        }
        // u steps summed before scaling: int16 pairs hold two (2 x 2 x 63 x 127 < 2^15),
        // int32 lanes the four of one scale.
        constexpr int kSpan = kVnni ? 4 : 2;
#pragma GCC unroll 4
        for (int u0 = 0; u0 < 8; u0 += kSpan) {
          __m256i s16[4][C];
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            s16[0][c] = s16[1][c] = s16[2][c] = s16[3][c] = _mm256_setzero_si256();
#pragma GCC unroll 4
          for (int u = u0; u < u0 + kSpan; ++u) {
            if (half == 0) prefetch_next_part(&x, 8 * h + u, 16);
            const __m256i ql0 =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.ql[h][0][u][r0]));
            const __m256i ql1 =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.ql[h][1][u][r0]));
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh[h][u][r0]));
            // (low nibbles | the high bits at 0x30) for kk = 0..3
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(ql0, low4),
                                _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
                _mm256_or_si256(_mm256_and_si256(ql1, low4),
                                _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                _mm256_and_si256(qh, bits45)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45))};
#pragma GCC unroll 4
            for (int kk = 0; kk < 4; ++kk) {
#pragma GCC unroll 8
              for (int c = 0; c < C; ++c) {
                const int8_t* qa = a[c][b].qs + 128 * h + 32 * kk + 4 * u;
                s16[kk][c] = add_products(s16[kk][c], q[kk], _mm256_set1_epi32(load_i32(qa)));
              }
            }
          }
#pragma GCC unroll 4
          for (int kk = 0; kk < 4; ++kk) {
            const __m256i scale = u0 < 4 ? s_first[kk] : s_second[kk];
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c)
              isum[c] = _mm256_add_epi32(isum[c], scale_sums(s16[kk][c], scale));
          }
        }
      }
      add_scaled(acc[half], isum, x.d + r0, a, b);
    }
  }
  store_halves(acc, y, y_stride);
}

// The 2-bit levels of step u of sub-block pair (h, kk) of Q2_Kx16 or Q3_Kx16 for the 8 rows
// from r0, one byte each; Q3_K's high bit (high_bit, 1 << (4h + kk), in its hmask) adds 4.
template <typename Block>
inline __m256i k2_levels(const Block& x, int h, int kk, int u, int r0, __m256i high_bit) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs[h][u][r0]));
  const __m256i q =
      _mm256_and_si256(kk == 0 ? raw : _mm256_srli_epi16(raw, 2 * kk), _mm256_set1_epi8(3));
  if constexpr (std::is_same_v<Block, BlockQ3_Kx16>)
    return add_where(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.hmask[u][r0])),
                     high_bit, _mm256_set1_epi8(4));
  else
    return q;
}

// Q2_Kx16 or Q3_Kx16 for several columns, for the reason of q6_kx16_prompt_tile: one half of
// 8 rows over all super-blocks, then the other, a sub-block's first four u steps before its
// second four, and Q2_K's mins after the levels, so that per column one float, one int32
// accumulator and one sum of products are alive instead of both halves' floats and four sums.
// The same integers and the same float operations in the same order as the tile below.
template <typename Block, int C>
void k2x16_prompt_tile(int64_t k, const Block* w, const BlockQ8_K* const (&a)[C], float* y,
                       size_t y_stride) {
  constexpr bool q3 = std::is_same_v<Block, BlockQ3_Kx16>;
  by_halves<C>(k, w, y, y_stride, [&](const Block& x, int r0, int64_t b, __m256(&acc)[C]) {
    __m256i isum[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {
        // Scale pair t = 4h + kk as in the tile below.
        const int t = 4 * h + kk;
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[t][r0]));
        __m256i s_first, s_second;
        if constexpr (q3) {
          const __m256i pair = _mm256_cvtepi8_epi16(bytes);
          signed_scales(pair, s_first, s_second);
          const __m256i offset = _mm256_mullo_epi16(pair, _mm256_set1_epi16(-4));
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            isum[c] = add_pair_products(isum[c], offset,
                                        _mm256_set1_epi32(load_i32(a[c][b].bsums + 2 * t)));
        } else {
          const __m256i pair = _mm256_cvtepu8_epi16(bytes);
          q2_scales(pair, s_first, s_second);
        }
        const __m256i high_bit = _mm256_set1_epi8(char(1 << t));
#pragma GCC unroll 1
        for (int u0 = 0; u0 < 8; u0 += 4) {
          __m256i s16[C];
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) s16[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
          for (int u = u0; u < u0 + 4; ++u) {
            const __m256i q = k2_levels(x, h, kk, u, r0, high_bit);
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c)
              s16[c] = add_products(
                  s16[c], q, _mm256_set1_epi32(load_i32(a[c][b].qs + 128 * h + 32 * kk + 4 * u)));
          }
          const __m256i scale = u0 == 0 ? s_first : s_second;
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            isum[c] = _mm256_add_epi32(isum[c], scale_sums(s16[c], scale));
        }
      }
    }
    add_scaled(acc, isum, x.d + r0, a, b);
    if constexpr (!q3) {
      __m256i msum[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) msum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        const __m256i mins = _mm256_srli_epi16(
            _mm256_cvtepu8_epi16(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[t][r0]))),
            4);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c)
          msum[c] =
              add_pair_products(msum[c], mins, _mm256_set1_epi32(load_i32(a[c][b].bsums + 2 * t)));
      }
      const __m256 dmin =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.dmin + r0)));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[c]),
                                  _mm256_mul_ps(dmin, _mm256_set1_ps(a[c][b].d)), acc[c]);
    }
  });
}

// 16 rows x C columns of Q2_Kx16 or Q3_Kx16, as two halves of 8 rows: sub-blocks of 16 like
// Q6_K, 2-bit levels (Q3_K's high bit adds 4, its stored offset of 4 comes off through the
// activation sums per 16, Q2_K's mins the same way as Q4_K's). Levels reach 7, so the int16
// pairs of a sub-block's four u steps stay within 4 x 2 x 7 x 127 < 2^15. Several columns go to
// k2x16_prompt_tile; one (decoding) takes both halves of each super-block together.
template <typename Block, int C>
void k2x16_tile(int64_t k, const void* wv, size_t, const void* av, size_t a_stride, float* y,
                size_t y_stride) {
  constexpr bool q3 = std::is_same_v<Block, BlockQ3_Kx16>;
  const auto* w = static_cast<const Block*>(wv);
  const BlockQ8_K* a[C];
  column_blocks(av, a_stride, a);
  if constexpr (C > 1) return k2x16_prompt_tile<Block, C>(k, w, a, y, y_stride);
  __m256 acc[2][C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
  const int64_t nb = k / QK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const Block& x = w[b];
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const int r0 = 8 * half;
      __m256i isum[C], msum[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) isum[c] = msum[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; ++kk) {
          // Sub-blocks 8h + 2kk (u < 4) and + 1 (u >= 4): scale pair t = 4h + kk, each lane
          // the int16 pair (first, second) of one row.
          const int t = 4 * h + kk;
          const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[t][r0]));
          __m256i s_first, s_second, pair_term;
          if constexpr (q3) {
            const __m256i pair = _mm256_cvtepi8_epi16(bytes);
            signed_scales(pair, s_first, s_second);
            pair_term = _mm256_mullo_epi16(pair, _mm256_set1_epi16(-4));  // the offset of 4
          } else {
            const __m256i pair = _mm256_cvtepu8_epi16(bytes);
            q2_scales(pair, s_first, s_second);
            pair_term = _mm256_srli_epi16(pair, 4);  // the mins
          }
          const __m256i high_bit = _mm256_set1_epi8(char(1 << t));
          __m256i first[C], second[C];
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) first[c] = second[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int u = 0; u < 8; ++u) {
            if (half == 0) prefetch_next_part(&x, 32 * h + 8 * kk + u, 64);
            const __m256i q = k2_levels(x, h, kk, u, r0, high_bit);
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) {
              const __m256i qa =
                  _mm256_set1_epi32(load_i32(a[c][b].qs + 128 * h + 32 * kk + 4 * u));
              if (u < 4)
                first[c] = add_products(first[c], q, qa);
              else
                second[c] = add_products(second[c], q, qa);
            }
          }
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(scale_sums(first[c], s_first),
                                                                 scale_sums(second[c], s_second)));
            const __m256i sums = _mm256_set1_epi32(load_i32(a[c][b].bsums + 2 * t));
            if constexpr (q3)
              isum[c] = add_pair_products(isum[c], pair_term, sums);
            else
              msum[c] = add_pair_products(msum[c], pair_term, sums);
          }
        }
      }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.d + r0)));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256 da = _mm256_set1_ps(a[c][b].d);
        acc[half][c] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, da), acc[half][c]);
        if constexpr (!q3) {
          const __m256 dmin =
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.dmin + r0)));
          acc[half][c] =
              _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[c]), _mm256_mul_ps(dmin, da), acc[half][c]);
        }
      }
    }
  }
  store_halves(acc, y, y_stride);
}

constexpr int kTileCols = 4;

template <int... I>
constexpr GemmKernel make_q4_0x8(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRows, kTileCols, {q4_0x8_tile<I + 1>...}};
}

template <int... I>
constexpr GemmKernel make_q8_0x16(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRowsK, kTileCols, {q8_0x16_tile<I + 1>...}};
}

constexpr PackedKernel kQ8_0{QK8_0, sizeof(BlockQ8O), act_q8o, tail_dot_q8_0,
                             make_q8_0x16(std::make_integer_sequence<int, kTileCols>{})};
constexpr PackedKernel kQ4_0{QK8_0, sizeof(BlockQ8S), act_q8s, tail_dot_q4_0,
                             make_q4_0x8(std::make_integer_sequence<int, kTileCols>{})};

template <typename Block, int... I>
constexpr GemmKernel make_k4x16(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRowsK, kTileCols, {k4x16_tile<Block, I + 1>...}};
}

constexpr PackedKernel kQ4_K{
    QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot_k<DType::Q4_K>,
    make_k4x16<BlockQ4_Kx16>(std::make_integer_sequence<int, kTileCols>{})};
template <int... I>
constexpr GemmKernel make_q6_kx16(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRowsK, kTileCols, {q6_kx16_tile<I + 1>...}};
}

constexpr PackedKernel kQ6_K{QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot_k<DType::Q6_K>,
                             make_q6_kx16(std::make_integer_sequence<int, kTileCols>{})};
template <typename Block, int... I>
constexpr GemmKernel make_k2x16(std::integer_sequence<int, I...>) {
  return GemmKernel{kPackRowsK, kTileCols, {k2x16_tile<Block, I + 1>...}};
}

constexpr PackedKernel kQ2_K{
    QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot_k<DType::Q2_K>,
    make_k2x16<BlockQ2_Kx16>(std::make_integer_sequence<int, kTileCols>{})};
constexpr PackedKernel kQ3_K{
    QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot_k<DType::Q3_K>,
    make_k2x16<BlockQ3_Kx16>(std::make_integer_sequence<int, kTileCols>{})};
constexpr PackedKernel kQ5_K{
    QK_K, sizeof(BlockQ8_K), act_q8_k, tail_dot_k<DType::Q5_K>,
    make_k4x16<BlockQ5_Kx16>(std::make_integer_sequence<int, kTileCols>{})};

}  // namespace

#if defined(__AVXVNNI__)
const PackedKernel* packed_kernel_avxvnni(DType w) {
#else
const PackedKernel* packed_kernel_avx2(DType w) {
#endif
  switch (w) {
    case DType::Q4_0:
      return &kQ4_0;
    case DType::Q8_0:
      return &kQ8_0;
    case DType::Q2_K:
      return &kQ2_K;
    case DType::Q3_K:
      return &kQ3_K;
    case DType::Q4_K:
      return &kQ4_K;
    case DType::Q5_K:
      return &kQ5_K;
    case DType::Q6_K:
      return &kQ6_K;
    default:
      return nullptr;
  }
}

}  // namespace ps::cpu

#else

namespace ps::cpu {
const PackedKernel* packed_kernel_avx2(DType) { return nullptr; }
const PackedKernel* packed_kernel_avxvnni(DType) { return nullptr; }
}  // namespace ps::cpu

#endif
