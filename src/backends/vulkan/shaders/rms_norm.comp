#version 450
// One workgroup (one subgroup wide) per row: each thread sums squares over a strided slice,
// then one subgroup reduction (reduce.glsl); fparam0 = eps.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "reduce.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

void main() {
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (r >= p.ne[1] * p.ne[2] * p.ne[3]) return;  // uniform over the workgroup
  const uvec3 at = row_index(r);
  const uint src = a_row(at), dst = d_row(at), n = p.ne[0];
  const uint t = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
  float s = 0.0;
  for (uint i = t; i < n; i += WG) s += a[src + i] * a[src + i];
  const float scale = inversesqrt(workgroup_sum(s) / float(n) + p.fparam0);
  for (uint i = t; i < n; i += WG) d[dst + i] = a[src + i] * scale;
}
