// The mixture-of-experts feed-forward that qwen2moe, qwen3moe and Mixtral (llama with
// experts) share: a router picks n_expert_used of n_expert experts per token, each a SwiGLU
// feed-forward, and their outputs are summed weighted by the router's probabilities (llama.cpp's
// build_moe_ffn); qwen2moe adds a shared expert that every token runs, scaled by a sigmoid gate.
#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace ps {

namespace {

// The largest expert count accepted: llama.cpp's limit is 512; real files have up to 384.
constexpr int64_t kMaxExperts = 1024;

const char* gating_name(ExpertGating g) {
  switch (g) {
    case ExpertGating::Softmax:
      return "softmax";
    case ExpertGating::Sigmoid:
      return "sigmoid";
    case ExpertGating::SoftmaxSelected:
      return "softmax over the chosen";
  }
  return "?";
}

}  // namespace

void Model::read_expert_params(const gguf::File& f, const std::string& a, bool normalize,
                               bool shared_expert, ExpertGating gating_fn) {
  auto& p = params_;
  p.n_expert = f.get_int(a + ".expert_count", 0, 0, kMaxExperts);
  if (p.n_expert == 0) {
    if (shared_expert || a.ends_with("moe") || a == "gpt-oss")
      throw ModelError(
          fmt::format("{}: metadata '{}.expert_count' is missing or 0: a {} model "
                      "has experts",
                      f.path(), a, a));
    return;
  }
  p.n_expert_used = f.require_int(a + ".expert_used_count", 1, p.n_expert);
  // Mixtral's experts are feed_forward_length wide; the qwen families state their width, else
  // (as llama.cpp) the dense width shared among the experts used.
  const int64_t fallback = a == "llama" ? p.n_ff : std::max<int64_t>(1, p.n_ff / p.n_expert_used);
  p.n_ff_expert = f.get_int(a + ".expert_feed_forward_length", fallback, 1, int64_t(1) << 24);
  if (shared_expert)
    p.n_ff_shared =
        f.get_int(a + ".expert_shared_feed_forward_length", p.n_ff, 1, int64_t(1) << 24);
  // These families route by softmax (llama.cpp hard-codes it for them); a file that states
  // another function is not one of them as polystack runs it.
  const int64_t gating = f.get_int(a + ".expert_gating_func", 1, 0, 3);
  if (gating != 0 && gating != 1)
    throw ModelError(
        fmt::format("{}: metadata '{}.expert_gating_func' = {}: {} routes experts by softmax (1)",
                    f.path(), a, gating, a));
  p.expert_weights.gating = gating_fn;
  p.expert_weights.normalize = normalize;
  const double scale = f.get_float(a + ".expert_weights_scale", 0.0, 0.0, 1e6);
  p.expert_weights.scale = scale > 0.0 ? float(scale) : 1.0f;

  std::string text =
      fmt::format("mixture of experts: {} of {} experts per token, {} wide; {} gating{}",
                  p.n_expert_used, p.n_expert, p.n_ff_expert, gating_name(p.expert_weights.gating),
                  normalize ? ", weights normalized to sum 1" : "");
  if (p.expert_weights.scale != 1.0f)
    text += fmt::format(", scaled by {:.4g}", p.expert_weights.scale);
  p.features.push_back(text);
  if (shared_expert)
    p.features.push_back(
        fmt::format("a shared expert {} wide, gated by a sigmoid per token", p.n_ff_shared));
}

ExpertWeightsSet Model::expert_weights(const gguf::File& f, int64_t l) {
  const auto& p = params_;
  auto n = [&](const char* what) { return fmt::format("blk.{}.{}.weight", l, what); };
  // Older conversions of Mixtral stored each expert as a tensor of its own.
  if (!f.find_tensor(n("ffn_gate_exps")) &&
      f.find_tensor(fmt::format("blk.{}.ffn_gate.0.weight", l)))
    throw ModelError(fmt::format(
        "{}: the experts are stored one tensor per expert ('blk.{}.ffn_gate.0.weight'), an older "
        "layout polystack does not read; convert the model again with a current "
        "convert_hf_to_gguf.py",
        f.path(), l));
  ExpertWeightsSet w;
  w.router = weight(f, n("ffn_gate_inp"), {p.n_embd, p.n_expert, 1, 1});
  w.gate_exps = weight(f, n("ffn_gate_exps"), {p.n_embd, p.n_ff_expert, p.n_expert, 1});
  w.up_exps = weight(f, n("ffn_up_exps"), {p.n_embd, p.n_ff_expert, p.n_expert, 1});
  w.down_exps = weight(f, n("ffn_down_exps"), {p.n_ff_expert, p.n_embd, p.n_expert, 1});
  if (p.n_ff_shared > 0) {
    w.shared_router = weight(f, n("ffn_gate_inp_shexp"), {p.n_embd, 1, 1, 1});
    w.shared_gate = weight(f, n("ffn_gate_shexp"), {p.n_embd, p.n_ff_shared, 1, 1});
    w.shared_up = weight(f, n("ffn_up_shexp"), {p.n_embd, p.n_ff_shared, 1, 1});
    w.shared_down = weight(f, n("ffn_down_shexp"), {p.n_ff_shared, p.n_embd, 1, 1});
  }
  return w;
}

Tensor* Model::experts_ffn(Graph& g, const ExpertWeightsSet& w, Tensor* h) const {
  const auto& p = params_;
  const int64_t T = h->ne[1];
  // The router and the routed experts may run apart from the layer (PlacementPlan::
  // experts_on_cpu): only h goes over and their sum comes back.
  g.set_experts(true);
  Tensor* logits = g.matmul(w.router, h);  // [E, T]
  Tensor* ids = g.top_k(logits, int32_t(p.n_expert_used));
  Tensor* weights = g.expert_weights(logits, ids, p.expert_weights);
  Tensor* x = g.reshape(h, {p.n_embd, 1, T, 1});
  Tensor* up = g.matmul_id(w.up_exps, x, ids);  // [n_ff_expert, k, T]
  Tensor* gate = g.matmul_id(w.gate_exps, x, ids);
  Tensor* down = g.matmul_id(w.down_exps, g.swiglu(gate, up), ids);  // [n_embd, k, T]
  Tensor* out = g.expert_sum(down, weights);
  g.set_experts(false);
  if (!w.shared_router) return out;
  // The shared expert's output is an "expert" of its own whose weight is sigmoid(router . x).
  Tensor* gate_value = g.sigmoid(g.matmul(w.shared_router, h));  // [1, T]
  Tensor* shared =
      g.matmul(w.shared_down, g.swiglu(g.matmul(w.shared_gate, h), g.matmul(w.shared_up, h)));
  return g.add(out, g.expert_sum(g.reshape(shared, {p.n_embd, 1, T, 1}), gate_value));
}

}  // namespace ps
