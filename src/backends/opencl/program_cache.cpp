// Programs from the embedded sources, built once per device and driver: the binary the driver
// returns is kept in the cache folder ($XDG_CACHE_HOME/polystack/opencl, default
// ~/.cache/polystack/opencl) under hashes of the device and driver and of the source, so later
// processes skip the compiler (PoCL compiles each program with LLVM, about a second each).
#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "backend/cache_dir.h"
#include "backends/opencl/device.h"
#include "backends/opencl/kernels.h"
#include "core/error.h"

namespace ps::ocl {

std::string program_source(const std::string& program) {
  std::string defines;
  std::vector<const char*> files = {"kernel_codes.h", "kernel_params.h", "common.cl"};
  if (program == "ops") {
    files.push_back("ops.cl");
  } else if (program.starts_with("weights_") && program.size() > 8) {
    std::string type = program.substr(8);
    for (char& c : type) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return {};
      c = char(std::toupper(static_cast<unsigned char>(c)));
    }
    defines = fmt::format("#define WTYPE_{}\n", type);
    files.push_back("weights.cl");
    files.push_back("matmul.cl");
  } else {
    return {};
  }
  std::string src = defines;
  for (const char* f : files) {
    const std::string_view text = kernel_file(f);
    if (text.empty()) return {};
    src += fmt::format("// ---- {}\n", f);
    src.append(text);
    src += '\n';
  }
  return src;
}

namespace {

// FNV-1a: a stable name for a cache entry (not a defence against anyone; the entry is
// rebuilt when the driver refuses it).
uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string build_log(const Functions& f, cl_program prog, cl_device_id dev) {
  size_t n = 0;
  f.clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n) f.clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  while (!log.empty() &&
         (log.back() == '\0' || std::isspace(static_cast<unsigned char>(log.back()))))
    log.pop_back();
  return log;
}

constexpr const char* kOptions = "-cl-std=CL1.2";

cl_program from_binary(const Functions& f, cl_context ctx, cl_device_id dev,
                       const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return nullptr;
  const std::vector<unsigned char> bin((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
  if (bin.empty()) return nullptr;
  const size_t len = bin.size();
  const unsigned char* ptr = bin.data();
  cl_int status = CL_SUCCESS, e = CL_SUCCESS;
  cl_program prog = f.clCreateProgramWithBinary(ctx, 1, &dev, &len, &ptr, &status, &e);
  if (e != CL_SUCCESS || status != CL_SUCCESS || !prog) {
    if (prog) f.clReleaseProgram(prog);
    return nullptr;
  }
  if (f.clBuildProgram(prog, 1, &dev, kOptions, nullptr, nullptr) != CL_SUCCESS) {
    f.clReleaseProgram(prog);
    return nullptr;
  }
  return prog;
}

void save_binary(const Functions& f, cl_program prog, const std::filesystem::path& file) {
  size_t size = 0;
  if (f.clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) !=
          CL_SUCCESS ||
      size == 0)
    return;
  std::vector<unsigned char> bin(size);
  unsigned char* ptr = bin.data();
  if (f.clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr) != CL_SUCCESS)
    return;
  // Written whole under another name, then renamed: a process reading at the same time sees
  // the old entry or the new one, never half of one.
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  const std::filesystem::path tmp =
      file.string() + fmt::format(".{}.tmp", static_cast<unsigned long>(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(reinterpret_cast<const char*>(bin.data()), std::streamsize(bin.size()));
    if (!out) return;
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

cl_program build_program(const Functions& f, cl_context ctx, const DeviceExtras& x,
                         const std::string& program) {
  const std::string src = program_source(program);
  if (src.empty())
    throw BackendError(fmt::format("{}: no OpenCL program '{}'", x.info.id, program));
  // <program>-<device and driver>-<source and options>.bin: a new source (another version of
  // polystack) replaces the device's entry for that program rather than adding to the folder.
  const uint64_t device_key =
      fnv1a(fmt::format("{}\n{}\n{}", x.info.name, x.info.driver_version, x.info.runtime_version));
  const uint64_t source_key = fnv1a(fmt::format("{}\n{}", kOptions, src));
  const std::string base = polystack_cache_dir();
  const std::filesystem::path folder =
      base.empty() ? std::filesystem::path() : std::filesystem::path(base) / "opencl";
  const std::string prefix = fmt::format("{}-{:08x}-", program, uint32_t(device_key));
  const std::filesystem::path file =
      folder.empty() ? std::filesystem::path()
                     : folder / fmt::format("{}{:016x}.bin", prefix, source_key);
  if (!file.empty())
    if (cl_program cached = from_binary(f, ctx, x.device, file)) return cached;

  const char* text = src.c_str();
  const size_t len = src.size();
  cl_int e = CL_SUCCESS;
  cl_program prog = f.clCreateProgramWithSource(ctx, 1, &text, &len, &e);
  check(e, "clCreateProgramWithSource");
  if (f.clBuildProgram(prog, 1, &x.device, kOptions, nullptr, nullptr) != CL_SUCCESS) {
    std::string log = build_log(f, prog, x.device);
    f.clReleaseProgram(prog);
    if (log.size() > 2000) log = log.substr(0, 2000) + " ...";
    throw BackendError(
        fmt::format("{}: the OpenCL compiler refused program '{}': {}", x.info.id, program, log));
  }
  if (!file.empty()) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with(prefix) && name.ends_with(".bin") && entry.path() != file)
        std::filesystem::remove(entry.path(), ec);
    }
    save_binary(f, prog, file);
  }
  return prog;
}

}  // namespace ps::ocl
