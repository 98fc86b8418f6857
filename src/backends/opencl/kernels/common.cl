// Shared by every kernel: the parameter block (backend/kernel_params.h, the same list the
// host's KernelParams and Vulkan's push constants come from), the operands, and index helpers.
// The host prepends kernel_codes.h and kernel_params.h (kernels.cpp). Every kernel takes the
// block and six operands, each a buffer and the byte offset of its first element; absent
// operands are bound to a placeholder. The block's offsets (a_off, ...) are 0: the byte
// offsets carry them.
#define PS_CL_U(name) uint name;
#define PS_CL_I(name) int name;
#define PS_CL_F(name) float name;
#define PS_CL_A(name) uint name[4];
typedef struct {
  PS_KERNEL_PARAMS(PS_CL_U, PS_CL_I, PS_CL_F, PS_CL_A)
} Params;

#define PS_ARGS                                                                          \
  Params p, global uchar *ps_mem0, ulong ps_off0, global uchar *ps_mem1, ulong ps_off1,   \
      global uchar *ps_mem2, ulong ps_off2, global uchar *ps_mem3, ulong ps_off3,         \
      global uchar *ps_mem4, ulong ps_off4, global uchar *ps_mem5, ulong ps_off5
// Operand i as a pointer to its element type.
#define OPERAND(type, i) ((global type*)(ps_mem##i + ps_off##i))

// The r-th row over dimensions 1..3 (dimension 1 fastest), as (i1, i2, i3).
#define ROW_INDEX(r) \
  ((uint3)((r) % p.ne[1], ((r) / p.ne[1]) % p.ne[2], (r) / (p.ne[1] * p.ne[2])))
#define A_ROW(i) ((i).x * p.a_nb[1] + (i).y * p.a_nb[2] + (i).z * p.a_nb[3])
#define D_ROW(i) ((i).x * p.d_nb[1] + (i).y * p.d_nb[2] + (i).z * p.d_nb[3])
// src1's row for output row i: src1 repeats along any dimension where its extent is 1.
#define B_ROW(i)                                                              \
  (((i).x % p.b_ne[1]) * p.b_nb[1] + ((i).y % p.b_ne[2]) * p.b_nb[2] + \
   ((i).z % p.b_ne[3]) * p.b_nb[3])
#define ROWS() (p.ne[1] * p.ne[2] * p.ne[3])

// Work-groups are WG (64) items wide; these reduce over one through local memory.
#define WG 64
float group_sum(float v, local float* red) {
  const uint t = get_local_id(0);
  red[t] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint w = WG / 2; w > 0; w >>= 1) {
    if (t < w) red[t] += red[t + w];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);  // red is free again for the caller's next reduction
  return r;
}
float group_max(float v, local float* red) {
  const uint t = get_local_id(0);
  red[t] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint w = WG / 2; w > 0; w >>= 1) {
    if (t < w) red[t] = fmax(red[t], red[t + w]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}
