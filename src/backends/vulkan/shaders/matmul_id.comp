#version 450
// The chosen experts' matmul (graph/ops.h, matmul_id): output column (j, t) is weight matrix
// ids[j, t] of src0 times src1's column (j, t), or (0, t) when src1 holds one column per token.
// A workgroup is one subgroup wide, as matmul.comp's, and takes ROWS weight rows of one
// (slot, token) pair: only the chosen experts' rows are read. Weights of any GGUF type
// (WTYPE_*, weights.glsl) with byte strides: a_nb[1] a row, a_nb[2] an expert. src1 F32 [K, B, T]
// (b_ne, b_nb); output F32 [N, k, T] (d_nb); ids I32 [k, T] at binding 3 from v_off, k = iparam;
// p.op = the number of experts: an id outside them writes NaN. For decoding; prompts take
// matmul_id_tile.comp, which groups the tokens per expert.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "reduce.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { uint wq[]; };
layout(std430, binding = 1) readonly buffer B { float x[]; };
layout(std430, binding = 2) writeonly buffer D { float y[]; };
layout(std430, binding = 3) readonly buffer I { int ids[]; };

#include "weights.glsl"

const uint ROWS = 4;

void main() {
  const uint WG = gl_WorkGroupSize.x, t = gl_LocalInvocationID.x;
  const uint k = uint(p.iparam);
  const uint pair = gl_WorkGroupID.y + gl_WorkGroupID.z * gl_NumWorkGroups.y;
  if (pair >= k * p.b_ne[2]) return;
  const uint j = pair % k, tok = pair / k;
  const int e = ids[p.v_off + pair];
  const uint K = p.b_ne[0];
  const uint xr = p.b_off + (p.b_ne[1] == 1u ? 0u : j) * p.b_nb[1] + tok * p.b_nb[2];
  for (uint r = 0; r < ROWS; ++r) {
    const uint n = gl_WorkGroupID.x * ROWS + r;
    if (n >= p.ne[1]) break;
    const uint at = p.d_off + n + j * p.d_nb[1] + tok * p.d_nb[2];
    if (e < 0 || uint(e) >= p.op) {
      if (t == 0) y[at] = uintBitsToFloat(0x7fc00000u);
      continue;
    }
    const uint wr = p.a_off + uint(e) * p.a_nb[2] + n * p.a_nb[1];
    float s = 0.0;
#ifdef WEIGHTS_QUANTIZED
    for (uint b = t; b < K / 32; b += WG) {
      float w[32];
      load_block(wr + b * BLOCK_BYTES, w);
      float acc = 0.0;
      for (uint i = 0; i < 32; ++i) acc += w[i] * x[xr + 32 * b + i];
      s += acc;
    }
#else
    for (uint i = t; i < K; i += WG) s += load_weight(wr, i) * x[xr + i];
#endif
    const float v = workgroup_sum(s);
    if (t == 0) y[at] = v;
  }
}
