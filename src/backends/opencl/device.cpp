// An OpenCL device: its context and in-order queue, the map from Tensor::data's addresses to
// buffers, and dispatching a kernel with the parameter block and its operands.
#include "backends/opencl/device.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace ps::ocl {

OclDevice::OclDevice(const Functions& f, DeviceExtras x) : f_(f), x_(std::move(x)) {
  cl_int e = CL_SUCCESS;
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                         reinterpret_cast<cl_context_properties>(x_.platform), 0};
  context_ = f_.clCreateContext(props, 1, &x_.device, nullptr, nullptr, &e);
  check(e, "clCreateContext");
  // In order: each command starts after the one before it has finished, which is the ordering
  // backend.h asks for without events.
  queue_ = f_.clCreateCommandQueue(context_, x_.device, 0, &e);
  if (e != CL_SUCCESS) {
    f_.clReleaseContext(context_);
    check(e, "clCreateCommandQueue");
  }
  const char* matmul = std::getenv("POLYSTACK_OPENCL_MATMUL");
  rows_per_item_ =
      x_.info.kind == DeviceKind::Cpu && !(matmul && std::string_view(matmul) == "gpu");
  placeholder_ = f_.clCreateBuffer(context_, CL_MEM_READ_WRITE, 16, nullptr, &e);
  if (e != CL_SUCCESS) {
    f_.clReleaseCommandQueue(queue_);
    f_.clReleaseContext(context_);
    check(e, "clCreateBuffer");
  }
}

OclDevice::~OclDevice() {
  f_.clFinish(queue_);
  for (auto& [name, k] : kernels_) f_.clReleaseKernel(k);
  for (auto& [name, prog] : programs_) f_.clReleaseProgram(prog);
  f_.clReleaseMemObject(placeholder_);
  f_.clReleaseCommandQueue(queue_);
  f_.clReleaseContext(context_);
}

std::unique_ptr<Buffer> OclDevice::alloc(size_t bytes) {
  return std::make_unique<OclBuffer>(*this, bytes);
}

void OclDevice::register_buffer(OclBuffer* b) {
  std::lock_guard lock(buffers_mu_);
  buffers_[b->base()] = b;
}

void OclDevice::unregister_buffer(OclBuffer* b) {
  std::lock_guard lock(buffers_mu_);
  buffers_.erase(b->base());
}

const OclBuffer* OclDevice::buffer_at(uintptr_t addr) const {
  std::lock_guard lock(buffers_mu_);
  auto it = buffers_.upper_bound(addr);
  if (it == buffers_.begin()) return nullptr;
  --it;
  return addr < it->first + it->second->size() || addr == it->first ? it->second : nullptr;
}

bool OclDevice::owns(const void* data) const {
  return buffer_at(reinterpret_cast<uintptr_t>(data)) != nullptr;
}

OclDevice::Operand OclDevice::operand(const Tensor& t) const {
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (const OclBuffer* b = buffer_at(addr)) return {b->mem(), cl_ulong(addr - b->base())};
  throw BackendError(
      fmt::format("{}: tensor {} is not in one of this device's buffers", x_.info.id, t.name));
}

void OclDevice::synchronize() { check(f_.clFinish(queue_), "clFinish"); }

cl_kernel OclDevice::kernel(const std::string& program, const std::string& name) {
  const std::string key = program + "/" + name;
  if (auto it = kernels_.find(key); it != kernels_.end()) return it->second;
  cl_program& prog = programs_[program];
  if (!prog) prog = build_program(f_, context_, x_, program);
  cl_int e = CL_SUCCESS;
  cl_kernel k = f_.clCreateKernel(prog, name.c_str(), &e);
  check(e, "clCreateKernel");
  kernels_[key] = k;
  return k;
}

void OclDevice::dispatch(const std::string& program, const std::string& name, const KernelParams& p,
                         std::initializer_list<Operand> operands,
                         const std::array<size_t, 3>& groups) {
  constexpr size_t local = 64;  // WG in kernels/common.cl
  cl_kernel k = kernel(program, name);
  check(f_.clSetKernelArg(k, 0, sizeof p, &p), "clSetKernelArg");
  cl_uint arg = 1;
  auto it = operands.begin();
  for (int i = 0; i < 6; ++i, arg += 2) {
    Operand o{placeholder_, 0};
    if (it != operands.end()) {
      if (it->mem) o = *it;
      ++it;
    }
    check(f_.clSetKernelArg(k, arg, sizeof(cl_mem), &o.mem), "clSetKernelArg");
    check(f_.clSetKernelArg(k, arg + 1, sizeof(cl_ulong), &o.offset), "clSetKernelArg");
  }
  const size_t global[3] = {groups[0] * local, groups[1], groups[2]};
  const size_t local_size[3] = {local, 1, 1};
  for (size_t g : groups)
    if (g == 0) return;  // nothing to do (an empty tensor)
  check(f_.clEnqueueNDRangeKernel(queue_, k, 3, nullptr, global, local_size, 0, nullptr, nullptr),
        "clEnqueueNDRangeKernel");
}

}  // namespace ps::ocl
