#pragma once
// What every CUDA/HIP kernel file shares: tensors as kernel arguments (data pointer, extents,
// byte strides), warp and block reductions written for the warp width the code is compiled for
// (32 on NVIDIA and RDNA, 64 on GCN/CDNA), and the launch context of a device's stream.
#include <cstdint>

#include "backends/cuda/vendor.h"
#include "graph/tensor.h"

namespace ps::gpu {

// A tensor as kernels see it: strides in bytes, dimension 0 innermost.
struct View {
  char* data;
  int64_t ne[4];
  int64_t nb[4];
};

inline View view_of(const Tensor& t) {
  View v{static_cast<char*>(t.data), {}, {}};
  for (int d = 0; d < 4; ++d) {
    v.ne[d] = t.ne[size_t(d)];
    v.nb[d] = int64_t(t.nb[size_t(d)]);
  }
  return v;
}

// The stream kernels are queued on, and the device's warp width (for grid sizes).
struct Launch {
  cudaStream_t stream;
  int warp;
  // Decode steps of Q4_K, Q6_K and Q8_0 weights with activations rounded to int8 and integer
  // dot products (POLYSTACK_CUDA_MATVEC=dp4a), in `scratch`: device memory of at least
  // matmul_scratch_bytes() of every node launched with it.
  bool int8_decode = false;
  void* scratch = nullptr;
};

// Throws BackendError naming the kernel (device.cpp).
[[noreturn]] void launch_failed(const char* kernel, cudaError_t e);

// Throws when the last launch failed (a bad configuration, no kernel image). Does not wait for
// the kernel.
inline void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) launch_failed(kernel, e);
}

inline unsigned blocks_for(int64_t n, int per_block, int64_t cap = 65535LL * 16) {
  const int64_t b = (n + per_block - 1) / per_block;
  return unsigned(b < 1 ? 1 : b > cap ? cap : b);
}

#if defined(PS_DEVICE_CODE)

__device__ inline char* row_at(const View& v, int64_t i1, int64_t i2, int64_t i3) {
  return v.data + i1 * v.nb[1] + i2 * v.nb[2] + i3 * v.nb[3];
}
// Row r of the rows over dimensions 1..3.
__device__ inline char* row_at(const View& v, int64_t r) {
  const int64_t i1 = r % v.ne[1], i2 = (r / v.ne[1]) % v.ne[2], i3 = r / (v.ne[1] * v.ne[2]);
  return row_at(v, i1, i2, i3);
}

template <typename T>
__device__ inline T imin(T a, T b) {
  return a < b ? a : b;
}
template <typename T>
__device__ inline T imax(T a, T b) {
  return a < b ? b : a;
}

__device__ inline float warp_sum(float v) {
  for (int m = PS_WARP_SIZE / 2; m > 0; m >>= 1) v += PS_SHFL_XOR(v, m);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int m = PS_WARP_SIZE / 2; m > 0; m >>= 1) v = fmaxf(v, PS_SHFL_XOR(v, m));
  return v;
}

// Sum (or max) over the block, returned to every thread. scratch: shared, one float per warp
// plus one; the block must be a whole number of warps.
template <bool kMax>
__device__ inline float block_reduce(float v, float* scratch) {
  const int lane = int(threadIdx.x) % PS_WARP_SIZE, warp = int(threadIdx.x) / PS_WARP_SIZE;
  const int warps = int(blockDim.x) / PS_WARP_SIZE;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) scratch[warps] = w;
  }
  __syncthreads();
  return scratch[warps];
}

#endif

}  // namespace ps::gpu
