#version 450
// add, mul, swiglu (src1 broadcast over rows), silu, gelu (tanh), scale (by fparam0), sigmoid,
// swiglu_oai (alpha fparam0, limit fparam1; graph/ops.h): one thread per element,
// x = element within the row, y/z = row.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "backend/kernel_codes.h"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

float silu(float v) { return v / (1.0 + exp(-v)); }
float gelu_tanh(float v) {
  const float k = 0.79788456080286535588;
  return 0.5 * v * (1.0 + tanh(k * v * (1.0 + 0.044715 * v * v)));
}

void main() {
  const uint i0 = gl_GlobalInvocationID.x;
  const uint r = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
  if (i0 >= p.ne[0] || r >= p.ne[1] * p.ne[2] * p.ne[3]) return;
  const uvec3 at = row_index(r);
  const float x = a[a_row(at) + i0];
  float y = 0.0;
  if (p.op == PS_EW_ADD || p.op == PS_EW_MUL || p.op == PS_EW_SWIGLU || p.op == PS_EW_SWIGLU_OAI)
    y = b[b_row(at) + i0];
  float v;
  if (p.op == PS_EW_ADD) v = x + y;
  else if (p.op == PS_EW_MUL) v = x * y;
  else if (p.op == PS_EW_SILU) v = silu(x);
  else if (p.op == PS_EW_GELU) v = gelu_tanh(x);
  else if (p.op == PS_EW_SCALE) v = x * p.fparam0;
  else if (p.op == PS_EW_SIGMOID) v = 1.0 / (1.0 + exp(-x));
  else if (p.op == PS_EW_SWIGLU_OAI) {
    const float g = min(x, p.fparam1), u = clamp(y, -p.fparam1, p.fparam1);
    v = g / (1.0 + exp(-p.fparam0 * g)) * (u + 1.0);
  }
  else v = silu(x) * y;
  d[d_row(at) + i0] = v;
}
