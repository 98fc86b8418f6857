// The placement plan on made-up sizes: -ngl N / all / auto, auto fit against free memory and
// headroom, several GPUs in proportion, a tied embedding counted once, the errors, and the
// POLYSTACK_DEVICE_MEMORY list.
#include "scheduler/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ps {
namespace {

constexpr uint64_t MiB = uint64_t(1) << 20;

// [input, n layers, output]: the input 3 MiB, each layer 10 MiB of weights and 2 MiB of KV,
// the output 7 MiB.
std::vector<UnitCost> model(int n_layer) {
  std::vector<UnitCost> u(size_t(n_layer + 2));
  u.front().weights = 3 * MiB;
  for (int l = 1; l <= n_layer; ++l) u[size_t(l)] = {10 * MiB, 2 * MiB, 0};
  u.back().weights = 7 * MiB;
  return u;
}

PlacementDevice gpu(const std::string& id, uint64_t free) { return {id, true, free, false}; }
PlacementDevice cpu(uint64_t free = 0) { return {"cpu", false, free, false}; }

LayerRequest count(int n) {
  LayerRequest r;
  r.mode = LayerRequest::Mode::Count;
  r.count = n;
  return r;
}

// The units' devices as ids: "cpu cpu vulkan:0 ...".
std::string where(const PlacementPlan& p) {
  std::string s;
  for (int d : p.unit_device) s += (s.empty() ? "" : " ") + p.devices[size_t(d)].id;
  return s;
}

TEST(Placement, NglCountsTheLastLayersThenEverything) {
  const auto units = model(4);
  const std::vector<PlacementDevice> devs = {gpu("g", 0), cpu()};
  EXPECT_EQ(where(plan_placement(units, MiB, devs, count(0))), "cpu cpu cpu cpu cpu cpu");
  EXPECT_EQ(where(plan_placement(units, MiB, devs, count(1))), "cpu cpu cpu cpu g cpu");
  EXPECT_EQ(where(plan_placement(units, MiB, devs, count(3))), "cpu cpu g g g cpu");
  // All repeating layers: the input and output stay on the CPU, as in llama.cpp.
  EXPECT_EQ(where(plan_placement(units, MiB, devs, count(4))), "cpu g g g g cpu");
  // More than the layer count: everything.
  EXPECT_EQ(where(plan_placement(units, MiB, devs, count(5))), "g g g g g g");
  EXPECT_EQ(where(plan_placement(units, MiB, devs, count(500))), "g g g g g g");
  LayerRequest all;
  all.mode = LayerRequest::Mode::All;
  const PlacementPlan p = plan_placement(units, MiB, devs, all);
  EXPECT_TRUE(p.single_device());
  EXPECT_EQ(p.units_text(0), "everything");
  EXPECT_EQ(p.need[1], 0u);
  EXPECT_EQ(p.mode, "-ngl all");
}

TEST(Placement, AutoFitsTheFreeMemoryLessHeadroom) {
  const auto units = model(4);
  // Everything: 3 + 4 x 12 + 7 = 58 MiB, with a 2 MiB compute buffer 60 MiB.
  const uint64_t compute = 2 * MiB;
  {
    const PlacementPlan p = plan_placement(units, compute, {gpu("g", 100 * MiB), cpu()}, {});
    EXPECT_EQ(where(p), "g g g g g g");
    EXPECT_EQ(p.whole_model, 60 * MiB);
    EXPECT_EQ(p.need[0], 60 * MiB);
    EXPECT_EQ(p.headroom[0], 10 * MiB);
    EXPECT_EQ(p.summary,
              "everything on g (60.0 MiB of 100.0 MiB free): the whole model needs 60.0 MiB "
              "(-ngl auto)");
  }
  {
    // 40 MiB free, 4 of headroom: 36 MiB hold the compute buffer (2), the output (7) and two
    // layers (24); a third would need 12 more.
    const PlacementPlan p = plan_placement(units, compute, {gpu("g", 40 * MiB), cpu()}, {});
    EXPECT_EQ(where(p), "cpu cpu cpu g g g");
    EXPECT_EQ(p.need[0], 33 * MiB);
    EXPECT_EQ(p.need[1], 3 * MiB + 24 * MiB + compute);
    EXPECT_EQ(p.units_text(0), "layers 2-3 + output");
    EXPECT_EQ(p.units_text(1), "input + layers 0-1");
    EXPECT_EQ(p.summary,
              "layers 2-3 + output on g (33.0 MiB of 40.0 MiB free), input + layers 0-1 on cpu "
              "(29.0 MiB, free memory unknown): the whole model needs 60.0 MiB (-ngl auto)");
  }
  {
    // The limit is exact: 33 MiB fit in 33 MiB + headroom.
    const uint64_t free = 33 * MiB * 10 / 9 + 1;
    EXPECT_EQ(where(plan_placement(units, compute, {gpu("g", free), cpu()}, {})),
              "cpu cpu cpu g g g");
    EXPECT_EQ(where(plan_placement(units, compute, {gpu("g", free - 2 * MiB), cpu()}, {})),
              "cpu cpu cpu cpu g g");
  }
  // Not even the output: everything on the CPU.
  EXPECT_EQ(where(plan_placement(units, compute, {gpu("g", 8 * MiB), cpu()}, {})),
            "cpu cpu cpu cpu cpu cpu");
  // Free memory unknown: the GPU is trusted with everything.
  EXPECT_EQ(where(plan_placement(units, compute, {gpu("g", 0), cpu()}, {})), "g g g g g g");
  // Headroom: a tenth, at most 512 MiB.
  EXPECT_EQ(placement_headroom(100 * MiB), 10 * MiB);
  EXPECT_EQ(placement_headroom(uint64_t(80) << 30), 512 * MiB);
}

TEST(Placement, TiedEmbeddingCountsOnceOnOneDevice) {
  auto units = model(2);
  units.front().shared_with_output = 3 * MiB;  // the output reads the embedding too
  units.back().weights = 3 * MiB;
  const PlacementPlan all = plan_placement(units, 0, {gpu("g", 0), cpu()}, count(3));
  EXPECT_EQ(all.need[0], 2 * 12 * MiB + 3 * MiB);
  EXPECT_EQ(all.whole_model, all.need[0]);
  // The input and output on the CPU share its copy.
  const PlacementPlan cpu_side = plan_placement(units, 0, {gpu("g", 0), cpu()}, count(2));
  EXPECT_EQ(cpu_side.need[0], 2 * 12 * MiB);
  EXPECT_EQ(cpu_side.need[1], 3 * MiB);
  // Auto fit takes the input for nothing once the output is on the GPU: 27 MiB hold it all.
  const uint64_t free = 27 * MiB * 10 / 9 + 1;
  EXPECT_EQ(where(plan_placement(units, 0, {gpu("g", free), cpu()}, {})), "g g g g");
  // Apart (-ngl 3 over two GPUs, the input on the first and the output on the last), each GPU
  // holds its own copy.
  LayerRequest split = count(3);
  const PlacementPlan apart = plan_placement(units, 0, {gpu("a", 0), gpu("b", 0), cpu()}, split);
  EXPECT_EQ(where(apart), "a a b b");
  EXPECT_EQ(apart.need[0], 3 * MiB + 12 * MiB);
  EXPECT_EQ(apart.need[1], 12 * MiB + 3 * MiB);
}

TEST(Placement, SeveralGpusInProportion) {
  const auto units = model(8);
  LayerRequest r;
  r.mode = LayerRequest::Mode::All;
  r.tensor_split = {3, 1};
  const std::vector<PlacementDevice> devs = {gpu("a", 0), gpu("b", 0), cpu()};
  PlacementPlan p = plan_placement(units, MiB, devs, r);
  EXPECT_EQ(where(p), "a a a a a a a b b b");
  EXPECT_EQ(p.units_text(0), "input + layers 0-5");
  EXPECT_EQ(p.units_text(1), "layers 6-7 + output");
  // Equal shares without --tensor-split; a share of zero leaves a GPU out.
  r.tensor_split.clear();
  EXPECT_EQ(where(plan_placement(units, MiB, devs, r)), "a a a a a b b b b b");
  r.tensor_split = {0, 1};
  EXPECT_EQ(where(plan_placement(units, MiB, devs, r)), "b b b b b b b b b b");
  // -ngl 4 over two GPUs: the last four layers, two each.
  LayerRequest c = count(4);
  EXPECT_EQ(where(plan_placement(units, MiB, devs, c)), "cpu cpu cpu cpu cpu a a b b cpu");
  // Auto: the last GPU (27 MiB after headroom) takes the output and layer 7, the first
  // (54 MiB) layers 3-6, then nothing more fits.
  const PlacementPlan fit =
      plan_placement(units, 0, {gpu("a", 60 * MiB), gpu("b", 30 * MiB), cpu()}, {});
  EXPECT_EQ(where(fit), "cpu cpu cpu cpu a a a a b b") << fit.summary;
  EXPECT_EQ(fit.need[0], 48 * MiB);
  EXPECT_EQ(fit.need[1], 19 * MiB);
  // Auto with --tensor-split: shares kept, as many units as fit.
  LayerRequest shares;
  shares.tensor_split = {1, 1};
  const PlacementPlan fit2 =
      plan_placement(units, 0, {gpu("a", 60 * MiB), gpu("b", 30 * MiB), cpu()}, shares);
  EXPECT_EQ(where(fit2), "cpu cpu cpu cpu cpu cpu a a b b") << fit2.summary;
  // Wrong lengths and shares.
  r.tensor_split = {1, 1, 1};
  EXPECT_THROW(plan_placement(units, MiB, devs, r), UsageError);
  r.tensor_split = {0, 0};
  EXPECT_THROW(plan_placement(units, MiB, devs, r), UsageError);
  r.tensor_split = {-1, 2};
  EXPECT_THROW(plan_placement(units, MiB, devs, r), UsageError);
}

TEST(Placement, RequestsThatCannotBeMetAreErrorsNamingTheSizes) {
  const auto units = model(4);
  // -ngl all over the GPU's free memory.
  LayerRequest all;
  all.mode = LayerRequest::Mode::All;
  try {
    plan_placement(units, MiB, {gpu("vulkan:0", 40 * MiB), cpu()}, all);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "-ngl all puts 59.0 MiB on vulkan:0, more than its 40.0 MiB free less 4.0 MiB of "
              "headroom (everything); lower -ngl or use -ngl auto");
  }
  // Fits nowhere: the CPU's share beyond its free memory.
  try {
    plan_placement(units, MiB, {gpu("vulkan:0", 20 * MiB), cpu(30 * MiB)}, {});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("the model does not fit: it needs 59.0 MiB; vulkan:0 "
                                         "holds output (8.0 MiB of 20.0 MiB free"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("input + layers 0-3"), std::string::npos) << e.what();
  }
  try {
    plan_placement(units, MiB, {cpu(30 * MiB)}, {});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the model does not fit: it needs 59.0 MiB, more than the 30.0 MiB free on cpu "
              "less 3.0 MiB of headroom");
  }
  // --strict: auto fit may not leave layers on the CPU; everything fitting is fine.
  LayerRequest strict;
  strict.strict = true;
  EXPECT_THROW(plan_placement(units, MiB, {gpu("g", 40 * MiB), cpu()}, strict), UsageError);
  EXPECT_NO_THROW(plan_placement(units, MiB, {gpu("g", 100 * MiB), cpu()}, strict));
  // -ngl 2 under --strict was asked for: not an error.
  LayerRequest two = count(2);
  two.strict = true;
  EXPECT_NO_THROW(plan_placement(units, MiB, {gpu("g", 100 * MiB), cpu()}, two));
  // A CPU alone fits what its memory holds.
  EXPECT_EQ(plan_placement(units, MiB, {cpu(100 * MiB)}, {}).summary,
            "everything on cpu (59.0 MiB of 100.0 MiB free): the whole model needs 59.0 MiB");
}

TEST(Placement, PlanAsJson) {
  const PlacementPlan p = plan_placement(model(2), MiB, {gpu("g", 0), cpu()}, count(1));
  const nlohmann::json j = p.to_json();
  EXPECT_EQ(j["mode"], "-ngl 1");
  ASSERT_EQ(j["units"].size(), 4u);
  EXPECT_EQ(j["units"][0]["unit"], "input");
  EXPECT_EQ(j["units"][2]["unit"], "layer 1");
  EXPECT_EQ(j["units"][2]["device"], "g");
  EXPECT_EQ(j["units"][3]["device"], "cpu");
  EXPECT_EQ(j["devices"][0]["units"], "layer 1");
  EXPECT_EQ(j["devices"][1]["units"], "input + layer 0 + output");
  EXPECT_EQ(j["devices"][0]["need_bytes"], 13 * MiB);
}

TEST(Placement, DeviceMemoryList) {
  EXPECT_EQ(device_memory_cap("vulkan:0=48MiB", "vulkan:0"), 48 * MiB);
  EXPECT_EQ(device_memory_cap("vulkan:0=48MiB", "vulkan:1"), 0u);
  EXPECT_EQ(device_memory_cap("cuda:0=1.5GiB,cpu=512KiB", "cpu"), 512u * 1024);
  EXPECT_EQ(device_memory_cap("cuda:0=1.5GiB,cpu=512KiB", "cuda:0"), 3 * (uint64_t(1) << 29));
  EXPECT_EQ(device_memory_cap("cpu=1000", "cpu"), 1000u);
  EXPECT_EQ(device_memory_cap("cpu=0", "cpu"), 1u);  // known and (almost) nothing
  EXPECT_EQ(device_memory_cap("", "cpu"), 0u);
  for (const char* bad : {"cpu", "=1MiB", "cpu=", "cpu=1MB", "cpu=-1MiB", "cpu=x", "cpu=1e30GiB",
                          "cpu=nanMiB", "cpu=1 MiB"})
    EXPECT_THROW(device_memory_cap(bad, "cpu"), UsageError) << bad;
}

// A mixture of experts: [input, n layers, output] where each layer holds 4 MiB of attention
// and shared weights, 2 MiB of KV and 30 MiB of routed experts.
std::vector<UnitCost> moe_model(int n_layer) {
  std::vector<UnitCost> u(size_t(n_layer + 2));
  u.front().weights = 3 * MiB;
  for (int l = 1; l <= n_layer; ++l) u[size_t(l)] = {34 * MiB, 2 * MiB, 0, 30 * MiB};
  u.back().weights = 7 * MiB;
  return u;
}

// Which layers' experts run apart on the CPU: "0 1" (layer numbers).
std::string apart(const PlacementPlan& p) {
  std::string s;
  for (int u = 1; u + 1 < p.n_units(); ++u)
    if (p.experts_on_cpu[size_t(u)] && p.unit_device[size_t(u)] != int(p.devices.size()) - 1) {
      if (!s.empty()) s += ' ';
      s += std::to_string(u - 1);
    }
  return s;
}

TEST(PlacementExperts, FollowTheirLayersWhenEverythingFits) {
  const auto units = moe_model(4);
  const std::vector<PlacementDevice> devs = {gpu("g", 1024 * MiB), cpu(8192 * MiB)};
  const PlacementPlan p = plan_placement(units, MiB, devs, LayerRequest{});
  EXPECT_EQ(where(p), "g g g g g g");
  EXPECT_EQ(apart(p), "");
  EXPECT_EQ(p.need[1], 0u);
  EXPECT_EQ(p.units_text(0), "everything");
}

TEST(PlacementExperts, AutoFitKeepsExpertsOnTheCpuFirstThenBringsBackTheLastLayers) {
  const auto units = moe_model(4);
  // Whole layers: 36 MiB each, 155 MiB in all with input, output and compute. Without their
  // experts 6 MiB each. 110 MiB free less 11 of headroom: every layer's attention (35 MiB with
  // input, output and compute) and the experts of two layers (60 MiB) fit, not three.
  const std::vector<PlacementDevice> devs = {gpu("g", 110 * MiB), cpu(8192 * MiB)};
  const PlacementPlan p = plan_placement(units, MiB, devs, LayerRequest{});
  EXPECT_EQ(where(p), "g g g g g g") << p.summary;
  EXPECT_EQ(apart(p), "0 1") << p.summary;
  EXPECT_EQ(p.need[0], (3 + 7 + 4 * 6 + 2 * 30 + 1) * MiB);
  EXPECT_EQ(p.need[1], 2 * 30 * MiB + MiB);  // the experts of layers 0 and 1, and compute
  EXPECT_EQ(p.experts_text(), "layers 0-1");
  EXPECT_EQ(p.units_text(1), "the routed experts of layers 0-1");
  EXPECT_EQ(p.units_text(0), "everything but routed experts");
  EXPECT_NE(p.summary.find("the routed experts of layers 0-1 on cpu"), std::string::npos)
      << p.summary;
  EXPECT_NE(p.experts_note.find("auto fit"), std::string::npos);
  // --strict: experts auto fit left on the CPU are refused; those --cpu-moe or --n-cpu-moe put
  // there were asked for, but not the ones auto fit adds beyond them.
  LayerRequest strict;
  strict.strict = true;
  EXPECT_THROW(plan_placement(units, MiB, devs, strict), UsageError);
  strict.n_cpu_moe = LayerRequest::kAllLayers;
  EXPECT_NO_THROW(plan_placement(units, MiB, devs, strict));
  strict.n_cpu_moe = 2;
  EXPECT_EQ(apart(plan_placement(units, MiB, devs, strict)), "0 1");
  EXPECT_NO_THROW(plan_placement(units, MiB, devs, strict));
  strict.n_cpu_moe = 1;  // layer 1's experts do not fit beside the rest either
  EXPECT_THROW(plan_placement(units, MiB, devs, strict), UsageError);
  // Layer-whole auto fit would have left layers on the CPU: 99 MiB hold the output, compute
  // and two whole layers.
  LayerRequest whole;
  whole.n_cpu_moe = 0;
  EXPECT_EQ(where(plan_placement(units, MiB, devs, whole)), "cpu cpu cpu g g g");
}

TEST(PlacementExperts, AttentionFirstWhenNotEvenItFits) {
  const auto units = moe_model(4);
  // 30 MiB free less 3 of headroom: the output, compute and three layers without experts.
  const std::vector<PlacementDevice> devs = {gpu("g", 30 * MiB), cpu(8192 * MiB)};
  const PlacementPlan p = plan_placement(units, MiB, devs, LayerRequest{});
  EXPECT_EQ(where(p), "cpu cpu g g g g") << p.summary;
  EXPECT_EQ(apart(p), "1 2 3");
}

TEST(PlacementExperts, NCpuMoeKeepsTheFirstLayersExpertsOnTheCpu) {
  const auto units = moe_model(4);
  const std::vector<PlacementDevice> devs = {gpu("g", 0), cpu()};
  LayerRequest r = count(4);
  r.n_cpu_moe = 3;
  PlacementPlan p = plan_placement(units, MiB, devs, r);
  EXPECT_EQ(where(p), "cpu g g g g cpu");
  EXPECT_EQ(apart(p), "0 1 2");
  EXPECT_EQ(p.experts_note, "--n-cpu-moe 3");
  // --n-cpu-moe beyond the layers keeps all of them and says what was asked.
  r.n_cpu_moe = 9;
  p = plan_placement(units, MiB, devs, r);
  EXPECT_EQ(apart(p), "0 1 2 3");
  EXPECT_EQ(p.experts_note, "--n-cpu-moe 9");
  r.n_cpu_moe = LayerRequest::kAllLayers;  // --cpu-moe
  p = plan_placement(units, MiB, devs, r);
  EXPECT_EQ(apart(p), "0 1 2 3");
  EXPECT_EQ(p.experts_note, "--cpu-moe");
  const std::vector<int> ed = p.expert_devices();
  for (int u = 1; u <= 4; ++u) EXPECT_EQ(ed[size_t(u)], 1);
  EXPECT_EQ(p.to_json()["units"][1]["experts_device"], "cpu");
}

TEST(PlacementExperts, AGpuThatCannotRunThemLeavesThemAllOnTheCpu) {
  const auto units = moe_model(2);
  const std::vector<PlacementDevice> devs = {gpu("g", 1024 * MiB), cpu(8192 * MiB)};
  LayerRequest r;
  r.experts_cpu_reason = "g cannot run the routed experts";
  const PlacementPlan p = plan_placement(units, MiB, devs, r);
  EXPECT_EQ(where(p), "g g g g");
  EXPECT_EQ(apart(p), "0 1");
  EXPECT_EQ(p.experts_note, r.experts_cpu_reason);
  EXPECT_EQ(p.need[1], 60 * MiB + MiB);
  // --strict: experts the GPU cannot run are a fallback, unless --cpu-moe asked for them all.
  r.strict = true;
  EXPECT_THROW(plan_placement(units, MiB, devs, r), UsageError);
  r.n_cpu_moe = 1;
  EXPECT_THROW(plan_placement(units, MiB, devs, r), UsageError);
  r.n_cpu_moe = LayerRequest::kAllLayers;
  EXPECT_NO_THROW(plan_placement(units, MiB, devs, r));
}

TEST(PlacementExperts, DenseModelsAreUnchanged) {
  const auto units = model(4);
  const std::vector<PlacementDevice> devs = {gpu("g", 40 * MiB), cpu(8192 * MiB)};
  LayerRequest r;
  r.n_cpu_moe = 2;
  const PlacementPlan p = plan_placement(units, MiB, devs, r);
  EXPECT_EQ(apart(p), "");
  EXPECT_EQ(p.experts_text(), "");
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

constexpr uint64_t GiB(uint64_t n) { return n << 30; }

PlacementRank rank_with(uint64_t free) { return {"node", free, "cpu", 0, 0, "", 0}; }

// Ranks of an MPI job: contiguous ranges in order, by --rank-split or free memory, each with a
// layer, the input on rank 0 and the output on the last; the errors name the rank and sizes.
TEST(PlacementRanks, EqualFreeMemoryGivesEqualShares) {
  const std::vector<int> r = plan_ranks(model(8), {rank_with(0), rank_with(0)}, {});
  // [in 3, 8 x 12, out 7]: 106 MiB; half is 53: input + 4 layers (51) then the rest.
  EXPECT_EQ(r, (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  const std::vector<int> r3 =
      plan_ranks(model(8), {rank_with(GiB(1)), rank_with(GiB(1)), rank_with(GiB(1))}, {});
  EXPECT_EQ(r3.front(), 0);
  EXPECT_EQ(r3.back(), 2);
  EXPECT_TRUE(std::is_sorted(r3.begin(), r3.end()));
}

TEST(PlacementRanks, SplitAndFreeMemoryMoveTheBoundary) {
  const std::vector<int> split = plan_ranks(model(8), {rank_with(0), rank_with(0)}, {1, 3});
  EXPECT_EQ(std::count(split.begin(), split.end(), 0), 3);  // input + 2 layers: 27 of 106
  const std::vector<int> byfree =
      plan_ranks(model(8), {rank_with(3 * GiB(1)), rank_with(GiB(1))}, {});
  EXPECT_EQ(std::count(byfree.begin(), byfree.end(), 1), 3);  // 2 layers + output: 31 of 106
}

TEST(PlacementRanks, EveryRankHoldsALayerWhateverTheShares) {
  const std::vector<int> r =
      plan_ranks(model(3), {rank_with(0), rank_with(0), rank_with(0)}, {100, 1, 1});
  EXPECT_EQ(r, (std::vector<int>{0, 0, 1, 2, 2}));
  const std::vector<int> last = plan_ranks(model(3), {rank_with(0), rank_with(0)}, {1, 100});
  EXPECT_EQ(last, (std::vector<int>{0, 0, 1, 1, 1}));
}

TEST(PlacementRanks, RequestsThatCannotBeMetAreErrors) {
  try {
    plan_ranks(model(2), {rank_with(0), rank_with(0), rank_with(0)}, {});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("3 ranks for a model of 2 layers"), std::string::npos);
  }
  EXPECT_THROW(plan_ranks(model(4), {rank_with(0), rank_with(0)}, {1}), UsageError);
  EXPECT_THROW(plan_ranks(model(4), {rank_with(0), rank_with(0)}, {1, 0}), UsageError);
  try {
    plan_ranks(model(8), {rank_with(GiB(1)), rank_with(10 * MiB)}, {1, 1});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (node) would hold"), std::string::npos)
        << e.what();
  }
}

TEST(PlacementRanks, NglCountsTheRanksOwnLayers) {
  // Rank 0 of two holds input + layers 0-2 of 6; -ngl 2 puts its layers 1-2 on its GPU.
  std::vector<UnitCost> units = model(6);
  LayerRequest req = count(2);
  req.unit_rank = {0, 0, 0, 0, 1, 1, 1, 1};
  for (size_t u = 4; u < units.size(); ++u) units[u] = UnitCost{};
  const PlacementPlan p = plan_placement(units, MiB, {gpu("vulkan:0", GiB(1)), cpu()}, req);
  EXPECT_EQ(p.units_text(0), "layers 1-2");
  EXPECT_EQ(p.units_text(1), "input + layer 0");
  req.count = 5;  // more than its 3 layers: everything it holds
  EXPECT_EQ(plan_placement(units, MiB, {gpu("vulkan:0", GiB(1)), cpu()}, req).units_text(0),
            "input + layers 0-2");
}

TEST(PlacementRanks, TheRankPlanSaysWhatEachRankHolds) {
  PlacementPlan p = plan_placement(model(4), MiB, {cpu()}, LayerRequest{});
  p.unit_rank = {0, 0, 0, 1, 1, 1};
  EXPECT_EQ(p.rank_units_text(0), "input + layers 0-1");
  EXPECT_EQ(p.rank_units_text(1), "layers 2-3 + output");
  p.rank = 1;
  EXPECT_EQ(p.units_text(0), "layers 2-3 + output");
  p.ranks = {rank_with(GiB(1)), rank_with(GiB(1))};
  const nlohmann::json j = p.to_json();
  EXPECT_EQ(j["units"][0]["rank"], 0);
  EXPECT_TRUE(j["units"][0]["device"].is_null());
  EXPECT_EQ(j["units"][5]["device"], "cpu");
  EXPECT_EQ(j["ranks"][1]["units"], "layers 2-3 + output");
}

}  // namespace
}  // namespace ps
