#pragma once
// A loaded model plus a context on one device: the KV cache, the scheduler and the batching
// of prompt tokens. This is the layer the CLI and the server talk to.
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_choice.h"
#include "model/model.h"
#include "scheduler/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace ps::gguf {
class File;
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

struct SessionOptions {
  int n_ctx = 0;       // 0: the model's training context, capped at 4096
  int n_batch = 512;   // prompt tokens per forward pass
  int n_threads = 0;   // 0: physical cores
  std::string device;  // a device spec (backend/physical_device.h); "" : POLYSTACK_DEVICE or auto
  bool strict = false;
  bool self_check = true;  // false: trust a GPU without its self-check (--no-self-check)
  bool recheck = false;    // run the self-check again even when results are cached
  // Layers on the chosen GPU, llama.cpp's -ngl: the last N repeating layers (and the output
  // layer when N exceeds their count), the rest on the CPU; -1: all of them.
  int n_gpu_layers = -1;
};

// The options for choosing a model's device: the session's flags and the model's weight types
// (each gets self-check cases; the one holding most bytes is timed).
ChoiceOptions device_choice_options(const LoadedModel& model, const SessionOptions& opts);

class Session {
 public:
  Session(std::shared_ptr<const LoadedModel> model, const SessionOptions& opts);
  ~Session();

  // Feeds tokens after what the context already holds. Returns the logits of the last token,
  // or of every token when all_logits (n_tokens x n_vocab). UsageError when the context would
  // overflow.
  std::vector<float> eval(std::span<const int32_t> tokens, bool all_logits = false);
  void reset() { n_past_ = 0; }
  int n_past() const { return n_past_; }
  int n_ctx() const { return n_ctx_; }
  const Device& device() const { return *device_; }
  // Which device and why, the devices passed over and the self-checks that ran.
  const ChosenDevice& device_choice() const { return choice_; }
  const PlacementReport& placement() const { return scheduler_->report(); }
  // Where the layers run, in words ("layers 3-4 + output on vulkan:0, input + layers 0-2 on
  // cpu (-ngl 2)"); "" when everything runs on device().
  const std::string& split() const { return split_; }
  // Bytes copied between devices in the last forward pass.
  size_t transfer_bytes() const { return scheduler_->transfer_bytes(); }
  const LoadedModel& model() const { return *model_; }
  size_t kv_cache_bytes() const;

 private:
  void forward(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& out);
  // The forward graph for `tokens` at the next positions (written to pos, which the graph
  // reads), returning the logits node.
  Tensor* build(Graph& g, std::span<const int32_t> tokens, std::vector<int32_t>& pos,
                bool all_logits) const;

  std::shared_ptr<const LoadedModel> model_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Device> cpu_;  // beside a GPU: the layers it does not hold, and fallbacks
  std::string split_;
  ChosenDevice choice_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Buffer>> k_cache_, v_cache_;
  int n_ctx_ = 0;
  int n_batch_ = 512;
  int n_past_ = 0;
};

}  // namespace ps
