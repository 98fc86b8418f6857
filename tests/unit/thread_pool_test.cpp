#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace ps {
namespace {

TEST(ThreadPool, RunsEveryTaskOnceOnAThreadOfThePool) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1001}) {
      // Many rounds, so that a round that starts while a worker still leaves the last one
      // would show up as a task run twice or not at all.
      for (int round = 0; round < 50; ++round) {
        std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
        std::atomic<bool> bad_thread{false};
        pool.parallel_for(n, [&](int64_t task, int thread) {
          runs[size_t(task)].fetch_add(1);
          if (thread < 0 || thread >= threads) bad_thread = true;
        });
        for (int64_t t = 0; t < n; ++t)
          ASSERT_EQ(runs[size_t(t)].load(), 1) << threads << " threads, " << n << " tasks";
        ASSERT_FALSE(bad_thread);
      }
    }
  }
}

TEST(ThreadPool, ThreadsRunTheirShareInOrderThenTakeAnothersFromTheBack) {
  // Two threads, ten tasks: thread 0's share is 0-4, thread 1's 5-9. Task 0 (the caller's
  // first) holds thread 0 until task 1 has run, which only thread 1 can then do: it runs its
  // own share in order and then thread 0's remaining tasks from the last one back. Where the
  // caller is descheduled before it takes task 0, thread 1 takes that one too, last.
  ThreadPool pool(2);
  std::mutex mu;
  std::vector<int64_t> order[2];
  std::atomic<bool> task1_done{false};
  bool timed_out = false;
  pool.parallel_for(10, [&](int64_t task, int thread) {
    if (task == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!task1_done.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      timed_out = !task1_done.load();
    }
    {
      std::lock_guard lock(mu);
      order[thread].push_back(task);
    }
    if (task == 1) task1_done = true;
  });
  ASSERT_FALSE(timed_out);
  const std::vector<int64_t> taken{5, 6, 7, 8, 9, 4, 3, 2, 1};
  if (order[0].empty()) {
    std::vector<int64_t> all = taken;
    all.push_back(0);
    EXPECT_EQ(order[1], all);
  } else {
    EXPECT_EQ(order[0], (std::vector<int64_t>{0}));
    EXPECT_EQ(order[1], taken);
  }
}

TEST(ThreadPool, RefusesMoreTasksThanItCanCount) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(int64_t(1) << 33, [](int64_t, int) {}), std::length_error);
}

}  // namespace
}  // namespace ps
