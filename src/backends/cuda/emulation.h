#pragma once
// A CPU stand-in for the CUDA runtime and execution model, so that this backend's kernels run in
// the tests of machines without a GPU (tests/emulation). A block's threads are fibers on the
// launching thread that meet at barriers: __syncthreads is a block-wide barrier, a warp
// shuffle a warp-wide one (warp width PS_EMU_WARP: 32 as on NVIDIA, or 64 as on AMD's GCN and
// CDNA). Each thread runs until it reaches a barrier or returns; a barrier opens once every
// thread that has not returned waits at it, as on the hardware. Blocks run one after another,
// so shared memory is a static array per kernel. Memory is host memory.
// Fibers rather than OS threads: a switch costs no trip through the kernel's scheduler, every
// run interleaves the threads the same way, and threads that wait at different barriers (a
// kernel that deadlocks on a GPU) are reported at once instead of hanging.
// Nothing here is fast; it checks indexing, reductions and synchronization, not speed.
#include <math.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define PS_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PS_EMU_ASAN 1
#endif
#endif
#if defined(PS_EMU_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

#include "core/fp16.h"

#ifndef PS_EMU_WARP
#define PS_EMU_WARP 32
#endif

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;  // of the launch in progress (launches are serialized)

#define __global__
#define __device__
#define __host__
#define __shared__ static

namespace ps::emu {

// Switching between a block's threads. On x86-64 a few instructions of our own: the callee-saved
// registers and the floating-point control words go on the stack being left. ucontext elsewhere,
// whose switches also save the signal mask, with a system call each.
#if defined(__x86_64__) && defined(__ELF__)
extern "C" void ps_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .pushsection .text.ps_emu_switch,"axG",@progbits,ps_emu_switch,comdat
  .weak ps_emu_switch
  .type ps_emu_switch, @function
ps_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ps_emu_switch, .-ps_emu_switch
  .popsection
)");
struct Context {
  void* sp = nullptr;
};
// The frame ps_emu_switch pops: control words, six registers, then `entry` as the return
// address, entered with the stack aligned as after a call.
inline void start_context(Context& c, void* stack, size_t bytes, void (*entry)()) {
  auto top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15);
  auto* frame = reinterpret_cast<uint64_t*>(top) - 10;
  std::memset(frame, 0, 10 * sizeof(uint64_t));
  uint16_t fpcw;
  asm volatile("fnstcw %0" : "=m"(fpcw));
  std::memcpy(&frame[0], &fpcw, sizeof fpcw);
  frame[1] = __builtin_ia32_stmxcsr();
  frame[8] = reinterpret_cast<uint64_t>(entry);
  c.sp = frame;
}
inline void switch_context(Context& from, Context& to) { ps_emu_switch(&from.sp, to.sp); }
#else
}  // namespace ps::emu
#include <ucontext.h>
namespace ps::emu {
struct Context {
  ucontext_t uc;
};
inline void start_context(Context& c, void* stack, size_t bytes, void (*entry)()) {
  int (*volatile get)(ucontext_t*) = getcontext;  // never resumed here: not a second return
  get(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

// The block in progress: one fiber per thread, scheduled from the launching thread's own stack.
class Block {
 public:
  enum class State { kReady, kAtBlockBarrier, kAtWarpBarrier, kReturned };

  Block(unsigned threads, void (*body)(void*), void* arg)
      : n_(threads), body_(body), arg_(arg), fibers_(threads), lanes_(threads) {
    for (unsigned t = 0; t < n_; ++t) fibers_[t].stack = stack(t);
  }

  // Runs every block of the grid: each thread's fiber runs the kernel once per block, and all
  // meet between blocks (shared memory is reused by the next block).
  void run(dim3 grid, dim3 block) {
    for (unsigned t = 0; t < n_; ++t) {
      Fiber& f = fibers_[t];
      f.idx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
      f.state = State::kReady;
      start_context(f.ctx, f.stack, kStackBytes, &Block::entry);
    }
    const unsigned blocks = grid.x * grid.y * grid.z;
    for (unsigned i = 0; i < blocks; ++i) {
      blockIdx = dim3(i % grid.x, (i / grid.x) % grid.y, i / (grid.x * grid.y));
      last_block_ = i + 1 == blocks;
      for (Fiber& f : fibers_) f.state = State::kReady;
      for (;;) {
        for (unsigned t = 0; t < n_; ++t)
          if (fibers_[t].state == State::kReady) resume(t);
        if (!open_barriers()) break;
      }
    }
  }

  // Called by the running thread.
  unsigned running() const { return running_; }
  float& lane(unsigned t) { return lanes_[t]; }
  void wait(State at) {
    Fiber& f = fibers_[running_];
    f.state = at;
    switch_to_scheduler(f, false);
  }

 private:
  static constexpr size_t kStackBytes = 256 << 10;
  struct Fiber {
    Context ctx;
    void* stack = nullptr;
    dim3 idx;
    State state = State::kReady;
    void* fake_stack = nullptr;  // the sanitizer's record of this fiber's frames
  };

  // Stacks outlive launches (one per thread index ever used), with a guard page below each.
  static void* stack(unsigned t) {
    static std::vector<void*> stacks;
    while (stacks.size() <= t) {
      const size_t page = 4096;
      void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "emulated GPU: no memory for a thread's stack\n");
        std::abort();
      }
      mprotect(p, page, PROT_NONE);
      stacks.push_back(static_cast<char*>(p) + page);
    }
    return stacks[t];
  }

  static inline thread_local Block* self = nullptr;

  static void entry() {
    Block* b = self;
#if defined(PS_EMU_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &b->sched_bottom_, &b->sched_size_);
#endif
    for (;;) {  // one pass per block; after the last the fiber is left, never resumed
      b->body_(b->arg_);
      Fiber& f = b->fibers_[b->running_];
      f.state = State::kReturned;
      b->switch_to_scheduler(f, b->last_block_);
      b = self;
    }
  }

  void resume(unsigned t) {
    Fiber& f = fibers_[t];
    running_ = t;
    threadIdx = f.idx;
    Block* outer = self;
    self = this;
#if defined(PS_EMU_ASAN)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
    switch_context(sched_, f.ctx);
#if defined(PS_EMU_ASAN)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    self = outer;
  }

  void switch_to_scheduler(Fiber& f, bool returned) {
#if defined(PS_EMU_ASAN)
    __sanitizer_start_switch_fiber(returned ? nullptr : &f.fake_stack, sched_bottom_, sched_size_);
#else
    (void)returned;
#endif
    switch_context(f.ctx, sched_);
#if defined(PS_EMU_ASAN)
    __sanitizer_finish_switch_fiber(f.fake_stack, &sched_bottom_, &sched_size_);
#endif
  }

  // With every thread waiting or returned: opens the block barrier if all that have not returned
  // wait at it, and each warp barrier that all of its remaining threads wait at. False when all
  // have returned; a block whose threads wait at barriers none of which can open ends the process.
  bool open_barriers() {
    unsigned at_block = 0, at_warp = 0, returned = 0;
    for (const Fiber& f : fibers_) {
      at_block += f.state == State::kAtBlockBarrier;
      at_warp += f.state == State::kAtWarpBarrier;
      returned += f.state == State::kReturned;
    }
    if (returned == n_) return false;
    bool opened = false;
    if (at_block == n_ - returned) {
      for (Fiber& f : fibers_)
        if (f.state == State::kAtBlockBarrier) f.state = State::kReady;
      return true;
    }
    for (unsigned first = 0; first < n_; first += PS_EMU_WARP) {
      const unsigned last = std::min<unsigned>(first + PS_EMU_WARP, n_);
      unsigned waiting = 0, live = 0;
      for (unsigned t = first; t < last; ++t) {
        waiting += fibers_[t].state == State::kAtWarpBarrier;
        live += fibers_[t].state != State::kReturned;
      }
      if (waiting == 0 || waiting != live) continue;
      for (unsigned t = first; t < last; ++t) fibers_[t].state = State::kReady;
      opened = true;
    }
    if (!opened) {
      std::fprintf(stderr,
                   "emulated GPU: block (%u,%u,%u) deadlocks: %u threads wait at __syncthreads, "
                   "%u at a warp shuffle whose warp has threads elsewhere, %u returned\n",
                   blockIdx.x, blockIdx.y, blockIdx.z, at_block, at_warp, returned);
      std::abort();
    }
    return true;
  }

  unsigned n_;
  void (*body_)(void*);
  void* arg_;
  std::vector<Fiber> fibers_;
  std::vector<float> lanes_;  // one slot per thread for shuffles
  Context sched_;
  unsigned running_ = 0;
  bool last_block_ = false;
  const void* sched_bottom_ = nullptr;
  size_t sched_size_ = 0;

 public:
  static Block* in_progress() { return self; }
};

inline unsigned linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

inline float shfl_xor(float v, int mask) {
  Block* b = Block::in_progress();
  const unsigned t = b->running(), warp = t / PS_EMU_WARP, lane = t % PS_EMU_WARP;
  b->lane(t) = v;
  b->wait(Block::State::kAtWarpBarrier);
  const float r = b->lane(warp * PS_EMU_WARP + (lane ^ unsigned(mask)));
  b->wait(Block::State::kAtWarpBarrier);
  return r;
}

// Runs the grid on the calling thread.
inline std::mutex launch_mutex;  // launches are serialized: blockDim and the stacks are shared
template <typename Body>
void launch(dim3 grid, dim3 block, void* /*stream: work runs at once*/, Body&& body) {
  std::lock_guard<std::mutex> lock(launch_mutex);
  gridDim = grid;
  blockDim = block;
  void (*run_body)(void*) = [](void* f) { (*static_cast<Body*>(f))(); };
  Block b(block.x * block.y * block.z, run_body, &body);
  b.run(grid, block);
}

}  // namespace ps::emu

inline void __syncthreads() {
  ps::emu::Block::in_progress()->wait(ps::emu::Block::State::kAtBlockBarrier);
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// A block's threads switch only at barriers, so a plain read-modify-write is atomic here.
inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}

struct __half {
  uint16_t bits;
};
inline float __half2float(__half h) { return ps::fp16_to_f32(h.bits); }
inline __half __float2half_rn(float f) { return __half{ps::f32_to_fp16(f)}; }

// The runtime API calls the backend makes, on host memory.
using cudaError_t = int;
using cudaStream_t = void*;
constexpr cudaError_t cudaSuccess = 0, cudaErrorMemoryAllocation = 2;
enum cudaMemcpyKind {
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice
};
constexpr unsigned cudaStreamNonBlocking = 1;
struct cudaDeviceProp {
  int warpSize = 0;
};
struct cudaFuncAttributes {
  int maxThreadsPerBlock = 0;
};
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "out of memory";
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  p->warpSize = PS_EMU_WARP;
  return cudaSuccess;
}
template <typename F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F) {
  a->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = *total = 0;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  static int stream;
  *s = &stream;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
// Events hold the host time they were recorded at: kernels run when they are launched.
using cudaEvent_t = std::chrono::steady_clock::time_point*;
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new std::chrono::steady_clock::time_point();
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  *e = std::chrono::steady_clock::now();
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = std::chrono::duration<float, std::milli>(*end - *start).count();
  return cudaSuccess;
}
