#include "model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ps {

std::unique_ptr<Model> Model::load(const gguf::File& file) {
  const std::string arch = file.get_string("general.architecture");
  if (arch.empty())
    throw ModelError(fmt::format("{}: metadata 'general.architecture' is missing", file.path()));
  std::unique_ptr<Model> m;
  if (arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "phi3" ||
      arch == "qwen2moe" || arch == "qwen3moe")
    m = make_llama_family_model(file, arch);
  else if (arch == "gemma3")
    m = make_gemma3_model(file);
  else if (arch == "gpt-oss")
    m = make_gpt_oss_model(file);
  else
    throw ModelError(
        fmt::format("{}: architecture '{}' is not supported (supported: llama and Mixtral, "
                    "qwen2, qwen2moe, qwen3, qwen3moe, phi3, gemma3, gpt-oss)",
                    file.path(), arch));
  m->check_all_tensors_used(file);
  return m;
}

void Model::check_all_tensors_used(const gguf::File& f) {
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (used_.count(t.name)) continue;
    // Older converters stored a rotary table per layer that every runtime recomputes.
    if (t.name.ends_with(".attn_rot_embd.weight")) {
      params_.warnings.push_back(fmt::format(
          "tensor '{}' (a rotary embedding table) is not needed: RoPE is computed", t.name));
      continue;
    }
    throw ModelError(
        fmt::format("{}: tensor '{}' is not used by the {} architecture as polystack runs it; "
                    "running without it would give wrong results",
                    f.path(), t.name, params_.architecture));
  }
}

void Model::read_transformer_params(const gguf::File& f, const std::string& a) {
  auto& p = params_;
  p.architecture = a;
  p.name = f.get_string("general.name", "");
  // Every hyperparameter within sane bounds before use; the sizes of the weights they imply
  // are then checked against the file's tensors (weight()), which bounds them by the file.
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  p.n_embd = f.require_int(a + ".embedding_length", 1, kMaxDim);
  p.n_layer = f.require_int(a + ".block_count", 1, kMaxDim);
  p.n_ff = f.require_int(a + ".feed_forward_length", 1, kMaxDim);
  p.n_head = f.require_int(a + ".attention.head_count", 1, kMaxDim);
  p.n_head_kv = f.get_int(a + ".attention.head_count_kv", p.n_head, 1, kMaxDim);
  p.n_ctx_train = f.get_int(a + ".context_length", 2048, 1, kMaxDim);
  if (p.n_head % p.n_head_kv != 0)
    throw ModelError(fmt::format("{}: head_count {} is not a multiple of head_count_kv {}",
                                 f.path(), p.n_head, p.n_head_kv));
  if (!f.has(a + ".attention.key_length") && p.n_embd % p.n_head != 0)
    throw ModelError(fmt::format("{}: embedding_length {} is not a multiple of head_count {}",
                                 f.path(), p.n_embd, p.n_head));
  p.head_dim = f.get_int(a + ".attention.key_length", p.n_embd / p.n_head, 1, 1024);
  if (p.head_dim % 2 != 0)
    throw ModelError(fmt::format("{}: head dimension {} is odd", f.path(), p.head_dim));
  const int64_t v_len = f.get_int(a + ".attention.value_length", p.head_dim, 1, 1024);
  if (v_len != p.head_dim)
    throw ModelError(
        fmt::format("{}: value_length {} differs from key_length {}", f.path(), v_len, p.head_dim));
  p.n_rot = f.get_int(a + ".rope.dimension_count", p.head_dim, 1, 1024);
  if (p.n_rot > p.head_dim || p.n_rot % 2 != 0)
    throw ModelError(fmt::format("{}: rope.dimension_count {} is invalid for head size {}",
                                 f.path(), p.n_rot, p.head_dim));
  p.norm_eps = float(f.get_float(a + ".attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0));
  p.rope_freq_base = float(f.get_float(a + ".rope.freq_base", 10000.0, 1.0, 1e12));
  const std::string scaling_key = a + ".rope.scaling.type";
  const std::string scaling = f.get_string(scaling_key, "");
  float factor = float(f.get_float(a + ".rope.scaling.factor", 0.0, 0.0, 1e6));
  if (factor == 0.0f) factor = float(f.get_float(a + ".rope.scale_linear", 0.0, 0.0, 1e6));
  if (scaling.empty() || scaling == "none") {
    if (scaling.empty() && factor > 0.0f) p.rope_freq_scale = 1.0f / factor;
  } else if (scaling == "linear") {
    if (factor > 0.0f) p.rope_freq_scale = 1.0f / factor;
  } else if (scaling == "yarn") {
    read_yarn_params(f, a, factor);
  } else if (scaling == "longrope") {
    // LongRoPE's per-pair factors are tensors (rope_factors_long / _short) that llama.cpp reads
    // for llama and phi3 (the architecture picks them); a factor, if any, scales as linear does.
    if (a != "llama" && a != "phi3")
      throw ModelError(
          fmt::format("{}: metadata '{}' = 'longrope' is read for llama and phi3 (their "
                      "rope_factors_long / rope_factors_short), not {}",
                      f.path(), scaling_key, a));
    p.longrope = true;
    if (factor > 0.0f) p.rope_freq_scale = 1.0f / factor;
  } else {
    throw ModelError(
        fmt::format("{}: metadata '{}' = '{}' is not supported (none, linear, yarn, longrope)",
                    f.path(), scaling_key, scaling));
  }
  // Where the file says what it was trained for before the scaling, the factor extends that;
  // else context_length is taken as it stands (converters often give the extended one there).
  p.n_ctx_usable = p.n_ctx_train;
  const std::string orig_key = a + ".rope.scaling.original_context_length";
  if (scaling != "none" && factor > 1.0f && f.has(orig_key)) {
    const int64_t orig = f.get_int(orig_key, p.n_ctx_train, 1, int64_t(1) << 24);
    p.n_ctx_usable = std::max(p.n_ctx_train, int64_t(double(orig) * factor));
  }
}

void Model::load_embeddings(const gguf::File& f) {
  auto& p = params_;
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2)
    throw ModelError(fmt::format("{}: tensor 'token_embd.weight' is missing or not 2-D", f.path()));
  p.n_vocab = emb->dims[1];
  tok_embd_ = weight(f, "token_embd.weight", {p.n_embd, p.n_vocab, 1, 1});
  out_norm_ = norm_weight(f, "output_norm.weight", p.n_embd);
  output_ = weight(f, "output.weight", {p.n_embd, p.n_vocab, 1, 1}, /*optional=*/true);
  p.tied_output = output_ == nullptr;
  if (!output_) output_ = tok_embd_;
}

int64_t Model::sliding_window(const gguf::File& f, const std::string& arch) {
  return f.get_int(arch + ".attention.sliding_window", 0, 0, int64_t(1) << 24);
}

BlockWeights Model::block_weights(const gguf::File& f, int64_t l) {
  const auto& p = params_;
  const int64_t q_dim = p.n_head * p.head_dim, kv_dim = p.n_head_kv * p.head_dim;
  auto n = [&](const char* what) { return fmt::format("blk.{}.{}.weight", l, what); };
  BlockWeights b;
  b.attn_norm = norm_weight(f, n("attn_norm"), p.n_embd);
  b.wq = weight(f, n("attn_q"), {p.n_embd, q_dim, 1, 1});
  b.wk = weight(f, n("attn_k"), {p.n_embd, kv_dim, 1, 1});
  b.wv = weight(f, n("attn_v"), {p.n_embd, kv_dim, 1, 1});
  b.wo = weight(f, n("attn_output"), {q_dim, p.n_embd, 1, 1});
  b.ffn_norm = norm_weight(f, n("ffn_norm"), p.n_embd);
  b.w_gate = b.w_up = b.w_down = nullptr;
  if (p.n_expert > 0) return b;
  b.w_gate = weight(f, n("ffn_gate"), {p.n_embd, p.n_ff, 1, 1});
  b.w_up = weight(f, n("ffn_up"), {p.n_embd, p.n_ff, 1, 1});
  b.w_down = weight(f, n("ffn_down"), {p.n_ff, p.n_embd, 1, 1});
  return b;
}

void Model::read_yarn_params(const gguf::File& f, const std::string& a, float factor) {
  auto& p = params_;
  if (factor < 1.0f)
    throw ModelError(
        fmt::format("{}: YaRN RoPE scaling needs '{}.rope.scaling.factor' >= 1 (it "
                    "is {})",
                    f.path(), a, factor));
  const auto get = [&](const char* key, double fallback, double lo, double hi) {
    return float(f.get_float(a + ".rope.scaling." + key, fallback, lo, hi));
  };
  auto& y = p.yarn;
  y.on = true;
  p.rope_freq_scale = 1.0f / factor;
  y.n_ctx_orig =
      f.get_int(a + ".rope.scaling.original_context_length", p.n_ctx_train, 1, int64_t(1) << 24);
  // As llama.cpp: a negative or absent ext_factor means 1 for YaRN.
  y.ext_factor = get("yarn_ext_factor", -1.0, -1.0, 16.0);
  if (y.ext_factor < 0.0f) y.ext_factor = 1.0f;
  y.beta_fast = get("yarn_beta_fast", 32.0, 0.0, 1e4);
  y.beta_slow = get("yarn_beta_slow", 1.0, 0.0, 1e4);
  if (y.beta_fast <= 0.0f || y.beta_slow <= 0.0f)
    throw ModelError(fmt::format("{}: YaRN's beta_fast ({}) and beta_slow ({}) must be positive",
                                 f.path(), y.beta_fast, y.beta_slow));
  const float attn = get("attn_factor", 1.0, 0.0, 16.0);
  const float log_mul = get("yarn_log_multiplier", 0.0, 0.0, 100.0);
  if (attn <= 0.0f)
    throw ModelError(
        fmt::format("{}: metadata '{}.rope.scaling.attn_factor' = {} is out of range (0, 16]",
                    f.path(), a, attn));
  // The magnitude of cos and sin, as llama.cpp arrives at it: 1 + 0.1 ln(factor) (divided by
  // 1 + 0.1 m ln(factor) where the file has a log multiplier m), times the file's attn_factor;
  // without the ramp (ext_factor 0), the file's yarn_attn_factor instead of the first part.
  const auto mscale = [&](float m) { return 1.0f + 0.1f * m * std::log(factor); };
  if (y.ext_factor != 0.0f)
    y.mscale = attn * (log_mul != 0.0f ? mscale(1.0f) / mscale(log_mul) : mscale(1.0f));
  else
    y.mscale = attn * get("yarn_attn_factor", 1.0, 0.0, 16.0);
  p.features.push_back(fmt::format(
      "YaRN RoPE scaling (factor {:g} over an original context of {}; ext_factor {:g}, beta "
      "{:g}/{:g}, magnitude {:.4g})",
      factor, y.n_ctx_orig, y.ext_factor, y.beta_fast, y.beta_slow, y.mscale));
}

Model::RopeScaling Model::rope_scaling(Tensor* file_factors, float attn_factor) {
  const auto& p = params_;
  if (!p.yarn.on) return {file_factors, p.rope_freq_scale, attn_factor};
  const auto& y = p.yarn;
  if (y.ext_factor == 0.0f) return {file_factors, p.rope_freq_scale, y.mscale};
  // ggml's correction dimensions: the pairs that turn beta times within n_ctx_orig positions.
  const float n_dims = float(p.n_rot);
  const auto corr_dim = [&](float beta) {
    return n_dims * std::log(float(y.n_ctx_orig) / (beta * 2.0f * std::numbers::pi_v<float>)) /
           (2.0f * std::log(p.rope_freq_base));
  };
  const float low = std::max(0.0f, std::floor(corr_dim(y.beta_fast)));
  const float high = std::min(n_dims - 1.0f, std::ceil(corr_dim(y.beta_slow)));
  // Pair i: theta = theta_extrap * (freq_scale * (1 - ramp) + ramp), which the rope op takes as
  // a frequency factor (it divides by it) over whatever factors the file has.
  std::vector<float> factors(size_t(p.n_rot / 2));
  for (size_t i = 0; i < factors.size(); ++i) {
    const float t = (float(i) - low) / std::max(0.001f, high - low);
    const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, t))) * y.ext_factor;
    const float file = file_factors ? reinterpret_cast<const float*>(file_factors->data)[i] : 1.0f;
    factors[i] = file / (p.rope_freq_scale * (1.0f - ramp) + ramp);
  }
  return {owned_vector("rope_yarn_factors", std::move(factors)), 1.0f, y.mscale};
}

Tensor* Model::owned_vector(const std::string& name, std::vector<float> values) {
  const std::vector<float>& v = owned_values_.emplace_back(std::move(values));
  Tensor& t = weights_.emplace_back();
  t.name = name;
  t.type = DType::F32;
  t.ne = {int64_t(v.size()), 1, 1, 1};
  t.set_contiguous_strides();
  t.data = reinterpret_cast<uint8_t*>(const_cast<float*>(v.data()));
  t.constant = true;
  return &t;
}

Tensor* Model::vector_weight(const gguf::File& f, const std::string& name, int64_t n,
                             const char* what, bool optional) {
  Tensor* t = weight(f, name, {n, 1, 1, 1}, optional);
  if (t && t->type != DType::F32)
    throw ModelError(
        fmt::format("{}: {} '{}' must be F32, not {}", f.path(), what, name, dtype_name(t->type)));
  return t;
}

Tensor* Model::row_slice(const Tensor* w, int64_t first, int64_t n, const std::string& name) {
  Tensor& t = weights_.emplace_back(*w);
  t.name = name;
  t.ne[1] = n;
  t.set_contiguous_strides();
  t.data = static_cast<uint8_t*>(w->data) + size_t(first) * w->nb[1];
  return &t;
}

Tensor* Model::norm_weight(const gguf::File& f, const std::string& name, int64_t n) {
  return vector_weight(f, name, n, "norm weight");
}

int64_t kv_slots(const ModelParams& p, int64_t layer, int64_t n_ctx, int64_t n_batch) {
  const int64_t window = p.layer_window.empty() ? 0 : p.layer_window[size_t(layer)];
  return window > 0 ? std::min(n_ctx, window + n_batch - 1) : n_ctx;
}

size_t kv_row_bytes(const ModelParams& p) { return size_t(p.head_dim * p.n_head_kv) * 2; }

Tensor* Model::cached_attention(Graph& g, const ForwardInputs& in, int64_t layer, Tensor* q,
                                Tensor* k, Tensor* v, float scale, int32_t window,
                                Tensor* sinks) const {
  const auto& p = params_;
  const int64_t T = in.n_tokens;
  Tensor* kc = in.k_cache[size_t(layer)];
  Tensor* vc = in.v_cache[size_t(layer)];
  const int64_t kv_dim = p.head_dim * p.n_head_kv, slots = kc->ne[2];
  // This batch's positions [n_past, n_past + T) go to slots from n_past % slots on, in two runs
  // where they wrap around the end of a ring.
  const int64_t first_slot = in.n_past % slots;
  const int64_t run0 = std::min(T, slots - first_slot);
  Tensor* k2 = g.reshape(k, {kv_dim, T, 1, 1});
  auto columns = [&](Tensor* t, int64_t from, int64_t n) {
    return g.view(t, {kv_dim, n, 1, 1}, {t->nb[0], t->nb[1], t->nb[1] * n, t->nb[1] * n},
                  size_t(from) * t->nb[1]);
  };
  auto slots_of = [&](Tensor* cache, int64_t from, int64_t n) {
    return g.view(cache, {kv_dim, n, 1, 1},
                  {cache->nb[0], cache->nb[2], cache->nb[2] * n, cache->nb[2] * n},
                  size_t(from) * cache->nb[2]);
  };
  if (!in.kv_layout.empty()) {
    // The keys and values into their cells, then one attention over every token.
    const ForwardInputs::KvLayout& L = *in.kv_layout[size_t(layer)];
    for (const ForwardInputs::KvWrite& w : L.writes)
      for (auto [src, cache] : {std::pair{k2, kc}, std::pair{v, vc}})
        g.copy(columns(src, w.first_token, w.n_tokens), slots_of(cache, w.cell, w.n_tokens));
    Tensor* attn = g.attention_paged(q, kc, vc, L.token_info, scale, window, sinks);
    return g.reshape(attn, {p.head_dim * p.n_head, T, 1, 1});
  }
  for (auto [src, cache] : {std::pair{k2, kc}, std::pair{v, vc}}) {
    if (run0 == T) {
      g.copy(src, slots_of(cache, first_slot, T));
    } else {
      g.copy(columns(src, 0, run0), slots_of(cache, first_slot, run0));
      g.copy(columns(src, run0, T - run0), slots_of(cache, 0, T - run0));
    }
  }
  Tensor* attn = g.attention(q, kc, vc, in.n_past, scale, window, sinks);
  return g.reshape(attn, {p.head_dim * p.n_head, T, 1, 1});
}

Tensor* Model::output_logits(Graph& g, const ForwardInputs& in, Tensor* x) const {
  const auto& p = params_;
  g.set_layer(int(p.n_layer));
  if (in.hidden_rows) {
    Tensor* h = g.get_rows(x, in.hidden_rows);
    h = g.mul(g.rms_norm(h, p.norm_eps), out_norm_);
    if (in.hidden) *in.hidden = h;
    if (in.no_logits) return h;
  }
  if (in.out_rows)
    x = g.get_rows(x, in.out_rows);
  else if (!in.all_logits && in.n_tokens > 1)
    x = g.view(x, {p.n_embd, 1, 1, 1}, x->nb, size_t(in.n_tokens - 1) * x->nb[1]);
  x = g.mul(g.rms_norm(x, p.norm_eps), out_norm_);
  return g.matmul(output_, x);
}

Tensor* Model::weight(const gguf::File& f, const std::string& name, std::array<int64_t, 4> ne,
                      bool optional) {
  const gguf::TensorInfo* ti = f.find_tensor(name);
  if (!ti) {
    if (optional) return nullptr;
    throw ModelError(fmt::format("{}: tensor '{}' is missing", f.path(), name));
  }
  std::array<int64_t, 4> have{1, 1, 1, 1};
  for (size_t d = 0; d < ti->dims.size(); ++d) have[d] = ti->dims[d];
  if (have != ne)
    throw ModelError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", f.path(), name,
                                 fmt::join(have, ", "), fmt::join(ne, ", ")));
  const auto& info = dtype_info(ti->type);
  if (!info.computable)
    throw ModelError(fmt::format("{}: tensor '{}' has type {}, which polystack cannot compute yet",
                                 f.path(), name, info.name));
  used_.insert(name);
  Tensor& t = weights_.emplace_back();
  t.name = name;
  t.type = ti->type;
  t.ne = ne;
  t.set_contiguous_strides();
  t.data = const_cast<uint8_t*>(ti->data);  // read-only mapping; kernels never write weights
  t.constant = true;
  params_.n_params += uint64_t(ti->n_elements());
  params_.weight_bytes += ti->nbytes;
  return &t;
}

}  // namespace ps
