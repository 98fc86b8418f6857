#pragma once
// A CPU stand-in for the CUDA runtime and execution model, so that this backend's kernels run in
// the tests of machines without a GPU (tests/emulation). Each block's threads are OS threads
// that meet at barriers: __syncthreads is a block-wide barrier, a warp shuffle a warp-wide one
// (warp width PS_EMU_WARP: 32 as on NVIDIA, or 64 as on AMD's GCN and CDNA). Blocks run one
// after another, so shared memory is a static array per kernel. A thread that returns counts as
// arrived at every later barrier of its block, as on the hardware. Memory is host memory.
// Nothing here is fast; it checks indexing, reductions and synchronization, not speed.
#include <math.h>

#include <barrier>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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

struct Block {
  explicit Block(unsigned threads) : block(std::ptrdiff_t(threads)), lanes(threads) {
    for (unsigned first = 0; first < threads; first += PS_EMU_WARP)
      warps.push_back(std::make_unique<std::barrier<>>(
          std::ptrdiff_t(std::min<unsigned>(PS_EMU_WARP, threads - first))));
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> lanes;  // one slot per thread for shuffles
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

template <typename Body>
void launch(dim3 grid, dim3 block, void* /*stream: work runs at once*/, Body&& body) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Block b(n);
        std::vector<std::thread> threads;
        threads.reserve(n);
        for (unsigned t = 0; t < n; ++t)
          threads.emplace_back([&, t] {
            threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
            blockIdx = dim3(bx, by, bz);
            current = &b;
            body();
            b.block.arrive_and_drop();
            b.warps[t / PS_EMU_WARP]->arrive_and_drop();
          });
        for (auto& th : threads) th.join();
      }
}

}  // namespace ps::emu

inline void __syncthreads() { ps::emu::current->block.arrive_and_wait(); }
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
