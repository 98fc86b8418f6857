// The pieces of a model across MPI ranks that need no MPI: a pass's description through its
// bytes (and bytes that are not one), the options rank 0 sends, the model fingerprint, and the
// graph cut that leaves a rank its own nodes over leaves for what other ranks computed.
#include "engine/pipeline.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "engine/model_context.h"
#include "graph/graph.h"

namespace ps {
namespace {

PassDesc sample_pass() {
  PassDesc d;
  d.all_logits = true;
  d.runs.push_back({3, 17, false, {5, 9, 11}, {{0, 4}, {7}}});
  d.runs.push_back({0, 0, true, {1}, {{2}, {}}});
  return d;
}

TEST(Pipeline, APassSurvivesItsBytes) {
  const PassDesc d = sample_pass();
  const std::vector<uint8_t> bytes = encode_pass(d);
  EXPECT_EQ(bytes[0], uint8_t(PipelineCommand::Pass));
  const PassDesc back = decode_pass(bytes);
  EXPECT_EQ(back.all_logits, true);
  ASSERT_EQ(back.runs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back.runs[i].seq, d.runs[i].seq);
    EXPECT_EQ(back.runs[i].n_past, d.runs[i].n_past);
    EXPECT_EQ(back.runs[i].hidden, d.runs[i].hidden);
    EXPECT_EQ(back.runs[i].tokens, d.runs[i].tokens);
    EXPECT_EQ(back.runs[i].tables, d.runs[i].tables);
  }
}

TEST(Pipeline, BytesThatAreNoPassAreRefused) {
  const std::vector<uint8_t> bytes = encode_pass(sample_pass());
  // Every truncation, a byte too many, another command, and a list longer than the message.
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(decode_pass(std::span<const uint8_t>(bytes.data(), n)), std::runtime_error) << n;
  std::vector<uint8_t> more = bytes;
  more.push_back(0);
  EXPECT_THROW(decode_pass(more), std::runtime_error);
  std::vector<uint8_t> other = bytes;
  other[0] = uint8_t(PipelineCommand::Plan);
  EXPECT_THROW(decode_pass(other), std::runtime_error);
  std::vector<uint8_t> long_list = bytes;
  // The first run's token count sits after the command, all_logits, the run count, seq, n_past
  // and hidden.
  const int32_t huge = 1 << 30;
  std::memcpy(long_list.data() + 1 + 5 * 4, &huge, 4);
  EXPECT_THROW(decode_pass(long_list), std::runtime_error);
  // A flag other than 0 or 1 (all_logits, after the command byte).
  std::vector<uint8_t> odd_flag = bytes;
  odd_flag[2] = 1;
  EXPECT_THROW(decode_pass(odd_flag), std::runtime_error);
}

TEST(Pipeline, OptionsSurviveJson) {
  ContextOptions o;
  o.n_ctx = 300;
  o.n_ctx_per_seq = 100;
  o.n_batch = 7;
  o.n_threads = 3;
  o.device = "vulkan:0";
  o.strict = true;
  o.n_gpu_layers = 5;
  o.split_layers = true;
  o.tensor_split = {3, 1};
  o.main_gpu = 1;
  o.n_cpu_moe = 2;
  o.deterministic = true;
  o.n_seq = 4;
  o.n_seq_cached = 2;
  const ContextOptions b = context_options_from_json(context_options_json(o));
  EXPECT_EQ(context_options_json(b), context_options_json(o));
  EXPECT_EQ(b.tensor_split, o.tensor_split);
  EXPECT_EQ(b.device, "vulkan:0");
}

TEST(Pipeline, TheFingerprintSeesOneByte) {
  const std::string path = testing::TempDir() + "/fingerprint.bin";
  std::vector<char> bytes(3 << 20);
  std::mt19937 rng(5);
  for (char& c : bytes) c = char(rng());
  const auto write = [&] {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  };
  write();
  const std::string a = model_fingerprint(path);
  EXPECT_EQ(model_fingerprint(path), a);
  bytes[bytes.size() - 10] ^= 1;  // the end of the data
  write();
  const std::string b = model_fingerprint(path);
  EXPECT_NE(b, a);
  bytes[100] ^= 1;  // the header
  write();
  EXPECT_NE(model_fingerprint(path), b);
  std::remove(path.c_str());
}

TEST(Pipeline, TheCutKeepsARanksNodesOverLeaves) {
  Graph g;
  std::vector<float> x(8, 1.0f);
  Tensor* in = g.leaf("x", DType::F32, {8, 1, 1, 1}, x.data());
  g.set_layer(0);
  Tensor* a = g.scale(in, 2.0f);
  g.set_layer(1);
  Tensor* b = g.scale(a, 3.0f);
  Tensor* c = g.add(b, a);
  ASSERT_EQ(g.nodes().size(), 3u);
  // This rank runs layer 1: a came from another rank.
  std::vector<bool> keep(g.all().size(), false);
  keep[size_t(b->index)] = keep[size_t(c->index)] = true;
  g.keep_nodes(keep);
  std::vector<float> got(8, 2.0f);
  g.make_leaf(a, got.data());
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[0], b);
  EXPECT_EQ(a->op, OpKind::None);
  EXPECT_EQ(a->data, got.data());
  EXPECT_EQ(a->src[0], nullptr);
  EXPECT_FALSE(a->constant);
  // A view that is not contiguous cannot come from another rank.
  Tensor* v = g.view(c, {4, 1, 1, 1}, {8, 8, 8, 8}, 0);
  EXPECT_THROW(g.make_leaf(v, got.data()), ModelError);
}

}  // namespace
}  // namespace ps
