#include "core/large_buffer.h"

#include <cstdint>
#include <new>
#include <utility>

#if defined(__linux__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#define PS_LARGE_BUFFER_MMAP 1
#else
#include <cstdlib>
#endif

namespace ps {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

LargeBuffer::LargeBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
#if PS_LARGE_BUFFER_MMAP
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  mapped_ = round_up(bytes, page);
  // Map a huge page more than needed, then return the unaligned head and the tail to the kernel.
  const size_t span = mapped_ + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, kHugePage);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + mapped_, raw_end = start + span;
  if (raw_end > end) munmap(reinterpret_cast<void*>(end), raw_end - end);
  data_ = reinterpret_cast<void*>(aligned);
#if defined(MADV_HUGEPAGE)
  // Advice only: a kernel without transparent huge pages refuses it and small pages serve.
  madvise(data_, mapped_, MADV_HUGEPAGE);
#endif
#else
  mapped_ = round_up(bytes, 64);
  data_ = std::aligned_alloc(64, mapped_);
  if (data_ == nullptr) throw std::bad_alloc();
#endif
}

LargeBuffer::~LargeBuffer() { release(); }

LargeBuffer::LargeBuffer(LargeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

LargeBuffer& LargeBuffer::operator=(LargeBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void LargeBuffer::release() {
  if (data_ == nullptr) return;
#if PS_LARGE_BUFFER_MMAP
  munmap(data_, mapped_);
#else
  std::free(data_);
#endif
  data_ = nullptr;
}

}  // namespace ps
