#pragma once
// An architecture turns a GGUF file's metadata and tensors into forward graphs. Models know
// nothing about backends: weights enter graphs as leaves pointing at the file mapping.
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace ps::gguf {
class File;
}

namespace ps {

struct ModelParams {
  std::string architecture;
  std::string name;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  // The context the file says the model handles: n_ctx_train, or more where it declares RoPE
  // scaling by a factor of its rope.scaling.original_context_length.
  int64_t n_ctx_usable = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ff = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_rot = 0;
  float norm_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  RopeMode rope_mode = RopeMode::Normal;
  // YaRN (rope.scaling.type "yarn"): pair i's angle blends the interpolated (times
  // rope_freq_scale) and the extrapolated one by a ramp over the pairs between the correction
  // dimensions of beta_fast and beta_slow rotations within n_ctx_orig positions, and cos and
  // sin are scaled by mscale (Model::rope_scaling folds both into the rope op's inputs).
  struct Yarn {
    bool on = false;
    float ext_factor = 1.0f, beta_fast = 32.0f, beta_slow = 1.0f, mscale = 1.0f;
    int64_t n_ctx_orig = 0;
  } yarn;
  // rope.scaling.type "longrope" (llama, phi3): LongRoPE's factor tensors are read.
  bool longrope = false;
  bool tied_output = false;
  // A mixture of experts in every block's feed-forward (n_expert > 0): n_expert_used experts
  // of n_ff_expert each run per token, weighted as `expert_weights` says; n_ff_shared > 0: a
  // shared expert (qwen2moe) beside them.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_expert = 0, n_ff_shared = 0;
  ExpertWeightsParams expert_weights;
  // Per layer: the sliding attention window (0: the layer attends to every position). Empty
  // when no layer has one.
  std::vector<int64_t> layer_window;
  // What this file uses beyond the plain architecture (biases, QK-norm, RoPE factors, a
  // window), for `inspect` and `run -v`; and what the loader noticed but can run without.
  std::vector<std::string> features, warnings;
  uint64_t n_params = 0;      // elements of all weights
  uint64_t weight_bytes = 0;  // bytes of all weights as stored
};

// Inputs of one forward pass over n_tokens tokens at positions [n_past, n_past + n_tokens).
struct ForwardInputs {
  Tensor* tokens = nullptr;     // I32 [n_tokens]
  Tensor* positions = nullptr;  // I32 [n_tokens]
  int32_t n_past = 0;
  int32_t n_tokens = 0;
  int64_t n_ctx = 0;  // positions a sequence may use (LongRoPE picks its factors by it)
  // Per layer [head_dim, n_head_kv, slots]: position j in slot j % slots. Layers with a window
  // may have fewer slots than the context (kv_slots), so their cache is a ring.
  std::vector<Tensor*> k_cache, v_cache;
  bool all_logits = false;     // else only the last token's
  Tensor* out_rows = nullptr;  // I32 [n]: the tokens whose logits are wanted (else the last's)
  // Embeddings: the final hidden states (after the output norm) of these tokens (I32 [m]) come
  // out through *hidden; with no_logits the pass computes no logits and returns them instead.
  Tensor* hidden_rows = nullptr;
  Tensor** hidden = nullptr;
  bool no_logits = false;
  // A paged cache (graph/ops.h): per layer, its group's per-token data (positions and block
  // tables) and where this pass's keys and values go, in pieces of consecutive cells. The
  // caches are then [head_dim, n_head_kv, cells, 1]; positions come from `positions`.
  struct KvWrite {
    int32_t first_token, n_tokens;
    int64_t cell;
  };
  struct KvLayout {
    Tensor* token_info = nullptr;
    std::vector<KvWrite> writes;
  };
  std::vector<const KvLayout*> kv_layout;
};

// The weights of one pre-norm transformer block that llama and its descendants share, under
// GGUF's names: attention (attn_norm, attn_q/k/v, attn_output) and a gated feed-forward
// (ffn_norm, ffn_gate, ffn_up, ffn_down).
struct BlockWeights {
  Tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
};

// A mixture-of-experts feed-forward under GGUF's names: the router (ffn_gate_inp), the experts'
// weights stacked along dimension 2 (ffn_{gate,up,down}_exps), and for qwen2moe a shared expert
// (ffn_{gate,up,down}_shexp) scaled per token by the sigmoid of ffn_gate_inp_shexp . x.
struct ExpertWeightsSet {
  Tensor *router = nullptr, *gate_exps = nullptr, *up_exps = nullptr, *down_exps = nullptr;
  Tensor *shared_router = nullptr, *shared_gate = nullptr, *shared_up = nullptr,
         *shared_down = nullptr;
};

class Model {
 public:
  virtual ~Model() = default;
  // Picks the architecture from general.architecture; ModelError when unsupported, when a
  // tensor is missing, misshapen or of a type without kernels, or when the file holds a tensor
  // the architecture does not use (a stated warning for the few known to be redundant).
  static std::unique_ptr<Model> load(const gguf::File& file);

  const ModelParams& params() const { return params_; }
  // Returns the logits tensor [n_vocab, n_out].
  virtual Tensor* build_graph(Graph& g, const ForwardInputs& in) const = 0;

 protected:
  // A weight leaf over the file mapping, checked against the expected shape.
  Tensor* weight(const gguf::File& f, const std::string& name, std::array<int64_t, 4> ne,
                 bool optional = false);
  // A norm's weight vector of n values, which must be F32.
  Tensor* norm_weight(const gguf::File& f, const std::string& name, int64_t n);
  // Any other vector of n F32 values (`what` names it in errors: "bias", ...).
  Tensor* vector_weight(const gguf::File& f, const std::string& name, int64_t n, const char* what,
                        bool optional = false);
  // Rows [first, first + n) of a 2-D weight, over the same bytes (a fused tensor's parts).
  Tensor* row_slice(const Tensor* w, int64_t first, int64_t n, const std::string& name);
  // A constant F32 vector the model computed itself (not in the file), owned by the model.
  Tensor* owned_vector(const std::string& name, std::vector<float> values);
  // What the rope op of a layer with the file's RoPE scaling takes: with YaRN, per-pair factors
  // (file_factors, Llama 3.1's rope_freqs, folded in), freq_scale 1 and YaRN's magnitude (which
  // holds rope.scaling.attn_factor already); otherwise file_factors, the linear scale and the
  // attn_factor the architecture read, as they are.
  struct RopeScaling {
    Tensor* factors = nullptr;
    float freq_scale = 1.0f, attn_factor = 1.0f;
  };
  RopeScaling rope_scaling(Tensor* file_factors, float attn_factor = 1.0f);
  // ModelError naming the first tensor of the file that no weight() call took; known redundant
  // ones become warnings.
  void check_all_tensors_used(const gguf::File& f);
  // The hyperparameters a decoder-only transformer stores under "<arch>." (sizes, heads,
  // RoPE, norm epsilon), each checked.
  void read_transformer_params(const gguf::File& f, const std::string& arch);
  // rope.scaling.type "yarn": ModelParams::yarn from rope.scaling.* (factor already read).
  void read_yarn_params(const gguf::File& f, const std::string& arch, float factor);
  // Block `layer`'s BlockWeights, each checked against the hyperparameters; without the dense
  // feed-forward's gate, up and down when the model has experts instead.
  BlockWeights block_weights(const gguf::File& f, int64_t layer);
  // The "<arch>.expert_*" hyperparameters (src/model/moe.cpp): none when expert_count is absent
  // or 0 (an error for an architecture that has experts: "...moe" or shared_expert).
  // `normalize` and `gating` are the family's ExpertWeightsParams, as llama.cpp fixes them.
  void read_expert_params(const gguf::File& f, const std::string& arch, bool normalize,
                          bool shared_expert, ExpertGating gating = ExpertGating::Softmax);
  ExpertWeightsSet expert_weights(const gguf::File& f, int64_t layer);
  // The mixture-of-experts feed-forward of h [n_embd, T]: [n_embd, T].
  Tensor* experts_ffn(Graph& g, const ExpertWeightsSet& w, Tensor* h) const;
  // `<arch>.attention.sliding_window`: 0 (none) when absent, at most 2^24 positions.
  static int64_t sliding_window(const gguf::File& f, const std::string& arch);
  // token_embd, output_norm and output (token_embd again when the file ties them).
  void load_embeddings(const gguf::File& f);
  // Writes this batch's K [head_dim, n_head_kv, T] and V [kv_dim, T] into layer l's cache,
  // then attends over the cache (window > 0: sliding window; sinks: graph/ops.h). Returns
  // [q_dim, T].
  Tensor* cached_attention(Graph& g, const ForwardInputs& in, int64_t layer, Tensor* q, Tensor* k,
                           Tensor* v, float scale, int32_t window, Tensor* sinks = nullptr) const;
  // The final norm and the output projection, over the last position only unless every
  // position's logits are wanted (or the rows of out_rows); the hidden rows' normed states too.
  Tensor* output_logits(Graph& g, const ForwardInputs& in, Tensor* x) const;

  ModelParams params_;
  std::deque<Tensor> weights_;
  std::deque<std::vector<float>> owned_values_;  // the data of owned_vector()s
  std::set<std::string> used_;                   // the file's tensors taken by weight()
  Tensor *tok_embd_ = nullptr, *out_norm_ = nullptr, *output_ = nullptr;
};

// Cache slots layer l needs for a context of n_ctx positions evaluated n_batch at a time: all
// of them, or for a sliding-window layer only its window plus the batch.
int64_t kv_slots(const ModelParams& p, int64_t layer, int64_t n_ctx, int64_t n_batch);
// The bytes of one cache cell's K (or V) row: F16 values of the KV width.
size_t kv_row_bytes(const ModelParams& p);

// llama, qwen2, qwen3 and phi3 (src/model/llama.cpp).
std::unique_ptr<Model> make_llama_family_model(const gguf::File& file, const std::string& arch);
std::unique_ptr<Model> make_gemma3_model(const gguf::File& file);
std::unique_ptr<Model> make_gpt_oss_model(const gguf::File& file);  // src/model/gpt_oss.cpp

}  // namespace ps
