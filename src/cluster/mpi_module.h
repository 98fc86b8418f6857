#pragma once
// The C interface between polystack and libpolystack-mpi.so, the module that links Open MPI (or
// any MPI). The executable opens it with dlopen only when --mpi is given, so that polystack runs
// on machines without MPI and says there how to get it. Every function returns 0 on success;
// otherwise a message is left for last_error().
#include <cstddef>

extern "C" {

inline constexpr int kPolystackMpiAbi = 1;

struct PolystackMpiModule {
  int abi;  // kPolystackMpiAbi
  // MPI_Init_thread (serialized: one thread at a time, not always the main one).
  int (*init)(int* rank, int* size);
  // Blocking send of n bytes; isend starts one and returns a handle for wait (the bytes must
  // stay valid until then).
  int (*send)(int dst, int tag, const void* data, size_t n);
  int (*isend)(int dst, int tag, const void* data, size_t n, void** handle);
  int (*wait)(void* handle);
  // The size of the next message from src with tag (waits for it), then its bytes.
  int (*probe)(int src, int tag, size_t* n);
  int (*recv)(int src, int tag, void* data, size_t n);
  void (*abort)(int code);
  int (*finalize)(void);
  const char* (*host)(void);     // MPI_Get_processor_name
  const char* (*library)(void);  // MPI_Get_library_version, first line
  const char* (*last_error)(void);
  int (*local_size)(void);  // the ranks on this host (MPI_COMM_TYPE_SHARED), this one included
};

// The module's one entry point.
const PolystackMpiModule* polystack_mpi_module(void);
}
