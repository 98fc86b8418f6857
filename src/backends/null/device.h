#pragma once
// The skeleton's device and buffer. A real backend's device.h holds the same two classes over
// its API's handles (a queue or stream, device memory); see README.md.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace ps::null {

// Memory "on the device". The skeleton's device is the host, so its buffers are host memory
// and address() is host_ptr(); a GPU backend returns an opaque address instead that only its
// device maps back to a buffer (see Vulkan's device.h).
class NullBuffer final : public Buffer {
 public:
  NullBuffer(std::string device_id, size_t bytes);
  size_t size() const override { return bytes_.size(); }
  void* host_ptr() override { return bytes_.data(); }
  // write() and read() return when done; since the skeleton runs each node inside execute(),
  // nothing is ever queued for them to wait for. A backend whose execute() returns early waits
  // for the queue here (backend.h's ordering contract).
  void write(size_t offset, const void* src, size_t n) override;
  void read(size_t offset, void* dst, size_t n) const override;

 private:
  // Throws BackendError when [offset, offset + n) is not inside the buffer.
  void check_range(const char* what, size_t offset, size_t n) const;

  std::string device_id_;
  std::vector<std::byte> bytes_;
};

class NullDevice final : public Device {
 public:
  explicit NullDevice(DeviceInfo info) : info_(std::move(info)) {}
  const DeviceInfo& info() const override { return info_; }
  // ops.cpp: which ops have a kernel here, and why the others do not.
  std::string unsupported_reason(const Tensor& node) const override;
  bool reads_host_memory() const override { return true; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  // ops.cpp: runs each node at once (a GPU backend records and submits instead).
  void execute(std::span<Tensor* const> nodes) override;
  void synchronize() override {}

 private:
  DeviceInfo info_;
};

// probe.cpp: the skeleton's report. No devices unless POLYSTACK_NULL_DEVICES=1, which shows
// one (null:0) for the tests that run the contract's structure on it.
ProbeReport probe();

}  // namespace ps::null
