# polystack_plugin(TARGET): a backend plugin (a MODULE library loaded with dlopen) that links
# the backend API alone, compiled with hidden visibility and linked with a version script, so
# that its dynamic symbol table holds its two entry points (backend.h's POLYSTACK_BACKEND_PLUGIN)
# and nothing else: no symbol of a static library it carries (the CUDA runtime, the IR) can
# stand in for another's at load time. A symbol it needs and does not link is an error at link
# time rather than at dlopen.
set(POLYSTACK_PLUGIN_EXPORTS ${CMAKE_CURRENT_LIST_DIR}/plugin_exports.map)

function(polystack_plugin target)
  set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${POLYSTACK_PLUGIN_EXPORTS})
  target_link_libraries(${target} PRIVATE polystack_backend_api polystack_warnings)
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${POLYSTACK_PLUGIN_EXPORTS}")
  # The fuzz build's sanitizer runtimes live in the executable, so its modules leave their
  # symbols undefined; it builds no plugin, but stays out of the way.
  if(NOT POLYSTACK_FUZZ)
    target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  endif()
endfunction()
