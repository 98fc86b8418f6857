#pragma once
// `polystack doctor`: why a GPU is or is not used, checked bottom-up per API (hardware, kernel
// driver, device nodes, user-space runtime, compatibility, environment), each check with what it
// read and the command that fixes it. These checks read only files (through Sysroot), so tests
// run them on fake machines; the API probes, self-checks and memory checks that need the real
// system are added by the command (cli/cmd_doctor.cpp).
#include <string>
#include <vector>

#include "doctor/sysroot.h"

namespace ps::doctor {

enum class Status { Ok, Warn, Fail, Skip, Info };
const char* status_name(Status s);  // "ok", "warn", "fail", "skip", "info"

struct Check {
  std::string id;     // stable: "cuda.kernel-driver"
  std::string api;    // "cuda", "hip", "vulkan", "opencl", "cpu"
  std::string layer;  // "kernel driver"
  Status status = Status::Ok;
  std::string summary;
  std::vector<std::string> evidence;  // "path = value", API calls and their results
  std::string fix;                    // the command or step that fixes it; "" when none
};

// A display, 3D or processing-accelerator device on the PCI bus.
struct PciGpu {
  std::string address;  // "0000:41:00.0"
  unsigned vendor = 0, device = 0, pci_class = 0;
  std::string vendor_name;  // "NVIDIA", "AMD", "Intel", ...
  std::string model;        // from pciutils' pci.ids where it is installed, else ""
  std::string driver;       // the bound kernel driver's name, "" for none
};
std::vector<PciGpu> find_gpus(const Sysroot& root);

// The identity the permission checks use: this process's, by default.
struct Identity {
  unsigned uid = 0;
  std::vector<unsigned> gids;
  static Identity of_process();
};

struct Options {
  std::vector<std::string> apis;  // empty: every API
  Identity who = Identity::of_process();
  std::vector<std::string> hip_targets;  // the gfx targets of this build's HIP plugin
  int cuda_driver_needed = 580;          // the NVIDIA driver this build's CUDA runtime needs
};

// The file-level checks of every requested API, bottom-up; a layer after a failure is Skip,
// "because ...". Each API's chain ends with its last file-level layer.
std::vector<Check> file_checks(const Sysroot& root, const Options& opts);

// Appends a Skip check for `layer` of `api` when an earlier check of that API failed (and
// returns true), so callers adding the later layers keep the chain.
bool skip_after_failure(std::vector<Check>& checks, const std::string& api, const std::string& id,
                        const std::string& layer);

// "gfx1032" from a KFD gfx_target_version (100302); "" when malformed.
std::string gfx_from_target_version(const std::string& v);
// "gfx1030" from HSA_OVERRIDE_GFX_VERSION's "10.3.0"; "" when malformed.
std::string gfx_from_override(const std::string& v);
// The device's name in a pci.ids database's text ("GH100 [H200 SXM 141GB]"), "" when absent.
std::string pci_ids_model(const std::string& pci_ids, unsigned vendor, unsigned device);
// The NVIDIA kernel module's version from /proc/driver/nvidia/version's text ("580.65.06").
std::string nvidia_module_version(const std::string& proc_text);

}  // namespace ps::doctor
