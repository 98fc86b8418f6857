#pragma once
// A model across the ranks of an MPI job (cluster/cluster.h), as a pipeline: each rank holds a
// contiguous range of units (PlacementPlan::unit_rank) on its own devices, rank 0 owns the
// tokenizer, the sampler and the KV pool's bookkeeping, and for every forward pass it sends each
// worker the pass's description (PassDesc), from which every rank builds the same graph and runs
// the nodes of its own units; the tensors that cross from one rank's units to another's go
// point to point, and the logits come back to rank 0.
//
// The commands rank 0 sends, in order: Start (the model, the options, the version) answered by
// each worker's facts; Plan (unit_rank) answered when its layers are loaded; then Pass after Pass;
// End when the context goes; Quit when rank 0's command ends.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

namespace ps {

struct ContextOptions;
struct LoadedModel;

namespace cluster {
class Cluster;
}

// What one forward pass evaluates: per run its sequence, the positions before it, its tokens
// and its block table per group of layers (the pool's cells), as rank 0's pool holds them.
struct PassRun {
  int32_t seq = 0, n_past = 0;
  bool hidden = false;
  std::vector<int32_t> tokens;
  std::vector<std::vector<int32_t>> tables;
};
struct PassDesc {
  bool all_logits = false;
  std::vector<PassRun> runs;
};

// Ping: bytes the worker sends back at once (rank 0 times the hop with it). Memory: the worker's
// resident and peak resident bytes, as JSON.
enum class PipelineCommand : uint8_t {
  Start = 1,
  Plan = 2,
  Pass = 3,
  End = 4,
  Quit = 5,
  Ping = 6,
  Memory = 7
};

// A command with its JSON body (Start, Plan), or without one; sent to every worker, or a
// worker's JSON reply read.
std::vector<uint8_t> command_message(PipelineCommand cmd, const nlohmann::json* body = nullptr);
void tell_workers(cluster::Cluster& c, const std::vector<uint8_t>& message);
nlohmann::json recv_reply(cluster::Cluster& c, int rank);

std::vector<uint8_t> encode_pass(const PassDesc& d);
// std::runtime_error for bytes that are not a pass this version encodes.
PassDesc decode_pass(std::span<const uint8_t> bytes);

// The options a context is made with, as rank 0 sends them (the workers use them, not their own
// command line).
nlohmann::json context_options_json(const ContextOptions& o);
ContextOptions context_options_from_json(const nlohmann::json& j);

// What identifies a model file between ranks: its size and a hash of its header (metadata and
// tensor list) and of its first and last bytes.
std::string model_fingerprint(const std::string& path);

// A worker rank's life: serves Start..End for each context rank 0 makes, until Quit; returns
// the exit code. Errors in a pass end the whole job (Cluster::abort) after one line on stderr.
// own_model: the -m of this rank's command line (mpirun's MPMD form can give each rank its own
// path), else "" for rank 0's.
int run_pipeline_worker(cluster::Cluster& c, const std::string& own_model);
// Rank 0 at the end of its command: the workers told to quit, MPI finalized.
void stop_pipeline_workers(cluster::Cluster& c);

// The resident memory of this process (VmRSS), or its peak (VmHWM), bytes; 0 where unknown.
uint64_t resident_bytes(bool peak = false);

}  // namespace ps
