// Which ops the OpenCL backend runs, and how each is dispatched: the program and kernel
// (kernels/*.cl), the parameter block (backend/kernel_params.h) and the grid. What a kernel
// cannot take is refused with a reason, so the conformance suite lists the gaps and a caller can
// place those ops elsewhere.
#include "graph/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "backend/op_checks.h"
#include "backend/op_params.h"
#include "backends/opencl/device.h"
#include "core/error.h"

namespace ps::ocl {
namespace {

constexpr size_t kGroup = 64;         // WG in kernels/common.cl
constexpr int64_t kMaxHeadDim = 256;  // MAX_HD in kernels/ops.cl
constexpr uint64_t kMatmulCols = 4;   // COLS in kernels/matmul.cl

size_t ceil_div(uint64_t a, uint64_t b) { return size_t((a + b - 1) / b); }

// The kernels index in 32 bits: every shape, stride and operand size must fit.
bool fits_u32(const Tensor& t) {
  for (int d = 0; d < 4; ++d)
    if (t.ne[size_t(d)] > int64_t(UINT32_MAX) || t.nb[size_t(d)] > UINT32_MAX) return false;
  return t.n_bytes() <= UINT32_MAX;
}

// The weight types weights.cl decodes: every GGUF type polystack reads.
bool has_weight_kernel(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::MXFP4:
    case DType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

// "weights_q4_k": the program with that type's get_rows, matmul and matmul_id.
std::string weights_program(DType t) {
  std::string name(dtype_name(t));
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  return "weights_" + name;
}

}  // namespace

std::string OclDevice::unsupported_reason(const Tensor& n) const {
  for (const Tensor* t :
       {&n, static_cast<const Tensor*>(n.src[0]), static_cast<const Tensor*>(n.src[1]),
        static_cast<const Tensor*>(n.src[2])}) {
    if (!t) continue;
    if (!fits_u32(*t)) return "an operand, shape or stride beyond 32 bits";
    if (t->n_bytes() > x_.max_alloc)
      return fmt::format("an operand of {} MiB, more than the device allocates at once ({} MiB)",
                         t->n_bytes() >> 20, x_.max_alloc >> 20);
  }
  switch (n.op) {
    case OpKind::None:
    case OpKind::View:
      return {};
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::SwiGlu:
    case OpKind::SwiGluOai:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::Scale:
    case OpKind::Sigmoid:
    case OpKind::Rope:
    case OpKind::RmsNorm:
    case OpKind::SoftMax:
      return row_operands_problem(n);
    case OpKind::MatMul:
    case OpKind::GetRows: {
      const Tensor& w = *n.src[0];
      if (!has_weight_kernel(w.type))
        return fmt::format("no OpenCL kernel for {} {}", dtype_name(w.type),
                           n.op == OpKind::MatMul ? "weights" : "tables");
      return weights_operands_problem(n);
    }
    case OpKind::Copy:
      return copy_operands_problem(n);
    case OpKind::Attention: {
      if (const Tensor* info = attention_token_info(n); info && !info->is_contiguous())
        return "per-token positions that are not contiguous";
      if (std::string why = attention_operands_problem(n); !why.empty()) return why;
      if (n.src[0]->ne[0] > kMaxHeadDim) return "head size above 256";
      return {};
    }
    case OpKind::ExpertSum:
    case OpKind::TopK:
    case OpKind::ExpertWeights:
      return experts_operands_problem(n);
    case OpKind::MatMulId:
      if (!has_weight_kernel(n.src[0]->type))
        return fmt::format("no OpenCL kernel for {} weights", dtype_name(n.src[0]->type));
      return experts_operands_problem(n);
    case OpKind::Count:
      break;
  }
  return "unknown op";
}

void OclDevice::execute(std::span<Tensor* const> nodes) {
  for (Tensor* n : nodes) {
    if (n->op == OpKind::None || n->op == OpKind::View) continue;
    // execute() gets only supported nodes (backend.h); anything else is the caller's bug.
    if (const std::string why = unsupported_reason(*n); !why.empty())
      throw BackendError(fmt::format("{}: {} ({}) is not supported here: {}", x_.info.id, n->name,
                                     op_name(n->op), why));
    run(*n);
  }
  check(f_.clFlush(queue_), "clFlush");  // started, not waited for (synchronize() waits)
}

void OclDevice::run(Tensor& n) {
  const KernelParams p = kernel_params_for(n);
  const Tensor* a = n.src[0];
  const auto op = [&](const Tensor* t) { return t ? operand(*t) : Operand{}; };
  // Grids: (work-groups along dimension 0, items along 1 and 2); kGroup items per work-group.
  const auto per_element = [&](const Tensor& t, uint64_t rows) -> std::array<size_t, 3> {
    return {ceil_div(uint64_t(t.ne[0]), kGroup), size_t(rows), 1};
  };
  switch (n.op) {
    case OpKind::None:
    case OpKind::View:
      return;
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::SwiGlu:
    case OpKind::SwiGluOai:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::Scale:
    case OpKind::Sigmoid:
      dispatch("ops", "elementwise", p, {op(a), op(n.src[1]), op(&n)},
               per_element(*a, uint64_t(a->n_rows())));
      return;
    case OpKind::RmsNorm:
    case OpKind::SoftMax:  // a work-group per row
      dispatch("ops", n.op == OpKind::RmsNorm ? "rms_norm" : "softmax", p, {op(a), {}, op(&n)},
               {1, size_t(a->n_rows()), 1});
      return;
    case OpKind::Rope:
      dispatch("ops", "rope", p, {op(a), op(n.src[1]), op(&n), op(n.src[2])},
               per_element(*a, uint64_t(a->n_rows())));
      return;
    case OpKind::MatMul:
      // On a CPU driver an item per weight row (matmul_rows), elsewhere a work-group per weight
      // row; kMatmulCols activation rows each.
      if (rows_per_item_)
        dispatch(weights_program(a->type), "matmul_rows", p, {op(a), op(n.src[1]), op(&n)},
                 {ceil_div(uint64_t(a->ne[1]), kGroup),
                  ceil_div(uint64_t(n.src[1]->ne[1]), kMatmulCols), 1});
      else
        dispatch(weights_program(a->type), "matmul", p, {op(a), op(n.src[1]), op(&n)},
                 {size_t(a->ne[1]), ceil_div(uint64_t(n.src[1]->ne[1]), kMatmulCols), 1});
      return;
    case OpKind::GetRows:
      dispatch(weights_program(a->type), "get_rows", p, {op(a), op(n.src[1]), op(&n)},
               per_element(*a, uint64_t(n.src[1]->ne[0])));
      return;
    case OpKind::Copy:
      dispatch("ops", "copy", p, {op(a), {}, op(n.src[1])}, per_element(*a, uint64_t(a->n_rows())));
      return;
    case OpKind::Attention:  // a work-group per (head, token)
      dispatch("ops", "attention", p,
               {op(a), op(n.src[1]), op(&n), op(n.src[2]), op(attention_token_info(n)),
                op(attention_sinks(n))},
               {size_t(a->ne[1]), size_t(a->ne[2]), 1});
      return;
    case OpKind::TopK:
      dispatch("ops", "top_k", p, {op(a), {}, op(&n)}, per_element(*a, uint64_t(a->ne[1])));
      return;
    case OpKind::ExpertWeights:  // an item per token
      dispatch("ops", "expert_weights", p, {op(a), op(n.src[1]), op(&n)},
               {ceil_div(uint64_t(a->ne[1]), kGroup), 1, 1});
      return;
    case OpKind::MatMulId:  // a work-group per weight row and (slot, token) pair
      dispatch(weights_program(a->type), "matmul_id", p,
               {op(a), op(n.src[1]), op(&n), op(n.src[2])},
               {size_t(a->ne[1]), size_t(n.src[2]->ne[0] * n.src[2]->ne[1]), 1});
      return;
    case OpKind::ExpertSum:
      dispatch("ops", "expert_sum", p, {op(a), op(n.src[1]), op(&n)},
               per_element(*a, uint64_t(a->ne[2])));
      return;
    case OpKind::Count:
      break;
  }
  throw BackendError(fmt::format("{}: no kernel for {}", x_.info.id, op_name(n.op)));
}

}  // namespace ps::ocl
