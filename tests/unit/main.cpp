// The test binaries' entry point: the registry probes plugins and self-checks devices in child
// processes of the running executable (backend/child_process.h), so a test binary answers the
// same hidden commands as polystack before it runs any test.
#include <gtest/gtest.h>

#include "backend/device_choice.h"

int main(int argc, char** argv) {
  if (std::optional<int> rc = ps::run_child_command(argc, argv)) return *rc;
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
