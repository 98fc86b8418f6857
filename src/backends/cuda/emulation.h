#pragma once
// A CPU stand-in for the CUDA runtime and execution model, so that this backend's kernels run in
// the tests of machines without a GPU (tests/emulation). A block's threads are OS threads that
// meet at barriers: __syncthreads is a block-wide barrier, a warp shuffle a warp-wide one (warp
// width PS_EMU_WARP: 32 as on NVIDIA, or 64 as on AMD's GCN and CDNA). Blocks run one after
// another, so shared memory is a static array per kernel. A thread that returns no longer holds
// up its block's barriers, as on the hardware. Memory is host memory.
// Nothing here is fast; it checks indexing, reductions and synchronization, not speed.
#include <math.h>

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/fp16.h"

#ifndef PS_EMU_WARP
#define PS_EMU_WARP 32
#endif

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;  // of the launch in progress (launches are serialized)

#define __global__
#define __device__
#define __host__
#define __shared__ static

namespace ps::emu {

// The barriers of the block in progress: a thread that returns from the kernel drops out of
// them, so that the others do not wait for it (as on the hardware); between blocks they are made
// anew for every thread.
struct Block {
  explicit Block(unsigned threads) : n(threads), lanes(threads), end(threads, Renew{this}) {
    renew();
  }
  void renew() {
    block = std::make_unique<std::barrier<>>(std::ptrdiff_t(n));
    warps.clear();
    for (unsigned first = 0; first < n; first += PS_EMU_WARP)
      warps.push_back(std::make_unique<std::barrier<>>(
          std::ptrdiff_t(std::min<unsigned>(PS_EMU_WARP, n - first))));
  }
  struct Renew {
    Block* b;
    void operator()() noexcept { b->renew(); }
  };
  unsigned n;
  std::unique_ptr<std::barrier<>> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> lanes;  // one slot per thread for shuffles
  std::barrier<Renew> end;   // all threads, between blocks
};
inline thread_local Block* current = nullptr;

inline unsigned linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

inline float shfl_xor(float v, int mask) {
  const unsigned t = linear_thread(), warp = t / PS_EMU_WARP, lane = t % PS_EMU_WARP;
  current->lanes[t] = v;
  current->warps[warp]->arrive_and_wait();
  const float r = current->lanes[warp * PS_EMU_WARP + (lane ^ unsigned(mask))];
  current->warps[warp]->arrive_and_wait();
  return r;
}

// OS threads kept for the emulation's launches: the first n of them run a launch's job.
class Workers {
 public:
  static Workers& get() {
    static Workers* w = new Workers();  // never destroyed: its threads wait until exit
    return *w;
  }
  void run(unsigned n, const std::function<void(unsigned)>& job) {
    std::unique_lock<std::mutex> lock(mu_);
    while (threads_.size() < n) {
      threads_.emplace_back([this, i = unsigned(threads_.size())] { loop(i); });
      threads_.back().detach();
    }
    job_ = &job;
    active_ = n;
    pending_ = n;
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(unsigned i) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      start_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (i >= active_) continue;
      const std::function<void(unsigned)>* job = job_;
      lock.unlock();
      (*job)(i);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }
  std::mutex mu_;
  std::condition_variable start_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(unsigned)>* job_ = nullptr;
  unsigned active_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
};

// Runs the grid: the threads of a block are OS threads, each running the kernel for every block
// in turn, all meeting between blocks (shared memory is reused by the next block).
template <typename Body>
void launch(dim3 grid, dim3 block, void* /*stream: work runs at once*/, Body&& body) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x * block.y * block.z;
  Block b(n);
  const std::function<void(unsigned)> job = [&](unsigned t) {
    threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
    current = &b;
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          blockIdx = dim3(bx, by, bz);
          body();
          b.block->arrive_and_drop();
          b.warps[t / PS_EMU_WARP]->arrive_and_drop();
          b.end.arrive_and_wait();
        }
  };
  Workers::get().run(n, job);
}

}  // namespace ps::emu

inline void __syncthreads() { ps::emu::current->block->arrive_and_wait(); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

struct __half {
  uint16_t bits;
};
inline float __half2float(__half h) { return ps::fp16_to_f32(h.bits); }
inline __half __float2half_rn(float f) { return __half{ps::f32_to_fp16(f)}; }

// The runtime API calls the backend makes, on host memory.
using cudaError_t = int;
using cudaStream_t = void*;
constexpr cudaError_t cudaSuccess = 0, cudaErrorMemoryAllocation = 2;
enum cudaMemcpyKind {
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice
};
constexpr unsigned cudaStreamNonBlocking = 1;
struct cudaDeviceProp {
  int warpSize = 0;
};
struct cudaFuncAttributes {
  int maxThreadsPerBlock = 0;
};
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "out of memory";
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  p->warpSize = PS_EMU_WARP;
  return cudaSuccess;
}
template <typename F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F) {
  a->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = *total = 0;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  static int stream;
  *s = &stream;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
