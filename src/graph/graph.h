#pragma once
// The op graph for one forward pass. Builders append nodes in execution order; the graph owns
// its tensors. Weights and caches enter as leaves that point at memory someone else owns.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graph/ops.h"
#include "graph/tensor.h"

namespace ps {

class Graph {
 public:
  // Leaves.
  Tensor* leaf(std::string name, DType type, std::array<int64_t, 4> ne, void* data = nullptr);
  // Views share their source's bytes.
  Tensor* reshape(Tensor* t, std::array<int64_t, 4> ne);
  Tensor* view(Tensor* t, std::array<int64_t, 4> ne, std::array<size_t, 4> nb, size_t offset);

  Tensor* get_rows(Tensor* table, Tensor* ids);
  Tensor* matmul(Tensor* w, Tensor* x);
  Tensor* rms_norm(Tensor* x, float eps);
  Tensor* mul(Tensor* a, Tensor* b);
  Tensor* add(Tensor* a, Tensor* b);
  Tensor* silu(Tensor* x);
  Tensor* gelu(Tensor* x);
  Tensor* scale(Tensor* x, float s);
  Tensor* swiglu(Tensor* gate, Tensor* up);
  // gpt-oss's clamped SwiGLU (graph/ops.h).
  Tensor* swiglu_oai(Tensor* gate, Tensor* up, const SwiGluOaiParams& p);
  // freq_factors (optional, F32 [n_rot / 2]): pair i's angle is divided by factor i (Llama 3.1's
  // and LongRoPE's per-dimension frequency factors, ggml's rope freq_factors). attn_factor
  // scales the rotated values (LongRoPE's magnitude correction); the rest pass unchanged.
  Tensor* rope(Tensor* x, Tensor* pos, int n_rot, float freq_base, float freq_scale, RopeMode mode,
               Tensor* freq_factors = nullptr, float attn_factor = 1.0f);
  Tensor* softmax(Tensor* x, float scale, int32_t causal_offset);
  // Writes src converted to dst's type into dst's bytes; returns a node later ops may depend on.
  Tensor* copy(Tensor* src, Tensor* dst);
  // Causal attention of n_tokens queries at positions n_past.. over cache positions
  // [0, n_past + n_tokens). The cache writes for these tokens must come earlier in the graph.
  // window > 0 makes it sliding-window attention: the query at position p sees only positions
  // (p - window, p]. Position j lives in cache slot j % slots (slots = the caches' ne[2]): a
  // cache that holds every position never wraps; a sliding-window layer's may be a ring of at
  // least window + n_tokens - 1 slots.
  // sinks (optional, F32 [n_head]): head h's softmax has one more logit, sinks[h], that adds
  // no value (gpt-oss's attention sinks; graph/ops.h), in all three forms.
  Tensor* attention(Tensor* q, Tensor* k_cache, Tensor* v_cache, int32_t n_past, float scale,
                    int32_t window = 0, Tensor* sinks = nullptr);
  // The same for tokens of several sequences (graph/ops.h): token_info I32 [2, n_tokens]
  // holds each token's position and cache plane; the caches [head_dim, n_kv_head, slots,
  // n_seq] hold a plane per sequence. The cache writes must come earlier in the graph.
  Tensor* attention_tokens(Tensor* q, Tensor* k_cache, Tensor* v_cache, Tensor* token_info,
                           float scale, int32_t window = 0, Tensor* sinks = nullptr);
  // The same over a pool of cells given out in blocks (graph/ops.h, AttentionParams::paged):
  // the caches [head_dim, n_kv_head, n_cells, 1], token_info I32 [2 + 2 n_tokens + tables].
  Tensor* attention_paged(Tensor* q, Tensor* k_cache, Tensor* v_cache, Tensor* token_info,
                          float scale, int32_t window = 0, Tensor* sinks = nullptr);

  // Mixture of experts (graph/ops.h).
  Tensor* sigmoid(Tensor* x);
  Tensor* top_k(Tensor* x, int32_t k);
  Tensor* expert_weights(Tensor* logits, Tensor* ids, const ExpertWeightsParams& p);
  Tensor* matmul_id(Tensor* experts, Tensor* x, Tensor* ids);
  Tensor* expert_sum(Tensor* x, Tensor* weights);

  // The model layer the nodes created from now on belong to (Tensor::layer).
  void set_layer(int layer) { layer_ = layer; }
  // Whether the nodes created from now on compute routed experts (Tensor::experts).
  void set_experts(bool on) { experts_ = on; }

  // Part of a built graph, for a rank of an MPI job that runs only its own layers' nodes:
  // keeps the nodes whose keep[Tensor::index] is true, in their order; and turns node t into a
  // leaf over `data` (the bytes another rank computed; t must be contiguous).
  void keep_nodes(const std::vector<bool>& keep);
  void make_leaf(Tensor* t, void* data);

  // Every tensor in creation order; nodes() are the ones with an op (View included).
  const std::vector<Tensor*>& nodes() const { return nodes_; }
  std::span<Tensor* const> all() const { return all_; }

 private:
  Tensor* node(OpKind op, DType type, std::array<int64_t, 4> ne,
               std::initializer_list<Tensor*> src);
  // Checks sinks and sets them as attention node attn's src[4].
  Tensor* with_sinks(Tensor* attn, Tensor* sinks);
  // A new tensor at a stable address, set as the graph's next one (index, all()).
  Tensor& add_tensor();
  // Tensors live in chunks of kChunk, which never move: a decode step builds hundreds of them,
  // and one allocation per tensor (or per two, as a deque of them makes) showed in its time.
  static constexpr size_t kChunk = 64;
  std::vector<std::unique_ptr<Tensor[]>> storage_;
  std::vector<Tensor*> all_;
  std::vector<Tensor*> nodes_;
  int layer_ = -1;
  bool experts_ = false;
};

}  // namespace ps
