#pragma once
// What the per-API chains of `doctor` share (doctor.cpp runs them; cuda.cpp, hip.cpp,
// vulkan.cpp and opencl.cpp hold one API each): a chain of checks that skips the layers above
// a failure, and the file-level facts several APIs read (libraries, device nodes, containers).
#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor.h"

namespace ps::doctor::detail {

// Where libraries are looked for, in order (find_library).
inline constexpr const char* kLibDirs[] = {"/usr/lib/x86_64-linux-gnu",
                                           "/lib/x86_64-linux-gnu",
                                           "/usr/lib64",
                                           "/lib64",
                                           "/usr/lib",
                                           "/lib",
                                           "/usr/local/lib",
                                           "/usr/lib/wsl/lib"};

// A sysfs hex field ("0x10de") as a number; 0 when absent or malformed.
unsigned hex_value(const std::optional<std::string>& s);

// The last component of a path.
std::string base_name(const std::string& p);

// An environment variable of this process, when set.
std::optional<std::string> env(const char* name);

// A group's name from the machine's /etc/group, else its number.
std::string group_name(const Sysroot& root, unsigned gid);

// A library found by name in the library folders: its path, and what its symlinks end at.
struct Library {
  std::string path, resolved;
  bool found() const { return !path.empty(); }
};

// Looks in extra_dirs first, then the usual library folders.
Library find_library(const Sysroot& root, const std::string& name,
                     const std::vector<std::string>& extra_dirs = {});

// The version in a library's file name: "libcuda.so.580.65.06" -> "580.65.06".
std::string so_version(const std::string& path, const std::string& stem);

// Windows Subsystem for Linux; a Docker or Podman container; the step that passes a GPU into
// a container (NVIDIA's toolkit, or the device nodes for the others).
bool is_wsl(const Sysroot& root);
bool in_container(const Sysroot& root);
std::string container_fix(bool nvidia);

// A kernel module file for `name` under /lib/modules/<release>.
std::string module_on_disk(const Sysroot& root, const std::string& name);

// Whether UEFI Secure Boot is on (unsigned kernel modules are refused).
bool secure_boot_on(const Sysroot& root);

// A *_VISIBLE_DEVICES style variable against the count of GPUs it selects from.
std::optional<Check> visible_devices_check(const std::string& api, const char* var, size_t gpus);

// One API's checks, bottom-up: a layer above a failed one is a Skip saying why.
struct Chain {
  std::vector<Check>& out;
  std::string api;
  bool failed = false;
  std::string because;
  // Adds c unless an earlier layer failed, in which case a Skip in its place.
  void add(Check c) {
    if (failed) {
      out.push_back({c.id, api, c.layer, Status::Skip, "because " + because, {}, ""});
      return;
    }
    if (c.status == Status::Fail) {
      failed = true;
      because = c.summary;
    }
    out.push_back(std::move(c));
  }
  Check make(const std::string& id, const std::string& layer) const {
    return Check{api + "." + id, api, layer, Status::Ok, "", {}, ""};
  }
};

// A GPU as evidence lines show it ("0000:41:00.0: 10de:2335 ...") and by name.
std::string pci_evidence(const PciGpu& g);
std::string gpu_name(const PciGpu& g);

// The DRM render nodes (/dev/dri/renderD*); the first one's name when there are none, so that
// its absence is reported.
std::vector<std::string> render_nodes(const Sysroot& root);

// Device nodes: present and openable.
void node_check(const Sysroot& root, const Options& o, Chain& ch,
                const std::vector<std::string>& nodes, bool nvidia);

// Each API's chain, bottom-up, appended to out.
void nvidia_chain(const Sysroot& root, const Options& o, const std::vector<PciGpu>& all,
                  std::vector<Check>& out);
void amd_chain(const Sysroot& root, const Options& o, const std::vector<PciGpu>& all,
               std::vector<Check>& out);
void vulkan_chain(const Sysroot& root, const Options& o, const std::vector<PciGpu>& gpus,
                  std::vector<Check>& out);
void opencl_chain(const Sysroot& root, std::vector<Check>& out);

}  // namespace ps::doctor::detail
