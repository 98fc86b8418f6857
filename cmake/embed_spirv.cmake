# Writes OUT, a C++ file holding every SPIR-V module of SPV_FILES ("|"-separated) as a byte
# array, and the table find_shader() searches (see src/backends/vulkan/shaders.h).
string(REPLACE "|" ";" files "${SPV_FILES}")
set(arrays "")
set(entries "")
foreach(f IN LISTS files)
  get_filename_component(name "${f}" NAME_WE)
  file(READ "${f}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND arrays "alignas(4) const unsigned char k_${name}[] = {${bytes}};\n")
  string(APPEND entries "    {\"${name}\", k_${name}, sizeof(k_${name})},\n")
endforeach()
file(WRITE "${OUT}.tmp"
  "// Generated at build time from src/backends/vulkan/shaders; do not edit.\n"
  "#include \"backends/vulkan/shaders.h\"\n\n"
  "#include <iterator>\n\n"
  "namespace ps::vk {\nnamespace {\n${arrays}\n"
  "const ShaderCode kShaders[] = {\n${entries}};\n}  // namespace\n\n"
  "const ShaderCode* find_shader(std::string_view name) {\n"
  "  for (const ShaderCode& s : kShaders)\n"
  "    if (name == s.name) return &s;\n"
  "  return nullptr;\n}\n\n}  // namespace ps::vk\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
