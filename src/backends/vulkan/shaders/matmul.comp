#version 450
// y[n, m] = dot(weight row n, activation row m): one workgroup per output, threads over K with a
// shared-memory reduction. Weights of any GGUF type (WTYPE_*) read through weights.glsl, with
// byte strides (a_nb[1], a_off in bytes); activations and output F32.
// src0 = weights [K, N], src1 = activations [K, M], output [N, M].
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { uint wq[]; };
layout(std430, binding = 1) readonly buffer B { float x[]; };
layout(std430, binding = 2) writeonly buffer D { float y[]; };

#include "weights.glsl"

shared float partial[64];

void main() {
  const uint n = gl_WorkGroupID.x, m = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
  const uint K = p.b_ne[0];
  const uint wr = p.a_off + n * p.a_nb[1], xr = p.b_off + m * p.b_nb[1];
  float s = 0.0;
  for (uint k = t; k < K; k += 64) s += load_weight(wr, k) * x[xr + k];
  partial[t] = s;
  barrier();
  for (uint h = 32; h > 0; h >>= 1) {
    if (t < h) partial[t] += partial[t + h];
    barrier();
  }
  if (t == 0) y[p.d_off + n + m * p.d_nb[1]] = partial[0];
}
