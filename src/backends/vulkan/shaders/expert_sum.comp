#version 450
// expert_sum (graph/ops.h): out[i, t] = sum over j of w[j, t] * x[i, j, t], j in order. One
// invocation per element: x = element, y/z = token. src0 F32 [N, k, T] (ne, a_nb), src1 F32
// [k, T] (b_nb), output F32 [N, T] (d_nb).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float x[]; };
layout(std430, binding = 1) readonly buffer B { float w[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

void main() {
  const uint i = gl_GlobalInvocationID.x;
  const uint t = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
  if (i >= p.ne[0] || t >= p.ne[2]) return;
  const uint wr = p.b_off + t * p.b_nb[1];
  float s = 0.0;
  for (uint j = 0; j < p.ne[1]; ++j) s += x[p.a_off + i + j * p.a_nb[1] + t * p.a_nb[2]] * w[wr + j];
  d[p.d_off + i + t * p.d_nb[1]] = s;
}
