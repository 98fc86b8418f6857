#pragma once
// A tensor of the op graph: shape, strides, type, where its bytes are, and (for computed
// tensors) the op and inputs that produce it. Dimension 0 is the innermost, contiguous one,
// as in GGUF.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/kernel_codes.h"
#include "core/dtype.h"

namespace ps {

enum class OpKind : uint8_t {
  None,     // a leaf: weights, inputs, KV cache
  View,     // shares src[0]'s bytes (reshape / slice); no kernel runs
  GetRows,  // src0: table [n, rows] any dtype, src1: I32 ids [k] -> F32 [n, k]
  MatMul,   // src0: weight [K, N] any dtype, src1: F32 [K, M] -> F32 [N, M]
  RmsNorm,  // src0 F32 [n, ...] (graph/ops.h: RmsNormParams)
  Mul,      // src0 * src1, src1 broadcast over rows when src1->ne[1..3] == 1
  Add,      // src0 + src1, broadcast as Mul
  Silu,
  Gelu,       // tanh approximation
  Scale,      // src0 * a scalar (ScaleParams)
  SwiGlu,     // silu(src0) * src1
  Rope,       // src0 F32 [head_dim, n_heads, n_tokens], src1 I32 positions [n_tokens], src2
              // optional F32 frequency factors [n_rot / 2] (RopeParams)
  SoftMax,    // rows of src0, scaled and optionally masked (SoftMaxParams)
  Copy,       // converts src0 into the bytes of src1 (a view, e.g. of the KV cache)
  Attention,  // q src0 [hd, n_head, T], K cache src1, V cache src2 [hd, n_kv_head, n_ctx],
              // per-token data src3, sinks src4 (graph/ops.h: AttentionParams)
  // Mixture of experts (graph/ops.h says each one's operands and parameters):
  Sigmoid,        // 1 / (1 + exp(-src0))
  TopK,           // src0 F32 [n, rows] -> I32 [k, rows]: the k largest of each row
  ExpertWeights,  // router logits src0 F32 [E, T], chosen ids src1 I32 [k, T] -> F32 [k, T]
  MatMulId,       // experts src0 [K, N, E], src1 F32 [K, 1 or k, T], ids src2 -> F32 [N, k, T]
  ExpertSum,      // src0 F32 [N, k, T] weighted by src1 F32 [k, T], summed -> F32 [N, T]
  SwiGluOai,      // gpt-oss's clamped SwiGLU of gate src0 and up src1 (graph/ops.h)
  Count,
};

const char* op_name(OpKind op);

enum class RopeMode : int32_t { Normal = 0, NeoX = 2 };
static_assert(uint32_t(RopeMode::NeoX) == PS_ROPE_NEOX, "backend/kernel_codes.h's rope mode");

struct Tensor {
  std::string name;
  DType type = DType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  std::array<size_t, 4> nb{};  // byte strides
  void* data = nullptr;        // host pointer for CPU-resident tensors
  OpKind op = OpKind::None;
  std::array<Tensor*, 5> src{};  // attention takes five; the rest fewer
  // The op's parameters: written and read only through graph/ops.h's typed structs.
  std::array<int32_t, 8> iparams{};
  std::array<float, 4> fparams{};
  size_t view_offset = 0;  // for View: byte offset into src[0]
  int device = -1;         // placement chosen by the scheduler
  // The model layer a node belongs to (Graph::set_layer): -1 for the input (embedding), 0..n-1
  // for the repeating blocks, n for the output; the scheduler places nodes by layer.
  int layer = -1;
  // The bytes never change while any device that computed with them is alive (model weights):
  // a backend may keep a copy derived from them (packed, uploaded) keyed by data.
  bool constant = false;
  // The node computes a mixture of experts' routed experts (Graph::set_experts): the placement
  // plan may run these on another device than the rest of their layer (--cpu-moe).
  bool experts = false;
  // Its position in its graph's all() (Graph sets it), so that passes over a graph can keep
  // per-tensor facts in vectors; -1 outside a graph.
  int32_t index = -1;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t n_bytes() const;
  bool is_contiguous() const;
  // Recomputes nb for a contiguous layout of the current type and ne.
  void set_contiguous_strides();
};

}  // namespace ps
