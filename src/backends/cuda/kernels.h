#pragma once
// The CUDA/HIP kernels' launchers, one per op family, each in the file of the CPU backend's
// version (matmul.cu beside backends/cpu/matmul.cpp). Each queues its kernels on the launch's
// stream and returns without waiting; shapes were checked by GpuDevice::unsupported_reason.
#include "backends/cuda/common.cuh"
#include "graph/tensor.h"

namespace ps::gpu {

void elementwise(const Launch& l,
                 const Tensor& node);  // add, mul, silu, gelu, scale, swiglu(_oai), sigmoid
void rms_norm(const Launch& l, const Tensor& node);
void softmax(const Launch& l, const Tensor& node);
void rope(const Launch& l, const Tensor& node);
void copy(const Launch& l, const Tensor& node);
void get_rows(const Launch& l, const Tensor& node);
void matmul(const Launch& l, const Tensor& node);
// The scratch memory matmul() needs for a node under Launch::int8_decode (0: none).
size_t matmul_scratch_bytes(const Tensor& node);
void attention(const Launch& l, const Tensor& node);
// Mixture of experts (moe.cu).
void top_k(const Launch& l, const Tensor& node);
void expert_weights(const Launch& l, const Tensor& node);
void matmul_id(const Launch& l, const Tensor& node);
void expert_sum(const Launch& l, const Tensor& node);

// Whether this build's kernels can run on the current device (cudaErrorNoKernelImageForDevice
// and the like when not).
cudaError_t kernel_image_status();

// The largest head size attention() takes (a query row and accumulators per thread).
inline constexpr int64_t kMaxHeadDim = 256;

}  // namespace ps::gpu
