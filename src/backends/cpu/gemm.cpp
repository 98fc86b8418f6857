// Dispatch between the levels' tile kernels, and the split of a tiled matmul into tasks.
#include "backends/cpu/gemm.h"

#include <algorithm>

namespace ps::cpu {
namespace {

// Weight bytes of one row block: with the activation columns of one tile beside them this sits
// well inside the L2 of current x86 cores (256 KiB and up), so the block's rows are read from
// memory once per column block rather than once per column tile.
constexpr size_t kRowBlockBytes = 128 * 1024;
// Rows beyond this gain nothing from the cache and only coarsen the load balance.
constexpr int64_t kMaxBlockRows = 128;
// Tasks per thread: enough that a thread slowed by the rest of the machine does not hold up
// the matmul, few enough that handing them out costs nothing.
constexpr int64_t kTasksPerThread = 4;
constexpr int64_t kDecodeTasksPerThread = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

const GemmKernel* gemm_kernel(DType w, IsaLevel isa) {
  const IsaLevel best = best_isa_level();
  const IsaLevel level = isa < best ? isa : best;
  if (level >= IsaLevel::Avx512) {
    if (const GemmKernel* g = gemm_kernel_avx512(w)) return g;
  }
  if (level >= IsaLevel::AvxVnni && cpu_features().avx_vnni) {
    if (const GemmKernel* g = gemm_kernel_avxvnni(w)) return g;
  }
  if (level >= IsaLevel::Avx2) {
    if (const GemmKernel* g = gemm_kernel_avx2(w)) return g;
  }
  return nullptr;
}

GemmBlocking plan_gemm(int64_t n, int64_t m, size_t w_row_bytes, const GemmKernel& g, int threads) {
  const int64_t R = g.rows, C = g.cols;
  const int64_t row_tiles = std::max<int64_t>(1, n / R), col_tiles = ceil_div(m, C);
  const int64_t cache_tiles = std::max<int64_t>(
      1,
      std::min<int64_t>(kMaxBlockRows, int64_t(kRowBlockBytes / std::max<size_t>(w_row_bytes, 1))) /
          R);
  // As many row blocks as the cache asks for; with several threads at least kTasksPerThread
  // each, in whole rounds, so that equal tasks leave no thread idle at the end.
  int64_t tasks = ceil_div(row_tiles, cache_tiles);
  // One column (decode) makes short tasks whose hand-out costs little, and the last one
  // decides when the matmul ends: more of them balance the threads more finely.
  const int64_t per_thread = m == 1 ? kDecodeTasksPerThread : kTasksPerThread;
  if (threads > 1)
    tasks = ceil_div(std::max<int64_t>(tasks, int64_t(threads) * per_thread), threads) * threads;
  GemmBlocking b{};
  b.block_rows = ceil_div(row_tiles, std::min(tasks, row_tiles)) * R;
  b.n_row_blocks = ceil_div(row_tiles, b.block_rows / R);
  // Columns are split only when the rows alone cannot make the tasks: every column of a block
  // streams past its weights, which are then read once.
  const int64_t col_blocks = std::clamp<int64_t>(ceil_div(tasks, b.n_row_blocks), 1, col_tiles);
  b.block_cols = ceil_div(col_tiles, col_blocks) * C;
  b.n_col_blocks = ceil_div(m, b.block_cols);
  return b;
}

namespace {

// Rows [r0, r1) by columns [c0, c1) of one product.
void gemm_block(const GemmProblem& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const GemmKernel& g = *p.g;
  const char* wbytes = static_cast<const char*>(p.w);
  const char* abytes = static_cast<const char*>(p.a);
  const int64_t R = g.rows, C = g.cols;
  const int64_t tiled_end = r0 + (r1 - r0) / R * R;
  // Column tiles outside, row tiles inside: one tile's activation columns stay in L1 while
  // the block's weight rows stream past them from L2.
  for (int64_t c = c0; c < c1; c += C) {
    const int64_t width = std::min(C, c1 - c);
    const GemmTileFn tile = g.tiles[width - 1];
    const char* ac = abytes + size_t(c) * p.a_stride;
    float* yc = p.y + size_t(c) * p.y_stride;
    for (int64_t r = r0; r < tiled_end; r += R)
      tile(p.k, wbytes + size_t(r) * p.w_stride, p.w_stride, ac, p.a_stride, yc + r, p.y_stride);
    for (int64_t r = tiled_end; r < r1; ++r) {
      const char* wr = wbytes + size_t(r) * p.w_stride;
      for (int64_t j = 0; j < width; ++j)
        yc[size_t(j) * p.y_stride + size_t(r)] = p.dot(p.k, wr, ac + size_t(j) * p.a_stride);
    }
  }
}

}  // namespace

void gemm_batch(ThreadPool& pool, std::span<const GemmProblem> problems) {
  constexpr size_t kMaxProblems = 8;
  if (problems.empty()) return;
  if (problems.size() > kMaxProblems) {
    gemm_batch(pool, problems.first(kMaxProblems));
    gemm_batch(pool, problems.subspan(kMaxProblems));
    return;
  }
  GemmBlocking plan[kMaxProblems];
  int64_t first_task[kMaxProblems + 1] = {0};
  for (size_t i = 0; i < problems.size(); ++i) {
    const GemmProblem& p = problems[i];
    plan[i] = plan_gemm(p.n, p.m, p.w_stride, *p.g, pool.size());
    first_task[i + 1] = first_task[i] + plan[i].n_row_blocks * plan[i].n_col_blocks;
  }
  pool.parallel_for(first_task[problems.size()], [&](int64_t task, int) {
    size_t i = 0;
    while (task >= first_task[i + 1]) ++i;
    const GemmProblem& p = problems[i];
    const GemmBlocking& b = plan[i];
    const int64_t local = task - first_task[i];
    const int64_t rb = local / b.n_col_blocks, cb = local % b.n_col_blocks;
    const int64_t r0 = rb * b.block_rows;
    // The last row block also takes the rows short of a whole tile.
    const int64_t r1 = rb + 1 == b.n_row_blocks ? p.n : std::min(p.n, r0 + b.block_rows);
    const int64_t c0 = cb * b.block_cols;
    gemm_block(p, r0, r1, c0, std::min(p.m, c0 + b.block_cols));
  });
}

void gemm(ThreadPool& pool, const GemmKernel& g, VecDotFn dot, int64_t k, int64_t n, int64_t m,
          const void* w, size_t w_stride, const void* a, size_t a_stride, float* y,
          size_t y_stride) {
  const GemmProblem p{&g, dot, k, n, m, w, w_stride, a, a_stride, y, y_stride};
  gemm_batch(pool, std::span(&p, 1));
}

}  // namespace ps::cpu
