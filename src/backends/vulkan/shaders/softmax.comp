#version 450
// One workgroup (one subgroup wide) per row: the maximum, then the sum of exponentials, each
// one subgroup reduction (reduce.glsl). fparam0 = scale; iparam >= 0: row i1 sees columns
// j <= i1 + iparam (the rest become 0).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "reduce.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) buffer D { float d[]; };

void main() {
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (r >= p.ne[1] * p.ne[2] * p.ne[3]) return;  // uniform over the workgroup
  const uvec3 at = row_index(r);
  const uint src = a_row(at), dst = d_row(at), n = p.ne[0];
  const uint t = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
  const uint visible = p.iparam >= 0 ? min(n, at.x + uint(p.iparam) + 1) : n;
  float m = -1.0 / 0.0;
  for (uint j = t; j < visible; j += WG) m = max(m, a[src + j] * p.fparam0);
  m = workgroup_max(m);
  float s = 0.0;
  for (uint j = t; j < visible; j += WG) {
    const float e = exp(a[src + j] * p.fparam0 - m);
    d[dst + j] = e;
    s += e;
  }
  const float inv = 1.0 / workgroup_sum(s);
  // Each thread rescales the elements it wrote itself: no barrier needed between the passes.
  for (uint j = t; j < visible; j += WG) d[dst + j] *= inv;
  for (uint j = visible + t; j < n; j += WG) d[dst + j] = 0.0;
}
