#version 450
// y[n, m] = dot(weight row n, activation row m), shaped for drivers that run a subgroup as the
// SIMD lanes of one CPU thread (lavapipe, SwiftShader). There every read of a buffer is a loop
// of scalar loads over the lanes, whether the lanes read one address or many, so this kernel
// spends its reads where they carry the most: each lane owns one weight row and reads it a
// whole block (32 weights) at a time in aligned words; each activation is read by one lane only,
// a subgroup-wide slice per read, handed to every lane with subgroupShuffle and used for ROWS
// weight rows per lane; COLS activation rows share every dequantized block. The host runs it
// with the workgroup one subgroup wide (local_size_x_id = 0 is the subgroup size), which must
// divide 32.
// src0 = weights [K, N] of any GGUF type (weights.glsl), byte strides; src1 = activations
// [K, M] F32; output [N, M] F32.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { uint wq[]; };
layout(std430, binding = 1) readonly buffer B { float x[]; };
layout(std430, binding = 2) writeonly buffer D { float y[]; };

#include "weights.glsl"

// Two shapes (host: ops.cpp): for one or a few activation rows, 4 weight rows per lane
// and one activation row per workgroup; for prompt batches, 8 x 8, where every read of a
// weight block serves 8 activation rows and every read of an activation serves 64 weight rows.
const uint ROWS = LANE_ROWS;  // weight rows per lane
const uint COLS = LANE_COLS;  // activation rows per workgroup

// Weights k0 .. k0+31 of the row that starts at byte `row`.
void load_chunk(uint row, uint k0, out float w[32]) {
#ifdef WEIGHTS_QUANTIZED
  load_block(row + (k0 / 32u) * BLOCK_BYTES, w);
#else
  for (uint i = 0; i < 32; ++i) w[i] = load_weight(row, k0 + i);
#endif
}

void main() {
  const uint S = gl_WorkGroupSize.x, lane = gl_LocalInvocationID.x;
  const uint N = p.ne[1], K = p.b_ne[0], M = p.b_ne[1];
  const uint n0 = row_group() * S * ROWS + lane;  // this lane's rows: n0 + r * S
  const uint m0 = gl_WorkGroupID.y * COLS;
  const uint cols = min(COLS, M - m0);
  // Lanes past the last row repeat it (every lane must take part in the shuffles) and store
  // nothing.
  uint wr[ROWS];
  for (uint r = 0; r < ROWS; ++r) wr[r] = p.a_off + min(n0 + r * S, N - 1u) * p.a_nb[1];
  uint xr[COLS];
  for (uint c = 0; c < COLS; ++c) xr[c] = p.b_off + (m0 + min(c, cols - 1u)) * p.b_nb[1];
  float s[ROWS][COLS];
  for (uint r = 0; r < ROWS; ++r)
    for (uint c = 0; c < COLS; ++c) s[r][c] = 0.0;
  for (uint k0 = 0; k0 + 32u <= K; k0 += 32u) {
    // The 32 activations of each column for this block, in every lane: read a slice per lane,
    // then passed around.
    float xb[COLS][32];
    for (uint c = 0; c < COLS; ++c) {
      if (c >= cols) break;
      for (uint i0 = 0; i0 < 32u; i0 += S) {
        const float v = x[xr[c] + k0 + i0 + lane];
        for (uint j = 0; j < S; ++j) xb[c][i0 + j] = subgroupShuffle(v, j);
      }
    }
    for (uint r = 0; r < ROWS; ++r) {
      float w[32];
      load_chunk(wr[r], k0, w);
      for (uint c = 0; c < COLS; ++c) {
        if (c >= cols) break;
        float acc = 0.0;
        for (uint i = 0; i < 32u; ++i) acc += w[i] * xb[c][i];
        s[r][c] += acc;
      }
    }
  }
  // Float weights: the last K % 32 (quantized rows are whole blocks).
  for (uint k = K & ~31u; k < K; ++k)
    for (uint r = 0; r < ROWS; ++r) {
      const float w = load_weight(wr[r], k);
      for (uint c = 0; c < COLS; ++c)
        if (c < cols) s[r][c] += w * x[xr[c] + k];
    }
  for (uint r = 0; r < ROWS; ++r) {
    const uint n = n0 + r * S;
    if (n < N)
      for (uint c = 0; c < cols; ++c) y[p.d_off + n + (m0 + c) * p.d_nb[1]] = s[r][c];
  }
}
