// Which ops the Vulkan backend runs, and how each is dispatched: the shader, its push constants
// and the workgroup grid. What a kernel cannot take is refused with a reason, so the conformance
// suite lists the gaps and a caller can place those ops elsewhere.
#include "graph/ops.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/op_checks.h"
#include "backend/op_params.h"
#include "backends/vulkan/device.h"
#include "core/error.h"

namespace ps::vk {
namespace {

constexpr uint32_t kMaxGroups = 65535;  // the minimum every device supports per dimension
constexpr int64_t kMaxHeadDim = 256;    // attention.comp keeps a query row in shared memory
constexpr uint32_t kMatmulCols = 4;     // activation rows per workgroup (COLS in matmul.comp)
constexpr uint32_t kMatmulRows = 4;     // weight rows per workgroup (ROWS in matmul.comp)
// matmul_lanes.comp: weight rows per lane x activation rows per workgroup, for a few
// activation rows (decode) and for prompt batches from kLanesTileFrom rows on.
constexpr uint32_t kLanesVec[2] = {4, 1};
constexpr uint32_t kLanesTile[2] = {8, 8};
constexpr int64_t kLanesTileFrom = 4;
// matmul_tile.comp: 64 x 64 output tiles, for batches of kTileFrom activation rows or more.
constexpr uint32_t kTile = 64;
constexpr int64_t kTileFrom = 8;

uint32_t ceil_div(uint64_t a, uint64_t b) { return uint32_t((a + b - 1) / b); }

bool fits_u32(const Tensor& t) {
  for (int d = 0; d < 4; ++d)
    if (t.ne[size_t(d)] > int64_t(UINT32_MAX) || t.nb[size_t(d)] > UINT32_MAX) return false;
  return true;
}

// Types the shaders read through weights.glsl, and the shader-name suffix of each.
// The types weights.glsl reads a block at a time (load_block): the float types and the classic
// 32-element ones; the k-quants and the codebook types are read element by element.
bool whole_block_weights(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
      return true;
    default:
      return false;
  }
}

const char* weight_suffix(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::Q8_0:
      return "q8_0";
    case DType::Q4_0:
      return "q4_0";
    case DType::Q4_1:
      return "q4_1";
    case DType::Q5_0:
      return "q5_0";
    case DType::Q5_1:
      return "q5_1";
    case DType::Q2_K:
      return "q2_k";
    case DType::Q3_K:
      return "q3_k";
    case DType::Q4_K:
      return "q4_k";
    case DType::Q5_K:
      return "q5_k";
    case DType::IQ4_NL:
      return "iq4_nl";
    case DType::MXFP4:
      return "mxfp4";
    case DType::IQ4_XS:
      return "iq4_xs";
    case DType::Q6_K:
      return "q6_k";
    default:
      return nullptr;
  }
}

// Rows [first, first + count) of t along dimension dim: a view of the same bytes.
Tensor slice(const Tensor& t, int dim, int64_t first, int64_t count) {
  Tensor s = t;
  s.ne[size_t(dim)] = count;
  s.data = static_cast<uint8_t*>(t.data) + size_t(first) * t.nb[size_t(dim)];
  return s;
}

// Rows over dimensions 1..3 as a grid of (y, z) workgroups within the per-dimension limit.
void row_grid(uint64_t rows, uint32_t& gy, uint32_t& gz) {
  gy = uint32_t(std::min<uint64_t>(std::max<uint64_t>(rows, 1), kMaxGroups));
  gz = ceil_div(rows, gy);
}

}  // namespace

std::string VulkanDevice::unsupported_reason(const Tensor& n) const {
  if (!refused_op_.empty() && refused_op_ == op_name(n.op))
    return "refused for a test (POLYSTACK_TEST_FAULT=refuse:" + refused_op_ + ")";
  for (const Tensor* t :
       {&n, static_cast<const Tensor*>(n.src[0]), static_cast<const Tensor*>(n.src[1]),
        static_cast<const Tensor*>(n.src[2])})
    if (t && !fits_u32(*t)) return "a shape or stride beyond 32 bits";
  // Weights and tables are bound in slices of rows (run()); every other operand in one piece.
  const bool sliced_src0 = n.op == OpKind::MatMul || n.op == OpKind::GetRows;
  for (const Tensor* t :
       {&n, static_cast<const Tensor*>(n.src[0]), static_cast<const Tensor*>(n.src[1]),
        static_cast<const Tensor*>(n.src[2])})
    if (t && !(sliced_src0 && t == n.src[0]) &&
        t->n_bytes() > max_storage_range_ - storage_alignment_)
      return fmt::format("an operand of {} MiB, more than one storage binding holds ({} MiB)",
                         t->n_bytes() >> 20, max_storage_range_ >> 20);
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
    case OpKind::Rope:
      return row_operands_problem(n);
    case OpKind::RmsNorm:
    case OpKind::SoftMax:
      if (std::string why = row_operands_problem(n); !why.empty()) return why;
      if (!extras_.subgroup_arithmetic)
        return "the reduction kernels need subgroup arithmetic in compute shaders";
      return {};
    case OpKind::MatMul:
    case OpKind::GetRows: {
      const Tensor& w = *n.src[0];
      if (!weight_suffix(w.type))
        return fmt::format("no Vulkan kernel for {} {}", dtype_name(w.type),
                           n.op == OpKind::MatMul ? "weights" : "tables");
      if (std::string why = weights_operands_problem(n); !why.empty()) return why;
      if (n.op == OpKind::GetRows) return {};
      if (!extras_.subgroup_arithmetic)
        return "the matmul kernel needs subgroup arithmetic in compute shaders";
      if (n.src[1]->ne[1] > kMaxGroups) return "more than 65535 activation rows";
      return {};
    }
    case OpKind::Copy:
      if (n.src[1]->type == DType::F16 && !extras_.storage16)
        return "F16 destinations need 16-bit storage buffers, which this device lacks";
      return copy_operands_problem(n);
    case OpKind::Attention: {
      if (const Tensor* info = attention_token_info(n); info && !info->is_contiguous())
        return "per-token positions that are not contiguous";
      if (std::string why = attention_operands_problem(n); !why.empty()) return why;
      const Tensor& q = *n.src[0];
      if (q.ne[0] > kMaxHeadDim) return "head size above 256";
      if (q.ne[1] > kMaxGroups || q.ne[2] > kMaxGroups) return "more than 65535 heads or tokens";
      return {};
    }
    case OpKind::Sigmoid:
      return row_operands_problem(n);
    case OpKind::ExpertSum:
    case OpKind::TopK:
    case OpKind::ExpertWeights:
      return experts_operands_problem(n);
    case OpKind::MatMulId:
      if (!weight_suffix(n.src[0]->type))
        return fmt::format("no Vulkan kernel for {} weights", dtype_name(n.src[0]->type));
      if (std::string why = experts_operands_problem(n); !why.empty()) return why;
      if (!extras_.subgroup_arithmetic)
        return "the matmul kernel needs subgroup arithmetic in compute shaders";
      if (n.src[0]->ne[2] + 1 > kMaxGroups) return "more than 65534 experts";
      return {};
    case OpKind::Count:
      break;
  }
  return "unknown op";
}

void VulkanDevice::run(Tensor& n) {
  Params p = kernel_params_for(n);
  const Tensor* a = n.src[0];
  const Operand none{nullptr, 0};
  uint32_t gy = 1, gz = 1;
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
    case OpKind::Sigmoid: {
      const Tensor* b = n.src[1];
      row_grid(uint64_t(a->n_rows()), gy, gz);
      dispatch("elementwise", {a, sizeof(float)}, {b, sizeof(float)}, {&n, sizeof(float)}, none, p,
               ceil_div(uint64_t(a->ne[0]), 64), gy, gz);
      return;
    }
    case OpKind::RmsNorm:
    case OpKind::SoftMax: {
      row_grid(uint64_t(a->n_rows()), gy, gz);
      // These shaders take the row from (x, y): one workgroup per row.
      dispatch(n.op == OpKind::RmsNorm ? "rms_norm" : "softmax", {a, sizeof(float)}, none,
               {&n, sizeof(float)}, none, p, gy, gz, 1);
      return;
    }
    case OpKind::Rope: {
      row_grid(uint64_t(a->n_rows()), gy, gz);
      dispatch("rope", {a, sizeof(float)}, {n.src[1], sizeof(int32_t)}, {&n, sizeof(float)},
               {n.src[2], sizeof(float)}, p, ceil_div(uint64_t(a->ne[0]), 64), gy, gz);
      return;
    }
    case OpKind::MatMul: {
      const Tensor& x = *n.src[1];
      // The kernel for this device and batch, and its rows and columns per workgroup (see
      // lane_per_row_matmul).
      const char* const type = weight_suffix(a->type);
      const uint64_t cols = uint64_t(x.ne[1]);
      Operand act{&x, sizeof(float)};
      std::string shader;
      uint64_t group_rows = 0, group_cols = 0;
      if (lane_matmul_ && whole_block_weights(a->type)) {
        // Weight rows per lane of a subgroup-wide workgroup; not yet for the k-quants and the
        // codebook types (see the shader list in src/CMakeLists.txt).
        const bool tile = x.ne[1] >= kLanesTileFrom;
        const uint32_t(&lanes)[2] = tile ? kLanesTile : kLanesVec;
        shader = fmt::format("matmul_lanes_{}{}", tile ? "tile_" : "", type);
        group_rows = uint64_t(extras_.subgroup_size) * lanes[0];
        group_cols = lanes[1];
      } else if (x.ne[1] >= kTileFrom) {  // staged tiles; fp16 staging where the device has it
        const bool f16 = extras_.fp16 && a->type != DType::F32;
        shader = fmt::format("matmul_tile_{}{}", f16 ? "f16_" : "", type);
        group_rows = group_cols = kTile;
      } else {
        if (int_dot_matmul_ && whole_block_weights(a->type) &&
            dtype_info(a->type).block_size == 32) {
          // Activations to blocks of 8-bit integers first, then packed integer dot products.
          const uint64_t blocks = uint64_t(x.ne[0] / 32) * cols;
          Tensor& q = scratch(size_t(blocks) * 10 * sizeof(uint32_t));
          Params pq{};
          set_shape(pq.ne, pq.a_nb, x, sizeof(float));
          dispatch("quantize_q8", act, none, {&q, sizeof(uint32_t)}, none, pq,
                   ceil_div(uint64_t(x.ne[0] / 32), 64), uint32_t(cols), 1);
          act = {&q, sizeof(uint32_t)};
          shader = fmt::format("matmul_dot_{}", type);
        } else {  // subgroup lanes split each row
          shader = fmt::format("matmul_{}", type);
        }
        group_rows = kMatmulRows;
        group_cols = kMatmulCols;
      }
      // A weight larger than one storage binding (a 262k-row vocabulary) runs as slices of rows,
      // each bound on its own; the output rows of a slice are a view of the output.
      const int64_t per_slice = rows_per_binding(*a);
      for (int64_t r0 = 0; r0 < a->ne[1]; r0 += per_slice) {
        const int64_t count = std::min(per_slice, a->ne[1] - r0);
        const Tensor w = slice(*a, 1, r0, count), out = slice(n, 0, r0, count);
        set_shape(p.ne, p.a_nb, w, 1);
        // Groups of weight rows beyond one grid dimension continue along z (row_group()).
        uint32_t gx = ceil_div(uint64_t(count), group_rows), gz_rows = 1;
        if (gx > kMaxGroups) {
          gz_rows = ceil_div(gx, kMaxGroups);
          gx = ceil_div(gx, gz_rows);
        }
        dispatch(shader, {&w, 1}, act, {&out, sizeof(float)}, none, p, gx,
                 ceil_div(cols, group_cols), gz_rows);
      }
      if (fault_matmul_ == a->type) {  // the test hook: the output scaled in place
        Params f{};
        set_shape(f.ne, f.a_nb, n, sizeof(float));
        set_shape(f.b_ne, f.b_nb, n, sizeof(float));
        set_strides(f.d_nb, n, sizeof(float));
        f.op = elementwise_code(OpKind::Scale);
        f.fparam0 = 1.25f;
        row_grid(uint64_t(n.n_rows()), gy, gz);
        dispatch("elementwise", {&n, sizeof(float)}, none, {&n, sizeof(float)}, none, f,
                 ceil_div(uint64_t(n.ne[0]), 64), gy, gz);
      }
      return;
    }
    case OpKind::GetRows: {
      // As for matmul, a table larger than one storage binding is read in slices of rows; each
      // pass writes the output rows whose ids fall in its slice.
      const Tensor& ids = *n.src[1];
      row_grid(uint64_t(ids.ne[0]), gy, gz);
      const int64_t per_slice = rows_per_binding(*a);
      for (int64_t r0 = 0; r0 < a->ne[1]; r0 += per_slice) {
        const Tensor table = slice(*a, 1, r0, std::min(per_slice, a->ne[1] - r0));
        set_shape(p.ne, p.a_nb, table, 1);
        p.iparam = int32_t(r0);
        dispatch(fmt::format("get_rows_{}", weight_suffix(a->type)), {&table, 1},
                 {&ids, sizeof(int32_t)}, {&n, sizeof(float)}, none, p,
                 ceil_div(uint64_t(a->ne[0]), 64), gy, gz);
      }
      return;
    }
    case OpKind::Copy: {
      const Tensor& dst = *n.src[1];
      const size_t unit = dtype_info(dst.type).block_bytes;
      row_grid(uint64_t(a->n_rows()), gy, gz);
      dispatch(dst.type == DType::F16 ? "copy_f16" : "copy_f32", {a, sizeof(float)}, none,
               {&dst, unit}, none, p, ceil_div(uint64_t(a->ne[0]), 64), gy, gz);
      return;
    }
    case OpKind::Attention: {
      const Tensor& k = *n.src[1];
      const Tensor& v = *n.src[2];
      // Binding 4 holds each token's position and plane where the block says so; binding 5 the
      // sinks.
      const Tensor* info = attention_token_info(n);
      const Tensor* sinks = attention_sinks(n);
      dispatch("attention", {a, sizeof(float)}, {&k, sizeof(uint16_t)}, {&n, sizeof(float)},
               {&v, sizeof(uint16_t)}, p, uint32_t(a->ne[1]), uint32_t(a->ne[2]), 1,
               {info, sizeof(int32_t)}, {sinks, sizeof(float)});
      return;
    }
    case OpKind::TopK:
    case OpKind::ExpertWeights: {
      // expert_weights: one invocation per row (token), groups of 64 along x, continued along y.
      const uint64_t rows = uint64_t(a->ne[1]);
      const uint64_t groups = ceil_div(rows, 64);
      const uint32_t gx = uint32_t(std::min<uint64_t>(groups, kMaxGroups));
      if (n.op == OpKind::TopK) {  // an invocation per element (x) and row (y, z)
        row_grid(rows, gy, gz);
        dispatch("top_k", {a, sizeof(float)}, none, {&n, sizeof(int32_t)}, none, p,
                 ceil_div(uint64_t(a->ne[0]), 64), gy, gz);
      } else {
        dispatch("expert_weights", {a, sizeof(float)}, {n.src[1], sizeof(int32_t)},
                 {&n, sizeof(float)}, none, p, gx, ceil_div(groups, gx), 1);
      }
      return;
    }
    case OpKind::MatMulId: {
      const Tensor& x = *n.src[1];
      const Tensor& ids = *n.src[2];
      if (ids.ne[1] >= kTileFrom) {
        // Prompts: a workgroup per 64 weight rows (x, continued over z) and expert (y, one more
        // for the ids outside the experts) over the tokens that chose it.
        uint32_t gx = ceil_div(uint64_t(a->ne[1]), kTile), gz_rows = 1;
        if (gx > kMaxGroups) {
          gz_rows = ceil_div(gx, kMaxGroups);
          gx = ceil_div(gx, gz_rows);
        }
        dispatch(fmt::format("matmul_id_tile_{}", weight_suffix(a->type)), {a, 1},
                 {&x, sizeof(float)}, {&n, sizeof(float)}, {&ids, sizeof(int32_t)}, p, gx,
                 uint32_t(a->ne[2] + 1), gz_rows);
        return;
      }
      // A workgroup per ROWS (4) weight rows and (slot, token) pair, the pairs over y and z.
      row_grid(uint64_t(ids.ne[0] * ids.ne[1]), gy, gz);
      dispatch(fmt::format("matmul_id_{}", weight_suffix(a->type)), {a, 1}, {&x, sizeof(float)},
               {&n, sizeof(float)}, {&ids, sizeof(int32_t)}, p, ceil_div(uint64_t(a->ne[1]), 4), gy,
               gz);
      return;
    }
    case OpKind::ExpertSum: {
      row_grid(uint64_t(a->ne[2]), gy, gz);
      dispatch("expert_sum", {a, sizeof(float)}, {n.src[1], sizeof(float)}, {&n, sizeof(float)},
               none, p, ceil_div(uint64_t(a->ne[0]), 64), gy, gz);
      return;
    }
    default:
      throw BackendError(fmt::format("{}: no kernel for {}", info_.id, op_name(n.op)));
  }
}

}  // namespace ps::vk
