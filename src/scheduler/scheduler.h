#pragma once
// Places each node of a graph on a device, plans the memory of intermediate tensors (reusing
// bytes once a tensor's last reader has run) and executes runs of nodes device by device.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"

namespace ps {

struct PlacementReport {
  // One line per op kind that could not run on the preferred device, with the reason.
  std::vector<std::string> fallbacks;
};

class Scheduler {
 public:
  // devices[0] is preferred; later ones take ops it does not support, unless strict.
  Scheduler(std::vector<Device*> devices, bool strict);

  // Runs the graph; `outputs` stay valid (not reused) until the next run. Leaves in host
  // memory that nodes on a device-memory device read are copied in: constant ones (weights)
  // once for the scheduler's life, the others (token ids, positions) on every run.
  void run(Graph& graph, const std::vector<Tensor*>& outputs);
  // Copies the constant leaves the graph's nodes read (the weights) to the device now, so
  // that the first run does not: a model's weights reach a GPU when it is loaded. Nothing to
  // do for devices that read host memory.
  void upload_constants(const Graph& graph);
  // Copies an output of the last run to host memory (dst holds t.n_bytes()).
  void read(const Tensor& t, void* dst) const;
  const PlacementReport& report() const { return report_; }
  size_t arena_bytes() const { return arena_ ? arena_->size() : 0; }

 private:
  void place(Graph& graph);
  void plan_memory(Graph& graph, const std::vector<Tensor*>& outputs);

  std::vector<Device*> devices_;
  bool strict_;
  PlacementReport report_;
  std::unique_ptr<Buffer> arena_;
  // Device copies of constant leaves, by host address; and the per-run copies of the others.
  std::unordered_map<const void*, std::unique_ptr<Buffer>> constants_;
  std::vector<std::unique_ptr<Buffer>> run_inputs_;
  void copy_in_leaves(Graph& graph);
  // The device copy of a constant leaf, made on first use.
  Buffer& constant_copy(const Tensor& leaf);
};

}  // namespace ps
