// Sum and maximum of a value over a workgroup the host makes one subgroup wide
// (local_size_x_id = 0): a subgroup operation and no barrier, which is what CPU drivers (one
// thread per subgroup, barriers switch between them) and GPUs alike run best. Where a driver
// splits the workgroup into several subgroups anyway, their results meet in shared memory.
#extension GL_KHR_shader_subgroup_arithmetic : require

shared float reduce_partial[64];

float combine_subgroups(float v, bool is_max) {
  barrier();  // earlier readers of reduce_partial are done
  if (subgroupElect()) reduce_partial[gl_SubgroupID] = v;
  barrier();
  float r = reduce_partial[0];
  for (uint g = 1; g < gl_NumSubgroups; ++g)
    r = is_max ? max(r, reduce_partial[g]) : r + reduce_partial[g];
  return r;
}

float workgroup_sum(float v) {
  v = subgroupAdd(v);
  return gl_NumSubgroups == 1 ? v : combine_subgroups(v, false);
}

float workgroup_max(float v) {
  v = subgroupMax(v);
  return gl_NumSubgroups == 1 ? v : combine_subgroups(v, true);
}
