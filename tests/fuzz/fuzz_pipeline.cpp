// libFuzzer target for the pass messages rank 0 sends the other ranks of an MPI job
// (engine/pipeline.h): any bytes through decode_pass. std::runtime_error is the normal outcome of
// bytes that are not a pass. Findings: any other exception, a crash, a sanitizer report, or a
// pass that does not come back the same through encode_pass.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <stdexcept>

#include "engine/pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ps::PassDesc d;
  try {
    d = ps::decode_pass(std::span<const uint8_t>(data, size));
  } catch (const std::runtime_error&) {
    return 0;
  }
  const std::vector<uint8_t> again = ps::encode_pass(d);
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  return 0;
}
