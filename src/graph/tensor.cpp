// Op names and Tensor's layout helpers: part of the IR library that backends link.
#include "graph/tensor.h"

namespace ps {

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::None:
      return "none";
    case OpKind::View:
      return "view";
    case OpKind::GetRows:
      return "get_rows";
    case OpKind::MatMul:
      return "matmul";
    case OpKind::RmsNorm:
      return "rms_norm";
    case OpKind::Mul:
      return "mul";
    case OpKind::Add:
      return "add";
    case OpKind::Silu:
      return "silu";
    case OpKind::Gelu:
      return "gelu";
    case OpKind::Scale:
      return "scale";
    case OpKind::SwiGlu:
      return "swiglu";
    case OpKind::Rope:
      return "rope";
    case OpKind::SoftMax:
      return "softmax";
    case OpKind::Copy:
      return "copy";
    case OpKind::Attention:
      return "attention";
    case OpKind::Sigmoid:
      return "sigmoid";
    case OpKind::TopK:
      return "top_k";
    case OpKind::ExpertWeights:
      return "expert_weights";
    case OpKind::MatMulId:
      return "matmul_id";
    case OpKind::ExpertSum:
      return "expert_sum";
    case OpKind::SwiGluOai:
      return "swiglu_oai";
    case OpKind::Count:
      break;
  }
  return "?";
}

size_t Tensor::n_bytes() const {
  if (n_elements() == 0) return 0;
  size_t last = row_bytes(type, ne[0]);
  for (int d = 1; d < 4; ++d) last += size_t(ne[d] - 1) * nb[d];
  return last;
}

bool Tensor::is_contiguous() const {
  size_t expect = row_bytes(type, ne[0]);
  if (nb[0] != dtype_info(type).block_bytes) return false;
  for (int d = 1; d < 4; ++d) {
    if (ne[d] > 1 && nb[d] != expect) return false;
    expect *= size_t(ne[d]);
  }
  return true;
}

void Tensor::set_contiguous_strides() {
  nb[0] = dtype_info(type).block_bytes;
  nb[1] = row_bytes(type, ne[0]);
  for (int d = 2; d < 4; ++d) nb[d] = nb[d - 1] * size_t(ne[d - 1]);
}

}  // namespace ps
