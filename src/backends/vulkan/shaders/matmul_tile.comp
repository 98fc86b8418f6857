#version 450
// y[n, m] = dot(weight row n, activation row m) for prompt batches on GPUs: a workgroup of 256
// threads computes a 64 x 64 tile of the output, 4 x 4 per thread, stepping through K 32 at a
// time: each step stages 64 weight rows (dequantized) and 64 activation rows in shared memory,
// so every weight read from memory serves 64 activation rows and every activation 64 weight
// rows. With TILE_F16 the staged values are fp16 (half the shared memory, so more workgroups
// fit per core), products still summed in fp32; the host uses it for weights that are not F32
// on devices with fp16 arithmetic. Weights of any GGUF type (weights.glsl), byte strides;
// activations and output F32.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#ifdef TILE_F16
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define STAGED float16_t
#else
#define STAGED float
#endif

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { uint wq[]; };
layout(std430, binding = 1) readonly buffer B { float x[]; };
layout(std430, binding = 2) writeonly buffer D { float y[]; };

#include "weights.glsl"

const uint TN = 64, TM = 64, TK = 32;
// [k][row]: threads that differ in their row read neighbouring words; one more column keeps
// the stores of a step (consecutive k of one row) off a single bank.
shared STAGED ws[TK][TN + 1];
shared STAGED xs[TK][TM + 1];

void main() {
  const uint t = gl_LocalInvocationID.x, tn = t % 16u, tm = t / 16u;
  const uint N = p.ne[1], K = p.b_ne[0], M = p.b_ne[1];
  const uint n0 = row_group() * TN, m0 = gl_WorkGroupID.y * TM;
  float acc[4][4];
  for (uint i = 0; i < 4; ++i)
    for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;
  for (uint k0 = 0; k0 < K; k0 += TK) {
    // Element e = t + 256 q of each tile: row e / 32, k e % 32 (a warp reads along k).
    for (uint q = 0; q < 8; ++q) {
      const uint e = t + 256u * q, r = e / TK, k = e % TK;
      const uint n = n0 + r, m = m0 + r, kk = k0 + k;
      float w = 0.0, v = 0.0;
      if (n < N && kk < K) w = load_weight(p.a_off + n * p.a_nb[1], kk);
      if (m < M && kk < K) v = x[p.b_off + m * p.b_nb[1] + kk];
      ws[k][r] = STAGED(w);
      xs[k][r] = STAGED(v);
    }
    barrier();
    for (uint k = 0; k < TK; ++k) {
      float a[4], b[4];
      for (uint i = 0; i < 4; ++i) a[i] = float(ws[k][tn + 16u * i]);
      for (uint j = 0; j < 4; ++j) b[j] = float(xs[k][tm + 16u * j]);
      for (uint i = 0; i < 4; ++i)
        for (uint j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }
  for (uint j = 0; j < 4; ++j) {
    const uint m = m0 + tm + 16u * j;
    if (m >= M) break;
    for (uint i = 0; i < 4; ++i) {
      const uint n = n0 + tn + 16u * i;
      if (n < N) y[p.d_off + n + m * p.d_nb[1]] = acc[i][j];
    }
  }
}
