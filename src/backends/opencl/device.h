#pragma once
// An OpenCL device: its context and in-order queue, buffers in device memory that Tensor::data
// names by opaque addresses, and the kernels, built from the embedded OpenCL C sources on first
// use and kept as program binaries per device and driver (program_cache.cpp).
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/kernel_params.h"
#include "backends/opencl/probe.h"

namespace ps::ocl {

class OclDevice;

// Device memory. read() and write() are blocking commands on the device's in-order queue, so
// they take their place after the work queued before them (backend.h's ordering); write_async
// is the same blocking write, which the contract allows (the source may be reused at once).
class OclBuffer final : public Buffer {
 public:
  OclBuffer(OclDevice& dev, size_t bytes);
  ~OclBuffer() override;
  size_t size() const override { return size_; }
  void* host_ptr() override { return nullptr; }
  void* address() override { return reinterpret_cast<void*>(base_); }
  void write(size_t offset, const void* src, size_t n) override;
  void read(size_t offset, void* dst, size_t n) const override;

  cl_mem mem() const { return mem_; }
  uintptr_t base() const { return base_; }

 private:
  void check_range(const char* what, size_t offset, size_t n) const;

  OclDevice& dev_;
  size_t size_;
  uintptr_t base_;
  cl_mem mem_ = nullptr;
};

class OclDevice final : public Device {
 public:
  OclDevice(const Functions& f, DeviceExtras x);
  ~OclDevice() override;

  const DeviceInfo& info() const override { return x_.info; }
  std::string unsupported_reason(const Tensor& node) const override;  // ops.cpp
  bool reads_host_memory() const override { return false; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  bool owns(const void* data) const override;
  void execute(std::span<Tensor* const> nodes) override;  // ops.cpp
  void synchronize() override;

  const Functions& fn() const { return f_; }
  cl_context context() const { return context_; }
  cl_command_queue queue() const { return queue_; }
  const DeviceExtras& extras() const { return x_; }
  void register_buffer(OclBuffer* b);
  void unregister_buffer(OclBuffer* b);

  // An operand as a kernel sees it: its buffer and the byte offset of its first element.
  struct Operand {
    cl_mem mem = nullptr;
    cl_ulong offset = 0;
  };
  Operand operand(const Tensor& t) const;
  // Runs kernel `name` of program `program` (kernels.h) with the parameter block and up to six
  // operands (absent ones bound to a placeholder): groups[0] work-groups of 64 items along
  // dimension 0, groups[1] and groups[2] items along dimensions 1 and 2.
  void dispatch(const std::string& program, const std::string& name, const KernelParams& p,
                std::initializer_list<Operand> operands, const std::array<size_t, 3>& groups);

 private:
  // The buffer whose addresses hold addr (its first byte, for an empty one); null if none.
  const OclBuffer* buffer_at(uintptr_t addr) const;
  cl_kernel kernel(const std::string& program, const std::string& name);
  void run(Tensor& node);  // ops.cpp

  const Functions& f_;
  DeviceExtras x_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  cl_mem placeholder_ = nullptr;
  // A CPU driver's items are the SIMD lanes of a loop: matmuls take a weight row per item
  // there. POLYSTACK_OPENCL_MATMUL=gpu gives them the GPUs' kernel (for tests).
  bool rows_per_item_ = false;
  std::map<uintptr_t, OclBuffer*> buffers_;  // by base address
  mutable std::mutex buffers_mu_;
  std::map<std::string, cl_program> programs_;
  std::map<std::string, cl_kernel> kernels_;  // "program/kernel"
};

// The program `program` built for the device: from the cached binary when one matches the
// device, driver and source, else compiled from the embedded source and cached (program_cache.cpp).
cl_program build_program(const Functions& f, cl_context ctx, const DeviceExtras& x,
                         const std::string& program);

}  // namespace ps::ocl
