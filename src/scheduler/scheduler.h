#pragma once
// Places each node of a graph on a device, plans the memory of intermediate tensors (reusing
// bytes once a tensor's last reader has run) and executes runs of nodes device by device.
#include <memory>
#include <string>
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

  // Runs the graph; `outputs` stay valid (not reused) until the next run.
  void run(Graph& graph, const std::vector<Tensor*>& outputs);
  const PlacementReport& report() const { return report_; }
  size_t arena_bytes() const { return arena_ ? arena_->size() : 0; }

 private:
  void place(Graph& graph);
  void plan_memory(Graph& graph, const std::vector<Tensor*>& outputs);

  std::vector<Device*> devices_;
  bool strict_;
  PlacementReport report_;
  std::unique_ptr<Buffer> arena_;
};

}  // namespace ps
