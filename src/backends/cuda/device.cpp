// A CUDA/HIP device: its stream, the map of its allocations, and waiting for its work.
#include "backends/cuda/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/kernels.h"
#include "core/error.h"

namespace ps::gpu {

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
  profile_ = GpuOpProfile::from_environment(*this);
  if (const char* v = std::getenv("POLYSTACK_CUDA_MATVEC"); v && *v) {
    if (std::strcmp(v, "dp4a") == 0)
      int8_decode_ = true;
    else if (std::strcmp(v, "float") != 0)
      throw BackendError(fmt::format("POLYSTACK_CUDA_MATVEC: '{}' is neither float nor dp4a", v));
  }
}

GpuDevice::~GpuDevice() {
  if (profile_) {
    select_quietly();
    profile_.reset();  // prints the totals
  }
#if defined(PS_CUDA_GRAPHS)
  if (graph_exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
#endif
  if (stream_) {
    select_quietly();  // destructors do not throw
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
  if (scratch_) (void)cudaFree(scratch_);
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

void GpuDevice::synchronize() {
  activate();
  check(cudaStreamSynchronize(stream_), "running the queued kernels");
}

}  // namespace ps::gpu

namespace ps::gpu {

std::unique_ptr<GpuOpProfile> GpuOpProfile::from_environment(const GpuDevice& dev) {
  const char* v = std::getenv("POLYSTACK_PROFILE_OPS");
  if (!v || !*v || std::strcmp(v, "0") == 0) return nullptr;
  return std::make_unique<GpuOpProfile>(dev);
}

int GpuOpProfile::mark(cudaStream_t stream) {
  if (used_ == int(events_.size())) {
    cudaEvent_t e = nullptr;
    dev_.check(cudaEventCreate(&e), "creating an event");
    events_.push_back(e);
  }
  dev_.check(cudaEventRecord(events_[size_t(used_)], stream), "recording an event");
  return used_++;
}

void GpuOpProfile::add(std::string what, int start, int end) {
  pending_.emplace_back(std::move(what), start, end);
}

void GpuOpProfile::collect() {
  if (used_ == 0) return;
  dev_.check(cudaEventSynchronize(events_[size_t(used_ - 1)]), "waiting for the run's kernels");
  const auto elapsed = [&](int a, int b) {
    float ms = 0;
    dev_.check(cudaEventElapsedTime(&ms, events_[size_t(a)], events_[size_t(b)]),
               "reading the kernels' times");
    return double(ms);
  };
  for (const auto& [what, a, b] : pending_) {
    Total& t = totals_[what];
    t.calls += 1;
    t.ms += elapsed(a, b);
  }
  span_ms_ += elapsed(0, used_ - 1);
  runs_ += 1;
  pending_.clear();
  used_ = 0;
}

GpuOpProfile::~GpuOpProfile() {
  double kernels = 0;
  std::vector<std::pair<std::string, Total>> order(totals_.begin(), totals_.end());
  for (const auto& [what, t] : order) kernels += t.ms;
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  const std::string& id = dev_.info().id;
  for (const auto& [what, t] : order)
    fmt::print(stderr,
               "polystack: {} op {:<22} {:>8} calls {:>10.1f} ms {:>9.2f} us each {:>5.1f} %\n", id,
               what, t.calls, t.ms, t.ms * 1000 / double(t.calls),
               kernels > 0 ? 100 * t.ms / kernels : 0.0);
  for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  if (runs_ == 0) return;
  fmt::print(stderr,
             "polystack: {} ops {:.1f} ms in {} runs; {:.1f} ms from each run's first kernel to "
             "its last ({:.1f} ms between kernels)\n",
             id, kernels, runs_, span_ms_, std::max(0.0, span_ms_ - kernels));
}

}  // namespace ps::gpu
