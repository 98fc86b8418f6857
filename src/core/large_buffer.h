#pragma once
// Memory for large arrays that kernels stream through (the CPU backend's packed weights): an
// anonymous mapping that starts on a 2 MiB boundary and asks the kernel for transparent huge
// pages (MADV_HUGEPAGE, which Linux honours in its default "madvise" mode). Streaming a matrix
// through 4 KiB pages costs a TLB miss per page; a 2 MiB page covers 512 of them. Where huge
// pages are not granted the mapping still works with small ones. Pages are not cleared by us: the kernel hands out zero pages on first touch.
#include <cstddef>

namespace ps {

class LargeBuffer {
 public:
  LargeBuffer() = default;
  // Throws std::bad_alloc when the mapping fails.
  explicit LargeBuffer(size_t bytes);
  ~LargeBuffer();
  LargeBuffer(LargeBuffer&& other) noexcept;
  LargeBuffer& operator=(LargeBuffer&& other) noexcept;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release();

  void* data_ = nullptr;
  size_t size_ = 0;    // bytes asked for
  size_t mapped_ = 0;  // bytes mapped at data_ (size_ rounded up to whole pages)
};

}  // namespace ps
