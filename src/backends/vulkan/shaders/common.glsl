// Shared by every kernel: the push-constant block the host fills (vulkan_ops.cpp) and the
// index helpers. Shapes and strides are in elements of each operand's type; offsets are the
// operand's first element within its bound range (the host binds at aligned offsets).
#extension GL_EXT_shader_explicit_arithmetic_types : require

layout(push_constant) uniform Params {
  uint ne[4];    // shape of the output (and of src0 for the elementwise ops)
  uint a_nb[4];  // src0 strides
  uint b_ne[4];  // src1 shape
  uint b_nb[4];  // src1 strides
  uint d_nb[4];  // output strides
  uint a_off;
  uint b_off;
  uint d_off;
  int iparam;
  float fparam0;
  float fparam1;
  uint op;  // elementwise: which op; attention: the sliding window (0: none); get_rows: rows
            // of the whole table
  uint v_off;  // attention: the V cache's first element
  uint e_off;  // attention: the per-token (position, plane) pairs' first element (binding 4)
  float fparam2;
  uint f_off;  // attention: the sinks' first element (binding 5)
}
p;

// The matmul kernels' group of weight rows: x, continued over z where one dimension of the grid
// cannot hold them all (vocabularies of 262k rows).
uint row_group() { return gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x; }

// The r-th row over dimensions 1..3 (dimension 1 fastest), as (i1, i2, i3).
uvec3 row_index(uint r) { return uvec3(r % p.ne[1], (r / p.ne[1]) % p.ne[2], r / (p.ne[1] * p.ne[2])); }
uint a_row(uvec3 i) { return p.a_off + i.x * p.a_nb[1] + i.y * p.a_nb[2] + i.z * p.a_nb[3]; }
uint d_row(uvec3 i) { return p.d_off + i.x * p.d_nb[1] + i.y * p.d_nb[2] + i.z * p.d_nb[3]; }
// src1's row for output row i: src1 repeats along any dimension where its extent is 1.
uint b_row(uvec3 i) {
  return p.b_off + (i.x % p.b_ne[1]) * p.b_nb[1] + (i.y % p.b_ne[2]) * p.b_nb[2] +
         (i.z % p.b_ne[3]) * p.b_nb[3];
}
