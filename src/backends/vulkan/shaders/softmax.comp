#version 450
// One workgroup per row: max, then sum of exponentials, each a shared-memory reduction.
// fparam0 = scale; iparam >= 0: row i1 sees columns j <= i1 + iparam (the rest become 0).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) buffer D { float d[]; };

shared float partial[128];

void main() {
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (r >= p.ne[1] * p.ne[2] * p.ne[3]) return;
  const uvec3 at = row_index(r);
  const uint src = a_row(at), dst = d_row(at), n = p.ne[0], t = gl_LocalInvocationID.x;
  const uint visible = p.iparam >= 0 ? min(n, at.x + uint(p.iparam) + 1) : n;
  float m = -1.0 / 0.0;
  for (uint j = t; j < visible; j += 128) m = max(m, a[src + j] * p.fparam0);
  partial[t] = m;
  barrier();
  for (uint w = 64; w > 0; w >>= 1) {
    if (t < w) partial[t] = max(partial[t], partial[t + w]);
    barrier();
  }
  m = partial[0];
  barrier();
  float s = 0.0;
  for (uint j = t; j < visible; j += 128) {
    const float e = exp(a[src + j] * p.fparam0 - m);
    d[dst + j] = e;
    s += e;
  }
  partial[t] = s;
  barrier();
  for (uint w = 64; w > 0; w >>= 1) {
    if (t < w) partial[t] += partial[t + w];
    barrier();
  }
  const float inv = 1.0 / partial[0];
  for (uint j = t; j < visible; j += 128) d[dst + j] *= inv;
  for (uint j = visible + t; j < n; j += 128) d[dst + j] = 0.0;
}
