#pragma once
// The OpenCL C sources, embedded at build time (cmake/embed_opencl.cmake), and the programs
// made of them.
#include <string>
#include <string_view>

namespace ps::ocl {

// A file of kernels/ or backend/kernel_codes.h / kernel_params.h by name; empty when absent.
std::string_view kernel_file(std::string_view name);

// The whole source of a program: "ops" (the kernels that read no weights) or "weights_<type>"
// (get_rows, matmul and matmul_id for one GGUF type, e.g. "weights_q4_k"); empty for another
// name.
std::string program_source(const std::string& program);

}  // namespace ps::ocl
