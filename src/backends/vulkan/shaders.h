#pragma once
// The compute shaders, compiled to SPIR-V by glslc at build time and embedded in the plugin
// (cmake/embed_spirv.cmake writes the table).
#include <cstddef>
#include <string_view>

namespace ps::vk {

struct ShaderCode {
  const char* name;  // the .spv file's stem: "matmul_f16"
  const unsigned char* bytes;
  size_t size;
};

// Null when no shader has that name.
const ShaderCode* find_shader(std::string_view name);

}  // namespace ps::vk
