// A stand-in for the NVIDIA driver library (libcuda.so.1) with the driver API entry points the
// CUDA backend's probe uses, reporting one GPU. Tests put its folder on LD_LIBRARY_PATH to check
// the probe's report end to end on machines without a GPU. The environment shapes the GPU:
// FAKE_CUDA_CC (compute capability x 10, default 90), FAKE_CUDA_DRIVER (the CUDA version the
// driver supports, default 13000), FAKE_CUDA_DEVICES (count, default 1), FAKE_CUDA_UUID (device
// 0's UUID as 32 hex digits, e.g. another API's view of a GPU, for the matching across APIs). It
// implements nothing the CUDA runtime needs, so opening the device must fail cleanly.
#include <cstdlib>
#include <cstring>

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

void copy_string(char* out, int len, const char* s) {
  std::strncpy(out, s, size_t(len));
  if (len > 0) out[len - 1] = '\0';
}

}  // namespace

extern "C" {

int cuInit(unsigned) { return 0; }
int cuDriverGetVersion(int* v) {
  *v = env_int("FAKE_CUDA_DRIVER", 13000);
  return 0;
}
int cuDeviceGetCount(int* n) {
  *n = env_int("FAKE_CUDA_DEVICES", 1);
  return 0;
}
int cuDeviceGet(int* dev, int ordinal) {
  *dev = ordinal;
  return 0;
}
int cuDeviceGetName(char* name, int len, int) {
  copy_string(name, len, "Fake NVIDIA H200");
  return 0;
}
int cuDeviceGetAttribute(int* v, int attr, int) {
  const int cc = env_int("FAKE_CUDA_CC", 90);
  switch (attr) {
    case 75:
      *v = cc / 10;
      return 0;
    case 76:
      *v = cc % 10;
      return 0;
    case 16:
      *v = 132;
      return 0;
    case 18:
      *v = 0;
      return 0;
    default:
      return 1;  // CUDA_ERROR_INVALID_VALUE
  }
}
int cuDeviceTotalMem_v2(size_t* bytes, int) {
  *bytes = size_t(141) << 30;
  return 0;
}
int cuDeviceGetUuid_v2(unsigned char* uuid, int dev) {
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(0x10 * (i % 16) + dev);
  const char* hex = std::getenv("FAKE_CUDA_UUID");
  if (dev == 0 && hex && std::strlen(hex) == 32)
    for (int i = 0; i < 16; ++i) {
      const char pair[3] = {hex[2 * i], hex[2 * i + 1], 0};
      uuid[i] = static_cast<unsigned char>(std::strtoul(pair, nullptr, 16));
    }
  return 0;
}
int cuDeviceGetPCIBusId(char* id, int len, int dev) {
  copy_string(id, len, dev == 0 ? "0000:4E:00.0" : "0000:5F:00.0");
  return 0;
}
int cuDevicePrimaryCtxRetain(void** ctx, int) {
  static int context;
  *ctx = &context;
  return 0;
}
int cuDevicePrimaryCtxRelease_v2(int) { return 0; }
int cuCtxPushCurrent_v2(void*) { return 0; }
int cuCtxPopCurrent_v2(void** ctx) {
  *ctx = nullptr;
  return 0;
}
int cuMemGetInfo_v2(size_t* free, size_t* total) {
  *total = size_t(141) << 30;
  *free = size_t(140) << 30;
  return 0;
}
int cuGetErrorString(int, const char** s) {
  *s = "fake driver error";
  return 0;
}

}  // extern "C"
