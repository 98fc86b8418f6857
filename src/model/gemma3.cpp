// The gemma3 architecture (Gemma 3 text models). Against llama it differs in: the embedding
// scaled by sqrt(n_embd); RMSNorm weights stored as (1 + w) by the GGUF converter, so used as
// they are; RMSNorm of each query and key head (QK-norm); norms after attention and after the
// feed-forward as well as before; a GeGLU feed-forward with tanh-approximated GELU; RoPE on
// the two halves of each head (NeoX layout); and interleaved layers: most attend over a
// sliding window with their own RoPE base, every few attend globally. The output reuses the
// token embedding unless the file has output.weight.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace ps {
namespace {

struct Gemma3Layer : BlockWeights {
  Tensor *q_norm, *k_norm, *post_attn_norm, *post_ffw_norm;
  bool sliding;
};

class Gemma3Model final : public Model {
 public:
  explicit Gemma3Model(const gguf::File& f) {
    const std::string a = "gemma3";
    read_transformer_params(f, a);
    auto& p = params_;
    p.rope_mode = RopeMode::NeoX;

    const double softcap = f.get_float(a + ".final_logit_softcapping", 0.0, -1e30, 1e30);
    if (softcap != 0.0)
      throw ModelError(
          fmt::format("{}: final_logit_softcapping = {} is not supported", f.path(), softcap));
    window_ = sliding_window(f, a);
    swa_rope_base_ = float(f.get_float(a + ".rope.freq_base_swa", 10000.0, 1.0, 1e12));
    // Gemma 3 27B scales queries by its model width per head, the others by the head size
    // (as in the reference implementation's config).
    kq_scale_ = p.n_layer == 62 ? 1.0f / std::sqrt(float(p.n_embd / p.n_head))
                                : 1.0f / std::sqrt(float(p.head_dim));

    load_embeddings(f);
    const std::vector<bool> sliding = sliding_layers(f, a);
    for (int64_t l = 0; l < p.n_layer; ++l) {
      auto n = [&](const char* what) { return fmt::format("blk.{}.{}.weight", l, what); };
      Gemma3Layer L;
      static_cast<BlockWeights&>(L) = block_weights(f, l);
      L.q_norm = norm_weight(f, n("attn_q_norm"), p.head_dim);
      L.k_norm = norm_weight(f, n("attn_k_norm"), p.head_dim);
      L.post_attn_norm = norm_weight(f, n("post_attention_norm"), p.n_embd);
      L.post_ffw_norm = norm_weight(f, n("post_ffw_norm"), p.n_embd);
      L.sliding = sliding[size_t(l)];
      p.layer_window.push_back(L.sliding ? window_ : 0);
      layers_.push_back(L);
    }
    global_rope_ = rope_scaling(nullptr);
    p.features.push_back("QK-norm and post-attention / post-FFN norms");
    const auto n_sliding = std::count(sliding.begin(), sliding.end(), true);
    if (n_sliding > 0)
      p.features.push_back(fmt::format("sliding window of {} positions on {} of {} layers", window_,
                                       n_sliding, p.n_layer));
  }

  Tensor* build_graph(Graph& g, const ForwardInputs& in) const override {
    const auto& p = params_;
    const int64_t T = in.n_tokens;
    const float eps = p.norm_eps;
    auto norm = [&](Tensor* x, Tensor* w) { return g.mul(g.rms_norm(x, eps), w); };
    Tensor* x = g.scale(g.get_rows(tok_embd_, in.tokens), std::sqrt(float(p.n_embd)));
    for (int64_t l = 0; l < p.n_layer; ++l) {
      g.set_layer(int(l));
      const Gemma3Layer& L = layers_[size_t(l)];
      // Sliding layers rotate with their own base and no scaling; global ones use the model's.
      const float base = L.sliding ? swa_rope_base_ : p.rope_freq_base;
      const RopeScaling r = L.sliding ? RopeScaling{} : global_rope_;
      Tensor* h = norm(x, L.attn_norm);
      Tensor* q = g.reshape(g.matmul(L.wq, h), {p.head_dim, p.n_head, T, 1});
      Tensor* k = g.reshape(g.matmul(L.wk, h), {p.head_dim, p.n_head_kv, T, 1});
      Tensor* v = g.matmul(L.wv, h);
      q = g.rope(norm(q, L.q_norm), in.positions, int(p.n_rot), base, r.freq_scale, p.rope_mode,
                 r.factors, r.attn_factor);
      k = g.rope(norm(k, L.k_norm), in.positions, int(p.n_rot), base, r.freq_scale, p.rope_mode,
                 r.factors, r.attn_factor);
      Tensor* attn =
          cached_attention(g, in, l, q, k, v, kq_scale_, L.sliding ? int32_t(window_) : 0);
      x = g.add(x, norm(g.matmul(L.wo, attn), L.post_attn_norm));

      h = norm(x, L.ffn_norm);
      Tensor* ff = g.mul(g.gelu(g.matmul(L.w_gate, h)), g.matmul(L.w_up, h));
      x = g.add(x, norm(g.matmul(L.w_down, ff), L.post_ffw_norm));
    }
    return output_logits(g, in, x);
  }

 private:
  // Which layers attend over the sliding window: none without a window; else the metadata's
  // per-layer flags, or a period n (every n-th layer global; 6 when the file says nothing).
  std::vector<bool> sliding_layers(const gguf::File& f, const std::string& a) const {
    const int64_t n_layer = params_.n_layer;
    std::vector<bool> sliding(size_t(n_layer), false);
    if (window_ == 0) return sliding;
    const std::string key = a + ".attention.sliding_window_pattern";
    const gguf::Value* v = f.find(key);
    if (v && v->type == gguf::ValueType::ARRAY) {
      const std::vector<int64_t> flags = *f.get_int_array(key, 0, 1);
      if (flags.size() != size_t(n_layer))
        throw ModelError(fmt::format("{}: metadata '{}' has {} entries for {} layers", f.path(),
                                     key, flags.size(), n_layer));
      for (int64_t l = 0; l < n_layer; ++l) sliding[size_t(l)] = flags[size_t(l)] != 0;
      return sliding;
    }
    const int64_t period = f.get_int(key, 6, 0, int64_t(1) << 24);
    for (int64_t l = 0; l < n_layer; ++l)
      sliding[size_t(l)] = period == 0 || l % period < period - 1;
    return sliding;
  }

  int64_t window_ = 0;
  float swa_rope_base_ = 10000.0f;
  RopeScaling global_rope_;  // the global layers' RoPE scaling
  float kq_scale_ = 1.0f;
  std::vector<Gemma3Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_gemma3_model(const gguf::File& file) {
  return std::make_unique<Gemma3Model>(file);
}

}  // namespace ps
