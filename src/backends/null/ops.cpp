// The skeleton's ops: which nodes have a kernel (unsupported_reason) and running them
// (execute). The switch names every op with no default, so adding an op to graph/ops.h fails
// this build (and every backend's) until each says what it does with it. Scale is the one op
// with a kernel, as the example to copy: the shared operand check first (backend/op_checks.h),
// then the backend's own limits; the parameters through graph/ops.h's typed accessor.
#include "graph/ops.h"

#include <fmt/format.h>

#include "backend/op_checks.h"
#include "backends/null/device.h"
#include "core/error.h"

namespace ps::null {
namespace {

constexpr const char* kNoKernel = "the skeleton has no kernel for it";

// out = x * scale over F32 rows; dimension 0 dense (row_operands_problem), the others strided.
void run_scale(const Tensor& n) {
  const Tensor& x = *n.src[0];
  const float s = scale_params(n).scale;
  for (int64_t i3 = 0; i3 < n.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < n.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < n.ne[1]; ++i1) {
        const auto* in = reinterpret_cast<const float*>(static_cast<const char*>(x.data) +
                                                        i1 * x.nb[1] + i2 * x.nb[2] + i3 * x.nb[3]);
        auto* out = reinterpret_cast<float*>(static_cast<char*>(n.data) + i1 * n.nb[1] +
                                             i2 * n.nb[2] + i3 * n.nb[3]);
        for (int64_t i0 = 0; i0 < n.ne[0]; ++i0) out[i0] = in[i0] * s;
      }
}

}  // namespace

std::string NullDevice::unsupported_reason(const Tensor& node) const {
  switch (node.op) {
    case OpKind::None:
    case OpKind::View:
      return "";  // leaves and views run nowhere: the scheduler places their bytes
    case OpKind::Scale:
      return row_operands_problem(node);
    case OpKind::GetRows:
    case OpKind::MatMul:
    case OpKind::RmsNorm:
    case OpKind::Mul:
    case OpKind::Add:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::SwiGlu:
    case OpKind::SwiGluOai:
    case OpKind::Rope:
    case OpKind::SoftMax:
    case OpKind::Copy:
    case OpKind::Attention:
    case OpKind::Sigmoid:
    case OpKind::TopK:
    case OpKind::ExpertWeights:
    case OpKind::MatMulId:
    case OpKind::ExpertSum:
    case OpKind::Count:
      return kNoKernel;
  }
  return kNoKernel;
}

void NullDevice::execute(std::span<Tensor* const> nodes) {
  for (Tensor* n : nodes) {
    if (n->op == OpKind::None || n->op == OpKind::View) continue;
    // The contract gives execute() only supported nodes; saying so beats computing garbage.
    if (const std::string why = unsupported_reason(*n); !why.empty())
      throw BackendError(fmt::format("{}: {} ({}) given to execute(): {}", info_.id, n->name,
                                     op_name(n->op), why));
    run_scale(*n);
  }
}

}  // namespace ps::null
