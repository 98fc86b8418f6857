# POLYSTACK_CUDA_ARCHITECTURES as the CUDA probe can read it (src/backends/cuda/targets.cpp):
# numbers with nvcc's optional 'a' or 'f' suffix and CMake's optional -real / -virtual, not
# "native" or "all", whose coverage the probe could not tell. Included by the CUDA backend's
# CMakeLists; as a script (cmake -DPOLYSTACK_CUDA_ARCHITECTURES=... -P this file) it checks one
# list, for the tests.
function(polystack_check_cuda_architectures list)
  foreach(arch IN LISTS list)
    if(NOT arch MATCHES "^[0-9]+[af]?(-real|-virtual)?$")
      message(FATAL_ERROR "POLYSTACK_CUDA_ARCHITECTURES: \"${arch}\" is not an architecture "
        "such as 90, 90-real, 90a-real or 120-virtual")
    endif()
  endforeach()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  polystack_check_cuda_architectures("${POLYSTACK_CUDA_ARCHITECTURES}")
  message(STATUS "POLYSTACK_CUDA_ARCHITECTURES: ${POLYSTACK_CUDA_ARCHITECTURES} can be read")
endif()
