// The llama architecture (Llama 1/2/3, Mistral, TinyLlama, SmolLM): pre-norm blocks with
// grouped-query attention and a SwiGLU feed-forward, RoPE in GGUF's adjacent-pair layout.
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace ps {
namespace {

struct LlamaLayer {
  Tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
};

class LlamaModel final : public Model {
 public:
  explicit LlamaModel(const gguf::File& f) {
    auto& p = params_;
    const std::string a = "llama";
    p.architecture = a;
    p.name = f.get_string("general.name", "");
    auto req = [&](const std::string& key) {
      const int64_t v = f.require_int(key);
      if (v <= 0 || v > (int64_t(1) << 24))
        throw ModelError(fmt::format("{}: metadata '{}' = {} is out of range", f.path(), key, v));
      return v;
    };
    p.n_embd = req(a + ".embedding_length");
    p.n_layer = req(a + ".block_count");
    p.n_ff = req(a + ".feed_forward_length");
    p.n_head = req(a + ".attention.head_count");
    p.n_head_kv =
        f.has(a + ".attention.head_count_kv") ? req(a + ".attention.head_count_kv") : p.n_head;
    p.n_ctx_train = f.get_int(a + ".context_length", 2048);
    if (p.n_embd % p.n_head != 0)
      throw ModelError(fmt::format("{}: embedding_length {} is not a multiple of head_count {}",
                                   f.path(), p.n_embd, p.n_head));
    if (p.n_head % p.n_head_kv != 0)
      throw ModelError(fmt::format("{}: head_count {} is not a multiple of head_count_kv {}",
                                   f.path(), p.n_head, p.n_head_kv));
    p.head_dim = f.get_int(a + ".attention.key_length", p.n_embd / p.n_head);
    if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.head_dim > 1024)
      throw ModelError(fmt::format("{}: head dimension {} is invalid", f.path(), p.head_dim));
    p.n_rot = f.get_int(a + ".rope.dimension_count", p.head_dim);
    if (p.n_rot <= 0 || p.n_rot > p.head_dim || p.n_rot % 2 != 0)
      throw ModelError(fmt::format("{}: rope.dimension_count {} is invalid for head size {}",
                                   f.path(), p.n_rot, p.head_dim));
    p.norm_eps = float(f.get_float(a + ".attention.layer_norm_rms_epsilon", 1e-5));
    p.rope_freq_base = float(f.get_float(a + ".rope.freq_base", 10000.0));
    const std::string scaling = f.get_string(a + ".rope.scaling.type", "");
    float factor = float(f.get_float(a + ".rope.scaling.factor", 0.0));
    if (factor == 0.0f) factor = float(f.get_float(a + ".rope.scale_linear", 0.0));
    if (scaling.empty() || scaling == "none") {
      if (scaling.empty() && factor > 0.0f) p.rope_freq_scale = 1.0f / factor;
    } else if (scaling == "linear") {
      if (factor > 0.0f) p.rope_freq_scale = 1.0f / factor;
    } else {
      throw ModelError(fmt::format("{}: rope scaling type '{}' is not supported (none, linear)",
                                   f.path(), scaling));
    }

    const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
    if (!emb || emb->dims.size() != 2)
      throw ModelError(
          fmt::format("{}: tensor 'token_embd.weight' is missing or not 2-D", f.path()));
    p.n_vocab = emb->dims[1];
    tok_embd_ = weight(f, "token_embd.weight", {p.n_embd, p.n_vocab, 1, 1});
    out_norm_ = weight(f, "output_norm.weight", {p.n_embd, 1, 1, 1});
    output_ = weight(f, "output.weight", {p.n_embd, p.n_vocab, 1, 1}, /*optional=*/true);
    p.tied_output = output_ == nullptr;
    if (!output_) output_ = tok_embd_;

    const int64_t q_dim = p.n_head * p.head_dim, kv_dim = p.n_head_kv * p.head_dim;
    for (int64_t l = 0; l < p.n_layer; ++l) {
      auto n = [&](const char* what) { return fmt::format("blk.{}.{}.weight", l, what); };
      LlamaLayer L;
      L.attn_norm = weight(f, n("attn_norm"), {p.n_embd, 1, 1, 1});
      L.wq = weight(f, n("attn_q"), {p.n_embd, q_dim, 1, 1});
      L.wk = weight(f, n("attn_k"), {p.n_embd, kv_dim, 1, 1});
      L.wv = weight(f, n("attn_v"), {p.n_embd, kv_dim, 1, 1});
      L.wo = weight(f, n("attn_output"), {q_dim, p.n_embd, 1, 1});
      L.ffn_norm = weight(f, n("ffn_norm"), {p.n_embd, 1, 1, 1});
      L.w_gate = weight(f, n("ffn_gate"), {p.n_embd, p.n_ff, 1, 1});
      L.w_up = weight(f, n("ffn_up"), {p.n_embd, p.n_ff, 1, 1});
      L.w_down = weight(f, n("ffn_down"), {p.n_ff, p.n_embd, 1, 1});
      for (Tensor* norm : {L.attn_norm, L.ffn_norm})
        if (norm->type != DType::F32)
          throw ModelError(fmt::format("{}: norm weight '{}' must be F32, not {}", f.path(),
                                       norm->name, dtype_name(norm->type)));
      layers_.push_back(L);
    }
  }

  Tensor* build_graph(Graph& g, const ForwardInputs& in) const override {
    const auto& p = params_;
    const int64_t T = in.n_tokens;
    const float kq_scale = 1.0f / std::sqrt(float(p.head_dim));
    Tensor* x = g.get_rows(tok_embd_, in.tokens);
    for (int64_t l = 0; l < p.n_layer; ++l) {
      const LlamaLayer& L = layers_[size_t(l)];
      Tensor* h = g.mul(g.rms_norm(x, p.norm_eps), L.attn_norm);
      Tensor* q = g.reshape(g.matmul(L.wq, h), {p.head_dim, p.n_head, T, 1});
      Tensor* k = g.reshape(g.matmul(L.wk, h), {p.head_dim, p.n_head_kv, T, 1});
      Tensor* v = g.matmul(L.wv, h);
      q = g.rope(q, in.positions, int(p.n_rot), p.rope_freq_base, p.rope_freq_scale, p.rope_mode);
      k = g.rope(k, in.positions, int(p.n_rot), p.rope_freq_base, p.rope_freq_scale, p.rope_mode);
      Tensor* kc = in.k_cache[size_t(l)];
      Tensor* vc = in.v_cache[size_t(l)];
      // This batch's slice of the cache: positions [n_past, n_past + T).
      const int64_t kv_dim = p.head_dim * p.n_head_kv;
      auto slot = [&](Tensor* cache) {
        return g.view(cache, {kv_dim, T, 1, 1},
                      {cache->nb[0], cache->nb[2], cache->nb[2] * T, cache->nb[2] * T},
                      size_t(in.n_past) * cache->nb[2]);
      };
      g.copy(g.reshape(k, {kv_dim, T, 1, 1}), slot(kc));
      g.copy(v, slot(vc));
      Tensor* attn = g.attention(q, kc, vc, in.n_past, kq_scale);
      attn = g.reshape(attn, {p.head_dim * p.n_head, T, 1, 1});
      x = g.add(x, g.matmul(L.wo, attn));

      h = g.mul(g.rms_norm(x, p.norm_eps), L.ffn_norm);
      Tensor* ff = g.swiglu(g.matmul(L.w_gate, h), g.matmul(L.w_up, h));
      x = g.add(x, g.matmul(L.w_down, ff));
    }
    if (!in.all_logits && T > 1)
      x = g.view(x, {p.n_embd, 1, 1, 1}, x->nb, size_t(T - 1) * x->nb[1]);
    x = g.mul(g.rms_norm(x, p.norm_eps), out_norm_);
    return g.matmul(output_, x);
  }

 private:
  Tensor *tok_embd_ = nullptr, *out_norm_ = nullptr, *output_ = nullptr;
  std::vector<LlamaLayer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_llama_model(const gguf::File& file) {
  return std::make_unique<LlamaModel>(file);
}

}  // namespace ps
