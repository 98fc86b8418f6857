// Which ops the Vulkan backend runs, and how each is dispatched: the shader, its push constants
// and the workgroup grid. Every other op is refused with a reason, so the conformance suite
// lists the gaps and a caller can place those ops elsewhere.
#include <fmt/format.h>

#include <algorithm>

#include "backends/vulkan/vulkan_device.h"
#include "core/error.h"

namespace ps::vk {
namespace {

constexpr uint32_t kMaxGroups = 65535;  // the minimum every device supports per dimension

uint32_t ceil_div(uint64_t a, uint64_t b) { return uint32_t((a + b - 1) / b); }

bool f32_rows(const Tensor& t) { return t.type == DType::F32 && t.nb[0] == sizeof(float); }

bool fits_u32(const Tensor& t) {
  for (int d = 0; d < 4; ++d)
    if (t.ne[size_t(d)] > int64_t(UINT32_MAX) || t.nb[size_t(d)] / 2 > UINT32_MAX) return false;
  return true;
}

void fill_shape(uint32_t (&ne)[4], uint32_t (&nb)[4], const Tensor& t, size_t elem) {
  for (int d = 0; d < 4; ++d) {
    ne[d] = uint32_t(t.ne[size_t(d)]);
    nb[d] = uint32_t(t.nb[size_t(d)] / elem);
  }
}

uint32_t elementwise_code(OpKind op) {
  switch (op) {
    case OpKind::Add:
      return 0;
    case OpKind::Mul:
      return 1;
    case OpKind::Silu:
      return 2;
    case OpKind::Gelu:
      return 3;
    default:
      return 4;  // SwiGlu
  }
}

}  // namespace

std::string VulkanDevice::unsupported_reason(const Tensor& n) const {
  for (const Tensor* t :
       {&n, static_cast<const Tensor*>(n.src[0]), static_cast<const Tensor*>(n.src[1]),
        static_cast<const Tensor*>(n.src[2])})
    if (t && !fits_u32(*t)) return "a shape or stride beyond 32 bits";
  switch (n.op) {
    case OpKind::None:
    case OpKind::View:
      return {};
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::SwiGlu:
      if (!f32_rows(*n.src[1])) return "the second operand is not F32 with contiguous rows";
      [[fallthrough]];
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::RmsNorm:
    case OpKind::SoftMax:
      if (!f32_rows(*n.src[0]) || !f32_rows(n)) return "only F32 with contiguous rows";
      return {};
    case OpKind::MatMul: {
      const Tensor& w = *n.src[0];
      if (w.type == DType::F16 && !extras_.storage16)
        return "F16 weights need 16-bit storage buffers, which this device lacks";
      if (w.type != DType::F32 && w.type != DType::F16)
        return fmt::format("no Vulkan kernel for {} weights yet", dtype_name(w.type));
      if (w.nb[0] != dtype_info(w.type).block_bytes || !f32_rows(*n.src[1]) || !f32_rows(n))
        return "only contiguous rows";
      if (w.ne[2] != 1 || w.ne[3] != 1 || n.src[1]->ne[2] != 1 || n.src[1]->ne[3] != 1)
        return "only 2-D matmuls";
      if (w.ne[1] > kMaxGroups || n.src[1]->ne[1] > kMaxGroups)
        return "more than 65535 rows or columns";
      return {};
    }
    case OpKind::GetRows:
    case OpKind::Rope:
    case OpKind::Copy:
    case OpKind::Attention:
      return fmt::format("no Vulkan kernel for {} yet", op_name(n.op));
    case OpKind::Count:
      break;
  }
  return "unknown op";
}

void VulkanDevice::run(Tensor& n) {
  Params p{};
  const Tensor* a = n.src[0];
  switch (n.op) {
    case OpKind::None:
    case OpKind::View:
      return;
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::SwiGlu:
    case OpKind::Silu:
    case OpKind::Gelu: {
      const Tensor* b = n.src[1];
      fill_shape(p.ne, p.a_nb, *a, sizeof(float));
      fill_shape(p.b_ne, p.b_nb, b ? *b : *a, sizeof(float));
      uint32_t unused[4];
      fill_shape(unused, p.d_nb, n, sizeof(float));
      p.op = elementwise_code(n.op);
      const uint64_t rows = uint64_t(a->n_rows());
      const uint32_t gy = uint32_t(std::min<uint64_t>(rows, kMaxGroups));
      dispatch("elementwise", a, b, n, sizeof(float), p, ceil_div(uint64_t(a->ne[0]), 64), gy,
               ceil_div(rows, gy));
      return;
    }
    case OpKind::RmsNorm:
    case OpKind::SoftMax: {
      fill_shape(p.ne, p.a_nb, *a, sizeof(float));
      uint32_t unused[4];
      fill_shape(unused, p.d_nb, n, sizeof(float));
      fill_shape(p.b_ne, p.b_nb, *a, sizeof(float));
      p.fparam0 = n.fparams[0];
      p.iparam = n.iparams[0];
      const uint64_t rows = uint64_t(a->n_rows());
      const uint32_t gx = uint32_t(std::min<uint64_t>(rows, kMaxGroups));
      dispatch(n.op == OpKind::RmsNorm ? "rms_norm" : "softmax", a, nullptr, n, sizeof(float), p,
               gx, ceil_div(rows, gx), 1);
      return;
    }
    case OpKind::MatMul: {
      const Tensor& w = *a;
      const Tensor& x = *n.src[1];
      const size_t welem = dtype_info(w.type).block_bytes;
      fill_shape(p.ne, p.a_nb, w, welem);
      fill_shape(p.b_ne, p.b_nb, x, sizeof(float));
      uint32_t unused[4];
      fill_shape(unused, p.d_nb, n, sizeof(float));
      dispatch(w.type == DType::F16 ? "matmul_f16" : "matmul_f32", &w, &x, n, welem, p,
               uint32_t(w.ne[1]), uint32_t(x.ne[1]), 1);
      return;
    }
    default:
      throw BackendError(fmt::format("{}: no kernel for {}", info_.id, op_name(n.op)));
  }
}

}  // namespace ps::vk
