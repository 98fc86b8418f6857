#include "backends/cpu/cpu_backend.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backend/op_checks.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/packed.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace ps {
namespace {

uint64_t meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string k;
  uint64_t v = 0;
  std::string unit;
  while (in >> k >> v) {
    std::getline(in, unit);
    if (k == key) return v * 1024;
  }
  return 0;
}

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t n) : size_(n) {
    // 64-byte alignment for AVX-512 loads; at least one byte so the pointer is never null.
    // A size whose rounding would wrap is refused, not turned into a tiny allocation.
    if (n > std::numeric_limits<size_t>::max() - 128)
      throw BackendError(fmt::format("cpu: cannot allocate {} bytes", n));
    data_ = static_cast<unsigned char*>(std::aligned_alloc(64, (n + 63) / 64 * 64 + 64));
    if (!data_) throw BackendError(fmt::format("cpu: cannot allocate {} bytes", n));
  }
  ~HostBuffer() override { std::free(data_); }
  size_t size() const override { return size_; }
  void* host_ptr() override { return data_; }
  void write(size_t off, const void* src, size_t n) override { std::memcpy(data_ + off, src, n); }
  void read(size_t off, void* dst, size_t n) const override { std::memcpy(dst, data_ + off, n); }

 private:
  unsigned char* data_;
  size_t size_;
};

DeviceInfo cpu_device_info(int threads) {
  const CpuFeatures& f = cpu_features();
  DeviceInfo d;
  d.id = "cpu";
  d.api = Api::Cpu;
  d.kind = DeviceKind::Cpu;
  d.name = f.brand.empty() ? "unknown CPU" : f.brand;
  d.vendor = f.vendor;
  d.memory_total = meminfo_bytes("MemTotal:");
  d.memory_free = meminfo_bytes("MemAvailable:");
  d.unified_memory = true;
#if defined(__x86_64__)
  d.architecture = "x86-64";
#elif defined(__aarch64__)
  d.architecture = "aarch64";
#endif
  std::string isa;
  for (const auto& n : f.names()) isa += (isa.empty() ? "" : " ") + n;
  const long logical = sysconf(_SC_NPROCESSORS_ONLN);
  d.facts.emplace_back("physical cores", std::to_string(physical_core_count()));
  d.facts.emplace_back("logical cpus", std::to_string(logical));
  d.facts.emplace_back("threads used", std::to_string(threads));
  d.facts.emplace_back("isa extensions", isa.empty() ? "none beyond the baseline" : isa);
  d.facts.emplace_back("kernels", isa_level_name(active_isa_level()));
  return d;
}

// POLYSTACK_PROFILE_OPS=1: the device times its ops by kind (a batch of sibling matmuls is one
// matmul call) and prints the totals to stderr when it is closed, slowest kind first.
class OpProfile {
 public:
  using Clock = std::chrono::steady_clock;
  static std::unique_ptr<OpProfile> from_environment() {
    const char* v = std::getenv("POLYSTACK_PROFILE_OPS");
    if (!v || !*v || std::strcmp(v, "0") == 0) return nullptr;
    return std::make_unique<OpProfile>();
  }
  void add(OpKind op, Clock::duration t) {
    auto& k = kinds_[size_t(op)];
    k.calls += 1;
    k.time += t;
  }
  ~OpProfile() {
    std::vector<size_t> order;
    for (size_t k = 0; k < kinds_.size(); ++k)
      if (kinds_[k].calls && OpKind(k) != OpKind::View && OpKind(k) != OpKind::None)
        order.push_back(k);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return kinds_[a].time > kinds_[b].time; });
    for (size_t k : order) {
      const double us = std::chrono::duration<double, std::micro>(kinds_[k].time).count();
      fmt::print(stderr, "polystack: cpu op {:<10} {:>8} calls {:>10.1f} ms {:>9.2f} us each\n",
                 op_name(OpKind(k)), kinds_[k].calls, us / 1000, us / double(kinds_[k].calls));
    }
  }

 private:
  struct Kind {
    uint64_t calls = 0;
    Clock::duration time{};
  };
  std::array<Kind, size_t(OpKind::Count)> kinds_{};
};

class CpuDevice final : public Device {
 public:
  CpuDevice(int threads, bool batch_invariant)
      : pool_(threads), info_(cpu_device_info(threads)), profile_(OpProfile::from_environment()) {
    ctx_.pool = &pool_;
    ctx_.isa = active_isa_level();
    ctx_.packed = &packed_;
    ctx_.batch_invariant = batch_invariant;
  }
  const DeviceInfo& info() const override { return info_; }
  bool reads_host_memory() const override { return true; }
  int threads() const override { return pool_.size(); }

  std::string unsupported_reason(const Tensor& n) const override {
    switch (n.op) {
      case OpKind::MatMul:
      case OpKind::MatMulId:
      case OpKind::GetRows:
        if (!dtype_info(n.src[0]->type).computable)
          return fmt::format("no CPU kernel for {} weights", dtype_name(n.src[0]->type));
        return {};
      case OpKind::Copy:
        if (!dtype_info(n.type).computable || n.type == DType::Q8_1)
          return fmt::format("cannot convert to {}", dtype_name(n.type));
        return {};
      case OpKind::Attention:
        for (const Tensor* c : {n.src[1], n.src[2]})
          if (c->type != DType::F16 && c->type != DType::F32)
            return fmt::format("KV cache of type {} (F16 or F32 only)", dtype_name(c->type));
        return attention_sinks_problem(n);
      case OpKind::Count:
        return "unknown op";
      default:
        return {};
    }
  }

  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    return std::make_unique<HostBuffer>(bytes);
  }

  void execute(std::span<Tensor* const> nodes) override {
    for (size_t i = 0; i < nodes.size();) {
      const OpKind op = nodes[i]->op;
      const OpProfile::Clock::time_point start =
          profile_ ? OpProfile::Clock::now() : OpProfile::Clock::time_point{};
      if (op == OpKind::MatMul)
        i += cpu::matmul_siblings(ctx_, nodes.subspan(i));
      else
        run(*nodes[i++]);
      if (profile_) profile_->add(op, OpProfile::Clock::now() - start);
    }
  }
  void synchronize() override {}

 private:
  void run(Tensor& n) {
    switch (n.op) {
      case OpKind::None:
      case OpKind::View:
        return;
      case OpKind::MatMul:
        return cpu::matmul(ctx_, n);
      case OpKind::GetRows:
        return cpu::get_rows(ctx_, n);
      case OpKind::RmsNorm:
        return cpu::rms_norm(ctx_, n);
      case OpKind::Rope:
        return cpu::rope(ctx_, n);
      case OpKind::SoftMax:
        return cpu::softmax(ctx_, n);
      case OpKind::Attention:
        return cpu::attention(ctx_, n);
      case OpKind::Copy:
        return cpu::copy(ctx_, n);
      case OpKind::Add:
      case OpKind::Mul:
      case OpKind::Silu:
      case OpKind::Gelu:
      case OpKind::Scale:
      case OpKind::SwiGlu:
      case OpKind::SwiGluOai:
      case OpKind::Sigmoid:
        return cpu::elementwise(ctx_, n);
      case OpKind::TopK:
        return cpu::top_k(ctx_, n);
      case OpKind::ExpertWeights:
        return cpu::expert_weights(ctx_, n);
      case OpKind::MatMulId:
        return cpu::matmul_id(ctx_, n);
      case OpKind::ExpertSum:
        return cpu::expert_sum(ctx_, n);
      case OpKind::Count:
        break;
    }
    throw BackendError(fmt::format("cpu: no kernel for op {}", op_name(n.op)));
  }

  ThreadPool pool_;
  DeviceInfo info_;
  cpu::PackedWeights packed_;
  cpu::Context ctx_;
  std::unique_ptr<OpProfile> profile_;  // null unless POLYSTACK_PROFILE_OPS is set
};

class CpuBackend final : public Backend {
 public:
  Api api() const override { return Api::Cpu; }
  ProbeReport probe() override {
    ProbeReport r;
    r.api = Api::Cpu;
    r.built = true;
    r.devices.push_back(cpu_device_info(physical_core_count()));
    return r;
  }
  std::unique_ptr<Device> open_device(int index, const DeviceOptions& opts) override {
    if (index != 0) throw BackendError("cpu: there is only one CPU device, 'cpu'");
    const int threads = opts.n_threads > 0 ? opts.n_threads : physical_core_count();
    if (threads > 1024) throw UsageError(fmt::format("{} threads is too many", threads));
    return std::make_unique<CpuDevice>(threads, opts.batch_invariant);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace ps
