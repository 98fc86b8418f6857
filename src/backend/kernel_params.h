// The parameter block the GPU kernels read (Vulkan's push constants, OpenCL's first kernel
// argument), as one list that C++, GLSL and OpenCL C expand into their own declarations, so
// they cannot disagree on a field's place. Shapes and strides are in elements of each operand's
// type; offsets are an operand's first element within its bound range. Preprocessor definitions
// only (as in kernel_codes.h) outside the C++ part, for every kernel language.
//
// PS_KERNEL_PARAMS(U, I, F, A) calls U(name) for a 32-bit unsigned field, I(name) for a signed
// one, F(name) for a float and A(name) for four unsigned ones, in the block's order.
#ifndef PS_BACKEND_KERNEL_PARAMS_H
#define PS_BACKEND_KERNEL_PARAMS_H

#define PS_KERNEL_PARAMS(U, I, F, A)                                                        \
  A(ne)      /* shape of the output (and of src0 for the element-wise ops) */               \
  A(a_nb)    /* src0 strides */                                                             \
  A(b_ne)    /* src1 shape */                                                               \
  A(b_nb)    /* src1 strides */                                                             \
  A(d_nb)    /* output strides */                                                           \
  U(a_off)   /* src0's first element */                                                     \
  U(b_off)   /* src1's */                                                                   \
  U(d_off)   /* the output's */                                                             \
  I(iparam)  /* rope: n_rot; softmax: the causal offset; ... */                             \
  F(fparam0) /* scale, eps, rope's base, swiglu_oai's alpha, ... */                         \
  F(fparam1) /* rope's frequency scale, swiglu_oai's limit, ... */                          \
  U(op)      /* element-wise: the op (kernel_codes.h); rope: mode and flags; attention: the \
                sliding window (0: none); get_rows: rows of the whole table */              \
  U(v_off)   /* attention: the V cache's first element; rope: the factors' */               \
  U(e_off)   /* attention: the per-token (position, plane) pairs' first element */          \
  F(fparam2) /* rope: the scale of the rotated values */                                    \
  U(f_off)   /* attention: the sinks' first element */

// The block's size in bytes: 4 per U, I and F, 16 per A.
#define PS_KERNEL_PARAMS_BYTES 124

#ifdef __cplusplus
#include <cstdint>

namespace ps {

// The host's side of the block (C++ and CUDA).
#define PS_CXX_U(name) uint32_t name;
#define PS_CXX_I(name) int32_t name;
#define PS_CXX_F(name) float name;
#define PS_CXX_A(name) uint32_t name[4];
struct KernelParams {
  PS_KERNEL_PARAMS(PS_CXX_U, PS_CXX_I, PS_CXX_F, PS_CXX_A)
};
#undef PS_CXX_U
#undef PS_CXX_I
#undef PS_CXX_F
#undef PS_CXX_A
static_assert(sizeof(KernelParams) == PS_KERNEL_PARAMS_BYTES);

}  // namespace ps
#endif

#endif
