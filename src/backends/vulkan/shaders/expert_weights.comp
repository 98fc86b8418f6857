#version 450
// expert_weights (graph/ops.h): the chosen experts' weights from the router's logits, one
// invocation per token. src0 logits F32 [E, T] (ne, a_nb), src1 ids I32 [k, T] (b_ne, b_nb),
// output F32 [k, T] (d_nb); op = gating (0 softmax over all, 1 sigmoid, 2 softmax over the
// chosen), iparam = normalize, fparam0 = scale. An id outside [0, E) gives NaN.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float z[]; };
layout(std430, binding = 1) readonly buffer B { int ids[]; };
layout(std430, binding = 2) buffer D { float w[]; };

void main() {
  const uint t = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (t >= p.ne[1]) return;
  const uint E = p.ne[0], k = p.b_ne[0];
  const uint zr = p.a_off + t * p.a_nb[1], ir = p.b_off + t * p.b_nb[1];
  const uint wr = p.d_off + t * p.d_nb[1];
  bool bad = false;
  for (uint j = 0; j < k; ++j) bad = bad || ids[ir + j] < 0 || uint(ids[ir + j]) >= E;
  if (bad) {
    for (uint j = 0; j < k; ++j) w[wr + j] = uintBitsToFloat(0x7fc00000u);
    return;
  }
  if (p.op == 1u) {
    for (uint j = 0; j < k; ++j) w[wr + j] = 1.0 / (1.0 + exp(-z[zr + uint(ids[ir + j])]));
  } else {
    float mx = -1.0 / 0.0, sum = 0.0;
    if (p.op == 0u) {
      for (uint e = 0; e < E; ++e) mx = max(mx, z[zr + e]);
      for (uint e = 0; e < E; ++e) sum += exp(z[zr + e] - mx);
    } else {
      for (uint j = 0; j < k; ++j) mx = max(mx, z[zr + uint(ids[ir + j])]);
      for (uint j = 0; j < k; ++j) sum += exp(z[zr + uint(ids[ir + j])] - mx);
    }
    for (uint j = 0; j < k; ++j) w[wr + j] = exp(z[zr + uint(ids[ir + j])] - mx) / sum;
  }
  if (p.iparam != 0) {
    float s = 0.0;
    for (uint j = 0; j < k; ++j) s += w[wr + j];
    for (uint j = 0; j < k; ++j) w[wr + j] /= s;
  }
  if (p.fparam0 != 1.0)
    for (uint j = 0; j < k; ++j) w[wr + j] *= p.fparam0;
}
