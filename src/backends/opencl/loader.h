#pragma once
// The OpenCL ICD loader (libOpenCL.so.1), opened at run time: the plugin links no OpenCL
// library, so it loads on machines without one and its probe says so.
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS  // clCreateCommandQueue: every 1.x and 2.x+ driver
#include <CL/cl.h>

#include <string>

namespace ps::ocl {

// Every entry point the backend calls, loaded by name.
#define POLYSTACK_CL_FUNCTIONS(X) \
  X(clGetPlatformIDs)             \
  X(clGetPlatformInfo)            \
  X(clGetDeviceIDs)               \
  X(clGetDeviceInfo)              \
  X(clCreateContext)              \
  X(clReleaseContext)             \
  X(clCreateCommandQueue)         \
  X(clReleaseCommandQueue)        \
  X(clCreateBuffer)               \
  X(clReleaseMemObject)           \
  X(clEnqueueReadBuffer)          \
  X(clEnqueueWriteBuffer)         \
  X(clCreateProgramWithSource)    \
  X(clCreateProgramWithBinary)    \
  X(clBuildProgram)               \
  X(clGetProgramInfo)             \
  X(clGetProgramBuildInfo)        \
  X(clReleaseProgram)             \
  X(clCreateKernel)               \
  X(clReleaseKernel)              \
  X(clSetKernelArg)               \
  X(clGetKernelWorkGroupInfo)     \
  X(clEnqueueNDRangeKernel)       \
  X(clFlush)                      \
  X(clFinish)

struct Functions {
#define POLYSTACK_CL_MEMBER(name) decltype(&::name) name = nullptr;
  POLYSTACK_CL_FUNCTIONS(POLYSTACK_CL_MEMBER)
#undef POLYSTACK_CL_MEMBER
};

// The process's loader, opened on first use; null with the reason (no libOpenCL.so.1, or one
// without an entry point the backend needs).
const Functions* functions(std::string* why);

// "CL_OUT_OF_RESOURCES" and the like, for messages.
const char* error_name(cl_int e);

// Throws BackendError naming the call and the error unless e is CL_SUCCESS.
void check(cl_int e, const char* what);

}  // namespace ps::ocl
