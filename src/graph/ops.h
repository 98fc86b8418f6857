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
//
// Paged (paged = true; Graph::attention_paged): the caches are one pool of cells [head_dim,
// n_kv_head, n_cells, 1] handed out in blocks, and src[3] is I32 [2 + 2 n_tokens + E]: a header
// (slots, block), then each token's (position, table), then the block tables. A token's table
// is the offset in src[3] of its sequence's list of blocks: position j of the sequence lives in
// slot s = j % slots (a sliding-window layer's ring; otherwise slots exceeds every position),
// which is cell table[s / block] * block + s % block.
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

void set_attention_params(Tensor& node, const AttentionParams& p);
AttentionParams attention_params(const Tensor& node);
// src[3], or nullptr: the per-token positions and sequences.
inline const Tensor* attention_token_info(const Tensor& node) { return node.src[3]; }

}  // namespace ps
