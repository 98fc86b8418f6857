// The llama architecture (Llama 1/2/3, Mistral, TinyLlama, SmolLM): pre-norm blocks with
// grouped-query attention and a SwiGLU feed-forward, RoPE in GGUF's adjacent-pair layout.

#include <cmath>

#include "gguf/gguf.h"
#include "model/model.h"

namespace ps {
namespace {

class LlamaModel final : public Model {
 public:
  explicit LlamaModel(const gguf::File& f) {
    read_transformer_params(f, "llama");
    load_embeddings(f);
    for (int64_t l = 0; l < params_.n_layer; ++l) layers_.push_back(block_weights(f, l));
  }

  Tensor* build_graph(Graph& g, const ForwardInputs& in) const override {
    const auto& p = params_;
    const int64_t T = in.n_tokens;
    const float kq_scale = 1.0f / std::sqrt(float(p.head_dim));
    Tensor* x = g.get_rows(tok_embd_, in.tokens);
    for (int64_t l = 0; l < p.n_layer; ++l) {
      g.set_layer(int(l));
      const BlockWeights& L = layers_[size_t(l)];
      Tensor* h = g.mul(g.rms_norm(x, p.norm_eps), L.attn_norm);
      Tensor* q = g.reshape(g.matmul(L.wq, h), {p.head_dim, p.n_head, T, 1});
      Tensor* k = g.reshape(g.matmul(L.wk, h), {p.head_dim, p.n_head_kv, T, 1});
      Tensor* v = g.matmul(L.wv, h);
      q = g.rope(q, in.positions, int(p.n_rot), p.rope_freq_base, p.rope_freq_scale, p.rope_mode);
      k = g.rope(k, in.positions, int(p.n_rot), p.rope_freq_base, p.rope_freq_scale, p.rope_mode);
      Tensor* attn = cached_attention(g, in, l, q, k, v, kq_scale, /*window=*/0);
      x = g.add(x, g.matmul(L.wo, attn));

      h = g.mul(g.rms_norm(x, p.norm_eps), L.ffn_norm);
      Tensor* ff = g.swiglu(g.matmul(L.w_gate, h), g.matmul(L.w_up, h));
      x = g.add(x, g.matmul(L.w_down, ff));
    }
    return output_logits(g, in, x);
  }

 private:
  std::vector<BlockWeights> layers_;
};

}  // namespace

std::unique_ptr<Model> make_llama_model(const gguf::File& file) {
  return std::make_unique<LlamaModel>(file);
}

}  // namespace ps
