#pragma once
// The ranks of an MPI job (`mpirun -np N polystack run|serve|bench ... --mpi`): this process's
// rank among them and byte messages between ranks, over libpolystack-mpi.so (mpi_module.h).
// Rank 0 runs the command (tokenizer, sampler, server); the others serve the layers the
// placement plan gives them (engine/pipeline.h). Messages between one pair of ranks with one tag
// arrive in the order they were sent.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ps::cluster {

// What a message carries.
enum Tag : int {
  kCommand = 1,     // rank 0 to a worker: what to do next
  kReply = 2,       // a worker to rank 0: the answer to a command
  kActivation = 3,  // a tensor that a rank's layers pass to a later rank's
  kOutput = 4,      // the pass's logits or hidden states, to rank 0
};

class Cluster {
 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& host() const { return host_; }
  const std::string& library() const { return library_; }
  // The ranks on this host, this one included: they share its cores.
  int local_size() const { return local_size_; }

  void send(int dst, Tag tag, const void* data, size_t n);
  void send(int dst, Tag tag, const std::vector<uint8_t>& bytes) {
    send(dst, tag, bytes.data(), bytes.size());
  }
  // A send that runs while the caller goes on; wait() before the bytes change or go.
  struct Pending {
    void* handle = nullptr;
  };
  Pending isend(int dst, Tag tag, const void* data, size_t n);
  void wait(Pending& p);
  // The next message from src with tag, whatever its size; or exactly n bytes into data.
  std::vector<uint8_t> recv(int src, Tag tag);
  void recv(int src, Tag tag, void* data, size_t n);
  // Ends every rank of the job now (MPI_Abort).
  [[noreturn]] void abort(int code);
  void finalize();

  // What rank 0 is waiting for, in words ("rank 2 (layers 4-7 on node2)"): named if the job
  // ends while it waits (a rank died and mpirun stopped the others).
  void set_waiting_for(const std::string& what);

 private:
  friend Cluster* start_mpi();
  Cluster() = default;
  [[noreturn]] void fail(const char* what);
  const void* module_ = nullptr;
  int rank_ = 0, size_ = 1, local_size_ = 1;
  std::string host_, library_;
};

// Opens libpolystack-mpi.so (beside the executable, or POLYSTACK_MPI_MODULE) and initializes
// MPI; the second call returns the first's. UsageError saying how to get MPI when the module or
// the MPI library is missing.
Cluster* start_mpi();
// The job's cluster once start_mpi() has run, else null.
Cluster* current();
// Where the module is looked for, and why it cannot be opened ("" when it can): for doctor.
std::string mpi_module_problem();

}  // namespace ps::cluster
