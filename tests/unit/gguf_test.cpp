#include <gtest/gtest.h>
#include "gguf/gguf.h"
TEST(Gguf, Placeholder) { EXPECT_EQ(ps::gguf::value_type_name(ps::gguf::ValueType::F32), "f32"); }
