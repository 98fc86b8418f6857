#include "backend/op_checks.h"

#include <fmt/format.h>

#include <cstdint>

namespace ps {

bool f32_rows(const Tensor& t) { return t.type == DType::F32 && t.nb[0] == sizeof(float); }

std::string row_operands_problem(const Tensor& n) {
  const bool binary = n.op == OpKind::Add || n.op == OpKind::Mul || n.op == OpKind::SwiGlu ||
                      n.op == OpKind::SwiGluOai;
  if (binary && !f32_rows(*n.src[1])) return "the second operand is not F32 with contiguous rows";
  if (!f32_rows(*n.src[0]) || !f32_rows(n)) return "only F32 with contiguous rows";
  return {};
}

std::string attention_operands_problem(const Tensor& n) {
  const Tensor& q = *n.src[0];
  const Tensor& k = *n.src[1];
  const Tensor& v = *n.src[2];
  if (!f32_rows(q) || !f32_rows(n)) return "only F32 queries with contiguous rows";
  if (k.type != DType::F16 || v.type != DType::F16) return "only F16 KV caches";
  if (k.nb[0] != 2) return "only KV caches with contiguous rows";
  if (k.nb != v.nb || k.ne != v.ne) return "K and V caches of different layouts";
  return attention_sinks_problem(n);
}

std::string attention_sinks_problem(const Tensor& n) {
  const Tensor* s = n.src[4];
  if (s && (s->type != DType::F32 || !s->is_contiguous() || s->ne[0] != n.src[0]->ne[1]))
    return "sinks that are not contiguous F32 [n_head]";
  return {};
}

std::string weights_operands_problem(const Tensor& n) {
  const Tensor& w = *n.src[0];
  if (w.nb[0] != dtype_info(w.type).block_bytes || !f32_rows(n)) return "only contiguous rows";
  if (w.nb[1] % 2 != 0 || reinterpret_cast<uintptr_t>(w.data) % 2 != 0)
    return "rows at odd byte offsets";
  if (w.ne[2] != 1 || w.ne[3] != 1) return "only 2-D weights";
  const Tensor& b = *n.src[1];
  if (n.op == OpKind::GetRows) {
    if (b.type != DType::I32 || !b.is_contiguous() || b.ne[0] > INT32_MAX)
      return "only contiguous I32 ids";
    return {};
  }
  if (!f32_rows(b) || b.ne[2] != 1 || b.ne[3] != 1)
    return "only 2-D F32 activations with contiguous rows";
  return {};
}

std::string copy_operands_problem(const Tensor& n) {
  const Tensor& dst = *n.src[1];
  if (!f32_rows(*n.src[0])) return "only F32 sources with contiguous rows";
  if (dst.type != DType::F32 && dst.type != DType::F16)
    return fmt::format("no conversion to {}", dtype_name(dst.type));
  if (dst.nb[0] != dtype_info(dst.type).block_bytes) return "only contiguous rows";
  return {};
}

std::string experts_operands_problem(const Tensor& n) {
  switch (n.op) {
    case OpKind::TopK:
    case OpKind::ExpertWeights:
      if (!f32_rows(*n.src[0]) || !n.is_contiguous() ||
          (n.src[1] && (n.src[1]->type != DType::I32 || !n.src[1]->is_contiguous())))
        return "only contiguous rows";
      return {};
    case OpKind::ExpertSum:
      if (!f32_rows(*n.src[0]) || !f32_rows(*n.src[1]) || !f32_rows(n))
        return "only F32 operands with contiguous rows";
      return {};
    case OpKind::MatMulId: {
      const Tensor& w = *n.src[0];
      if (w.nb[0] != dtype_info(w.type).block_bytes || !f32_rows(n) || !f32_rows(*n.src[1]) ||
          !n.src[2]->is_contiguous())
        return "only contiguous rows";
      if (w.nb[1] % 2 != 0 || w.nb[2] % 2 != 0 || reinterpret_cast<uintptr_t>(w.data) % 2 != 0)
        return "rows at odd byte offsets";
      return {};
    }
    default:
      return "not a mixture-of-experts op";
  }
}

}  // namespace ps
