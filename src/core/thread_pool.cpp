#include "core/thread_pool.h"

#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ps {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

constexpr int kSpinIterations = 20000;

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads),
      shares_(std::make_unique<Share[]>(size_t(n_threads_))) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool ThreadPool::take_own(int thread, int64_t& task) {
  std::atomic<uint64_t>& left = shares_[size_t(thread)].left;
  uint64_t v = left.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t next = v >> 32, end = v & 0xffffffffu;
    if (next >= end) return false;
    if (left.compare_exchange_weak(v, ((next + 1) << 32) | end, std::memory_order_relaxed)) {
      task = int64_t(next);
      return true;
    }
  }
}

bool ThreadPool::take_other(int thread, int64_t& task) {
  for (int i = 1; i < n_threads_; ++i) {
    std::atomic<uint64_t>& left = shares_[size_t((thread + i) % n_threads_)].left;
    uint64_t v = left.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t next = v >> 32, end = v & 0xffffffffu;
      if (next >= end) break;
      if (left.compare_exchange_weak(v, (next << 32) | (end - 1), std::memory_order_relaxed)) {
        task = int64_t(end - 1);
        return true;
      }
    }
  }
  return false;
}

void ThreadPool::run_tasks(int thread) {
  int64_t task;
  while (take_own(thread, task)) (*fn_)(task, thread);
  while (take_other(thread, task)) (*fn_)(task, thread);
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    if (stop_) return;
    run_tasks(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  if (n_tasks <= 0) return;
  if (n_tasks > int64_t(0xffffffffu))
    throw std::length_error("ThreadPool::parallel_for: more than 2^32 - 1 tasks");
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  fn_ = &fn;
  for (int i = 0; i < n_threads_; ++i) {
    const uint64_t next = uint64_t(n_tasks * i / n_threads_);
    const uint64_t end = uint64_t(n_tasks * (i + 1) / n_threads_);
    shares_[size_t(i)].left.store((next << 32) | end, std::memory_order_relaxed);
  }
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  run_tasks(0);
  while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
  fn_ = nullptr;
}

int physical_core_count() {
  // Count distinct (physical id, core id) pairs; fall back to the logical count.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys = "0";
  while (std::getline(in, line)) {
    auto value = [&] { return line.substr(line.find(':') + 1); };
    if (line.rfind("physical id", 0) == 0) phys = value();
    if (line.rfind("core id", 0) == 0) cores.emplace(phys, value());
  }
  if (!cores.empty()) return int(cores.size());
  const unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

}  // namespace ps
