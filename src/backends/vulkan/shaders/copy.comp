#version 450
// Converts F32 rows of src0 into the destination view (src1's bytes, bound as the output), F32
// or F16 (DST_F16, 16-bit storage): one thread per element, x = element, y/z = row.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#ifdef DST_F16
#extension GL_EXT_shader_16bit_storage : require
#define DTYPE float16_t
#else
#define DTYPE float
#endif

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float unused_b[]; };
layout(std430, binding = 2) writeonly buffer D { DTYPE d[]; };

void main() {
  const uint j = gl_GlobalInvocationID.x;
  const uint r = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
  if (j >= p.ne[0] || r >= p.ne[1] * p.ne[2] * p.ne[3]) return;
  // Source and destination may differ in shape beyond dimension 0 (same element count): both
  // are walked by their own row index.
  const uvec3 sa = row_index(r);
  const uvec3 da = uvec3(r % p.b_ne[1], (r / p.b_ne[1]) % p.b_ne[2], r / (p.b_ne[1] * p.b_ne[2]));
  d[d_row(da) + j] = DTYPE(a[a_row(sa) + j]);
}
