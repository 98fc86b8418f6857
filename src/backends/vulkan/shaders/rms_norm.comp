#version 450
// One workgroup per row: each thread sums squares over a strided slice, then a tree reduction
// in shared memory; fparam0 = eps.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

shared float partial[128];

void main() {
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (r >= p.ne[1] * p.ne[2] * p.ne[3]) return;
  const uvec3 at = row_index(r);
  const uint src = a_row(at), dst = d_row(at), n = p.ne[0], t = gl_LocalInvocationID.x;
  float s = 0.0;
  for (uint i = t; i < n; i += 128) s += a[src + i] * a[src + i];
  partial[t] = s;
  barrier();
  for (uint w = 64; w > 0; w >>= 1) {
    if (t < w) partial[t] += partial[t + w];
    barrier();
  }
  const float scale = inversesqrt(partial[0] / float(n) + p.fparam0);
  for (uint i = t; i < n; i += 128) d[dst + i] = a[src + i] * scale;
}
