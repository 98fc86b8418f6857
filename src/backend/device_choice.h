#pragma once
// Choosing the device a model runs on: the registry's reports, the policy (backend/policy.h)
// and the self-check (backend/selfcheck.h), run in a child process the first time a GPU is
// about to run a model and cached after.
#include <optional>
#include <string>
#include <vector>

#include "backend/policy.h"
#include "backend/registry.h"
#include "backend/selfcheck.h"

namespace ps {

struct ChoiceOptions {
  std::string spec;                 // --device (else POLYSTACK_DEVICE, else auto)
  std::vector<DType> weight_types;  // the model's: each gets matmul and get_rows cases
  std::optional<DType> timed_type;  // the model's main type, for the timed matmul
  bool strict = false;
  bool self_check = true;  // false: --no-self-check
  bool recheck = false;    // --recheck: run the self-check again, ignoring cached results
};

struct ChosenDevice : DeviceChoice {
  // One line per self-check that ran now ("self-check of vulkan:0: 23 cases in 1.2 s").
  std::vector<std::string> notes;
};

ChosenDevice choose_device(Registry& registry, const ChoiceOptions& opts);

// The self-check of one device: cached results where they cover what is asked, the rest run
// now in a child process (POLYSTACK_SELFCHECK_TIMEOUT seconds, default 60) and cached.
DeviceCheck self_check_device(Registry& registry, const DeviceInfo& d, const ChoiceOptions& opts,
                              std::vector<std::string>* notes);

// The hidden commands a child process runs (`__probe`, `__selfcheck`): the exit code when argv
// names one, else nothing. Every executable that uses Registry::global() calls this first.
std::optional<int> run_child_command(int argc, char** argv);

}  // namespace ps
