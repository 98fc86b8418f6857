#version 450
// out[i] = row ids[i] of the table, converted to F32: one thread per element, x = element,
// y = output row. Table of any GGUF type (weights.glsl), byte strides; ids I32.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { uint wq[]; };
layout(std430, binding = 1) readonly buffer B { int ids[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

#include "weights.glsl"

void main() {
  const uint j = gl_GlobalInvocationID.x;
  const uint i = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
  if (j >= p.ne[0] || i >= p.b_ne[0]) return;
  const int r = ids[p.b_off + i];
  // An id outside the table reads nothing; the CPU backend reports it as an error.
  const float v = (r < 0 || uint(r) >= p.ne[1]) ? 0.0 : load_weight(p.a_off + uint(r) * p.a_nb[1], j);
  d[p.d_off + i * p.d_nb[1] + j] = v;
}
