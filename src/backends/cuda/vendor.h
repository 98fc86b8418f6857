#pragma once
// The one place where CUDA and HIP differ in name. The backend's sources are written against
// CUDA's runtime API; built by hipcc (POLYSTACK_HIP defined), the same names map onto HIP's.
// Compiled by a host compiler alone (tests of the block decoders), the device qualifiers
// vanish so that weights.cuh runs on the CPU.
// Files: *.cu hold kernels and include no fmt; *.cpp are host code (device, probe, backend).
#if defined(POLYSTACK_GPU_EMULATION)
#include "backends/cuda/emulation.h"

#define PS_WARP_SIZE PS_EMU_WARP
#define PS_SHFL_XOR(v, mask) ::ps::emu::shfl_xor((v), (mask))
#define PS_VENDOR "emulated"
#define PS_LAUNCH(kernel, grid, block, stream, ...) \
  ::ps::emu::launch(dim3(grid), dim3(block), (stream), [&] { kernel(__VA_ARGS__); })

#elif defined(POLYSTACK_HIP)
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceProp hipDeviceProp_t
#define cudaSetDevice hipSetDevice
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemGetInfo hipMemGetInfo
#define cudaStream_t hipStream_t
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaEvent_t hipEvent_t
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaFuncAttributes hipFuncAttributes
#define cudaFuncGetAttributes(attr, fn) \
  hipFuncGetAttributes(attr, reinterpret_cast<const void*>(fn))
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaDriverGetVersion hipDriverGetVersion

// Wavefronts are 64 lanes on GCN and CDNA, 32 on RDNA: each target's code is compiled with its
// own width, and the host launches with the width the device reports.
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define PS_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define PS_WARP_SIZE 64
#endif
#define PS_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#define PS_VENDOR "AMD"

#elif defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define PS_WARP_SIZE 32
#define PS_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#define PS_VENDOR "NVIDIA"

#elif defined(POLYSTACK_CUDA)
// Host sources of the CUDA plugin (compiled by the host compiler: nvcc's front end cannot take
// fmt's compile-time format checks, so the kernel files stay free of fmt).
#include <cuda_runtime_api.h>

#endif

#if (defined(__CUDACC__) || defined(__HIPCC__)) && !defined(POLYSTACK_GPU_EMULATION)
#define PS_HD __host__ __device__
#else
#define PS_HD
#endif

// Device code: compiled by nvcc or hipcc, or for the emulation.
#if defined(__CUDACC__) || defined(__HIPCC__) || defined(POLYSTACK_GPU_EMULATION)
#define PS_DEVICE_CODE 1
#endif

// Unrolls the loop that follows where the compiler is nvcc or hipcc (the host compiler of the
// emulation does not know the pragma).
#if defined(__CUDACC__) || defined(__HIPCC__)
#define PS_UNROLL _Pragma("unroll")
#else
#define PS_UNROLL
#endif

// kernel<<<grid, block, 0, stream>>>(args...). kernel is a name or a pointer (a template
// instance with several arguments goes through a pointer: the macro would split it).
#ifndef PS_LAUNCH
#define PS_LAUNCH(kernel, grid, block, stream, ...) \
  kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif
