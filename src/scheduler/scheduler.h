#pragma once
// Places each node of a graph on a device (by the layer plan, else the first device, with ops a
// device does not support moved to another unless strict), plans the memory of intermediate
// tensors per device (reusing bytes once a tensor's last reader has run), copies activations
// between devices where a consumer runs elsewhere than its producer, and executes runs of nodes
// device by device.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"

namespace ps {

struct PlacementReport {
  // One line per op kind that could not run on its planned device, with the reason.
  std::vector<std::string> fallbacks;
};

class Scheduler {
 public:
  // devices[0] is preferred; an op its device does not support runs on another, the last
  // first (the CPU in a session), unless strict.
  // layer_devices[l + 1] is the device (an index into devices) of the nodes of layer l (-1, the
  // input, to n, the output: Tensor::layer); empty: every layer on devices[0]. expert_devices,
  // when given, is the same for the nodes of routed experts (Tensor::experts).
  Scheduler(std::vector<Device*> devices, bool strict, std::vector<int> layer_devices = {},
            std::vector<int> expert_devices = {});

  // Runs the graph; `outputs` stay valid (not reused) until the next run. Leaves in host
  // memory that nodes on a device-memory device read are copied in: constant ones (weights)
  // once for the scheduler's life, the others (token ids, positions) on every run.
  void run(Graph& graph, const std::vector<Tensor*>& outputs);
  // Copies the constant leaves the graph's nodes read (the weights) to the devices that will
  // read them now, so that the first run does not: a model's weights reach a GPU when it is
  // loaded. Nothing to do for devices that read host memory.
  void upload_constants(Graph& graph);
  // Copies an output of the last run to host memory (dst holds t.n_bytes()).
  void read(const Tensor& t, void* dst) const;
  // Places the graph and returns the bytes of intermediate tensors (and copies between
  // devices) each device would need to run it, allocating nothing: the compute buffers a
  // placement plan reserves.
  std::vector<size_t> measure(Graph& graph, const std::vector<Tensor*>& outputs);
  const PlacementReport& report() const { return report_; }
  size_t arena_bytes() const;
  // The bytes copied between devices in the last run.
  size_t transfer_bytes() const { return transfer_bytes_; }
  // The host time the last run spent on those copies (after the source device's queue drained;
  // a copy queued on the destination's stream counts as queued).
  double transfer_seconds() const { return transfer_seconds_; }

 private:
  struct PerDevice {
    std::unique_ptr<Buffer> arena, transfers;
    // Device copies of constant leaves, by host address; and the per-run copies of the others.
    std::unordered_map<const void*, std::unique_ptr<Buffer>> constants;
    std::vector<std::unique_ptr<Buffer>> run_inputs;
  };
  struct Transfer {
    Tensor* from;   // on from->device
    Tensor* to;     // a contiguous copy on to->device
    size_t before;  // the first node that reads it
  };
  int planned_device(const Tensor& n) const;
  void place(Graph& graph);
  void insert_transfers(Graph& graph);
  void copy_in_leaves(Graph& graph);
  void plan_memory(Graph& graph, const std::vector<Tensor*>& outputs);
  // Offsets of the intermediate tensors in their device's arena, by Tensor::index; returns each
  // device's peak.
  std::vector<size_t> plan_offsets(Graph& graph, const std::vector<Tensor*>& outputs,
                                   std::vector<size_t>& offset) const;
  void transfer(const Transfer& t);
  // The buffer of device d that holds [addr, addr + n), and the offset in it.
  std::pair<Buffer*, size_t> locate(int d, const void* addr, size_t n) const;
  Buffer& constant_copy(int d, const Tensor& leaf);

  std::vector<Device*> devices_;
  bool strict_;
  std::vector<int> layer_devices_, expert_devices_;
  PlacementReport report_;
  std::vector<PerDevice> per_;
  std::vector<Transfer> transfers_;
  size_t transfer_bytes_ = 0;
  double transfer_seconds_ = 0;
};

}  // namespace ps
