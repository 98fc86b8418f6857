#version 450
// Activations [K, M] F32 (K a multiple of 32) as blocks of 32 small integers for
// matmul_dot.comp. A block is 10 words: the scale d, s = d * (sum of the integers), then the
// integers round(x / d) in -127..127, four to a word (element 4i + j in byte j of word i).
// One thread per block: x = block, y = activation row.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float x[]; };
layout(std430, binding = 1) readonly buffer B { float unused[]; };
layout(std430, binding = 2) writeonly buffer D { uint xq[]; };

void main() {
  const uint nb = p.ne[0] / 32u, b = gl_GlobalInvocationID.x, m = gl_GlobalInvocationID.y;
  if (b >= nb) return;
  const uint src = p.a_off + m * p.a_nb[1] + 32u * b;
  float v[32];
  float amax = 0.0;
  for (uint i = 0; i < 32u; ++i) {
    v[i] = x[src + i];
    amax = max(amax, abs(v[i]));
  }
  const float d = amax / 127.0, id = amax > 0.0 ? 127.0 / amax : 0.0;
  int sum = 0;
  uint w[8];
  for (uint k = 0; k < 8u; ++k) w[k] = 0u;
  for (uint i = 0; i < 32u; ++i) {
    const int q = clamp(int(round(v[i] * id)), -127, 127);
    sum += q;
    w[i / 4u] |= (uint(q) & 0xffu) << (8u * (i % 4u));
  }
  const uint at = p.d_off + (m * nb + b) * 10u;
  xq[at] = floatBitsToUint(d);
  xq[at + 1u] = floatBitsToUint(d * float(sum));
  for (uint k = 0; k < 8u; ++k) xq[at + 2u + k] = w[k];
}
