# Writes OUT, a C++ file holding each file of CL_FILES ("|"-separated) as a string, and the
# table kernel_file() searches by file name (see src/backends/opencl/kernels.h).
string(REPLACE "|" ";" files "${CL_FILES}")
set(arrays "")
set(entries "")
set(n 0)
foreach(f IN LISTS files)
  get_filename_component(name "${f}" NAME)
  file(READ "${f}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND arrays "const char k_file${n}[] = {${bytes}};\n")
  string(APPEND entries "    {\"${name}\", std::string_view(k_file${n}, sizeof(k_file${n}))},\n")
  math(EXPR n "${n} + 1")
endforeach()
file(WRITE "${OUT}.tmp"
  "// Generated at build time from src/backends/opencl/kernels; do not edit.\n"
  "#include \"backends/opencl/kernels.h\"\n\n"
  "namespace ps::ocl {\nnamespace {\n${arrays}\n"
  "struct Entry {\n  std::string_view name, text;\n};\n"
  "const Entry kFiles[] = {\n${entries}};\n}  // namespace\n\n"
  "std::string_view kernel_file(std::string_view name) {\n"
  "  for (const Entry& f : kFiles)\n"
  "    if (name == f.name) return f.text;\n"
  "  return {};\n}\n\n}  // namespace ps::ocl\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
