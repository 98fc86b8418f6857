#include "gguf/gguf.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "core/error.h"
#include "gguf_builder.h"

namespace ps {
namespace {

using test::GgufBuilder;

// Ranges that let any value through, for tests of reading rather than of checking.
constexpr int64_t kLo = std::numeric_limits<int64_t>::min(),
                  kHi = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

GgufBuilder sample_file(uint32_t version = 3) {
  GgufBuilder b(version);
  b.kv_str("general.architecture", "llama");
  b.kv_u8("t.u8", 200);
  b.kv_i8("t.i8", -100);
  b.kv_u16("t.u16", 60000);
  b.kv_i16("t.i16", -30000);
  b.kv_u32("t.u32", 4000000000u);
  b.kv_i32("t.i32", -2000000000);
  b.kv_u64("t.u64", 1ull << 40);
  b.kv_i64("t.i64", -(1ll << 40));
  b.kv_f32("t.f32", 1.5f);
  b.kv_f64("t.f64", -2.25);
  b.kv_bool("t.bool", true);
  b.kv_str_array("t.strs", {"a", "", "héllo"});
  b.kv_array<float>("t.floats", 6, {0.5f, -1.0f, 3.25f});
  b.kv_array<int32_t>("t.ints", 5, {7, -8, 9});
  b.tensor("w", {5, 3}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  b.tensor("h", {4}, 1, std::vector<uint8_t>(8, 0x3c));
  return b;
}

std::unique_ptr<gguf::File> parse(const std::vector<uint8_t>& bytes) {
  return gguf::File::parse("test.gguf", bytes.data(), bytes.size());
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse(bytes);
  } catch (const GgufError& e) {
    return e.what();
  }
  return "";
}

TEST(Gguf, ReadsEveryValueType) {
  for (uint32_t version : {2u, 3u}) {
    const auto bytes = sample_file(version).build();
    auto f = parse(bytes);
    EXPECT_EQ(f->version(), version);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_int("t.u8", 0, kLo, kHi), 200);
    EXPECT_EQ(f->get_int("t.i8", 0, kLo, kHi), -100);
    EXPECT_EQ(f->get_int("t.u16", 0, kLo, kHi), 60000);
    EXPECT_EQ(f->get_int("t.i16", 0, kLo, kHi), -30000);
    EXPECT_EQ(f->get_int("t.u32", 0, kLo, kHi), 4000000000ll);
    EXPECT_EQ(f->get_int("t.i32", 0, kLo, kHi), -2000000000);
    EXPECT_EQ(f->get_int("t.u64", 0, kLo, kHi), 1ll << 40);
    EXPECT_EQ(f->get_int("t.i64", 0, kLo, kHi), -(1ll << 40));
    EXPECT_FLOAT_EQ(float(f->get_float("t.f32", 0, -kInf, kInf)), 1.5f);
    EXPECT_DOUBLE_EQ(f->get_float("t.f64", 0, -kInf, kInf), -2.25);
    EXPECT_TRUE(f->get_bool("t.bool", false));
    const auto& strs = f->require_array("t.strs");
    ASSERT_EQ(strs.count, 3u);
    EXPECT_EQ(strs.string_at(2), "héllo");
    EXPECT_EQ(strs.string_at(1), "");
    EXPECT_DOUBLE_EQ(f->require_array("t.floats").double_at(2), 3.25);
    EXPECT_EQ(f->require_array("t.ints").int_at(1), -8);
    ASSERT_EQ(f->tensors().size(), 2u);
    const auto* w = f->find_tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->dims, (std::vector<int64_t>{5, 3}));
    EXPECT_EQ(w->nbytes, 60u);
    float v;
    std::memcpy(&v, w->data + 4 * 7, 4);
    EXPECT_EQ(v, 8.0f);
    EXPECT_EQ(f->find_tensor("h")->offset % f->alignment(), 0u);
    EXPECT_EQ(f->get_int("missing", 42, kLo, kHi), 42);
  }
}

TEST(Gguf, WrongTypeAndMissingKeysNameTheKey) {
  const auto bytes = sample_file().build();
  auto f = parse(bytes);
  try {
    f->get_int("general.architecture", 0, kLo, kHi);
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos);
  }
  EXPECT_THROW(f->require_string("nope"), GgufError);
  EXPECT_THROW(f->require_array("t.u8"), GgufError);
}

std::string what_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const GgufError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Gguf, FloatMetadataReadAsIntegersIsCheckedNotCast) {
  // A plain cast of NaN or 1e30 to int64 is undefined behaviour; every integer read of a float
  // is a checked conversion or a refusal that names the key and the value.
  GgufBuilder b;
  b.kv_array<float>("t.flags", 6, {1.0f, std::numeric_limits<float>::quiet_NaN()});
  b.kv_array<float>("t.big", 6, {1e30f});
  b.kv_array<double>("t.half", 12, {0.5});
  b.kv_array<float>("t.whole", 6, {0.0f, 1.0f, 1.0f});
  b.kv_f32("t.nan", std::numeric_limits<float>::quiet_NaN());
  b.kv_f64("t.inf", std::numeric_limits<double>::infinity());
  b.kv_u64("t.u64max", ~0ull);
  b.kv_array<uint64_t>("t.u64s", 10, {3, ~0ull});
  const auto bytes = b.build();
  auto f = parse(bytes);
  EXPECT_EQ(what_of([&] { f->get_int_array("t.flags", 0, 1); }),
            "test.gguf: metadata 't.flags[1]' is NaN; expected 0 or 1");
  EXPECT_EQ(what_of([&] { f->get_int_array("t.big", 0, 1 << 24); }),
            "test.gguf: metadata 't.big[0]' = 1.0000000150474662e+30; expected an integer in "
            "0..16777216");
  EXPECT_EQ(what_of([&] { f->get_int_array("t.half", 0, 9); }),
            "test.gguf: metadata 't.half[0]' = 0.5; expected an integer in 0..9");
  EXPECT_EQ(*f->get_int_array("t.whole", 0, 1), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(what_of([&] { f->get_int_array("t.u64s", 0, 1000); }),
            "test.gguf: metadata 't.u64s[1]' = 18446744073709551615; expected an integer in "
            "0..1000");
  EXPECT_FALSE(f->get_int_array("t.absent", 0, 1).has_value());
  // The element accessors refuse too (without a key: they do not know it).
  EXPECT_THROW(f->require_array("t.flags").int_at(1), GgufError);
  EXPECT_THROW(f->require_array("t.big").int_at(0), GgufError);
  EXPECT_EQ(f->require_array("t.flags").int_at(0), 1);
  EXPECT_THROW(f->find("t.nan")->as_int(), GgufError);
  EXPECT_THROW(f->find("t.inf")->as_int(), GgufError);
  EXPECT_THROW(f->find("t.u64max")->as_int(), GgufError);
  EXPECT_EQ(what_of([&] { f->get_float("t.nan", 0.0, 0.0, 1.0); }),
            "test.gguf: metadata 't.nan' is NaN; expected a number in [0, 1]");
  EXPECT_EQ(what_of([&] { f->get_float("t.inf", 0.0, -1e6, 1e6); }),
            "test.gguf: metadata 't.inf' is inf; expected a number in [-1000000, 1000000]");
  EXPECT_EQ(what_of([&] { f->get_float_array("t.flags", -1.0, 1.0); }),
            "test.gguf: metadata 't.flags[1]' is NaN; expected a number in [-1, 1]");
  EXPECT_EQ(what_of([&] { f->get_int("t.nan", 0, 0, 1); }),
            "test.gguf: metadata 't.nan': expected 0 or 1, found f32");
}

TEST(Gguf, IntegerReadsAreRangeChecked) {
  GgufBuilder b;
  b.kv_i32("t.neg", -5);
  b.kv_u32("t.five", 5);
  b.kv_u64("t.u64max", ~0ull);
  b.kv_bool("t.yes", true);
  const auto bytes = b.build();
  auto f = parse(bytes);
  EXPECT_EQ(what_of([&] { f->get_int("t.neg", 2048, 1, 1 << 24); }),
            "test.gguf: metadata 't.neg' = -5 is out of range; expected an integer in 1..16777216");
  EXPECT_EQ(what_of([&] { f->require_int("t.five", 0, 4); }),
            "test.gguf: metadata 't.five' = 5 is out of range; expected an integer in 0..4");
  EXPECT_EQ(f->require_int("t.five", 5, 5), 5);
  EXPECT_EQ(what_of([&] { f->get_int("t.u64max", 0, 0, kHi); }),
            "test.gguf: metadata 't.u64max' = 18446744073709551615 is out of range; expected an "
            "integer in 0..9223372036854775807");
  EXPECT_EQ(f->get_int("t.yes", 0, 0, 1), 1);
  EXPECT_EQ(f->get_int("t.absent", -7, 0, 1), -7);  // a default is the caller's, not checked
  EXPECT_EQ(what_of([&] { f->require_int("t.absent", 0, 1); }),
            "test.gguf: metadata 't.absent' is missing");
}

TEST(Gguf, ArraysOfArraysAreRefused) {
  // ggml's reader refuses them too; accepting them let a 20 MB file of empty nested arrays
  // cost ~14 times its size in parsed values.
  std::vector<uint8_t> nested;
  auto put32 = [&](uint32_t v) { nested.insert(nested.end(), (uint8_t*)&v, (uint8_t*)&v + 4); };
  auto put64 = [&](uint64_t v) { nested.insert(nested.end(), (uint8_t*)&v, (uint8_t*)&v + 8); };
  put32(9);  // element type ARRAY
  put64(1);
  put32(0), put64(1), nested.push_back(1);
  GgufBuilder b;
  b.kv_raw("t.nested", 9, nested);
  EXPECT_EQ(error_of(b.build()),
            "test.gguf: metadata 't.nested': arrays of arrays are not supported (nor by ggml's "
            "reader)");
}

TEST(Gguf, EntryCountsAreCapped) {
  GgufBuilder b;
  for (uint64_t i = 0; i <= gguf::kMaxMetadata; ++i) b.kv_u8(fmt::format("k{}", i), 1);
  EXPECT_EQ(error_of(b.build()),
            "test.gguf: metadata_kv_count: 65537 entries; at most 65536 are read");
}

TEST(Gguf, CustomAlignment) {
  GgufBuilder b(3, 64);
  b.kv_u32("general.alignment", 64);
  b.tensor("a", {3}, 0, f32_bytes({1, 2, 3}));
  b.tensor("b", {2}, 0, f32_bytes({4, 5}));
  const auto bytes = b.build();
  auto f = parse(bytes);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, 64u);
}

TEST(Gguf, BadAlignmentIsRejected) {
  GgufBuilder b;
  b.kv_u32("general.alignment", 48);
  EXPECT_NE(error_of(b.build()).find("general.alignment"), std::string::npos);
}

TEST(Gguf, EveryTruncationIsACleanError) {
  const auto bytes = sample_file().build();
  // Bytes after the last tensor's data are padding: a cut there loses nothing.
  auto whole = parse(bytes);
  uint64_t end = 0;
  for (const auto& t : whole->tensors())
    end = std::max<uint64_t>(end, whole->data_offset() + t.offset + t.nbytes);
  for (size_t n = 0; n < end; ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + long(n));
    const std::string err = error_of(cut);
    EXPECT_FALSE(err.empty()) << "prefix of " << n << " bytes parsed without error";
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    EXPECT_EQ(err.rfind("test.gguf: ", 0), 0u) << err;
  }
}

TEST(Gguf, WrongMagicAndVersions) {
  auto bytes = sample_file().build();
  auto bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(error_of(bad).find("not a GGUF file"), std::string::npos);
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    bad = bytes;
    std::memcpy(bad.data() + 4, &v, 4);
    const std::string err = error_of(bad);
    EXPECT_NE(err.find("version"), std::string::npos) << err;
  }
  bad = bytes;
  const uint32_t one = 1;
  std::memcpy(bad.data() + 4, &one, 4);
  EXPECT_NE(error_of(bad).find("version 1 is not supported"), std::string::npos);
}

TEST(Gguf, AbsurdCountsAreRejected) {
  auto bytes = sample_file().build();
  for (uint64_t n : {1ull << 62, ~0ull, 1ull << 40}) {
    auto bad = bytes;
    std::memcpy(bad.data() + 8, &n, 8);  // tensor_count
    EXPECT_NE(error_of(bad).find("tensor_count"), std::string::npos);
    bad = bytes;
    std::memcpy(bad.data() + 16, &n, 8);  // metadata_kv_count
    EXPECT_NE(error_of(bad).find("metadata_kv_count"), std::string::npos);
  }
  // A string whose length runs past the end.
  GgufBuilder b;
  b.kv_raw("s", 8, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f});
  EXPECT_NE(error_of(b.build()).find("metadata 's'"), std::string::npos);
  // An array of 2^61 u32 elements.
  GgufBuilder a;
  std::vector<uint8_t> rec = {4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20};
  a.kv_raw("arr", 9, rec);
  EXPECT_NE(error_of(a.build()).find("larger than the rest of the file"), std::string::npos);
  // Arrays nested deep: refused at the first level.
  GgufBuilder d;
  std::vector<uint8_t> deep;
  for (int i = 0; i < 20; ++i) {
    const uint32_t t = 9;
    const uint64_t c = 1;
    deep.insert(deep.end(), (const uint8_t*)&t, (const uint8_t*)&t + 4);
    deep.insert(deep.end(), (const uint8_t*)&c, (const uint8_t*)&c + 8);
  }
  deep.resize(deep.size() + 64, 0);
  d.kv_raw("deep", 9, deep);
  EXPECT_NE(error_of(d.build()).find("arrays of arrays"), std::string::npos);
}

TEST(Gguf, BadTensorInfosAreRejected) {
  {
    GgufBuilder b;
    b.tensor("t", {4}, 77, std::vector<uint8_t>(16));
    EXPECT_NE(error_of(b.build()).find("unknown tensor type id 77"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.tensor("t", {1, 1, 1, 1, 1}, 0, std::vector<uint8_t>(4));
    EXPECT_NE(error_of(b.build()).find("n_dims"), std::string::npos);
  }
  {
    GgufBuilder b;  // 40 elements of Q8_0 is not a whole number of 32-element blocks
    b.tensor("q", {40}, 8, std::vector<uint8_t>(68));
    EXPECT_NE(error_of(b.build()).find("whole number of Q8_0 blocks"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.tensor("z", {4, 0}, 0, {});
    EXPECT_NE(error_of(b.build()).find("zero"), std::string::npos);
  }
  {
    GgufBuilder b;  // element count overflows int64
    b.tensor("big", {1ull << 40, 1ull << 40}, 0, {});
    EXPECT_NE(error_of(b.build()).find("overflows"), std::string::npos);
  }
  {
    GgufBuilder b;  // data runs past the end: claim 100 floats, store 4
    b.tensor("t", {100}, 0, f32_bytes({1, 2, 3, 4}));
    const std::string err = error_of(b.build());
    EXPECT_NE(err.find("past the end"), std::string::npos) << err;
    EXPECT_NE(err.find("'t'"), std::string::npos) << err;
  }
  {
    GgufBuilder b;
    b.kv_u32("k", 1);
    b.kv_u32("k", 2);
    EXPECT_NE(error_of(b.build()).find("duplicate"), std::string::npos);
  }
}

TEST(Gguf, MisalignedOffsetIsRejected) {
  GgufBuilder b;
  b.tensor("t", {4}, 0, f32_bytes({1, 2, 3, 4}));
  auto bytes = b.build();
  // The offset is the last 8 bytes of the tensor info, just before the padding.
  const std::string name = "t";
  auto it = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  const size_t off_pos = size_t(it - bytes.begin()) + 1 + 4 + 8 + 4;
  const uint64_t off = 3;
  std::memcpy(bytes.data() + off_pos, &off, 8);
  EXPECT_NE(error_of(bytes).find("alignment"), std::string::npos);
}

// Random corruption must give either a parsed file or a GgufError, never a crash (the
// sanitizer build checks for silent out-of-bounds reads).
TEST(Gguf, RandomCorruptionNeverCrashes) {
  const auto bytes = sample_file().build();
  std::mt19937 rng(7);
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto bad = bytes;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = uint8_t(rng());
    try {
      auto f = parse(bad);
      for (const auto& t : f->tensors()) ASSERT_LE(t.data + t.nbytes, bad.data() + bad.size());
    } catch (const GgufError&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100);
}

TEST(Gguf, OpenReportsMissingFile) {
  try {
    gguf::File::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf: cannot open"),
              std::string::npos);
  }
}

TEST(Gguf, ReadsSharedModels) {
  const char* dir = std::getenv("POLYSTACK_SHARED_DIR");
  const std::string path =
      std::string(dir ? dir : POLYSTACK_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::ifstream(path)) GTEST_SKIP() << "shared models not found at " << path;
  auto f = gguf::File::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->get_int("llama.block_count", 0, kLo, kHi), 5);
  EXPECT_EQ(f->require_array("tokenizer.ggml.tokens").count, 512u);
}

}  // namespace
}  // namespace ps
