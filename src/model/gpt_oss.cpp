// The gpt-oss architecture (OpenAI's gpt-oss-20b and -120b, GGUF arch "gpt-oss"). A pre-norm
// transformer whose feed-forward is a mixture of experts, differing from the qwen3moe block in:
//   - biases on Q, K, V and on the attention output;
//   - attention sinks: each query head has a learned logit (attn_sinks) that joins its softmax
//     and carries no value, so a head can attend to "nothing" (graph/ops.h);
//   - layers alternate: the even ones attend over a sliding window (attention.sliding_window)
//     with rope.freq_base_swa (default: the model's base), the odd ones over every position;
//     NeoX RoPE with the file's YaRN scaling on all of them; queries scaled by 1/sqrt(head_dim);
//   - the feed-forward's input norm is post_attention_norm (there is no ffn_norm);
//   - the router has a bias; the top k of the biased logits run, weighted by a softmax over
//     the k chosen (not normalized further); each expert adds a bias after its gate, up and
//     down projections, and joins gate and up with a clamped SwiGLU (graph/ops.h SwiGluOai).
// The experts' biases are rows of [width, E] tables picked by the chosen ids (get_rows) and
// added to the matmul_id outputs.
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace ps {
namespace {

struct GptOssLayer {
  Tensor *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo, *sinks, *post_attn_norm;
  ExpertWeightsSet experts;
  Tensor *router_bias, *gate_bias, *up_bias, *down_bias;  // [E], [n_ff_expert, E] x2, [n_embd, E]
  bool sliding;
};

class GptOssModel final : public Model {
 public:
  explicit GptOssModel(const gguf::File& f) {
    const std::string a = "gpt-oss";
    read_transformer_params(f, a);
    auto& p = params_;
    p.rope_mode = RopeMode::NeoX;
    read_expert_params(f, a, /*normalize=*/false, /*shared_expert=*/false,
                       ExpertGating::SoftmaxSelected);
    window_ = sliding_window(f, a);
    if (window_ == 0)
      throw ModelError(fmt::format(
          "{}: metadata '{}.attention.sliding_window' is missing or 0: gpt-oss's even layers "
          "attend over a sliding window",
          f.path(), a));
    swa_rope_base_ = float(f.get_float(a + ".rope.freq_base_swa", p.rope_freq_base, 1.0, 1e12));
    load_embeddings(f);
    const int64_t q_dim = p.n_head * p.head_dim, kv_dim = p.n_head_kv * p.head_dim;
    const int64_t E = p.n_expert;
    for (int64_t l = 0; l < p.n_layer; ++l) {
      auto n = [&](const char* what, const char* kind = "weight") {
        return fmt::format("blk.{}.{}.{}", l, what, kind);
      };
      auto table = [&](const char* what, int64_t width) {
        Tensor* t = weight(f, n(what, "bias"), {width, E, 1, 1});
        if (t->type != DType::F32)
          throw ModelError(fmt::format("{}: bias '{}' must be F32, not {}", f.path(),
                                       n(what, "bias"), dtype_name(t->type)));
        return t;
      };
      GptOssLayer L;
      L.attn_norm = norm_weight(f, n("attn_norm"), p.n_embd);
      L.wq = weight(f, n("attn_q"), {p.n_embd, q_dim, 1, 1});
      L.wk = weight(f, n("attn_k"), {p.n_embd, kv_dim, 1, 1});
      L.wv = weight(f, n("attn_v"), {p.n_embd, kv_dim, 1, 1});
      L.wo = weight(f, n("attn_output"), {q_dim, p.n_embd, 1, 1});
      L.bq = vector_weight(f, n("attn_q", "bias"), q_dim, "bias");
      L.bk = vector_weight(f, n("attn_k", "bias"), kv_dim, "bias");
      L.bv = vector_weight(f, n("attn_v", "bias"), kv_dim, "bias");
      L.bo = vector_weight(f, n("attn_output", "bias"), p.n_embd, "bias");
      L.sinks = vector_weight(f, n("attn_sinks"), p.n_head, "attention sinks");
      L.post_attn_norm = norm_weight(f, n("post_attention_norm"), p.n_embd);
      L.experts = expert_weights(f, l);
      L.router_bias = vector_weight(f, n("ffn_gate_inp", "bias"), E, "bias");
      L.gate_bias = table("ffn_gate_exps", p.n_ff_expert);
      L.up_bias = table("ffn_up_exps", p.n_ff_expert);
      L.down_bias = table("ffn_down_exps", p.n_embd);
      L.sliding = l % 2 == 0;
      p.layer_window.push_back(L.sliding ? window_ : 0);
      layers_.push_back(L);
    }
    rope_ = rope_scaling(nullptr);
    p.features.push_back("biases on Q, K, V, the attention output, the router and the experts");
    p.features.push_back("attention sinks (a learned logit per head)");
    p.features.push_back(fmt::format("sliding window of {} positions on the even layers{}", window_,
                                     swa_rope_base_ != p.rope_freq_base
                                         ? fmt::format(" (RoPE base {:g})", swa_rope_base_)
                                         : std::string()));
    p.features.push_back("clamped SwiGLU in the experts (limit 7, alpha 1.702)");
  }

  Tensor* build_graph(Graph& g, const ForwardInputs& in) const override {
    const auto& p = params_;
    const int64_t T = in.n_tokens, k = p.n_expert_used;
    const float kq_scale = 1.0f / std::sqrt(float(p.head_dim));
    auto norm = [&](Tensor* x, Tensor* w) { return g.mul(g.rms_norm(x, p.norm_eps), w); };
    auto project = [&](Tensor* w, Tensor* b, Tensor* x) { return g.add(g.matmul(w, x), b); };
    Tensor* x = g.get_rows(tok_embd_, in.tokens);
    for (int64_t l = 0; l < p.n_layer; ++l) {
      g.set_layer(int(l));
      const GptOssLayer& L = layers_[size_t(l)];
      const float base = L.sliding ? swa_rope_base_ : p.rope_freq_base;
      Tensor* h = norm(x, L.attn_norm);
      Tensor* q = g.reshape(project(L.wq, L.bq, h), {p.head_dim, p.n_head, T, 1});
      Tensor* kk = g.reshape(project(L.wk, L.bk, h), {p.head_dim, p.n_head_kv, T, 1});
      Tensor* v = project(L.wv, L.bv, h);
      q = g.rope(q, in.positions, int(p.n_rot), base, rope_.freq_scale, p.rope_mode, rope_.factors,
                 rope_.attn_factor);
      kk = g.rope(kk, in.positions, int(p.n_rot), base, rope_.freq_scale, p.rope_mode,
                  rope_.factors, rope_.attn_factor);
      Tensor* attn =
          cached_attention(g, in, l, q, kk, v, kq_scale, L.sliding ? int32_t(window_) : 0, L.sinks);
      x = g.add(x, project(L.wo, L.bo, attn));

      h = norm(x, L.post_attn_norm);
      g.set_experts(true);
      Tensor* logits = g.add(g.matmul(L.experts.router, h), L.router_bias);  // [E, T]
      Tensor* ids = g.top_k(logits, int32_t(k));
      Tensor* weights = g.expert_weights(logits, ids, p.expert_weights);
      Tensor* flat_ids = g.reshape(ids, {k * T, 1, 1, 1});
      // Each chosen expert's bias row beside its output: [width, k, T].
      auto bias_rows = [&](Tensor* table) {
        return g.reshape(g.get_rows(table, flat_ids), {table->ne[0], k, T, 1});
      };
      Tensor* xe = g.reshape(h, {p.n_embd, 1, T, 1});
      Tensor* up = g.add(g.matmul_id(L.experts.up_exps, xe, ids), bias_rows(L.up_bias));
      Tensor* gate = g.add(g.matmul_id(L.experts.gate_exps, xe, ids), bias_rows(L.gate_bias));
      Tensor* act = g.swiglu_oai(gate, up, SwiGluOaiParams{});
      Tensor* down = g.add(g.matmul_id(L.experts.down_exps, act, ids), bias_rows(L.down_bias));
      Tensor* out = g.expert_sum(down, weights);
      g.set_experts(false);
      x = g.add(x, out);
    }
    return output_logits(g, in, x);
  }

 private:
  std::vector<GptOssLayer> layers_;
  int64_t window_ = 0;
  float swa_rope_base_ = 10000.0f;
  RopeScaling rope_;
};

}  // namespace

std::unique_ptr<Model> make_gpt_oss_model(const gguf::File& file) {
  return std::make_unique<GptOssModel>(file);
}

}  // namespace ps
