#pragma once
// Packed weights: constant quantized weights copied once, at first use, into an order that the
// matrix-vector kernels read with a fraction of the instructions GGUF's row-by-row blocks need.
// Decode streams every weight once per token, so the row dots must keep up with memory; for
// Q4_0 they cannot on AVX2 (unpacking, the offset of 8, a scale conversion and a horizontal
// sum for every 32 weights), packed they can.
//
// Q4_0x8 packs groups of 8 consecutive rows. Block b of group g (elements 32b..32b+31 of each
// of the 8 rows) is 144 bytes: the 8 rows' fp16 scales, then four 32-byte vectors, the v-th of
// which holds bytes 4v..4v+3 of every row's qs, row j in bytes 4j..4j+3. Since GGUF puts element
// i in the low nibble of qs[i] and element i+16 in the high one, the low nibbles of vector v are
// elements 4v..4v+3 of each row and the high nibbles elements 16+4v..16+4v+3: one load holds 4
// elements of 8 rows, one row per 32-bit lane. Multiplied by the same 4 activations broadcast to
// every lane, the lanes accumulate 8 row dots at once, with no horizontal sum, and one vector
// conversion serves 8 scales. A group takes the bytes of its 8 rows, so group g starts where row
// 8g starts in GGUF; rows past the last whole group keep GGUF's layout at their usual offsets.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/vec_dot.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "graph/tensor.h"

namespace ps::cpu {

inline constexpr int kPackRows = 8;

struct BlockQ4_0x8 {
  uint16_t d[kPackRows];              // fp16 scales of the group's rows
  uint8_t qs[kPackRows * QK4_0 / 2];  // see above
};
static_assert(sizeof(BlockQ4_0x8) == kPackRows * sizeof(BlockQ4_0));

// Activations for packed weights: Q8_0's values, with d as a float (exactly the fp16 value Q8_0
// stores) and s = d * sum(qs), so a weight type's offset (8 for Q4_0) costs one multiply-add per
// block instead of a second byte product.
struct BlockQ8S {
  float d;
  float s;
  int8_t qs[QK8_0];
};
static_assert(sizeof(BlockQ8S) == 40);

struct PackedKernel {
  size_t act_block_bytes;  // bytes of activations per 32 elements
  ActFromF32Fn act_from_f32;
  // A row past the last whole group (GGUF layout) against converted activations.
  VecDotFn tail_dot;
  // Tiles of one group (rows = kPackRows) by C columns over the packed bytes; tiles[0] is the
  // matrix-vector kernel. Tiles ignore their w_stride argument: a group is contiguous.
  GemmKernel gemm;
};

// The packed kernel for weight type w at ISA level isa (capped at best_isa_level()), or null
// when the type has no packed layout or the level no kernel for it.
const PackedKernel* packed_kernel(DType w, IsaLevel isa);
const PackedKernel* packed_kernel_avx2(DType w);

// Packs n rows of k elements of type w (GGUF layout, rows contiguous) into dst, which has the
// same size. Throws BackendError for a type without a packed layout.
void pack_rows(DType w, const void* src, void* dst, int64_t k, int64_t n, ThreadPool& pool);

// True when matmul may use a packed copy of w: its bytes never change (a model weight), it is
// one contiguous 2-D matrix with at least one whole group of rows.
bool can_pack(const Tensor& w);

// The packed copies a device has made, keyed by the weight's bytes. A weight's bytes outlive
// every device that computes with them (the model outlives its sessions), so a key is never
// reused for other bytes while the cache holds it.
class PackedWeights {
 public:
  // The packed copy of w, made on the first call for w's bytes.
  const void* get(const Tensor& w, ThreadPool& pool);
  size_t bytes() const;

 private:
  struct Entry {
    DType type;
    int64_t k, n;
    std::vector<uint8_t> data;
  };
  mutable std::mutex mu_;
  std::unordered_map<const void*, Entry> entries_;
};

}  // namespace ps::cpu
