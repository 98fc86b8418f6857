#include <fmt/format.h>

#include <cstring>

#include "backends/cpu/kernels.h"
#include "core/error.h"

namespace ps::cpu {

void get_rows(Context& ctx, Tensor& node) {
  const Tensor& table = *node.src[0];
  const Tensor& ids = *node.src[1];
  const int32_t* id = static_cast<const int32_t*>(ids.data);
  ctx.pool->parallel_for(ids.ne[0], [&](int64_t i, int) {
    const int32_t r = id[i];
    if (r < 0 || r >= table.ne[1])
      throw BackendError(
          fmt::format("get_rows: id {} outside {} rows of {}", r, table.ne[1], table.name));
    dequantize_row(table.type, row_ptr(table, r), reinterpret_cast<float*>(row_ptr(node, i)),
                   table.ne[0]);
  });
}

}  // namespace ps::cpu
