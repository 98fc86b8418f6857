#include "core/large_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace ps {
namespace {

TEST(LargeBuffer, StartsOnA2MiBBoundaryAndHoldsEveryByteAskedFor) {
  for (size_t bytes : {size_t(1), size_t(4095), (size_t(5) << 20) + 3}) {
    LargeBuffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (uintptr_t(2) << 20), 0u);
    auto* p = static_cast<unsigned char*>(b.data());
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << "byte " << i << " of " << bytes;
    std::memset(p, 0xa5, bytes);
    EXPECT_EQ(p[bytes - 1], 0xa5);
  }
}

TEST(LargeBuffer, MovesOwnership) {
  LargeBuffer a(100);
  void* p = a.data();
  LargeBuffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_EQ(a.size(), 0u);
  LargeBuffer c(7);
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 100u);
  LargeBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
}

}  // namespace
}  // namespace ps
