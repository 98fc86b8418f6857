# Writes OUT, a C++ file holding each file of UI_FILES ("|"-separated) as a byte array, and the
# table find_ui_file() searches by file name (see src/server/ui_files.h).
string(REPLACE "|" ";" files "${UI_FILES}")
set(arrays "")
set(entries "")
set(n 0)
foreach(f IN LISTS files)
  get_filename_component(name "${f}" NAME)
  get_filename_component(ext "${f}" LAST_EXT)
  if(ext STREQUAL ".html")
    set(type "text/html; charset=utf-8")
  elseif(ext STREQUAL ".css")
    set(type "text/css; charset=utf-8")
  elseif(ext STREQUAL ".js")
    set(type "text/javascript; charset=utf-8")
  else()
    set(type "application/octet-stream")
  endif()
  file(READ "${f}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND arrays "const unsigned char k_file${n}[] = {${bytes}};\n")
  string(APPEND entries "    {\"${name}\", \"${type}\", k_file${n}, sizeof(k_file${n})},\n")
  math(EXPR n "${n} + 1")
endforeach()
file(WRITE "${OUT}.tmp"
  "// Generated at build time from src/server/ui; do not edit.\n"
  "#include \"server/ui_files.h\"\n\n"
  "namespace ps::server {\nnamespace {\n${arrays}\n"
  "const UiFile kFiles[] = {\n${entries}};\n}  // namespace\n\n"
  "const UiFile* find_ui_file(std::string_view name) {\n"
  "  for (const UiFile& f : kFiles)\n"
  "    if (name == f.name) return &f;\n"
  "  return nullptr;\n}\n\n}  // namespace ps::server\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
