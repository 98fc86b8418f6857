#pragma once
// The self-check a GPU passes before polystack trusts it with a model: the ops models run
// (matmul for every weight type the model holds, at decode and prompt shapes; attention over a
// KV cache; rms_norm, rope, softmax, get_rows, the cache copy and the element-wise ops) at
// model-like sizes, compared with the CPU backend within the conformance suite's tolerances,
// and one decode-shaped matmul (64 MiB of weights) timed on the device and on the CPU.
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/op_case.h"

namespace ps {

struct SelfCheckCase {
  std::string name;  // "matmul Q4_K decode"
  bool passed = false;
  double error = 0;  // max |device - cpu| / max |cpu|
  double tolerance = 0;
  // The device does not support the case's op (its reason): not run, and not a failure, as
  // the scheduler runs such ops on the CPU (listed as fallbacks; an error with --strict).
  std::string not_supported;
  // In words, for a failed case: "computed matmul Q4_K decode 2.3e-01 away from the CPU
  // (tolerance 2e-02)".
  std::string failure() const;
};

struct SelfCheckResult {
  std::vector<SelfCheckCase> cases;
  // The timed decode matmul: milliseconds per run on the device and on the CPU backend.
  std::string timed;  // "matmul Q4_K 4096x29127 decode"
  double device_ms = 0, cpu_ms = 0;
  // Set when the check could not finish: the device failed to open or a kernel threw.
  std::string error;
  double seconds = 0;  // how long it took

  bool passed() const;
  // The first failing case in words: "computed matmul Q4_K decode 2.3e-1 away from the CPU
  // (tolerance 2e-2)"; "" when it passed.
  std::string failure() const;
  double speedup() const { return device_ms > 0 ? cpu_ms / device_ms : 0; }
};

// How a child reports a result to its parent.
std::string selfcheck_result_to_json(const SelfCheckResult& r);
// Nothing when `text` is not what selfcheck_result_to_json writes.
std::optional<SelfCheckResult> selfcheck_result_from_json(const std::string& text);

// The names of the cases a model with these weight types needs.
std::vector<std::string> selfcheck_case_names(const std::vector<DType>& weight_types);
// The weight type the timing uses: the one that holds the most of a model's weights is the
// caller's choice; Q8_0 when none is given.
std::string timed_matmul_name(DType t);

// Runs the named cases (and the timing when `timed` is set) on dev, against cpu. `progress`
// is told each case's name before it runs.
SelfCheckResult run_selfcheck(Device& dev, Device& cpu, const std::vector<std::string>& names,
                              const DType* timed, void (*progress)(const std::string&) = nullptr);

// Where results are kept: $XDG_CACHE_HOME/polystack (default ~/.cache/polystack).
std::string selfcheck_cache_dir();

// The key results are kept under: the device's identity (UUID, else PCI address, else id and
// name), its driver and runtime versions, polystack's version and the plugin file's size and
// time (a rebuilt plugin is checked again).
std::string selfcheck_cache_key(const DeviceInfo& d, const std::string& plugin_file);

// Cached results for a key; cases and timings accumulate as models with other types run.
struct SelfCheckTiming {
  std::string name;  // "matmul Q4_K 4096x29127 decode"
  double device_ms = 0, cpu_ms = 0;
};

struct SelfCheckCache {
  std::string path;  // the file
  std::vector<SelfCheckCase> cases;
  // One timing per weight type timed so far: a model of another type adds its own rather than
  // replacing (and later re-timing) this one.
  std::vector<SelfCheckTiming> timings;
  const SelfCheckCase* find(const std::string& name) const;
  const SelfCheckTiming* find_timing(const std::string& name) const;
  // Reads the file for `key` (nothing cached when it is absent or unreadable).
  static SelfCheckCache load(const std::string& key);
  void merge(const SelfCheckResult& r);
  // Writes it: under a lock beside the file, what the file holds now (another process may have
  // added its own results since this one loaded it) is read again and this cache's results
  // merged over it, then written atomically (a temporary file renamed). "" on success, else
  // why not.
  std::string save(const std::string& key) const;
};

// The child's side of a self-check: `__selfcheck PLUGIN DEVICE_ID TIMED_TYPE|- CASE...`.
int selfcheck_child_main(const std::vector<std::string>& args);

}  // namespace ps
