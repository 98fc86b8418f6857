#version 450
// y[n, m] = dot(weight row n, activation row m) with packed 8-bit integer dot products, for a
// few activation rows on devices that offer them (VK_KHR_shader_integer_dot_product; the
// instruction is declared through GL_EXT_spirv_intrinsics, so no newer glslc is needed).
// Activations arrive as blocks of integers from quantize_q8.comp (binding 1). A weight block
// is 32 small integers q with w = d q + m (weights.glsl), so it adds d dx (q . qx) + m sx.
// The lanes of a subgroup-wide workgroup split each row's blocks, ROWS weight rows x up to COLS
// activation rows per workgroup, sums by subgroupAdd (as in matmul.comp). Quantized weights only.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_spirv_intrinsics : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { uint wq[]; };
layout(std430, binding = 1) readonly buffer B { uint xq[]; };
layout(std430, binding = 2) writeonly buffer D { float y[]; };

#include "weights.glsl"

// OpSDot (SPV_KHR_integer_dot_product) on four signed bytes packed in each operand; the last
// operand is the PackedVectorFormat, 0 = 4x8Bit.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450)
int dot_4x8(uint a, uint b, spirv_literal int packed_vector_format);

const uint COLS = 4;
const uint ROWS = 4;
shared float partial[64];

void main() {
  const uint WG = gl_WorkGroupSize.x, t = gl_LocalInvocationID.x;
  const uint m0 = gl_WorkGroupID.y * COLS;
  const uint nb = p.b_ne[0] / 32u, M = p.b_ne[1];
  const uint cols = min(COLS, M - m0);
  for (uint r = 0; r < ROWS; ++r) {
    const uint n = row_group() * ROWS + r;
    if (n >= p.ne[1]) break;
    const uint wr = p.a_off + n * p.a_nb[1];
    float s[COLS];
    for (uint c = 0; c < COLS; ++c) s[c] = 0.0;
    for (uint b = t; b < nb; b += WG) {
      uint q[8];
      float d, m;
      load_block_ints(wr + b * BLOCK_BYTES, q, d, m);
      for (uint c = 0; c < COLS; ++c) {
        if (c >= cols) break;
        const uint xa = p.b_off + ((m0 + c) * nb + b) * 10u;
        int dot = 0;
        for (uint k = 0; k < 8u; ++k) dot += dot_4x8(q[k], xq[xa + 2u + k], 0);
        s[c] += d * uintBitsToFloat(xq[xa]) * float(dot) + m * uintBitsToFloat(xq[xa + 1u]);
      }
    }
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
