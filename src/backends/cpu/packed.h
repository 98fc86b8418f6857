#pragma once
// Packed weights: constant quantized weights copied once, at first use, into an order that the
// matrix kernels read with a fraction of the instructions GGUF's row-by-row blocks need.
// Decode streams every weight once per token, so the row dots must keep up with memory; for
// Q4_0 they cannot on AVX2 (unpacking, the offset of 8, a scale conversion and a horizontal
// sum for every 32 weights), packed they can. A packed type interleaves groups of rows; its
// packed copy gives every row `packed_layout(type, k).row_bytes`, so row r starts r of those
// apart: group g (rows rows g.., whole groups only) starts where its first row does, and the
// rows past the last whole group keep GGUF's layout at their own offsets.
//
// Q4_0x8 packs groups of 8 consecutive rows. Block b of group g (elements 32b..32b+31 of each
// of the 8 rows) is 144 bytes: the 8 rows' fp16 scales, then four 32-byte vectors, the v-th of
// which holds bytes 4v..4v+3 of every row's qs, row j in bytes 4j..4j+3. Since GGUF puts element
// i in the low nibble of qs[i] and element i+16 in the high one, the low nibbles of vector v are
// elements 4v..4v+3 of each row and the high nibbles elements 16+4v..16+4v+3: one load holds 4
// elements of 8 rows, one row per 32-bit lane. Multiplied by the same 4 activations broadcast to
// every lane, the lanes accumulate 8 row dots at once, with no horizontal sum, and one vector
// conversion serves 8 scales. A Q4_0x8 group takes exactly the bytes of its 8 rows.
//
// Q4_0x16 packs 16 rows for 512-bit vectors the same way: a block is the 16 rows' fp16 scales,
// then four 64-byte vectors, the v-th holding bytes 4v..4v+3 of every row's qs, row j at 4j.
// Q5_0x16 puts the rows' fifth bits between the two, rearranged so that bit v of row j's byte i
// is the high bit of element 4v + i and bit 4 + v that of element 16 + 4v + i. Q8_0x16: the
// scales, then eight vectors of bytes 4v..4v+3 of every row's qs. All take exactly their bytes.
//
// Q4_Kx16 packs groups of 16 rows for 512-bit vectors, one row per 32-bit lane. A super-block
// of the group (elements 256b..256b+255 of the 16 rows) holds the rows' fp16 d and dmin, their
// 6-bit scales and mins unpacked to one byte each (sub-block major: 16 rows' scales of sub-block
// 0, then of 1, ...), then the quants: for each pair of sub-blocks p and each u < 8, bytes
// 32p + 4u .. 32p + 4u + 3 of every row's qs, row j at 4j. The low nibbles of such a vector are
// elements 64p + 4u .. + 3 of each row (sub-block 2p), the high ones elements 64p + 32 + 4u ..
// (sub-block 2p + 1). 2368 bytes for 16 rows' 2304: the unpacked scales and mins cost 2.8 %.
//
// Q5_Kx16 is Q4_Kx16 followed by the fifth bits: for each u < 8, bytes 4u .. 4u + 3 of every
// row's qh, whose bit 2p (2p + 1) is the high bit of the low (high) nibbles of that u in pair p.
// 2880 bytes for 16 rows' 2816 (2.3 %).
//
// BF16x16 (CPUs with AVX512_BF16) packs 16 rows of an even length: for each pair of elements
// 2p, 2p + 1, the pair of every row, row j at bytes 4j .. 4j + 3 of a 64-byte vector. Same bytes.
//
// Q2_Kx16 and Q3_Kx16 follow Q6_Kx16's order for the sub-blocks of 16: scales by pairs (Q2_K's
// bytes as GGUF has them, scale | min << 4; Q3_K's unpacked to signed bytes, 64 more bytes per
// 16 rows than its packed 6 bits: 1824 for 1760, 3.6 %), then Q3_K's hmask as bytes 4u .. 4u + 3
// of every row for each u < 8, then for each half h and u < 8 bytes 32h + 4u .. + 3 of every
// row's qs, whose bits 2k are the low bits of elements 128h + 32k + 4u ...
//
// Q6_Kx16 packs groups of 16 rows the same way, in exactly their bytes: the fp16 d of the
// rows, their signed scales by pairs of sub-blocks of 16 (row j's scales 2t and 2t + 1 side by
// side, so they widen into one int16 pair per lane), then for each half h, each k < 2 and each
// u < 8 bytes 64h + 32k + 4u .. + 3 of every row's ql (whose low and high nibbles are the low
// bits of elements 128h + 32k + 4u .. and 128h + 32(k + 2) + 4u ..), then for each half and u
// bytes 32h + 4u .. + 3 of every row's qh (bits 2k of which complete element 128h + 32k + 4u ..).
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/vec_dot.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "graph/tensor.h"

namespace ps::cpu {

inline constexpr int kPackRows = 8;  // rows of a Q4_0x8 group

struct BlockQ4_0x8 {
  uint16_t d[kPackRows];              // fp16 scales of the group's rows
  uint8_t qs[kPackRows * QK4_0 / 2];  // see above
};
static_assert(sizeof(BlockQ4_0x8) == kPackRows * sizeof(BlockQ4_0));

inline constexpr int kPackRowsK = 16;  // rows of a Q4_0x16 or k-quant group

struct BlockQ5_0x16 {
  uint16_t d[kPackRowsK];
  uint8_t qh[kPackRowsK][4];     // [row][byte]: see above
  uint8_t qs[4][kPackRowsK][4];  // [v][row][byte]
};
static_assert(sizeof(BlockQ5_0x16) == kPackRowsK * sizeof(BlockQ5_0));

struct BlockQ8_0x16 {
  uint16_t d[kPackRowsK];
  int8_t qs[8][kPackRowsK][4];  // [v][row][byte]
};
static_assert(sizeof(BlockQ8_0x16) == kPackRowsK * sizeof(BlockQ8_0));

struct BlockQ4_0x16 {
  uint16_t d[kPackRowsK];        // fp16 scales of the group's rows
  uint8_t qs[4][kPackRowsK][4];  // [v][row][byte]: see above
};
static_assert(sizeof(BlockQ4_0x16) == kPackRowsK * sizeof(BlockQ4_0));

// The codebook types IQ4_NL and MXFP4 in Q4_0x16's order (their nibbles index a table of 16
// values instead of being offset by 8): IQ4_NL with the rows' fp16 scales, MXFP4 with their
// E8M0 exponents, a byte each. Exactly their bytes.
struct BlockIQ4_NLx16 {
  uint16_t d[kPackRowsK];
  uint8_t qs[4][kPackRowsK][4];
};
static_assert(sizeof(BlockIQ4_NLx16) == kPackRowsK * sizeof(BlockIQ4_NL));
struct BlockMXFP4x16 {
  uint8_t e[kPackRowsK];
  uint8_t qs[4][kPackRowsK][4];
};
static_assert(sizeof(BlockMXFP4x16) == kPackRowsK * sizeof(BlockMXFP4));
// IQ4_XSx16: a super-block of 256 elements of 16 rows: their fp16 d, each sub-block's scale
// l - 32 unpacked to a signed byte per row (sub-block major), then each sub-block's quants in
// Q4_0x16's order. 2208 bytes for 16 rows' 2176 (1.5 %).
struct BlockIQ4_XSx16 {
  uint16_t d[kPackRowsK];
  int8_t scales[QK_K / 32][kPackRowsK];
  uint8_t qs[QK_K / 32][4][kPackRowsK][4];
};
static_assert(sizeof(BlockIQ4_XSx16) == 2208);

struct BlockQ4_Kx16 {
  uint16_t d[kPackRowsK];  // fp16
  uint16_t dmin[kPackRowsK];
  uint8_t scales[8][kPackRowsK];  // [sub-block][row]
  uint8_t mins[8][kPackRowsK];
  uint8_t qs[4][8][kPackRowsK][4];  // [sub-block pair][u][row][byte]: see above
};
static_assert(sizeof(BlockQ4_Kx16) == 2368);

struct BlockQ5_Kx16 {
  uint16_t d[kPackRowsK];
  uint16_t dmin[kPackRowsK];
  uint8_t scales[8][kPackRowsK];
  uint8_t mins[8][kPackRowsK];
  uint8_t qs[4][8][kPackRowsK][4];
  uint8_t qh[8][kPackRowsK][4];  // [u][row][byte]
};
static_assert(sizeof(BlockQ5_Kx16) == 2880);

struct BlockQ2_Kx16 {
  uint16_t d[kPackRowsK];
  uint16_t dmin[kPackRowsK];
  uint8_t scales[8][kPackRowsK][2];  // [pair of sub-blocks][row][which]: scale | min << 4
  uint8_t qs[2][8][kPackRowsK][4];   // [half][u][row][byte]
};
static_assert(sizeof(BlockQ2_Kx16) == kPackRowsK * sizeof(BlockQ2_K));

struct BlockQ3_Kx16 {
  uint16_t d[kPackRowsK];
  int8_t scales[8][kPackRowsK][2];  // [pair of sub-blocks][row][which], -32 .. 31
  uint8_t hmask[8][kPackRowsK][4];  // [u][row][byte]
  uint8_t qs[2][8][kPackRowsK][4];  // [half][u][row][byte]
};
static_assert(sizeof(BlockQ3_Kx16) == 1824);

struct BlockQ6_Kx16 {
  uint16_t d[kPackRowsK];              // fp16
  int8_t scales[8][kPackRowsK][2];     // [pair of sub-blocks][row][which]
  uint8_t ql[2][2][8][kPackRowsK][4];  // [half][k][u][row][byte]: see above
  uint8_t qh[2][8][kPackRowsK][4];     // [half][u][row][byte]
};
static_assert(sizeof(BlockQ6_Kx16) == kPackRowsK * sizeof(BlockQ6_K));

// How a type's packed copy in groups of `rows` rows is laid out: the group's rows (0: the type
// has no such layout) and the bytes each row takes in it. Q4_0 packs in groups of 8 (the AVX2
// kernels) or 16 (Q4_0x16, the AVX-512 ones); BF16 (rows of even length), Q5_0, Q8_0 and the
// k-quants in groups of 16.
struct PackedLayout {
  int rows = 0;
  size_t row_bytes = 0;
};
PackedLayout packed_layout(DType w, int rows, int64_t k);

// Activations for packed weights: Q8_0's values, with d as a float (exactly the fp16 value Q8_0
// stores) and s = d * sum(qs), so a weight type's offset (8 for Q4_0) costs one multiply-add per
// block instead of a second byte product.
struct BlockQ8S {
  float d;
  float s;
  int8_t qs[QK8_0];
};
static_assert(sizeof(BlockQ8S) == 40);

// Activations for Q4_0x16, Q5_0x16 and Q8_0x16: Q8_0's values with d as a float and -c times
// the sum of qs, the offset c of the weight type's unsigned levels (8, 16 or 128) as the
// integer a block's dot products start from.
struct BlockQ8O {
  float d;
  int32_t offset;
  int8_t qs[QK8_0];
};
static_assert(sizeof(BlockQ8O) == 40);

struct PackedKernel {
  int64_t act_block;       // elements per activation block
  size_t act_block_bytes;  // bytes per activation block
  ActFromF32Fn act_from_f32;
  // A row past the last whole group (GGUF layout) against converted activations.
  VecDotFn tail_dot;
  // Tiles of one group (rows = the layout's rows) by C columns over the packed bytes; tiles[0]
  // is the matrix-vector kernel. Tiles ignore their w_stride argument: a group is contiguous.
  GemmKernel gemm;

  size_t act_row_bytes(int64_t k) const { return act_block_bytes * size_t(k / act_block); }
};

// The packed kernel for weight type w at ISA level isa (capped at best_isa_level()), or null
// when the type has no packed layout or the level no kernel for it.
const PackedKernel* packed_kernel(DType w, IsaLevel isa);
const PackedKernel* packed_kernel_avx2(DType w);
const PackedKernel* packed_kernel_avxvnni(DType w);  // AVX2 with AVX-VNNI
const PackedKernel* packed_kernel_avx512(DType w);
const PackedKernel* packed_kernel_avx512_bf16(DType w);

// Packs n rows of k elements of type w (GGUF layout, rows contiguous) in groups of `rows` into
// dst, which holds n * packed_layout(w, rows, k).row_bytes bytes. Throws BackendError for a
// type without that layout.
void pack_rows(DType w, int rows, const void* src, void* dst, int64_t k, int64_t n,
               ThreadPool& pool);

// True when matmul may use a packed copy of w in groups of `rows`: its bytes never change (a
// model weight), it is one contiguous 2-D matrix with at least one whole group of rows.
bool can_pack(const Tensor& w, int rows);

// The packed copies a device has made, keyed by the weight's bytes. A weight's bytes outlive
// every device that computes with them (the model outlives its sessions), so a key is never
// reused for other bytes while the cache holds it.
class PackedWeights {
 public:
  // The packed copy of w in groups of `rows`, made on the first call for w's bytes and rows.
  const void* get(const Tensor& w, int rows, ThreadPool& pool);
  size_t bytes() const;

 private:
  struct Entry {
    DType type;
    int64_t k, n;
    LargeBuffer data;
  };
  struct KeyHash {
    size_t operator()(const std::pair<const void*, int>& key) const {
      return std::hash<const void*>()(key.first) ^ size_t(key.second);
    }
  };
  mutable std::mutex mu_;
  std::unordered_map<std::pair<const void*, int>, Entry, KeyHash> entries_;
};

}  // namespace ps::cpu
