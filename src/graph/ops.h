#pragma once
// Named, typed parameters of the ops that have them, read by the graph builder and by every
// backend through these functions (stored in Tensor's parameter slots, which nothing else
// reads for these ops).
#include <cstdint>

#include "graph/tensor.h"

namespace ps {

// Causal attention of n_tokens queries over F16/F32 caches [head_dim, n_kv_head, slots,
// n_seq]. Without per-token data (src[3] null) the queries sit at positions n_past.. of cache
// plane 0. With it, src[3] is I32 [2, n_tokens]: each token's position and the cache plane
// (its sequence), so one op serves tokens of several sequences. window > 0: the query at
// position p sees only (p - window, p]. Position j lives in slot j % slots.
struct AttentionParams {
  int32_t n_past = 0;  // the first query's position (no per-token data)
  int32_t window = 0;
  float scale = 1.0f;
};

void set_attention_params(Tensor& node, const AttentionParams& p);
AttentionParams attention_params(const Tensor& node);
// src[3], or nullptr: the per-token positions and sequences.
inline const Tensor* attention_token_info(const Tensor& node) { return node.src[3]; }

}  // namespace ps
