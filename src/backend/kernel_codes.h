// The codes the GPU kernels switch on, one list for every kernel language: C++ and CUDA include
// this file as a header, the Vulkan shaders through GL_GOOGLE_include_directive (glslc -I src),
// OpenCL C kernels as a header too. It holds preprocessor definitions only, which all of those
// languages read alike; unsigned literals, which GLSL compares with its uint fields as is.
#ifndef PS_BACKEND_KERNEL_CODES_H
#define PS_BACKEND_KERNEL_CODES_H

// The element-wise kernel's operation (one kernel serves all of these ops).
#define PS_EW_ADD 0u
#define PS_EW_MUL 1u
#define PS_EW_SILU 2u
#define PS_EW_GELU 3u
#define PS_EW_SWIGLU 4u
#define PS_EW_SCALE 5u
#define PS_EW_SIGMOID 6u
#define PS_EW_SWIGLU_OAI 7u
#define PS_EW_NONE 0xffffffffu  // not an element-wise op

// rope's op word: RopeMode's value in the low byte, flags above it.
#define PS_ROPE_MODE_MASK 0xffu
#define PS_ROPE_NEOX 2u         // RopeMode::NeoX (graph/tensor.h asserts it)
#define PS_ROPE_FACTORS 0x100u  // per-pair frequency factors are bound

#endif
