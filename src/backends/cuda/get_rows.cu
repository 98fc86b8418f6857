// get_rows: rows of a table of any weight dtype, picked by I32 ids, as F32. One block per id;
// its threads decode groups of 32.
#include "backends/cuda/kernels.h"
#include "backends/cuda/weights.cuh"

namespace ps::gpu {
namespace {

template <DType T>
__global__ void get_rows_kernel(View table, const int32_t* ids, View d) {
  const int64_t k = blockIdx.x;
  const int64_t n = table.ne[0];
  const uint8_t* row = reinterpret_cast<const uint8_t*>(table.data + ids[k] * table.nb[1]);
  float* out = reinterpret_cast<float*>(d.data + k * d.nb[1]);
  float v[32];
  for (int64_t g = threadIdx.x; 32 * g < n; g += blockDim.x) {
    decode32<T>(row, g, n, v);
    for (int i = 0; i < 32 && 32 * g + i < n; ++i) out[32 * g + i] = v[i];
  }
}

}  // namespace

void get_rows(const Launch& l, const Tensor& node) {
  const Tensor& table = *node.src[0];
  const Tensor& ids = *node.src[1];
  with_weight_type(table.type, [&]<DType T>() {
    PS_LAUNCH(get_rows_kernel<T>, unsigned(ids.ne[0]), 64, l.stream, view_of(table),
              static_cast<const int32_t*>(ids.data), view_of(node));
  });
  check_launch("get_rows");
}

}  // namespace ps::gpu
