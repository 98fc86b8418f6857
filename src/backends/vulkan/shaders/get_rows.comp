#version 450
// out[i] = row ids[i] of the table, converted to F32: one thread per element, x = element,
// y = output row. Table of any GGUF type (weights.glsl), byte strides; ids I32. The table may
// be bound in slices: this pass holds rows [iparam, iparam + ne[1]) of op rows in all, and
// writes only the output rows whose ids it holds (the first pass also zeroes rows whose id is
// outside the whole table).
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
  const int id = ids[p.b_off + i];
  const int r = id - p.iparam;
  if (id < 0 || uint(id) >= p.op) {
    // An id outside the table reads nothing; the CPU backend reports it as an error.
    if (p.iparam == 0) d[p.d_off + i * p.d_nb[1] + j] = 0.0;
    return;
  }
  if (r < 0 || uint(r) >= p.ne[1]) return;
  d[p.d_off + i * p.d_nb[1] + j] = load_weight(p.a_off + uint(r) * p.a_nb[1], j);
}
