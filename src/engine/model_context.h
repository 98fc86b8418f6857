#pragma once
// A loaded model on its devices, made once per model per process: the opened devices, the
// placement plan, the scheduler, the resident weights and the KV cells of every sequence. The
// engine (engine/engine.h) and the commands that need no engine (bench, logits) drive it; each
// step of its making is a function of its own that doctor and tests can call alone.
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_choice.h"
#include "engine/kv_pool.h"
#include "engine/pipeline.h"
#include "model/model.h"
#include "scheduler/placement.h"
#include "scheduler/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace ps::gguf {
class File;
}
namespace ps::cluster {
class Cluster;
}

namespace ps {

struct LoadedModel {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  double load_seconds = 0;
  // Opens and validates the file, builds the architecture and the tokenizer.
  static std::shared_ptr<LoadedModel> load(const std::string& path, bool with_tokenizer = true);
};

struct ContextOptions {
  // The KV pool's cells, shared by every sequence (-c, as llama.cpp's unified cache); 0: the
  // model's training context, capped at 4096.
  int n_ctx = 0;
  int n_ctx_per_seq = 0;  // the most positions one sequence may use (--ctx-per-seq); 0: n_ctx
  int n_batch = 512;      // prompt tokens per forward pass
  int n_threads = 0;      // 0: physical cores
  std::string device;  // a device spec (backend/physical_device.h); "" : POLYSTACK_DEVICE or auto
  bool strict = false;
  bool self_check = true;  // false: trust a GPU without its self-check (--no-self-check)
  bool recheck = false;    // run the self-check again even when results are cached
  // Layers on the GPU(s), llama.cpp's -ngl: kNglAuto fits as many as the GPU's free memory
  // holds (scheduler/placement.h); kNglAll puts everything there; N the last N repeating
  // layers (and everything when N exceeds their count), the rest on the CPU.
  static constexpr int kNglAuto = -2, kNglAll = -1;
  int n_gpu_layers = kNglAuto;
  // --split-mode layer: the layers spread over every GPU that passed its checks (with the
  // chosen one), in proportion to tensor_split (one share per GPU, in id order) or to their
  // free memory. Otherwise one GPU: the chosen one, or the main_gpu-th of those GPUs.
  bool split_layers = false;
  std::vector<double> tensor_split;
  int main_gpu = -1;
  // A mixture of experts' routed experts on the CPU for the first N layers (--n-cpu-moe N;
  // --cpu-moe: every layer); -1: with their layers, or on the CPU first when -ngl auto cannot
  // fit every layer whole (LayerRequest::n_cpu_moe).
  int n_cpu_moe = -1;
  // --deterministic: a sequence's tokens computed the same way whatever else shares its batch
  // (DeviceOptions::batch_invariant), so a greedy answer does not depend on other requests.
  bool deterministic = false;
  // Sequences that run at once (a server's slots), each with its own position and KV cells from
  // the pool, over the one copy of the weights; and sequences kept beside them, idle, whose
  // cells a later request may reuse (a server's prompt cache).
  int n_seq = 1;
  int n_seq_cached = 0;
  // --mpi: the model's layers spread over the ranks of the MPI job this process is rank 0 of
  // (engine/pipeline.h), in proportion to rank_split (--rank-split, one share per rank) or to
  // each rank's free memory.
  bool mpi = false;
  std::vector<double> rank_split;
};

// The first step: the options checked and the context's shape resolved (n_ctx 0 becomes the
// model's training context, capped at 4096). UsageError naming the bad value.
struct ContextShape {
  int n_ctx = 0;    // positions per sequence
  int n_cells = 0;  // the pool's cells
  int n_batch = 0, n_seq = 0, n_seq_cached = 0;
};
ContextShape resolve_shape(const ModelParams& p, const ContextOptions& opts);

// Cells of the KV pool are given out in blocks of this many.
inline constexpr int64_t kKvBlock = 64;
// The pool's groups of layers (engine/kv_pool.h): layers whose sequences hold the same slots (every
// position, or a sliding window's ring) share one; per layer, its group.
struct KvGroups {
  std::vector<KvPool::Group> groups;
  std::vector<int> layer_group;
};
KvGroups kv_groups(const ModelParams& p, const ContextShape& shape);

// The second: which device and why (the self-checks run here), and the devices opened: the
// GPUs in id order (the chosen one, or every GPU that passed with --split-mode layer), the CPU
// last. BackendError when an opened device cannot run models.
struct OpenedDevices {
  ChosenDevice choice;
  std::vector<std::unique_ptr<Device>> devices;
  size_t main = 0;  // the index of the device that prints as "running on"
};
OpenedDevices open_devices(const LoadedModel& model, const ContextOptions& opts);

// This process's devices as a rank of an MPI job (engine/pipeline.h) reports them: their free
// memory summed and their ids ("cuda:0 + cpu").
PlacementRank placement_rank(const OpenedDevices& opened);

// The options for choosing a model's device: the session's flags and the model's weight types
// (each gets self-check cases; the one holding most bytes is timed).
ChoiceOptions device_choice_options(const LoadedModel& model, const ContextOptions& opts);

// What each unit of the model ([input, layers, output]) costs with the KV pool of `shape`, and
// (compute) the intermediate tensors a device needs to run a prompt batch at the end of a
// sequence's context, measured by planning the graph on the CPU device. With experts_why, also
// why none of `gpus` can run a mixture of experts' routed experts (the first layer's nodes
// asked of each; "" when they can or the model has none), from the same graph.
std::vector<UnitCost> model_unit_costs(const LoadedModel& m, const ContextShape& shape, Device& cpu,
                                       uint64_t& compute, const std::vector<Device*>& gpus = {},
                                       std::string* experts_why = nullptr);

// A device as the placement plan sees it: its free memory (else its total), capped by
// POLYSTACK_DEVICE_MEMORY.
PlacementDevice placement_device(const DeviceInfo& d);

// The third: which device runs each unit of the model and why, from -ngl, the split flags and
// the devices' free memory.
// In an MPI job, unit_rank says which rank holds each unit: the units of other ranks than
// `rank` cost nothing here.
PlacementPlan plan_layers(const LoadedModel& model, const ContextShape& shape,
                          const std::vector<Device*>& devices, const ContextOptions& opts,
                          const std::vector<int>& unit_rank = {}, int rank = 0);

class ModelContext {
 public:
  // The steps in order: resolve_shape, open_devices, plan_layers, then allocate_kv and
  // upload_weights below.
  // With opts.mpi in a job of several ranks, this is rank 0's part: the other ranks are told of
  // the context, their facts checked, and the units planned over them (engine/pipeline.h).
  ModelContext(std::shared_ptr<const LoadedModel> model, const ContextOptions& opts);
  // A worker rank's part of rank 0's context: its devices (opened and reported to rank 0) and
  // the units it holds.
  ModelContext(std::shared_ptr<const LoadedModel> model, const ContextOptions& opts,
               OpenedDevices opened, std::vector<int> unit_rank, int rank);
  ~ModelContext();
  // A worker's share of a pass rank 0 described; finish_passes() waits for its last sends.
  void run_pass(const PassDesc& desc);
  void finish_passes();
  // Rank 0 of an MPI job: every rank's resident and peak resident memory now, bytes (empty in
  // one process).
  struct RankMemory {
    uint64_t resident = 0, peak = 0;
  };
  std::vector<RankMemory> rank_memory() const;
  ModelContext(const ModelContext&) = delete;
  ModelContext& operator=(const ModelContext&) = delete;

  // Sequence ids are handed out and returned here (engine/sequence.h): the lowest free id, or
  // -1 when all n_seq + n_seq_cached are live. A released sequence's cells go back to the pool.
  int acquire_sequence();
  void release_sequence(int seq);
  int live_sequences() const;

  // Feeds tokens to sequence `seq` after what its context already holds. Returns the logits of
  // the last token, or of every token when all_logits (n_tokens x n_vocab). UsageError when
  // the context would overflow.
  std::vector<float> eval(std::span<const int32_t> tokens, bool all_logits = false, int seq = 0);
  // Tokens of several sequences (each at most once, n_batch tokens in all) in one forward
  // pass, so the weights are read once for all of them; returns each run's last logits, or for
  // a run with `hidden` every token's final hidden state (after the output norm; n_tokens x
  // n_embd: embeddings). One pass per sequence where a device that runs layers lacks attention
  // over per-token positions (batched() is false), or when the runs exceed n_batch tokens.
  struct SeqTokens {
    int seq;
    std::span<const int32_t> tokens;
    bool hidden = false;
  };
  std::vector<std::vector<float>> eval_batch(std::span<const SeqTokens> runs);
  bool batched() const { return batched_; }
  // Forgets every position of seq; its cells go back to the pool.
  void reset(int seq = 0);
  // One token through the whole model, then forgotten: the work a device does at first use
  // (packing weights for the CPU's kernels, building pipelines) done now, so that it is not
  // counted as the first prompt's time. Returns its seconds.
  double warm_up();
  // What was asked that the model or the machine will not do well, one line each: a context
  // beyond the trained one, more threads than CPUs.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Makes sure seq holds cells for positions [0, n_positions): false (nothing taken) when the
  // pool lacks free blocks. eval and eval_batch reserve what they need themselves (UsageError
  // when the pool is full); a caller that can make room first (the engine) asks here.
  bool reserve(int seq, int n_positions);
  const KvPool& kv_pool() const { return *pool_; }
  int n_cells() const { return n_cells_; }
  int n_past(int seq = 0) const { return n_past_.at(size_t(seq)); }
  // Forgets sequence seq's positions from n on, keeping [0, n): false (and nothing changed)
  // when a sliding-window layer's ring no longer holds what position n would attend to.
  bool rewind(int seq, int n);
  int n_seq() const { return int(n_past_.size()); }  // sequence ids
  int n_batch() const { return n_batch_; }
  int n_ctx() const { return n_ctx_; }  // positions per sequence
  // The main device: the chosen GPU (or the CPU), which prints as "running on".
  const Device& device() const { return *device_; }
  // Every device the session uses: the GPUs in id order, the CPU last (beside a GPU it runs
  // the layers the GPU does not hold, and the ops it lacks).
  std::vector<const Device*> devices() const;
  // Which device and why, the devices passed over and the self-checks that ran.
  const ChosenDevice& device_choice() const { return choice_; }
  // Where each layer runs and why, and the ops that run elsewhere than their layer's device.
  const PlacementPlan& plan() const { return plan_; }
  // Bytes copied between devices in the last forward pass.
  size_t transfer_bytes() const { return scheduler_->transfer_bytes(); }
  // The time those copies took (not the wait for the producing device to finish).
  double transfer_seconds() const { return scheduler_->transfer_seconds(); }
  const LoadedModel& model() const { return *model_; }
  size_t kv_cache_bytes() const;

 private:
  // The fourth step: the KV pool, each layer's cells on the device that runs the layer (one
  // buffer per layer for its group's cells), and whether tokens of several sequences can share
  // a pass.
  void allocate_kv(const ContextShape& shape);
  // The fifth: the weights reach a device with its own memory now rather than with the first
  // token; placing a graph also finds the ops that run elsewhere than their layer's device.
  void upload_weights();
  // The steps both constructors share, once the devices are open.
  void init(const ContextShape& shape, const ContextOptions& opts, OpenedDevices opened,
            std::vector<int> unit_rank, int rank);
  // Rank 0, once the workers were told of the context (Start): their facts gathered and
  // checked against `fingerprint`, the units planned over the ranks and sent (Plan); returns
  // unit_rank, and each rank's facts in *ranks.
  std::vector<int> plan_job(const ContextShape& shape, const ContextOptions& opts,
                            const OpenedDevices& opened, const std::string& fingerprint,
                            std::vector<PlacementRank>& ranks);
  // Rank 0: each worker's answer once its layers are loaded, and the hop to it, into the plan.
  void gather_ready(std::vector<PlacementRank> ranks);
  // What a pass's graph reads beside the weights and caches: the tokens, their positions, the
  // rows whose logits come out, and per group of layers the paged attention's data and where
  // the new keys and values go.
  struct PassData {
    std::vector<int32_t> tokens, pos, rows, hidden_rows;
    std::vector<std::vector<int32_t>> info;
    std::vector<ForwardInputs::KvLayout> layouts;
  };
  // The graph of one forward pass over runs of tokens (each run a sequence's, after its
  // positions; cells reserved), returning the logits node: each run's last token's, or every
  // token's with all_logits (one run).
  // The hidden runs' states come out through *hidden (null when there are none); when every run
  // is hidden, that node is the one returned.
  Tensor* build_pass(Graph& g, const PassDesc& desc, PassData& d, Tensor** hidden = nullptr) const;
  // The pass over runs, from the pool's tables and the sequences' positions.
  PassDesc describe(std::span<const SeqTokens> runs, bool all_logits) const;
  // A pass in an MPI job: started (rank 0 sends the description; this rank's nodes run, their
  // tensors go on to the ranks that read them) and, on rank 0, finished (the logits back).
  struct RankPass;
  std::unique_ptr<RankPass> start_pass(const PassDesc& desc);
  std::vector<float> finish_pass(RankPass& p, std::vector<float>* hidden);
  // The rank that runs node n (the rank of its unit).
  int rank_of(const Tensor& n) const;
  // A tensor one rank computes and another reads.
  struct Crossing {
    Tensor* t;
    int from, to;
  };
  // Leaves g with this rank's nodes and returns the tensors that cross between ranks, in the
  // same order on every rank (the graphs are the same), so that each pair's messages match.
  std::vector<Crossing> cut_for_rank(Graph& g) const;
  // Builds, runs and reads it; the sequences' positions advance. The logits of the runs that
  // are not hidden; the hidden runs' states, in run order, into *hidden.
  std::vector<float> forward(std::span<const SeqTokens> runs, bool all_logits,
                             std::vector<float>* hidden = nullptr);
  // Checks the runs (sequences, vocabulary, context) and reserves their cells.
  void prepare(std::span<const SeqTokens> runs);
  // eval of a prepared run: passes of at most n_batch tokens.
  std::vector<float> eval_prepared(int seq, std::span<const int32_t> tokens, bool all_logits,
                                   bool hidden = false);

  std::shared_ptr<const LoadedModel> model_;
  std::vector<std::unique_ptr<Device>> devices_;  // the GPUs, the CPU last
  Device* device_ = nullptr;
  ChosenDevice choice_;
  PlacementPlan plan_;
  std::vector<std::string> warnings_;
  std::unique_ptr<Scheduler> scheduler_;
  // Per layer: its group's cells of the pool.
  std::vector<std::unique_ptr<Buffer>> k_cache_, v_cache_;
  KvGroups kv_groups_;
  std::unique_ptr<KvPool> pool_;
  bool batched_ = false;
  int n_ctx_ = 0, n_cells_ = 0;
  int n_batch_ = 512;
  std::vector<int> n_past_;  // per sequence
  std::vector<bool> live_;   // per sequence: acquired
  // In a job of several ranks: the job (rank 0's, or a worker's); the worker's last pass,
  // whose sends may still be under way.
  cluster::Cluster* cluster_ = nullptr;
  std::unique_ptr<RankPass> last_pass_;
};

}  // namespace ps
