#include "backends/cuda/device.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "backend/op_checks.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/weights.cuh"
#include "core/error.h"
#include "graph/ops.h"

#if defined(POLYSTACK_CUDA) && !defined(POLYSTACK_GPU_EMULATION)
#define PS_CUDA_GRAPHS 1
#endif

namespace ps::gpu {

namespace {

bool has_decoder(DType t) {
  return with_weight_type(t, []<DType>() {});
}

}  // namespace

void launch_failed(const char* kernel, cudaError_t e) {
  throw BackendError(fmt::format("{}: launch failed: {}", kernel, cudaGetErrorString(e)));
}

GpuBuffer::GpuBuffer(GpuDevice& dev, size_t bytes) : dev_(dev), size_(bytes) {
  dev_.activate();
  const cudaError_t e = cudaMalloc(&ptr_, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    size_t free = 0, total = 0;
    (void)cudaGetLastError();
    (void)cudaMemGetInfo(&free, &total);
    throw BackendError(fmt::format("{}: cannot allocate {} MiB ({} MiB of {} MiB free): {}",
                                   dev_.info().id, bytes >> 20, free >> 20, total >> 20,
                                   cudaGetErrorString(e)));
  }
  dev_.register_buffer(ptr_, bytes);
}

GpuBuffer::~GpuBuffer() {
  dev_.unregister_buffer(ptr_);
  dev_.select_quietly();
  (void)cudaFree(ptr_);
}

void GpuBuffer::enqueue_write(size_t offset, const void* src, size_t n) {
  if (offset + n > size_)
    throw BackendError(fmt::format("{}: write past a buffer", dev_.info().id));
  dev_.activate();
  dev_.check(cudaMemcpyAsync(static_cast<char*>(ptr_) + offset, src, n, cudaMemcpyHostToDevice,
                             dev_.stream()),
             "copy to the device");
}

void GpuBuffer::write(size_t offset, const void* src, size_t n) {
  enqueue_write(offset, src, n);
  dev_.check(cudaStreamSynchronize(dev_.stream()), "copy to the device");
}

void GpuBuffer::write_async(size_t offset, const void* src, size_t n) {
#if defined(POLYSTACK_HIP)
  write(offset, src, n);
#else
  enqueue_write(offset, src, n);
#endif
}

void GpuBuffer::read(size_t offset, void* dst, size_t n) const {
  if (offset + n > size_) throw BackendError(fmt::format("{}: read past a buffer", dev_.info().id));
  dev_.activate();
  dev_.check(cudaMemcpyAsync(dst, static_cast<const char*>(ptr_) + offset, n,
                             cudaMemcpyDeviceToHost, dev_.stream()),
             "copy from the device");
  dev_.check(cudaStreamSynchronize(dev_.stream()), "copy from the device");
}

GpuDevice::GpuDevice(DeviceInfo info, int ordinal) : info_(std::move(info)), ordinal_(ordinal) {
  activate();
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, ordinal_), "reading the device's properties");
  warp_ = prop.warpSize;
  if (const cudaError_t e = kernel_image_status(); e != cudaSuccess)
    throw BackendError(fmt::format("{} ({}): this build's kernels cannot run here: {}", info_.id,
                                   info_.name, cudaGetErrorString(e)));
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
#if defined(PS_CUDA_GRAPHS)
  const char* graphs = std::getenv("POLYSTACK_CUDA_GRAPHS");
  use_graphs_ = graphs && std::strcmp(graphs, "1") == 0;
#endif
}

GpuDevice::~GpuDevice() {
#if defined(PS_CUDA_GRAPHS)
  if (graph_exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
#endif
  if (stream_) {
    select_quietly();  // destructors do not throw
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

void GpuDevice::select_quietly() const { (void)cudaSetDevice(ordinal_); }

void GpuDevice::activate() const {
  const cudaError_t e = cudaSetDevice(ordinal_);
  if (e != cudaSuccess)
    throw BackendError(fmt::format("{} ({}): cannot select the device: {}", info_.id, info_.name,
                                   cudaGetErrorString(e)));
}

void GpuDevice::check(cudaError_t e, const char* what) const {
  if (e != cudaSuccess)
    throw BackendError(
        fmt::format("{} ({}): {} failed: {}", info_.id, info_.name, what, cudaGetErrorString(e)));
}

void GpuDevice::register_buffer(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
}

void GpuDevice::unregister_buffer(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.erase(reinterpret_cast<uintptr_t>(ptr));
}

bool GpuDevice::owns(const void* data) const {
  const auto addr = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.upper_bound(addr);
  if (it == buffers_.begin()) return false;
  --it;
  return addr < it->first + std::max<size_t>(it->second, 1);
}

std::unique_ptr<Buffer> GpuDevice::alloc(size_t bytes) {
  return std::make_unique<GpuBuffer>(*this, bytes);
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
      if (w.nb[0] != dtype_info(w.type).block_bytes || !f32_rows(n)) return "only contiguous rows";
      // weights.cuh reads 16-bit fields in one load.
      if (w.nb[1] % 2 != 0 || reinterpret_cast<uintptr_t>(w.data) % 2 != 0)
        return "rows at odd byte offsets";
      if (w.ne[2] != 1 || w.ne[3] != 1) return "only 2-D weights";
      if (n.op == OpKind::GetRows) {
        if (n.src[1]->type != DType::I32 || n.src[1]->ne[0] > INT32_MAX) return "only I32 ids";
        return {};
      }
      const Tensor& x = *n.src[1];
      if (!f32_rows(x) || x.ne[2] != 1 || x.ne[3] != 1)
        return "only 2-D F32 activations with contiguous rows";
      if (x.ne[1] > 65535LL * 64) return "more than 4194240 activation rows";
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
  if (use_graphs_)
    execute_as_graph(nodes);
  else
    launch_all(nodes);
}

void GpuDevice::execute_as_graph(std::span<Tensor* const> nodes) {
#if defined(PS_CUDA_GRAPHS)
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "starting a capture");
  cudaGraph_t graph = nullptr;
  try {
    launch_all(nodes);
  } catch (...) {
    (void)cudaStreamEndCapture(stream_, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    throw;
  }
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

void GpuDevice::launch_all(std::span<Tensor* const> nodes) {
  const Launch l{stream_, warp_};
  for (Tensor* n : nodes) {
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
}

void GpuDevice::synchronize() {
  activate();
  check(cudaStreamSynchronize(stream_), "running the queued kernels");
}

}  // namespace ps::gpu
