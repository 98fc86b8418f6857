#pragma once
// Named, typed parameters of the ops that have them, written by the graph builder and read by
// every backend through these functions. They are kept in Tensor's parameter slots, which only
// graph.cpp touches (a test checks that no backend reads them). Ops without a struct here
// (View, GetRows, MatMul, Mul, Add, Silu, Gelu, SwiGlu, Copy, Sigmoid, MatMulId, ExpertSum)
// take nothing but their operands.
#include <cstdint>

#include "graph/tensor.h"

namespace ps {

// RmsNorm: each row of src0 divided by sqrt(mean of its squares + eps).
struct RmsNormParams {
  float eps = 1e-6f;
};
void set_rms_norm_params(Tensor& node, const RmsNormParams& p);
RmsNormParams rms_norm_params(const Tensor& node);

// Scale: src0 * scale.
struct ScaleParams {
  float scale = 1.0f;
};
void set_scale_params(Tensor& node, const ScaleParams& p);
ScaleParams scale_params(const Tensor& node);

// Rope: src0 F32 [head_dim, n_heads, n_tokens], src1 I32 positions [n_tokens], src2 optional
// F32 frequency factors [n_rot / 2] (each pair's angle divided by its factor). The first n_rot
// elements of each head rotate, as adjacent pairs (Normal) or as the two halves (NeoX); pair i
// turns by pos * freq_scale * freq_base^(-2i / n_rot), and the result is multiplied by
// attn_factor.
struct RopeParams {
  int32_t n_rot = 0;
  RopeMode mode = RopeMode::Normal;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float attn_factor = 1.0f;
};
void set_rope_params(Tensor& node, const RopeParams& p);
RopeParams rope_params(const Tensor& node);

// SoftMax: each row of src0 times scale, softmaxed. causal_offset >= 0 masks element j of row
// r when j > r + causal_offset; -1 masks nothing.
struct SoftMaxParams {
  float scale = 1.0f;
  int32_t causal_offset = -1;
};
void set_softmax_params(Tensor& node, const SoftMaxParams& p);
SoftMaxParams softmax_params(const Tensor& node);

// Causal attention of n_tokens queries over F16/F32 caches [head_dim, n_kv_head, slots,
// n_seq]. Without per-token data (src[3] null) the queries sit at positions n_past.. of cache
// plane 0. With it, src[3] is I32 [2, n_tokens]: each token's position and the cache plane
// (its sequence), so one op serves tokens of several sequences. window > 0: the query at
// position p sees only (p - window, p]. Position j lives in slot j % slots.
//
// Paged (paged = true; Graph::attention_paged): the caches are one pool of cells [head_dim,
// n_kv_head, n_cells, 1] handed out in blocks, and src[3] is I32 [2 + 2 n_tokens + E]: a header
// (slots, block), then each token's (position, table), then the block tables. A token's table
// is the offset in src[3] of its sequence's list of blocks: position j of the sequence lives in
// slot s = j % slots (a sliding-window layer's ring; otherwise slots exceeds every position),
// which is cell table[s / block] * block + s % block.
//
// Sinks (src[4], optional, F32 [n_head]; gpt-oss): head h's softmax over the scaled scores z_j
// has one more logit s_h that carries no value: out = sum_j exp(z_j - M) v_j /
// (sum_j exp(z_j - M) + exp(s_h - M)), M = max(max_j z_j, s_h). A kernel that merges partial
// softmaxes merges them first, then folds the sink in.
struct AttentionParams {
  int32_t n_past = 0;  // the first query's position (no per-token data)
  int32_t window = 0;
  float scale = 1.0f;
  bool paged = false;
};

// The paged layout's parts, read from src[3] (after the kernel's own checks).
struct PagedHeader {
  int64_t slots, block;
};
inline constexpr int64_t kPagedHeader = 2;

// Mixture of experts. A layer's router scores each of E experts per token; the k best run, and
// their outputs are summed weighted by the router's probabilities (llama.cpp's build_moe_ffn):
//   logits = matmul(router, x)                       F32 [E, T]
//   ids = top_k(logits, k)                           I32 [k, T]
//   w = expert_weights(logits, ids, ...)             F32 [k, T]
//   h = matmul_id(up_exps, x, ids) ...               F32 [n_ff, k, T]
//   y = expert_sum(matmul_id(down_exps, h, ids), w)  F32 [n_embd, T]

// TopK: the indices of the k largest values of each row, largest first; equal values in index
// order, NaN below every number.
struct TopKParams {
  int32_t k = 1;
};

// How the router's logits become the chosen experts' weights.
enum class ExpertGating : int32_t {
  Softmax = 0,          // softmax over all E logits, then the chosen ones' probabilities
  Sigmoid = 1,          // each chosen logit's sigmoid
  SoftmaxSelected = 2,  // softmax over the k chosen logits only (gpt-oss)
};
// ExpertWeights: src0 the logits F32 [E, T], src1 the chosen ids I32 [k, T] (each in [0, E)).
// normalize divides the k weights of a token by their sum; then all are multiplied by scale.
struct ExpertWeightsParams {
  ExpertGating gating = ExpertGating::Softmax;
  bool normalize = false;
  float scale = 1.0f;
};

// MatMulId has no parameters: output column (j, t) is matmul(src0[:, :, ids[j, t]], src1 column
// (j or 0, t)): src1's ne[1] is k (an input per chosen expert) or 1 (one input for all of them).
// Only the chosen experts' weights are read. An id outside [0, E) is an error of the kernel.
// ExpertSum: out[:, t] = sum over j of src1[j, t] * src0[:, j, t], j in order.

void set_top_k_params(Tensor& node, const TopKParams& p);
TopKParams top_k_params(const Tensor& node);
void set_expert_weights_params(Tensor& node, const ExpertWeightsParams& p);
ExpertWeightsParams expert_weights_params(const Tensor& node);

// SwiGluOai (gpt-oss's experts, ggml's swiglu_oai): of gate g and up u,
//   x = min(g, limit), y = clamp(u, -limit, limit), out = x * sigmoid(alpha * x) * (y + 1).
struct SwiGluOaiParams {
  float alpha = 1.702f;
  float limit = 7.0f;
};
void set_swiglu_oai_params(Tensor& node, const SwiGluOaiParams& p);
SwiGluOaiParams swiglu_oai_params(const Tensor& node);

// The two scalars the GPU element-wise kernels take (one kernel serves Add, Mul, Silu, Gelu,
// SwiGlu, Scale, Sigmoid and SwiGluOai): Scale's factor; SwiGluOai's alpha and limit; zeros for
// the rest.
struct ElementwiseScalars {
  float s0 = 0.0f, s1 = 0.0f;
};
ElementwiseScalars elementwise_scalars(const Tensor& node);

// The element-wise kernels' code for an op (backend/kernel_codes.h); PS_EW_NONE for the others.
constexpr uint32_t elementwise_code(OpKind op) {
  switch (op) {
    case OpKind::Add:
      return PS_EW_ADD;
    case OpKind::Mul:
      return PS_EW_MUL;
    case OpKind::Silu:
      return PS_EW_SILU;
    case OpKind::Gelu:
      return PS_EW_GELU;
    case OpKind::SwiGlu:
      return PS_EW_SWIGLU;
    case OpKind::Scale:
      return PS_EW_SCALE;
    case OpKind::Sigmoid:
      return PS_EW_SIGMOID;
    case OpKind::SwiGluOai:
      return PS_EW_SWIGLU_OAI;
    case OpKind::None:
    case OpKind::View:
    case OpKind::GetRows:
    case OpKind::MatMul:
    case OpKind::RmsNorm:
    case OpKind::Rope:
    case OpKind::SoftMax:
    case OpKind::Copy:
    case OpKind::Attention:
    case OpKind::TopK:
    case OpKind::ExpertWeights:
    case OpKind::MatMulId:
    case OpKind::ExpertSum:
    case OpKind::Count:
      return PS_EW_NONE;
  }
  return PS_EW_NONE;
}

void set_attention_params(Tensor& node, const AttentionParams& p);
AttentionParams attention_params(const Tensor& node);
// src[3], or nullptr: the per-token positions and sequences.
inline const Tensor* attention_token_info(const Tensor& node) { return node.src[3]; }
// src[4], or nullptr: the sinks.
inline const Tensor* attention_sinks(const Tensor& node) { return node.src[4]; }

}  // namespace ps
