// The llama architecture and the families built on the same pre-norm block (grouped-query
// attention, a SwiGLU feed-forward):
//   llama  Llama 1/2/3, Mistral, TinyLlama, SmolLM: RoPE on adjacent pairs (GGUF's layout of
//          llama's Q and K rows); Llama 3.1+ files carry rope_freqs.weight, per-pair frequency
//          factors; with rope.scaling.type "longrope", LongRoPE's factors as phi3 has them.
//   qwen2  Qwen 2 / 2.5 (and DeepSeek-R1-Distill-Qwen): biases on Q, K and V; NeoX RoPE.
//   qwen3  dense Qwen 3: RMSNorm of each query and key head (QK-norm) before RoPE; a head size
//          of its own (attention.key_length); NeoX RoPE.
//   phi3   Phi-3 / 3.5 / 4-mini: Q, K and V in one tensor (attn_qkv) and gate and up in one
//          (ffn_up: gate rows first), used as row slices of the file mapping; NeoX RoPE over
//          rope.dimension_count; LongRoPE: rope_factors_short or rope_factors_long by the
//          context the session runs with, and rope.scaling.attn_factor on the rotated values;
//          a sliding window over every layer where the file sets one.
//   With experts (src/model/moe.cpp) in place of the dense feed-forward:
//   llama     Mixtral: llama with expert_count > 0; top-k of a softmax, weights normalized.
//   qwen2moe  Qwen1.5-MoE / Qwen2-MoE: qwen2's attention; top-k of a softmax, not normalized,
//             plus a shared expert gated by a sigmoid.
//   qwen3moe  Qwen3-30B-A3B / 235B-A22B: qwen3's attention; top-k of a softmax, normalized.
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace ps {
namespace {

struct FamilyLayer : BlockWeights {
  Tensor *bq = nullptr, *bk = nullptr, *bv = nullptr;  // qwen2
  Tensor *q_norm = nullptr, *k_norm = nullptr;         // qwen3
  ExpertWeightsSet experts;                            // with experts (router set)
};

class LlamaFamilyModel final : public Model {
 public:
  LlamaFamilyModel(const gguf::File& f, const std::string& a) {
    read_transformer_params(f, a);
    auto& p = params_;
    const bool qwen2 = a == "qwen2" || a == "qwen2moe", qwen3 = a == "qwen3" || a == "qwen3moe",
               phi3 = a == "phi3";
    if (a != "llama") p.rope_mode = RopeMode::NeoX;
    if (a == "llama" || a == "qwen2moe" || a == "qwen3moe")
      read_expert_params(f, a, /*normalize=*/a != "qwen2moe", /*shared_expert=*/a == "qwen2moe");
    load_embeddings(f);
    const int64_t q_dim = p.n_head * p.head_dim, kv_dim = p.n_head_kv * p.head_dim;

    if (a == "llama" && !p.longrope) {
      rope_factors_ = vector_weight(f, "rope_freqs.weight", p.n_rot / 2, "RoPE frequency factors",
                                    /*optional=*/true);
      if (rope_factors_)
        p.features.push_back("RoPE frequency factors (rope_freqs.weight, Llama 3.1 style)");
    }
    if (phi3 || p.longrope) {
      factors_short_ = vector_weight(f, "rope_factors_short.weight", p.n_rot / 2,
                                     "LongRoPE factors", /*optional=*/true);
      factors_long_ = vector_weight(f, "rope_factors_long.weight", p.n_rot / 2, "LongRoPE factors",
                                    /*optional=*/true);
      if ((factors_short_ == nullptr) != (factors_long_ == nullptr))
        throw ModelError(fmt::format(
            "{}: the file has only one of rope_factors_short.weight and rope_factors_long.weight",
            f.path()));
      const std::string orig_key = a + ".rope.scaling.original_context_length";
      n_ctx_orig_ = f.get_int(orig_key, p.n_ctx_train, 1, int64_t(1) << 24);
      const std::string attn_key = a + ".rope.scaling.attn_factor";
      attn_factor_ = float(f.get_float(attn_key, 1.0, 0.0, 16.0));
      if (attn_factor_ <= 0.0f)
        throw ModelError(fmt::format("{}: metadata '{}' = {} is out of range (0, 16]", f.path(),
                                     attn_key, attn_factor_));
      if (factors_long_)
        p.features.push_back(fmt::format(
            "LongRoPE (short factors up to a context of {}, long beyond; attn_factor {:.4g})",
            n_ctx_orig_, attn_factor_));
      else if (p.longrope)
        throw ModelError(fmt::format(
            "{}: rope.scaling.type is 'longrope' but the file has no rope_factors_long.weight "
            "and rope_factors_short.weight",
            f.path()));
    }
    if (phi3) {
      window_ = sliding_window(f, a);
      if (window_ > 0) {
        p.layer_window.assign(size_t(p.n_layer), window_);
        p.features.push_back(fmt::format("sliding window of {} positions on every layer", window_));
      }
    }
    if (p.yarn.on && factors_long_)
      throw ModelError(
          fmt::format("{}: the file has both LongRoPE factors and YaRN scaling", f.path()));
    rope_ = rope_scaling(rope_factors_, attn_factor_);
    if (qwen2) p.features.push_back("biases on Q, K and V");
    if (qwen3) p.features.push_back("QK-norm (RMSNorm of each query and key head)");
    if (phi3) p.features.push_back("fused QKV and gate+up weights, used as row slices");

    for (int64_t l = 0; l < p.n_layer; ++l) {
      auto n = [&](const char* what, const char* kind = "weight") {
        return fmt::format("blk.{}.{}.{}", l, what, kind);
      };
      FamilyLayer L;
      if (!phi3) {
        static_cast<BlockWeights&>(L) = block_weights(f, l);
      } else {
        L.attn_norm = norm_weight(f, n("attn_norm"), p.n_embd);
        if (f.find_tensor(n("attn_qkv"))) {
          Tensor* qkv = weight(f, n("attn_qkv"), {p.n_embd, q_dim + 2 * kv_dim, 1, 1});
          L.wq = row_slice(qkv, 0, q_dim, n("attn_qkv[q]"));
          L.wk = row_slice(qkv, q_dim, kv_dim, n("attn_qkv[k]"));
          L.wv = row_slice(qkv, q_dim + kv_dim, kv_dim, n("attn_qkv[v]"));
        } else {
          L.wq = weight(f, n("attn_q"), {p.n_embd, q_dim, 1, 1});
          L.wk = weight(f, n("attn_k"), {p.n_embd, kv_dim, 1, 1});
          L.wv = weight(f, n("attn_v"), {p.n_embd, kv_dim, 1, 1});
        }
        L.wo = weight(f, n("attn_output"), {q_dim, p.n_embd, 1, 1});
        L.ffn_norm = norm_weight(f, n("ffn_norm"), p.n_embd);
        Tensor* up = weight(f, n("ffn_up"), {p.n_embd, 2 * p.n_ff, 1, 1});
        L.w_gate = row_slice(up, 0, p.n_ff, n("ffn_up[gate]"));
        L.w_up = row_slice(up, p.n_ff, p.n_ff, n("ffn_up[up]"));
        L.w_down = weight(f, n("ffn_down"), {p.n_ff, p.n_embd, 1, 1});
      }
      if (qwen2) {
        L.bq = vector_weight(f, n("attn_q", "bias"), q_dim, "bias");
        L.bk = vector_weight(f, n("attn_k", "bias"), kv_dim, "bias");
        L.bv = vector_weight(f, n("attn_v", "bias"), kv_dim, "bias");
      }
      if (qwen3) {
        L.q_norm = norm_weight(f, n("attn_q_norm"), p.head_dim);
        L.k_norm = norm_weight(f, n("attn_k_norm"), p.head_dim);
      }
      if (p.n_expert > 0) L.experts = expert_weights(f, l);
      layers_.push_back(L);
    }
  }

  Tensor* build_graph(Graph& g, const ForwardInputs& in) const override {
    const auto& p = params_;
    const int64_t T = in.n_tokens;
    const float kq_scale = 1.0f / std::sqrt(float(p.head_dim));
    auto norm = [&](Tensor* x, Tensor* w) { return g.mul(g.rms_norm(x, p.norm_eps), w); };
    auto project = [&](Tensor* w, Tensor* b, Tensor* x) {
      Tensor* y = g.matmul(w, x);
      return b ? g.add(y, b) : y;
    };
    // LongRoPE picks its factors once, by the context a sequence runs with (as llama.cpp).
    RopeScaling r = rope_;
    if (factors_long_) r.factors = in.n_ctx > n_ctx_orig_ ? factors_long_ : factors_short_;
    Tensor* x = g.get_rows(tok_embd_, in.tokens);
    for (int64_t l = 0; l < p.n_layer; ++l) {
      g.set_layer(int(l));
      const FamilyLayer& L = layers_[size_t(l)];
      Tensor* h = norm(x, L.attn_norm);
      Tensor* q = g.reshape(project(L.wq, L.bq, h), {p.head_dim, p.n_head, T, 1});
      Tensor* k = g.reshape(project(L.wk, L.bk, h), {p.head_dim, p.n_head_kv, T, 1});
      Tensor* v = project(L.wv, L.bv, h);
      if (L.q_norm) {
        q = norm(q, L.q_norm);
        k = norm(k, L.k_norm);
      }
      q = g.rope(q, in.positions, int(p.n_rot), p.rope_freq_base, r.freq_scale, p.rope_mode,
                 r.factors, r.attn_factor);
      k = g.rope(k, in.positions, int(p.n_rot), p.rope_freq_base, r.freq_scale, p.rope_mode,
                 r.factors, r.attn_factor);
      Tensor* attn = cached_attention(g, in, l, q, k, v, kq_scale, int32_t(window_));
      x = g.add(x, g.matmul(L.wo, attn));

      h = norm(x, L.ffn_norm);
      if (L.experts.router) {
        x = g.add(x, experts_ffn(g, L.experts, h));
      } else {
        Tensor* ff = g.swiglu(g.matmul(L.w_gate, h), g.matmul(L.w_up, h));
        x = g.add(x, g.matmul(L.w_down, ff));
      }
    }
    return output_logits(g, in, x);
  }

 private:
  std::vector<FamilyLayer> layers_;
  Tensor* rope_factors_ = nullptr;                             // llama: rope_freqs
  Tensor *factors_short_ = nullptr, *factors_long_ = nullptr;  // phi3: LongRoPE
  int64_t n_ctx_orig_ = 0;
  float attn_factor_ = 1.0f;
  RopeScaling rope_;  // the rope op's factors, scale and magnitude (phi3: LongRoPE's by n_ctx)
  int64_t window_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_llama_family_model(const gguf::File& file, const std::string& arch) {
  return std::make_unique<LlamaFamilyModel>(file, arch);
}

}  // namespace ps
