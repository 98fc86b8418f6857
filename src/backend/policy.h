#pragma once
// Which device runs a model: the default policy and the forms of `--device`, as pure logic over
// probe reports and self-check outcomes (which the caller runs on demand), so that every rule
// is tested on made-up reports.
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/physical_device.h"

namespace ps {

// What the self-check said of one device.
struct DeviceCheck {
  bool checked = false;  // false: skipped (--no-self-check)
  bool passed = false;
  std::string failure;  // when it did not pass, in words
  double speedup = 0;   // CPU time / device time on the timed matmul; 0 when unknown
  bool from_cache = false;
};
using CheckFn = std::function<DeviceCheck(const DeviceInfo&)>;

struct PolicyOptions {
  DeviceSpec spec;
  std::string named_by = "--device";  // or "POLYSTACK_DEVICE", for the reason
  bool self_check = true;             // false: --no-self-check
  bool strict = false;                // every fallback is an error
};

struct DeviceChoice {
  std::string device_id;            // "cpu", "cuda:0"
  std::string reason;               // why this one, in words
  std::vector<std::string> passed;  // the devices (and APIs) not chosen, each with why
  // The APIs whose hardware is not on this machine (ProbeReport::no_hardware), each with why:
  // not advice, so commands show them only when asked for detail.
  std::vector<std::string> absent;
  // The other GPUs of the chosen one's kind that passed their checks (one view each), for a
  // model split over several GPUs (--split-mode layer). Empty when a device was named.
  std::vector<std::string> also_usable;
};

// "NVIDIA H200, driver 580.65, CUDA 13.0": the name with the driver and runtime versions.
std::string describe_device(const DeviceInfo& d);

// The device for `opts.spec`. The default policy (auto): GPUs that pass their self-check and
// beat the CPU on the timed matmul, ranked discrete > integrated > other, then by measured
// speed (within 10 % counts as equal), then by memory; the vendor's own API first for one
// physical device; a GPU API's CPU driver (lavapipe, PoCL) never; else the CPU. BackendError
// when a named device is absent or fails its check, when `gpu` or an API finds none that
// passes, and under strict when any device is passed over for a failure.
DeviceChoice choose_device(const std::vector<ProbeReport>& reports, const PolicyOptions& opts,
                           const CheckFn& check);

}  // namespace ps
