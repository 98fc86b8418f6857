// The self-check a device passes before it is trusted: its cases, its verdict on a device whose
// matmul is wrong, and the cache of its results.
#include "backend/selfcheck.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backend/registry.h"
#include "backends/cpu/cpu_backend.h"

namespace ps {
namespace {

std::unique_ptr<Device> open_cpu() {
  Registry r;
  r.add(make_cpu_backend());
  return r.open("cpu", DeviceOptions{});
}

// The CPU backend with one wrong kernel: matmul outputs with weights of `type` scaled by `by`.
class PerturbedDevice final : public Device {
 public:
  PerturbedDevice(std::unique_ptr<Device> inner, DType type, float by)
      : inner_(std::move(inner)), type_(type), by_(by) {}
  const DeviceInfo& info() const override { return inner_->info(); }
  std::string unsupported_reason(const Tensor& n) const override {
    return inner_->unsupported_reason(n);
  }
  bool reads_host_memory() const override { return inner_->reads_host_memory(); }
  std::unique_ptr<Buffer> alloc(size_t bytes) override { return inner_->alloc(bytes); }
  void execute(std::span<Tensor* const> nodes) override {
    inner_->execute(nodes);
    inner_->synchronize();
    for (Tensor* n : nodes)
      if (n->op == OpKind::MatMul && n->src[0]->type == type_) {
        float* v = static_cast<float*>(n->data);
        for (int64_t i = 0; i < n->n_elements(); ++i) v[i] *= by_;
      }
  }
  void synchronize() override {}

 private:
  std::unique_ptr<Device> inner_;
  DType type_;
  float by_;
};

TEST(SelfCheck, CoversEveryWeightTypeOnceAndTheModelOps) {
  const auto names = selfcheck_case_names({DType::Q4_K, DType::Q6_K, DType::Q4_K});
  for (const char* want :
       {"matmul Q4_K decode", "matmul Q4_K prompt", "get_rows Q4_K", "matmul Q6_K decode",
        "matmul Q6_K prompt", "get_rows Q6_K", "attention decode", "attention prompt",
        "attention sliding window", "rms_norm", "rope normal", "rope neox", "softmax",
        "copy into an F16 cache", "swiglu"})
    EXPECT_EQ(std::count(names.begin(), names.end(), want), 1) << want;
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) { return n.find("Q4_K") != n.npos; }),
            3);
}

TEST(SelfCheck, TheCpuPassesAgainstItselfAndIsTimed) {
  auto cpu = open_cpu(), dev = open_cpu();
  const DType timed = DType::Q8_0;
  const SelfCheckResult r =
      run_selfcheck(*dev, *cpu, selfcheck_case_names({DType::Q8_0, DType::F16}), &timed);
  EXPECT_TRUE(r.passed()) << r.failure();
  EXPECT_EQ(r.failure(), "");
  // 64 MiB of Q8_0 rows of 4096 (4352 bytes each).
  EXPECT_EQ(r.timed, "matmul Q8_0 4096x15420 decode");
  EXPECT_GT(r.device_ms, 0);
  EXPECT_GT(r.cpu_ms, 0);
  for (const SelfCheckCase& c : r.cases) EXPECT_LE(c.error, c.tolerance) << c.name;
}

TEST(SelfCheck, AWrongMatmulFailsNamingTheCase) {
  auto cpu = open_cpu();
  PerturbedDevice bad(open_cpu(), DType::Q4_K, 1.05f);
  const SelfCheckResult r =
      run_selfcheck(bad, *cpu, selfcheck_case_names({DType::Q8_0, DType::Q4_K}), nullptr);
  EXPECT_FALSE(r.passed());
  // 5 % off: above the 2e-2 the quantized paths are allowed.
  EXPECT_EQ(r.failure().rfind("computed matmul Q4_K decode ", 0), 0u) << r.failure();
  EXPECT_NE(r.failure().find("away from the CPU (tolerance 2e-02)"), std::string::npos)
      << r.failure();
  for (const SelfCheckCase& c : r.cases)
    EXPECT_EQ(c.passed, c.name.find("matmul Q4_K") == std::string::npos) << c.name;
}

class SelfCheckCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("polystack-selfcheck-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    const char* old = std::getenv("XDG_CACHE_HOME");
    old_ = old ? old : "";
    had_ = old != nullptr;
    setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (had_)
      setenv("XDG_CACHE_HOME", old_.c_str(), 1);
    else
      unsetenv("XDG_CACHE_HOME");
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  std::string old_;
  bool had_ = false;
};

TEST_F(SelfCheckCacheTest, KeepsResultsPerDeviceDriverAndVersion) {
  EXPECT_EQ(selfcheck_cache_dir(), (dir_ / "polystack").string());
  DeviceInfo d;
  d.id = "vulkan:0";
  d.api = Api::Vulkan;
  d.name = "Some GPU";
  d.uuid = "00112233-4455-6677-8899-aabbccddeeff";
  d.driver_version = "1.2.3";
  const std::string key = selfcheck_cache_key(d, "");
  EXPECT_NE(key.find("00112233445566778899aabbccddeeff"), std::string::npos) << key;
  // Another driver version is another key: checked again.
  DeviceInfo newer = d;
  newer.driver_version = "1.2.4";
  EXPECT_NE(selfcheck_cache_key(newer, ""), key);

  SelfCheckCache c = SelfCheckCache::load(key);
  EXPECT_TRUE(c.cases.empty());
  SelfCheckResult r;
  r.cases = {{"matmul Q4_K decode", true, 1e-3, 2e-2, ""},
             {"rms_norm", false, 0.5, 1e-5, ""},
             {"rope neox", true, 0, 1e-5, "no rope here"}};
  r.timed = "matmul Q4_K 4096x4096 decode";
  r.device_ms = 0.5;
  r.cpu_ms = 10;
  c.merge(r);
  ASSERT_EQ(c.save(key), "");
  SelfCheckCache back = SelfCheckCache::load(key);
  ASSERT_EQ(back.cases.size(), 3u);
  ASSERT_NE(back.find("rope neox"), nullptr);
  EXPECT_EQ(back.find("rope neox")->not_supported, "no rope here");  // kept, and a pass
  EXPECT_TRUE(back.find("rope neox")->passed);
  ASSERT_NE(back.find("rms_norm"), nullptr);
  EXPECT_FALSE(back.find("rms_norm")->passed);
  EXPECT_DOUBLE_EQ(back.find("rms_norm")->error, 0.5);
  ASSERT_EQ(back.timings.size(), 1u);
  ASSERT_NE(back.find_timing(r.timed), nullptr);
  EXPECT_DOUBLE_EQ(back.find_timing(r.timed)->cpu_ms / back.find_timing(r.timed)->device_ms, 20);
  EXPECT_TRUE(SelfCheckCache::load(selfcheck_cache_key(newer, "")).cases.empty());

  // A later run adds its cases; a rerun of a case replaces it.
  SelfCheckResult more;
  more.cases = {{"rms_norm", true, 1e-7, 1e-5, ""}, {"get_rows Q6_K", true, 0, 1e-5, ""}};
  back.merge(more);
  ASSERT_EQ(back.save(key), "");
  back = SelfCheckCache::load(key);
  EXPECT_EQ(back.cases.size(), 4u);
  EXPECT_TRUE(back.find("rms_norm")->passed);
  EXPECT_NE(back.find_timing(r.timed), nullptr);

  // Another weight type's timing is added beside the first, not in its place.
  SelfCheckResult q8;
  q8.timed = "matmul Q8_0 4096x15420 decode";
  q8.device_ms = 2;
  q8.cpu_ms = 4;
  back.merge(q8);
  ASSERT_EQ(back.save(key), "");
  back = SelfCheckCache::load(key);
  ASSERT_EQ(back.timings.size(), 2u);
  EXPECT_DOUBLE_EQ(back.find_timing(r.timed)->device_ms, 0.5);
  EXPECT_DOUBLE_EQ(back.find_timing(q8.timed)->device_ms, 2);

  // Two processes that loaded the same file and ran different cases: the second to save keeps
  // what the first saved.
  SelfCheckCache first = SelfCheckCache::load(key), second = SelfCheckCache::load(key);
  SelfCheckResult a, b;
  a.cases = {{"matmul Q5_K decode", true, 1e-3, 2e-2, ""}};
  a.timed = "matmul Q5_K 4096x11915 decode";
  a.device_ms = 1;
  a.cpu_ms = 3;
  b.cases = {{"matmul IQ4_NL decode", true, 1e-3, 2e-2, ""}};
  first.merge(a);
  second.merge(b);
  ASSERT_EQ(first.save(key), "");
  ASSERT_EQ(second.save(key), "");
  back = SelfCheckCache::load(key);
  EXPECT_EQ(back.cases.size(), 6u);
  EXPECT_NE(back.find("matmul Q5_K decode"), nullptr);
  EXPECT_NE(back.find("matmul IQ4_NL decode"), nullptr);
  EXPECT_EQ(back.timings.size(), 3u);
  EXPECT_NE(back.find_timing(a.timed), nullptr);

  // A damaged file caches nothing (and is rewritten on the next save).
  std::ofstream(back.path) << "{\"key\": 3, \"cases\": [";
  EXPECT_TRUE(SelfCheckCache::load(key).cases.empty());
}

}  // namespace
}  // namespace ps
