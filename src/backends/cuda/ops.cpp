// Which ops the CUDA/HIP backend runs (the kernels in *.cu) and how a run of nodes is launched:
// one by one, or captured once as a CUDA graph and replayed.
#include "graph/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "backend/op_checks.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/weights.cuh"
#include "core/error.h"

namespace ps::gpu {

namespace {

bool has_decoder(DType t) {
  return with_weight_type(t, []<DType>() {});
}

}  // namespace

void launch_failed(const char* kernel, cudaError_t e) {
  throw BackendError(fmt::format("{}: launch failed: {}", kernel, cudaGetErrorString(e)));
}

std::string GpuDevice::unsupported_reason(const Tensor& n) const {
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
    case OpKind::RmsNorm:
    case OpKind::SoftMax:
    case OpKind::Rope:
      if (std::string why = row_operands_problem(n); !why.empty()) return why;
      if ((n.op == OpKind::RmsNorm || n.op == OpKind::SoftMax) && n.src[0]->n_rows() > INT32_MAX)
        return "more than 2^31 rows";
      return {};
    case OpKind::MatMul:
    case OpKind::GetRows: {
      const Tensor& w = *n.src[0];
      if (!has_decoder(w.type))
        return fmt::format("no {} kernel for {} {}", api_name(info_.api), dtype_name(w.type),
                           n.op == OpKind::MatMul ? "weights" : "tables");
      if (std::string why = weights_operands_problem(n); !why.empty()) return why;
      if (n.op == OpKind::MatMul && n.src[1]->ne[1] > 65535LL * 64)
        return "more than 4194240 activation rows";
      return {};
    }
    case OpKind::Copy:
      return copy_operands_problem(n);
    case OpKind::Attention: {
      if (const Tensor* info = attention_token_info(n); info && !info->is_contiguous())
        return "per-token positions that are not contiguous";
      if (std::string why = attention_operands_problem(n); !why.empty()) return why;
      const Tensor& q = *n.src[0];
      if (q.ne[0] > kMaxHeadDim) return fmt::format("head size above {}", kMaxHeadDim);
      if (q.ne[1] > 65535 || q.ne[2] > 65535) return "more than 65535 heads or tokens";
      return {};
    }
    case OpKind::Sigmoid:
      return row_operands_problem(n);
    case OpKind::ExpertSum:
    case OpKind::TopK:
    case OpKind::ExpertWeights:
      if (std::string why = experts_operands_problem(n); !why.empty()) return why;
      if (n.ne[1] > 65535) return "more than 65535 tokens";
      return {};
    case OpKind::MatMulId:
      if (!has_decoder(n.src[0]->type))
        return fmt::format("no {} kernel for {} weights", api_name(info_.api),
                           dtype_name(n.src[0]->type));
      if (std::string why = experts_operands_problem(n); !why.empty()) return why;
      if (n.src[2]->n_elements() > 65535LL * 65535) return "more than 65535^2 chosen experts";
      if (n.src[0]->ne[2] >= 65535) return "more than 65534 experts";
      return {};
    case OpKind::Count:
      break;
  }
  return "unknown op";
}

void GpuDevice::execute(std::span<Tensor* const> nodes) {
  activate();
  if (int8_decode_) {
    // The scratch memory the run's int8 decode steps need, grown before any kernel is queued
    // (or captured) once the kernels that may still use the old one are done.
    size_t need = 0;
    for (const Tensor* n : nodes) need = std::max(need, matmul_scratch_bytes(*n));
    if (need > scratch_bytes_) {
      check(cudaStreamSynchronize(stream_), "running the queued kernels");
      if (scratch_) check(cudaFree(scratch_), "freeing scratch memory");
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      check(cudaMalloc(&scratch_, need), "allocating scratch memory");
      scratch_bytes_ = need;
    }
  }
  if (use_graphs_) {
    const int start = profile_ ? profile_->mark(stream_) : 0;
    execute_as_graph(nodes);
    if (profile_) profile_->add("graph", start, profile_->mark(stream_));
  } else {
    launch_all(nodes);
  }
  if (profile_) profile_->collect();
}

void GpuDevice::execute_as_graph(std::span<Tensor* const> nodes) {
#if defined(PS_CUDA_GRAPHS)
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "starting a capture");
  cudaGraph_t graph = nullptr;
  capturing_ = true;
  try {
    launch_all(nodes);
  } catch (...) {
    capturing_ = false;
    (void)cudaStreamEndCapture(stream_, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    throw;
  }
  capturing_ = false;
  check(cudaStreamEndCapture(stream_, &graph), "capturing the run's kernels");
  auto exec = static_cast<cudaGraphExec_t>(graph_exec_);
  cudaGraphExecUpdateResultInfo info{};
  if (exec && cudaGraphExecUpdate(exec, graph, &info) != cudaSuccess) {
    // Other kernels than last time (a prompt batch after decode steps): build the graph anew.
    (void)cudaGetLastError();
    (void)cudaGraphExecDestroy(exec);
    exec = nullptr;
  }
  cudaError_t e = cudaSuccess;
  if (!exec) e = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  graph_exec_ = e == cudaSuccess ? exec : nullptr;
  check(e, "instantiating the run's graph");
  check(cudaGraphLaunch(exec, stream_), "launching the run's graph");
#else
  launch_all(nodes);
#endif
}

namespace {

// What POLYSTACK_PROFILE_OPS counts a node's time for: its op, and for a matrix product the
// weight type and the number of activation rows ("matmul Q4_K x1" for a decode step).
std::string profile_key(const Tensor& n) {
  switch (n.op) {
    case OpKind::MatMul:
      return fmt::format("{} {} x{}", op_name(n.op), dtype_name(n.src[0]->type),
                         n.src[1]->n_rows());
    case OpKind::MatMulId:
    case OpKind::GetRows:
      return fmt::format("{} {}", op_name(n.op), dtype_name(n.src[0]->type));
    default:
      return op_name(n.op);
  }
}

}  // namespace

void GpuDevice::launch_all(std::span<Tensor* const> nodes) {
  const bool timed = profile_ && !capturing_;
  for (Tensor* n : nodes) {
    if (n->op == OpKind::None || n->op == OpKind::View) continue;
    const int start = timed ? profile_->mark(stream_) : 0;
    launch(*n);
    if (timed) profile_->add(profile_key(*n), start, profile_->mark(stream_));
  }
}

void GpuDevice::launch(Tensor& node) {
  const Launch l{stream_, warp_, int8_decode_, scratch_};
  Tensor* n = &node;
  switch (n->op) {
    case OpKind::None:
    case OpKind::View:
      break;
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::Scale:
    case OpKind::SwiGlu:
    case OpKind::SwiGluOai:
    case OpKind::Sigmoid:
      elementwise(l, *n);
      break;
    case OpKind::RmsNorm:
      rms_norm(l, *n);
      break;
    case OpKind::SoftMax:
      softmax(l, *n);
      break;
    case OpKind::Rope:
      rope(l, *n);
      break;
    case OpKind::Copy:
      copy(l, *n);
      break;
    case OpKind::GetRows:
      get_rows(l, *n);
      break;
    case OpKind::MatMul:
      matmul(l, *n);
      break;
    case OpKind::Attention:
      attention(l, *n);
      break;
    case OpKind::TopK:
      top_k(l, *n);
      break;
    case OpKind::ExpertWeights:
      expert_weights(l, *n);
      break;
    case OpKind::MatMulId:
      matmul_id(l, *n);
      break;
    case OpKind::ExpertSum:
      expert_sum(l, *n);
      break;
    case OpKind::Count:
      throw BackendError(fmt::format("{}: no kernel for {}", info_.id, op_name(n->op)));
  }
}

}  // namespace ps::gpu
