#version 450
// y[n, m] = dot(weight row n, activation row m). A workgroup is one subgroup wide (the host
// sets the size from the device's subgroup size), takes ROWS weight rows and up to COLS
// activation rows, and reduces with subgroupAdd, so no barrier is needed where the driver
// runs the workgroup as one subgroup (barriers dominate small workgroups on CPU drivers). Each
// weight is read and dequantized once for all columns; quantized types a whole block (32
// weights, word reads) per step. Weights of any GGUF type (WTYPE_*, weights.glsl) with byte
// strides (a_nb[1], a_off in bytes); activations and output F32.
// src0 = weights [K, N], src1 = activations [K, M], output [N, M].
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { uint wq[]; };
layout(std430, binding = 1) readonly buffer B { float x[]; };
layout(std430, binding = 2) writeonly buffer D { float y[]; };

#include "weights.glsl"

const uint COLS = 4;
const uint ROWS = 4;
shared float partial[64];

void main() {
  const uint WG = gl_WorkGroupSize.x, t = gl_LocalInvocationID.x;
  const uint m0 = gl_WorkGroupID.y * COLS;
  const uint K = p.b_ne[0], M = p.b_ne[1];
  const uint cols = min(COLS, M - m0);
  uint xr[COLS];
  for (uint c = 0; c < COLS; ++c) xr[c] = p.b_off + (m0 + min(c, cols - 1)) * p.b_nb[1];
  for (uint r = 0; r < ROWS; ++r) {
    const uint n = row_group() * ROWS + r;
    if (n >= p.ne[1]) break;
    const uint wr = p.a_off + n * p.a_nb[1];
    float s[COLS];
    for (uint c = 0; c < COLS; ++c) s[c] = 0.0;
#ifdef WEIGHTS_QUANTIZED
    for (uint b = t; b < K / 32; b += WG) {
      float w[32];
      load_block(wr + b * BLOCK_BYTES, w);
      for (uint c = 0; c < COLS; ++c) {
        if (c >= cols) break;
        float acc = 0.0;
        for (uint i = 0; i < 32; ++i) acc += w[i] * x[xr[c] + 32 * b + i];
        s[c] += acc;
      }
    }
#else
    for (uint k = t; k < K; k += WG) {
      const float w = load_weight(wr, k);
      for (uint c = 0; c < COLS; ++c)
        if (c < cols) s[c] += w * x[xr[c] + k];
    }
#endif
    for (uint c = 0; c < cols; ++c) {
      const float v = subgroupAdd(s[c]);
      const uint at = p.d_off + n + (m0 + c) * p.d_nb[1];
      if (gl_NumSubgroups == 1) {
        if (t == 0) y[at] = v;
      } else {
        // The driver split the workgroup into several subgroups: add their sums.
        if (gl_SubgroupInvocationID == 0) partial[gl_SubgroupID] = v;
        barrier();
        if (t == 0) {
          float total = 0.0;
          for (uint g = 0; g < gl_NumSubgroups; ++g) total += partial[g];
          y[at] = total;
        }
        barrier();
      }
    }
  }
}
