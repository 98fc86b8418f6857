#pragma once
// The parameter block (kernel_params.h) each op's GPU kernels read, filled in one place for the
// backends whose kernels take the block (Vulkan's shaders, OpenCL's kernels): shapes and
// strides in elements of each operand's type (weights and tables in bytes), and the op's
// parameters from graph/ops.h. Offsets are 0: each backend says where its operands start
// (Vulkan in the block, from its aligned bindings; OpenCL as kernel arguments).
#include "backend/kernel_params.h"
#include "graph/tensor.h"

namespace ps {

KernelParams kernel_params_for(const Tensor& node);

// Shape and strides of t into a block's fields, strides divided by `unit` (an element's bytes,
// or 1 for bytes).
void set_shape(uint32_t (&ne)[4], uint32_t (&nb)[4], const Tensor& t, size_t unit);
void set_strides(uint32_t (&nb)[4], const Tensor& t, size_t unit);

}  // namespace ps
