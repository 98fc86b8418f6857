#pragma once
// Test helper: a copy of some bytes placed so that they end exactly where an inaccessible page
// begins, so a kernel that reads past them faults.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace ps {

class GuardedBytes {
 public:
  explicit GuardedBytes(const void* src, size_t size) : size_(size) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    span_ = (size + page - 1) / page * page + page;
    void* base = mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<uint8_t*>(base);
    if (mprotect(base_ + span_ - page, page, PROT_NONE) != 0) throw std::runtime_error("mprotect");
    std::memcpy(data(), src, size);
  }
  ~GuardedBytes() { munmap(base_, span_); }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  uint8_t* data() { return base_ + span_ - size_t(sysconf(_SC_PAGESIZE)) - size_; }

 private:
  uint8_t* base_ = nullptr;
  size_t size_, span_ = 0;
};

}  // namespace ps
