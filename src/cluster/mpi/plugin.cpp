// libpolystack-mpi.so: polystack's transport over MPI (cluster/mpi_module.h). It holds no
// state of polystack's; MPI's own errors end the job (MPI_ERRORS_ARE_FATAL), as a rank that
// cannot reach another cannot go on.
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cluster/mpi_module.h"

namespace {

std::string g_error;
char g_host[MPI_MAX_PROCESSOR_NAME + 1] = {};
char g_library[MPI_MAX_LIBRARY_VERSION_STRING + 1] = {};
int g_local_size = 1;

int fail(const std::string& what, int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int n = 0;
  MPI_Error_string(rc, text, &n);
  g_error = what + ": " + std::string(text, size_t(n));
  return 1;
}

int check_size(size_t n) {
  if (n > size_t(INT_MAX)) {
    g_error = "a message of " + std::to_string(n) + " bytes is larger than MPI's int count";
    return 1;
  }
  return 0;
}

int init(int* rank, int* size) {
  // Open MPI's components stay loaded until the process ends (unless the user says otherwise),
  // so that what a debugger or leak checker reports in them can still be named.
  setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 0);
  int provided = 0;
  if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided))
    return fail("MPI_Init_thread", rc);
  if (provided < MPI_THREAD_SERIALIZED) {
    g_error = "the MPI library does not allow calls from more than one thread";
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_size(local, &g_local_size);
    MPI_Comm_free(&local);
  }
  int n = 0;
  MPI_Get_processor_name(g_host, &n);
  MPI_Get_library_version(g_library, &n);
  if (char* nl = std::strchr(g_library, '\n')) *nl = '\0';
  if (char* comma = std::strchr(g_library, ',')) *comma = '\0';
  return 0;
}

int send(int dst, int tag, const void* data, size_t n) {
  if (check_size(n)) return 1;
  if (int rc = MPI_Send(data, int(n), MPI_BYTE, dst, tag, MPI_COMM_WORLD))
    return fail("MPI_Send", rc);
  return 0;
}

int isend(int dst, int tag, const void* data, size_t n, void** handle) {
  if (check_size(n)) return 1;
  auto* req = new MPI_Request;
  if (int rc = MPI_Isend(data, int(n), MPI_BYTE, dst, tag, MPI_COMM_WORLD, req)) {
    delete req;
    return fail("MPI_Isend", rc);
  }
  *handle = req;
  return 0;
}

int wait(void* handle) {
  auto* req = static_cast<MPI_Request*>(handle);
  const int rc = MPI_Wait(req, MPI_STATUS_IGNORE);
  delete req;
  return rc ? fail("MPI_Wait", rc) : 0;
}

int probe(int src, int tag, size_t* n) {
  MPI_Status st;
  if (int rc = MPI_Probe(src, tag, MPI_COMM_WORLD, &st)) return fail("MPI_Probe", rc);
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  *n = size_t(count);
  return 0;
}

int recv(int src, int tag, void* data, size_t n) {
  if (check_size(n)) return 1;
  MPI_Status st;
  if (int rc = MPI_Recv(data, int(n), MPI_BYTE, src, tag, MPI_COMM_WORLD, &st))
    return fail("MPI_Recv", rc);
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  if (size_t(count) != n) {
    g_error = "expected " + std::to_string(n) + " bytes from rank " + std::to_string(src) +
              ", got " + std::to_string(count);
    return 1;
  }
  return 0;
}

void abort_job(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

int finalize() {
  if (int rc = MPI_Finalize()) return fail("MPI_Finalize", rc);
  return 0;
}

const char* host() { return g_host; }
const char* library() { return g_library; }
const char* last_error() { return g_error.c_str(); }
int local_size() { return g_local_size; }

const PolystackMpiModule kModule = {
    kPolystackMpiAbi, init,     send, isend,   wait,       probe,     recv,
    abort_job,        finalize, host, library, last_error, local_size};

}  // namespace

extern "C" __attribute__((visibility("default"))) const PolystackMpiModule* polystack_mpi_module(
    void) {
  return &kModule;
}
