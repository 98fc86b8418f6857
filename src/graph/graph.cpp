#include "graph/graph.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "core/error.h"
#include "graph/ops.h"

namespace ps {

namespace {

std::string shape(const Tensor* t) {
  return fmt::format("{}[{},{},{},{}]", dtype_name(t->type), t->ne[0], t->ne[1], t->ne[2],
                     t->ne[3]);
}

[[noreturn]] void bad_shapes(OpKind op, const Tensor* a, const Tensor* b) {
  throw ModelError(fmt::format("{}: incompatible shapes {} and {} ({} and {})", op_name(op),
                               shape(a), shape(b), a->name, b ? b->name : ""));
}

bool broadcasts_rows(const Tensor* a, const Tensor* b) {
  if (a->ne[0] != b->ne[0]) return false;
  for (int d = 1; d < 4; ++d)
    if (b->ne[d] != 1 && b->ne[d] != a->ne[d]) return false;
  return true;
}

}  // namespace

Tensor& Graph::add_tensor() {
  if (all_.size() == storage_.size() * kChunk)
    storage_.push_back(std::make_unique<Tensor[]>(kChunk));
  Tensor& t = storage_.back()[all_.size() % kChunk];
  t.index = int32_t(all_.size());
  all_.push_back(&t);
  return t;
}

Tensor* Graph::leaf(std::string name, DType type, std::array<int64_t, 4> ne, void* data) {
  Tensor& t = add_tensor();
  t.name = std::move(name);
  t.type = type;
  t.ne = ne;
  t.data = data;
  if (ne[0] % block_size(type) != 0)
    throw ModelError(fmt::format("tensor '{}': row of {} is not a whole number of {} blocks",
                                 t.name, ne[0], dtype_name(type)));
  t.set_contiguous_strides();
  return &t;
}

void Graph::keep_nodes(const std::vector<bool>& keep) {
  std::erase_if(nodes_, [&](const Tensor* t) { return !keep.at(size_t(t->index)); });
}

void Graph::make_leaf(Tensor* t, void* data) {
  if (!t->is_contiguous())
    throw ModelError(
        fmt::format("tensor '{}' is not contiguous: it cannot come from another rank", t->name));
  t->op = OpKind::None;
  t->src = {};
  t->iparams = {};
  t->fparams = {};
  t->view_offset = 0;
  t->data = data;
  t->constant = false;
  t->set_contiguous_strides();
  std::erase(nodes_, t);
}

Tensor* Graph::node(OpKind op, DType type, std::array<int64_t, 4> ne,
                    std::initializer_list<Tensor*> src) {
  Tensor& t = add_tensor();
  t.op = op;
  t.type = type;
  t.ne = ne;
  t.set_contiguous_strides();
  int i = 0;
  for (Tensor* s : src) t.src[size_t(i++)] = s;
  // op#n, without a formatting library's machinery: a decode step names hundreds of nodes.
  char number[24];
  const auto end = std::to_chars(number, number + sizeof number, nodes_.size()).ptr;
  t.name = op_name(op);
  t.name += '#';
  t.name.append(number, end);
  t.layer = layer_;
  t.experts = experts_;
  nodes_.push_back(&t);
  return &t;
}

Tensor* Graph::view(Tensor* t, std::array<int64_t, 4> ne, std::array<size_t, 4> nb, size_t offset) {
  Tensor* v = node(OpKind::View, t->type, ne, {t});
  v->nb = nb;
  v->view_offset = offset;
  if (v->n_bytes() + offset > t->n_bytes())
    throw ModelError(
        fmt::format("view of {} with shape {} at offset {} exceeds it", t->name, shape(v), offset));
  return v;
}

Tensor* Graph::reshape(Tensor* t, std::array<int64_t, 4> ne) {
  if (!t->is_contiguous() || ne[0] * ne[1] * ne[2] * ne[3] != t->n_elements())
    throw ModelError(fmt::format("reshape of {} {} to [{},{},{},{}] is not possible", t->name,
                                 shape(t), ne[0], ne[1], ne[2], ne[3]));
  Tensor probe;
  probe.type = t->type;
  probe.ne = ne;
  probe.set_contiguous_strides();
  return view(t, ne, probe.nb, 0);
}

Tensor* Graph::get_rows(Tensor* table, Tensor* ids) {
  if (ids->type != DType::I32 || ids->ne[1] != 1) bad_shapes(OpKind::GetRows, table, ids);
  return node(OpKind::GetRows, DType::F32, {table->ne[0], ids->ne[0], 1, 1}, {table, ids});
}

Tensor* Graph::matmul(Tensor* w, Tensor* x) {
  if (w->ne[0] != x->ne[0] || x->type != DType::F32 || w->ne[2] != 1 || x->ne[2] != 1)
    bad_shapes(OpKind::MatMul, w, x);
  return node(OpKind::MatMul, DType::F32, {w->ne[1], x->ne[1], 1, 1}, {w, x});
}

Tensor* Graph::rms_norm(Tensor* x, float eps) {
  Tensor* t = node(OpKind::RmsNorm, DType::F32, x->ne, {x});
  set_rms_norm_params(*t, {eps});
  return t;
}

Tensor* Graph::mul(Tensor* a, Tensor* b) {
  if (!broadcasts_rows(a, b)) bad_shapes(OpKind::Mul, a, b);
  return node(OpKind::Mul, DType::F32, a->ne, {a, b});
}

Tensor* Graph::add(Tensor* a, Tensor* b) {
  if (!broadcasts_rows(a, b)) bad_shapes(OpKind::Add, a, b);
  return node(OpKind::Add, DType::F32, a->ne, {a, b});
}

Tensor* Graph::silu(Tensor* x) { return node(OpKind::Silu, DType::F32, x->ne, {x}); }
Tensor* Graph::gelu(Tensor* x) { return node(OpKind::Gelu, DType::F32, x->ne, {x}); }

Tensor* Graph::scale(Tensor* x, float s) {
  Tensor* t = node(OpKind::Scale, DType::F32, x->ne, {x});
  set_scale_params(*t, {s});
  return t;
}

Tensor* Graph::swiglu(Tensor* gate, Tensor* up) {
  if (gate->ne != up->ne) bad_shapes(OpKind::SwiGlu, gate, up);
  return node(OpKind::SwiGlu, DType::F32, gate->ne, {gate, up});
}

Tensor* Graph::swiglu_oai(Tensor* gate, Tensor* up, const SwiGluOaiParams& p) {
  if (gate->ne != up->ne) bad_shapes(OpKind::SwiGluOai, gate, up);
  if (!(p.limit > 0.0f) || !std::isfinite(p.alpha))
    throw ModelError(fmt::format("swiglu_oai: limit {} and alpha {}", p.limit, p.alpha));
  Tensor* t = node(OpKind::SwiGluOai, DType::F32, gate->ne, {gate, up});
  set_swiglu_oai_params(*t, p);
  return t;
}

Tensor* Graph::rope(Tensor* x, Tensor* pos, int n_rot, float freq_base, float freq_scale,
                    RopeMode mode, Tensor* freq_factors, float attn_factor) {
  if (pos->type != DType::I32 || pos->ne[0] != x->ne[2] || n_rot > x->ne[0] || n_rot % 2 != 0)
    bad_shapes(OpKind::Rope, x, pos);
  if (freq_factors && (freq_factors->type != DType::F32 || !freq_factors->is_contiguous() ||
                       freq_factors->n_elements() != n_rot / 2))
    bad_shapes(OpKind::Rope, x, freq_factors);
  Tensor* t = freq_factors ? node(OpKind::Rope, DType::F32, x->ne, {x, pos, freq_factors})
                           : node(OpKind::Rope, DType::F32, x->ne, {x, pos});
  set_rope_params(*t, {n_rot, mode, freq_base, freq_scale, attn_factor});
  return t;
}

Tensor* Graph::softmax(Tensor* x, float scale, int32_t causal_offset) {
  Tensor* t = node(OpKind::SoftMax, DType::F32, x->ne, {x});
  set_softmax_params(*t, {scale, causal_offset});
  return t;
}

Tensor* Graph::copy(Tensor* src, Tensor* dst) {
  if (src->n_elements() != dst->n_elements() || src->ne[0] != dst->ne[0])
    bad_shapes(OpKind::Copy, src, dst);
  Tensor* t = node(OpKind::Copy, dst->type, dst->ne, {src, dst});
  t->nb = dst->nb;
  return t;
}

Tensor* Graph::with_sinks(Tensor* attn, Tensor* sinks) {
  if (!sinks) return attn;
  if (sinks->type != DType::F32 || sinks->ne[0] != attn->ne[1] || sinks->n_rows() != 1 ||
      !sinks->is_contiguous())
    bad_shapes(OpKind::Attention, attn, sinks);
  attn->src[4] = sinks;
  return attn;
}

Tensor* Graph::attention(Tensor* q, Tensor* k_cache, Tensor* v_cache, int32_t n_past, float scale,
                         int32_t window, Tensor* sinks) {
  const int64_t hd = q->ne[0], n_head = q->ne[1], n_tokens = q->ne[2];
  const int64_t slots = k_cache->ne[2];
  const bool holds = n_past + n_tokens <= slots || (window > 0 && window + n_tokens - 1 <= slots);
  if (k_cache->ne[0] != hd || v_cache->ne[0] != hd || k_cache->ne[1] != v_cache->ne[1] ||
      v_cache->ne[2] != slots || n_head % k_cache->ne[1] != 0 || !holds || window < 0)
    bad_shapes(OpKind::Attention, q, k_cache);
  Tensor* t = node(OpKind::Attention, DType::F32, {hd, n_head, n_tokens, 1}, {q, k_cache, v_cache});
  set_attention_params(*t, {n_past, window, scale});
  return with_sinks(t, sinks);
}

Tensor* Graph::attention_tokens(Tensor* q, Tensor* k_cache, Tensor* v_cache, Tensor* token_info,
                                float scale, int32_t window, Tensor* sinks) {
  const int64_t hd = q->ne[0], n_head = q->ne[1], n_tokens = q->ne[2];
  if (k_cache->ne[0] != hd || v_cache->ne[0] != hd || k_cache->ne[1] != v_cache->ne[1] ||
      v_cache->ne[2] != k_cache->ne[2] || v_cache->ne[3] != k_cache->ne[3] ||
      n_head % k_cache->ne[1] != 0 || window < 0 || token_info->type != DType::I32 ||
      token_info->ne[0] != 2 || token_info->ne[1] != n_tokens || !token_info->is_contiguous())
    bad_shapes(OpKind::Attention, q, k_cache);
  Tensor* t = node(OpKind::Attention, DType::F32, {hd, n_head, n_tokens, 1},
                   {q, k_cache, v_cache, token_info});
  set_attention_params(*t, {0, window, scale});
  return with_sinks(t, sinks);
}

Tensor* Graph::attention_paged(Tensor* q, Tensor* k_cache, Tensor* v_cache, Tensor* token_info,
                               float scale, int32_t window, Tensor* sinks) {
  const int64_t hd = q->ne[0], n_head = q->ne[1], n_tokens = q->ne[2];
  if (k_cache->ne[0] != hd || v_cache->ne[0] != hd || k_cache->ne[1] != v_cache->ne[1] ||
      v_cache->ne[2] != k_cache->ne[2] || k_cache->ne[3] != 1 || v_cache->ne[3] != 1 ||
      n_head % k_cache->ne[1] != 0 || window < 0 || token_info->type != DType::I32 ||
      token_info->ne[0] < kPagedHeader + 2 * n_tokens || token_info->ne[1] != 1 ||
      !token_info->is_contiguous())
    bad_shapes(OpKind::Attention, q, k_cache);
  Tensor* t = node(OpKind::Attention, DType::F32, {hd, n_head, n_tokens, 1},
                   {q, k_cache, v_cache, token_info});
  set_attention_params(*t, {0, window, scale, true});
  return with_sinks(t, sinks);
}

Tensor* Graph::sigmoid(Tensor* x) { return node(OpKind::Sigmoid, DType::F32, x->ne, {x}); }

Tensor* Graph::top_k(Tensor* x, int32_t k) {
  if (x->type != DType::F32 || k < 1 || k > x->ne[0] || x->ne[2] != 1 || x->ne[3] != 1)
    throw ModelError(fmt::format("top_k: {} values of {} ({})", k, shape(x), x->name));
  Tensor* t = node(OpKind::TopK, DType::I32, {k, x->ne[1], 1, 1}, {x});
  set_top_k_params(*t, {k});
  return t;
}

Tensor* Graph::expert_weights(Tensor* logits, Tensor* ids, const ExpertWeightsParams& p) {
  if (logits->type != DType::F32 || ids->type != DType::I32 || ids->ne[1] != logits->ne[1] ||
      ids->ne[0] > logits->ne[0] || logits->ne[2] != 1 || ids->ne[2] != 1 || logits->ne[3] != 1 ||
      ids->ne[3] != 1)
    bad_shapes(OpKind::ExpertWeights, logits, ids);
  Tensor* t =
      node(OpKind::ExpertWeights, DType::F32, {ids->ne[0], ids->ne[1], 1, 1}, {logits, ids});
  set_expert_weights_params(*t, p);
  return t;
}

Tensor* Graph::matmul_id(Tensor* experts, Tensor* x, Tensor* ids) {
  const int64_t k = ids->ne[0], T = ids->ne[1];
  if (experts->ne[0] != x->ne[0] || experts->ne[3] != 1 || x->type != DType::F32 ||
      (x->ne[1] != 1 && x->ne[1] != k) || x->ne[2] != T || x->ne[3] != 1 ||
      ids->type != DType::I32 || ids->ne[2] != 1 || ids->ne[3] != 1)
    bad_shapes(OpKind::MatMulId, experts, x);
  return node(OpKind::MatMulId, DType::F32, {experts->ne[1], k, T, 1}, {experts, x, ids});
}

Tensor* Graph::expert_sum(Tensor* x, Tensor* weights) {
  if (x->type != DType::F32 || weights->type != DType::F32 || weights->ne[0] != x->ne[1] ||
      weights->ne[1] != x->ne[2] || x->ne[3] != 1 || weights->ne[2] != 1 || weights->ne[3] != 1)
    bad_shapes(OpKind::ExpertSum, x, weights);
  return node(OpKind::ExpertSum, DType::F32, {x->ne[0], x->ne[2], 1, 1}, {x, weights});
}

}  // namespace ps
