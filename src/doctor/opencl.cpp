// doctor's OpenCL chain: the ICD loader and the vendor drivers it finds.
#include <fmt/format.h>
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/pci_vendor.h"
#include "doctor/chain.h"

namespace ps::doctor::detail {

void opencl_chain(const Sysroot& root, std::vector<Check>& out) {
  Chain ch{out, "opencl", false, {}};
  Check c = ch.make("drivers", "drivers (ICDs)");
  const Library loader = find_library(root, "libOpenCL.so.1");
  std::vector<std::string> icds;
  for (const std::string& e : root.list("/etc/OpenCL/vendors"))
    if (e.ends_with(".icd")) icds.push_back(e);
  if (loader.found()) c.evidence.push_back(fmt::format("{} -> {}", loader.path, loader.resolved));
  for (const std::string& e : icds) {
    const auto lib = root.read_line("/etc/OpenCL/vendors/" + e);
    c.evidence.push_back(fmt::format("/etc/OpenCL/vendors/{}: {}", e, lib ? *lib : "(unreadable)"));
  }
  c.status = Status::Info;
  if (!loader.found())
    c.summary = "no OpenCL ICD loader (libOpenCL.so.1)";
  else if (icds.empty()) {
    c.status = Status::Warn;
    c.summary =
        "the OpenCL loader is installed but no vendor driver (/etc/OpenCL/vendors is "
        "empty)";
    c.fix = "install a vendor's OpenCL driver (PoCL for CPUs: sudo apt install pocl-opencl-icd)";
  } else {
    c.summary = fmt::format("{} OpenCL driver(s)", icds.size());
  }
  ch.add(c);
}

}  // namespace ps::doctor::detail
