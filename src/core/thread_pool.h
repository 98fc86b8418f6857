#pragma once
// A persistent pool for data-parallel kernels. Workers spin briefly before sleeping, because a
// decode step runs hundreds of short ops and waking a sleeping thread costs more than the op.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
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
  // is thread 0), and returns when all are done. Tasks are handed out dynamically.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn);

 private:
  void worker(int index);
  void run_tasks(int thread);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> pending_{0};
  int64_t n_tasks_ = 0;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  bool stop_ = false;
};

// Physical cores of this machine (hyper-threads not counted), at least 1.
int physical_core_count();

}  // namespace ps
