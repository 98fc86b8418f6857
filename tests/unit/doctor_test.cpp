// The pure parts of `doctor`: versions and targets read from driver files, and who may open a
// device node.
#include "doctor/doctor.h"

#include <gtest/gtest.h>

namespace ps::doctor {
namespace {

TEST(Doctor, GfxTargetsFromKfdAndTheOverride) {
  EXPECT_EQ(gfx_from_target_version("100302"), "gfx1032");
  EXPECT_EQ(gfx_from_target_version("90010"), "gfx90a");
  EXPECT_EQ(gfx_from_target_version("110000"), "gfx1100");
  EXPECT_EQ(gfx_from_target_version("90000"), "gfx900");
  for (const char* bad : {"", "0", "abc", "1003020", "100316", "9999", "100302x"})
    EXPECT_EQ(gfx_from_target_version(bad), "") << bad;
  EXPECT_EQ(gfx_from_override("10.3.0"), "gfx1030");
  EXPECT_EQ(gfx_from_override("9.0.10"), "gfx90a");
  EXPECT_EQ(gfx_from_override("11.0.0"), "gfx1100");
  for (const char* bad : {"", "10.3", "10.3.0.1", "ten", "10.16.0", "10.3.0x"})
    EXPECT_EQ(gfx_from_override(bad), "") << bad;
}

TEST(Doctor, NvidiaModuleVersionFromProc) {
  EXPECT_EQ(nvidia_module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  "
                                  "Sun Jul 27 07:09:38 UTC 2025\nGCC version:  gcc 12.2.0\n"),
            "580.65.06");
  EXPECT_EQ(nvidia_module_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                  "575.57.08  Release Build"),
            "575.57.08");  // the open module's line puts words before the version
  EXPECT_EQ(nvidia_module_version(""), "");
  EXPECT_EQ(nvidia_module_version("Kernel Module"), "");
}

TEST(Doctor, ModelNamesFromPciIds) {
  const std::string ids =
      "# comment\n10de  NVIDIA Corporation\n\t2330  GH100 [H100 SXM5 80GB]\n"
      "\t\t10de 16c1  H100 SXM5 80GB\n\t2335  GH100 [H200 SXM 141GB]\n"
      "10df  Emulex Corporation\n\t2335  Not a GPU\n";
  EXPECT_EQ(pci_ids_model(ids, 0x10de, 0x2335), "GH100 [H200 SXM 141GB]");
  EXPECT_EQ(pci_ids_model(ids, 0x10de, 0x2330), "GH100 [H100 SXM5 80GB]");
  EXPECT_EQ(pci_ids_model(ids, 0x10de, 0x9999), "");  // not under the next vendor either
  EXPECT_EQ(pci_ids_model(ids, 0x1002, 0x2335), "");
  EXPECT_EQ(pci_ids_model("", 0x10de, 0x2335), "");
  EXPECT_EQ(pci_ids_model(ids.substr(ids.find('\n') + 1), 0x10de, 0x2335),
            "GH100 [H200 SXM 141GB]");  // the vendor on the first line
}

TEST(Doctor, WhoMayOpenADeviceNode) {
  const FileMode video_rw{0660, 0, 44};
  EXPECT_TRUE(can_open_rw(video_rw, 0, {}));             // root
  EXPECT_TRUE(can_open_rw(video_rw, 1000, {1000, 44}));  // in the group
  EXPECT_FALSE(can_open_rw(video_rw, 1000, {1000}));     // not in it
  EXPECT_TRUE(can_open_rw({0666, 0, 0}, 1000, {1000}));  // everyone
  EXPECT_FALSE(can_open_rw({0664, 0, 44}, 1000, {1000}));
  EXPECT_TRUE(can_open_rw({0600, 1000, 0}, 1000, {}));      // the owner
  EXPECT_FALSE(can_open_rw({0060, 1000, 44}, 1000, {44}));  // the owner's bits decide for it
}

}  // namespace
}  // namespace ps::doctor
