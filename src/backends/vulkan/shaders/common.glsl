// Shared by every kernel: the push-constant block the host fills (ops.cpp), declared from
// backend/kernel_params.h's list as the host's Params is, and the index helpers. Offsets are an
// operand's first element within its bound range (the host binds at aligned offsets).
#extension GL_EXT_shader_explicit_arithmetic_types : require

#include "backend/kernel_params.h"
#define PS_GLSL_U(name) uint name;
#define PS_GLSL_I(name) int name;
#define PS_GLSL_F(name) float name;
#define PS_GLSL_A(name) uint name[4];
layout(push_constant) uniform Params {
  PS_KERNEL_PARAMS(PS_GLSL_U, PS_GLSL_I, PS_GLSL_F, PS_GLSL_A)
}
p;

// The matmul kernels' group of weight rows: x, continued over z where one dimension of the grid
// cannot hold them all (vocabularies of 262k rows).
uint row_group() { return gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x; }

// The r-th row over dimensions 1..3 (dimension 1 fastest), as (i1, i2, i3).
uvec3 row_index(uint r) { return uvec3(r % p.ne[1], (r / p.ne[1]) % p.ne[2], r / (p.ne[1] * p.ne[2])); }
uint a_row(uvec3 i) { return p.a_off + i.x * p.a_nb[1] + i.y * p.a_nb[2] + i.z * p.a_nb[3]; }
uint d_row(uvec3 i) { return p.d_off + i.x * p.d_nb[1] + i.y * p.d_nb[2] + i.z * p.d_nb[3]; }
// src1's row for output row i: src1 repeats along any dimension where its extent is 1.
uint b_row(uvec3 i) {
  return p.b_off + (i.x % p.b_ne[1]) * p.b_nb[1] + (i.y % p.b_ne[2]) * p.b_nb[2] +
         (i.z % p.b_ne[3]) * p.b_nb[3];
}
