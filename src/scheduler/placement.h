#pragma once
// Where a model's layers run: the placement plan, as data. A model is a row of units (the
// input, its repeating layers 0..n-1, the output: Tensor::layer + 1); each unit goes to one
// device. The plan is chosen from llama.cpp-style flags (-ngl N | all | auto, --tensor-split)
// and, for auto, from each device's free memory and each unit's cost, so that every rule is
// pure logic tested on made-up sizes. The session and the scheduler run it; `run -v`,
// `doctor -m` and the JSON outputs print it; a pipeline over several hosts can reuse it.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace ps {

// What one unit costs on a device that runs it.
struct UnitCost {
  uint64_t weights = 0;  // bytes of the weights its nodes read
  uint64_t kv = 0;       // its KV cache at the session's context
  // Of `weights`, the bytes the output unit reads too (a tied embedding): counted once when
  // both units share a device. Only the input unit has any.
  uint64_t shared_with_output = 0;
  // Of `weights`, the bytes of a mixture of experts' routed experts and their router: a unit
  // on a GPU may leave these on the CPU (PlacementPlan::experts_on_cpu).
  uint64_t experts = 0;
};

struct PlacementDevice {
  std::string id;       // "vulkan:0", "cpu"
  bool gpu = true;      // false: the CPU, which takes every unit the GPUs do not
  uint64_t free = 0;    // free memory in bytes (after POLYSTACK_DEVICE_MEMORY); 0: unknown
  bool capped = false;  // free comes from POLYSTACK_DEVICE_MEMORY
};

struct LayerRequest {
  enum class Mode { Auto, Count, All };
  Mode mode = Mode::Auto;
  int count = 0;  // Mode::Count: -ngl N
  // Proportions of the GPU layers per GPU (--tensor-split); empty: by free memory (auto) or
  // equal shares.
  std::vector<double> tensor_split;
  bool strict = false;  // auto fit leaving a unit on the CPU is an error
  // Routed experts: -1 lets them follow their layer, except that auto fit keeps them on the CPU
  // first when the GPUs cannot hold every unit whole (attention and the shared weights gain
  // more from a GPU, and only a few experts run per token); N >= 0 keeps those of the first N
  // layers on the CPU (llama.cpp's --n-cpu-moe); kAllLayers: every layer's (--cpu-moe).
  static constexpr int kAllLayers = 1 << 24;
  int n_cpu_moe = -1;
  // Non-empty: no GPU can run the experts (why, for the summary); they all stay on the CPU.
  std::string experts_cpu_reason;
  // In an MPI job: the rank of each unit and this process's (PlacementPlan::unit_rank); the
  // other ranks' units must cost nothing in `units`.
  std::vector<int> unit_rank;
  int rank = 0;
};

// One rank of an MPI job (cluster/cluster.h) as the plan sees it.
struct PlacementRank {
  std::string host;
  uint64_t free = 0;    // the free memory of the devices it would use, summed; 0: unknown
  std::string devices;  // its devices in words ("cuda:0 + cpu")
  uint64_t need = 0;    // the bytes of its units (weights and KV)
  uint64_t rss = 0;     // its resident memory once its weights are loaded (filled in later)
  std::string summary;  // its own placement plan's summary (filled in later)
  // One hop from rank 0 to it and back, halved (the median of a few round trips of an
  // activation's size); 0 for rank 0.
  double hop_seconds = 0;
};

struct PlacementPlan {
  std::vector<PlacementDevice> devices;  // the GPUs in order, the CPU last
  std::vector<UnitCost> units;           // what each unit costs
  std::vector<int> unit_device;          // per unit, an index into devices
  // Per unit: its routed experts run on the CPU though the unit is on a GPU.
  std::vector<bool> experts_on_cpu;
  std::string experts_note;        // why the experts are where they are, when not with their layers
  std::vector<uint64_t> need;      // per device: the bytes the plan puts there
  std::vector<uint64_t> headroom;  // per device: the free memory the plan leaves alone
  uint64_t compute = 0;            // the compute buffer of each device that runs a unit
  uint64_t whole_model = 0;        // everything on one device
  std::string mode;                // "-ngl auto", "-ngl 3", "-ngl all"
  // The plan in one line: "layers 10-31 + output on cuda:0 (5.1 of 5.6 GiB free), input +
  // layers 0-9 on cpu: the whole model needs 7.2 GiB (-ngl auto)".
  std::string summary;
  // Ops that run elsewhere than their unit's device, each with the device's reason (the
  // scheduler's report, filled in once the graph is placed).
  std::vector<std::string> fallbacks;
  // In an MPI job: per unit, the rank that holds it (plan_ranks), and this process's rank;
  // devices and unit_device speak of this rank's units only (the others cost nothing here).
  // Empty in one process.
  std::vector<int> unit_rank;
  int rank = 0;
  // On rank 0, every rank of the job.
  std::vector<PlacementRank> ranks;

  int n_units() const { return int(unit_device.size()); }
  // True when every unit runs on devices[0].
  bool single_device() const;
  // Layers (with input and output) per device in words: "layers 2-4 + output".
  std::string units_text(int device) const;
  // The units of rank r in words ("input + layers 0-3").
  std::string rank_units_text(int r) const;
  // Rank r of `ranks` in one line: "rank 1 on node2: layers 4-7 + output on cpu, needs 1.2 GiB,
  // free 30.0 GiB, resident 1.3 GiB, hop from rank 0 12.0 us".
  std::string rank_text(int r) const;
  // True when unit u runs in this process.
  bool local(int u) const { return unit_rank.empty() || unit_rank[size_t(u)] == rank; }
  // Per unit, the device of its routed experts (an index into devices).
  std::vector<int> expert_devices() const;
  // The layers whose experts run on the CPU apart from them, in words ("layers 0-9"); "" if none.
  std::string experts_text() const;
  nlohmann::json to_json() const;
};

// The headroom auto fit leaves on a device: a tenth of its free memory, at most 512 MiB.
uint64_t placement_headroom(uint64_t free);

// The plan for `units` ([input, layers.., output]) over `devices` (GPUs first, the CPU last,
// which may be alone). `compute` is the compute buffer a device needs to run any unit.
// UsageError when the request cannot be met: -ngl N over a GPU's known free memory, a model
// that fits nowhere, --strict with layers left on the CPU by auto fit, a --tensor-split of the
// wrong length.
PlacementPlan plan_placement(const std::vector<UnitCost>& units, uint64_t compute,
                             const std::vector<PlacementDevice>& devices, const LayerRequest& req);

// Per unit, the rank of an MPI job that holds it: contiguous ranges in rank order (the input on
// rank 0, the output on the last), sized by `split`'s proportions (--rank-split, one per rank)
// or else by each rank's free memory (equal shares where any is unknown), with at least one
// repeating layer per rank. UsageError for more ranks than layers, a split of the wrong length
// or without a positive share, or a rank whose units need more than its free memory.
std::vector<int> plan_ranks(const std::vector<UnitCost>& units,
                            const std::vector<PlacementRank>& ranks,
                            const std::vector<double>& split);

// The bytes of the units each of n_ranks ranks holds (weights and KV; a tied embedding once when
// the input and output share a rank).
std::vector<uint64_t> rank_needs(const std::vector<UnitCost>& units,
                                 const std::vector<int>& unit_rank, int n_ranks);

// POLYSTACK_DEVICE_MEMORY: "vulkan:0=48MiB,cpu=2GiB" (KiB, MiB or GiB; B or none for bytes).
// The cap for `id`, or 0 when the list names none. UsageError for a malformed list.
uint64_t device_memory_cap(const std::string& list, const std::string& id);

// "1.5 GiB", "48.0 MiB", "12 KiB", "512 B".
std::string human_bytes(uint64_t n);

}  // namespace ps
