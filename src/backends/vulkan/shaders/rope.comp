#version 450
// Rotary position embedding over x [head_dim, n_heads, n_tokens] with positions (I32, one per
// token): one thread per element. iparam = n_rot, op = mode (0 adjacent pairs, PS_ROPE_NEOX halves),
// fparam0 = frequency base, fparam1 = frequency scale, fparam2 = scale of the rotated values;
// op flag PS_ROPE_FACTORS: per-pair frequency factors at
// binding 3 (the angle of pair i divided by factor i). Elements past n_rot pass through.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "backend/kernel_codes.h"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { int pos[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };
layout(std430, binding = 3) readonly buffer F { float factors[]; };

void main() {
  const uint j = gl_GlobalInvocationID.x;
  const uint r = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
  if (j >= p.ne[0] || r >= p.ne[1] * p.ne[2] * p.ne[3]) return;
  const uvec3 at = row_index(r);
  const uint src = a_row(at), dst = d_row(at);
  const uint n_rot = uint(p.iparam), half_rot = n_rot / 2;
  if (j >= n_rot) {
    d[dst + j] = a[src + j];
    return;
  }
  const bool neox = (p.op & PS_ROPE_MODE_MASK) == PS_ROPE_NEOX;
  const uint i = neox ? j % half_rot : j / 2;
  const bool second = neox ? j >= half_rot : (j & 1u) == 1u;
  const uint ia = neox ? i : 2 * i, ib = neox ? i + half_rot : 2 * i + 1;
  float theta = float(pos[p.b_off + at.y]) * p.fparam1 *
                pow(p.fparam0, -2.0 * float(i) / float(n_rot));
  if ((p.op & PS_ROPE_FACTORS) != 0u) theta /= factors[p.v_off + i];
  const float c = cos(theta) * p.fparam2, s = sin(theta) * p.fparam2;
  const float x0 = a[src + ia], x1 = a[src + ib];
  d[dst + j] = second ? x0 * s + x1 * c : x0 * c - x1 * s;
}
