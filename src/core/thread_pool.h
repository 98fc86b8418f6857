#pragma once
// A persistent pool for data-parallel kernels. Workers spin briefly before sleeping, because a
// decode step runs hundreds of short ops and waking a sleeping thread costs more than the op.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ps {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Runs fn(task, thread) for every task in [0, n_tasks), spread over all threads (the caller
  // is thread 0), and returns when all are done. Each thread starts on its own contiguous
  // share of the tasks, in order, and a thread that runs out takes the last tasks left in
  // another's share. Consecutive tasks of one thread thus read consecutive memory in a matmul
  // (one stream that the prefetchers follow, where tasks dealt out in turn would start a new
  // stream per task), while the threads still finish together.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn);

 private:
  void worker(int index);
  void run_tasks(int thread);
  bool take_own(int thread, int64_t& task);
  bool take_other(int thread, int64_t& task);

  // A thread's share of the tasks left: (next << 32) | end, next taken by its owner from the
  // front, end by others from the back.
  struct alignas(64) Share {
    std::atomic<uint64_t> left{0};
  };

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<Share[]> shares_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  bool stop_ = false;
};

// Physical cores of this machine (hyper-threads not counted), at least 1.
int physical_core_count();

}  // namespace ps
