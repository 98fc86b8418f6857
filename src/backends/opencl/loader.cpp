#include "backends/opencl/loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "core/error.h"

namespace ps::ocl {

const Functions* functions(std::string* why) {
  static Functions f;
  static std::string error;
  static bool ok = false;
  static std::once_flag once;
  std::call_once(once, [] {
    // The ICD loader's versioned name, as the runtime package installs it (the bare name
    // comes only with the development package).
    void* lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      error = fmt::format(
          "the OpenCL ICD loader libOpenCL.so.1 could not be loaded ({}); install it "
          "(Debian/Ubuntu: ocl-icd-libopencl1) and a driver for the device",
          e ? e : "dlopen failed");
      return;
    }
#define POLYSTACK_CL_LOAD(name)                                        \
  f.name = reinterpret_cast<decltype(f.name)>(dlsym(lib, #name));      \
  if (!f.name) {                                                       \
    error = fmt::format(                                               \
        "libOpenCL.so.1 does not provide {} (an OpenCL 1.2 loader is " \
        "needed)",                                                     \
        #name);                                                        \
    dlclose(lib);                                                      \
    return;                                                            \
  }
    POLYSTACK_CL_FUNCTIONS(POLYSTACK_CL_LOAD)
#undef POLYSTACK_CL_LOAD
    ok = true;  // the library stays open for the life of the process
  });
  if (!ok) {
    if (why) *why = error;
    return nullptr;
  }
  return &f;
}

const char* error_name(cl_int e) {
  switch (e) {
    case CL_SUCCESS:
      return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND:
      return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE:
      return "CL_DEVICE_NOT_AVAILABLE";
    case CL_COMPILER_NOT_AVAILABLE:
      return "CL_COMPILER_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES:
      return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY:
      return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE:
      return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE:
      return "CL_INVALID_VALUE";
    case CL_INVALID_DEVICE:
      return "CL_INVALID_DEVICE";
    case CL_INVALID_BINARY:
      return "CL_INVALID_BINARY";
    case CL_INVALID_BUFFER_SIZE:
      return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_PROGRAM_EXECUTABLE:
      return "CL_INVALID_PROGRAM_EXECUTABLE";
    case CL_INVALID_KERNEL_NAME:
      return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_ARG_INDEX:
      return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_VALUE:
      return "CL_INVALID_ARG_VALUE";
    case CL_INVALID_ARG_SIZE:
      return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_KERNEL_ARGS:
      return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_GROUP_SIZE:
      return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_WORK_ITEM_SIZE:
      return "CL_INVALID_WORK_ITEM_SIZE";
    case CL_INVALID_GLOBAL_WORK_SIZE:
      return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -1001:  // no ICD at all (cl_khr_icd)
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      break;
  }
  return "an OpenCL error";
}

void check(cl_int e, const char* what) {
  if (e != CL_SUCCESS)
    throw BackendError(fmt::format("opencl: {} failed: {} ({})", what, error_name(e), e));
}

}  // namespace ps::ocl
