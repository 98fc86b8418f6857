#version 450
// The chosen experts' matmul for prompts (graph/ops.h, matmul_id), tokens grouped per expert: a
// workgroup takes TN weight rows of one expert (y) and the (slot, token) pairs that chose it,
// which it gathers from ids into shared memory a window of tokens at a time (a token chooses an
// expert at most once, so a window's matches fit), then computes TN x TM output tiles of them
// as matmul_tile.comp does: each weight the expert's tokens need is read once per TM of them,
// not once per token. Workgroup y == the number of experts (p.op) writes NaN for the pairs
// whose id lies outside them. Weights of any GGUF type (weights.glsl), byte strides: a_nb[1] a
// row, a_nb[2] an expert. src1 F32 [K, B, T] (B = k, or 1 for one input per token); output
// F32 [N, k, T] (d_nb); ids I32 [k, T] at binding 3 from v_off, k = iparam.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { uint wq[]; };
layout(std430, binding = 1) readonly buffer B { float x[]; };
layout(std430, binding = 2) writeonly buffer D { float y[]; };
layout(std430, binding = 3) readonly buffer I { int ids[]; };

#include "weights.glsl"

const uint TN = 64, TM = 64, TK = 32;
const uint WINDOW = 1024;  // tokens scanned per pass: at most this many pairs match
shared float ws[TK][TN + 1];
shared float xs[TK][TM + 1];
shared uint list[WINDOW];
shared uint count;

void main() {
  const uint t = gl_LocalInvocationID.x, tn = t % 16u, tm = t / 16u;
  const uint N = p.ne[1], K = p.b_ne[0], k = uint(p.iparam), T = p.b_ne[2], E = p.op;
  const uint expert = gl_WorkGroupID.y, n0 = row_group() * TN;
  const uint w0 = p.a_off + expert * p.a_nb[2];
  for (uint tok0 = 0; tok0 < T; tok0 += WINDOW) {
    if (t == 0) count = 0;
    barrier();
    const uint end = min(T, tok0 + WINDOW);
    for (uint q = tok0 * k + t; q < end * k; q += 256) {
      const int e = ids[p.v_off + q];
      if (e < 0 || uint(e) >= E) {
        if (expert == E) {
          const uint at = p.d_off + (q % k) * p.d_nb[1] + (q / k) * p.d_nb[2];
          for (uint n = n0; n < min(N, n0 + TN); ++n) y[at + n] = uintBitsToFloat(0x7fc00000u);
        }
      } else if (uint(e) == expert) {
        list[atomicAdd(count, 1u)] = q;
      }
    }
    barrier();
    const uint c = count;
    for (uint m0 = 0; m0 < c; m0 += TM) {
      float acc[4][4];
      for (uint i = 0; i < 4; ++i)
        for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;
      for (uint k0 = 0; k0 < K; k0 += TK) {
        for (uint q = 0; q < 8; ++q) {
          const uint e = t + 256u * q, r = e / TK, kk = k0 + e % TK;
          const uint n = n0 + r, m = m0 + r;
          float w = 0.0, v = 0.0;
          if (n < N && kk < K) w = load_weight(w0 + n * p.a_nb[1], kk);
          if (m < c && kk < K) {
            const uint pair = list[m];
            const uint slot = p.b_ne[1] == 1u ? 0u : pair % k;
            v = x[p.b_off + slot * p.b_nb[1] + (pair / k) * p.b_nb[2] + kk];
          }
          ws[e % TK][r] = w;
          xs[e % TK][r] = v;
        }
        barrier();
        for (uint kk = 0; kk < TK; ++kk) {
          float a[4], b[4];
          for (uint i = 0; i < 4; ++i) a[i] = ws[kk][tn + 16u * i];
          for (uint j = 0; j < 4; ++j) b[j] = xs[kk][tm + 16u * j];
          for (uint i = 0; i < 4; ++i)
            for (uint j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        barrier();
      }
      for (uint j = 0; j < 4; ++j) {
        const uint m = m0 + tm + 16u * j;
        if (m >= c) break;
        const uint pair = list[m];
        const uint at = p.d_off + (pair % k) * p.d_nb[1] + (pair / k) * p.d_nb[2];
        for (uint i = 0; i < 4; ++i) {
          const uint n = n0 + tn + 16u * i;
          if (n < N) y[at + n] = acc[i][j];
        }
      }
    }
    barrier();  // every thread has read count and list before the next window resets them
  }
}
