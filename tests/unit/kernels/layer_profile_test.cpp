#include <gtest/gtest.h>

#include <cmath>

#include "kernels/layer_profile.hpp"

namespace rekindle::kernels {
namespace {

model_shape small() {
  model_shape s;
  s.layers = 2;
  s.heads = 4;
  s.width = 64;
  s.seq_len = 16;
  return s;
}

TEST(layer_profile, every_point_of_a_block_and_the_head_is_timed) {
  for (auto layer : {profiled_layer::block, profiled_layer::head})
    for (std::uint32_t t : {1u, 2u, 4u})
      for (std::uint32_t b : {1u, 3u}) {
        auto times = profile_cpu_layer(small(), layer, b, t, 2);
        ASSERT_TRUE(times) << times.error();
        EXPECT_TRUE(std::isfinite(times->forward) && times->forward > 0);
        EXPECT_TRUE(std::isfinite(times->backward) && times->backward > 0);
      }
}

TEST(layer_profile, a_point_the_model_cannot_have_names_the_figure) {
  const auto message = [](const status& s) { return s.message(); };
  auto s = check_profile_point(small(), profiled_layer::block, 1, 3, 5);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_EQ(message(s), "tensor degree 3 does not divide the 4 heads");
  s = check_profile_point(small(), profiled_layer::head, 1, 3, 5);
  EXPECT_EQ(message(s), "tensor degree 3 does not divide the vocabulary of 256");
  EXPECT_EQ(message(check_profile_point(small(), profiled_layer::block, 0, 1, 5)),
            "micro-batch size 0: it must be at least 1");
  EXPECT_EQ(message(check_profile_point(small(), profiled_layer::block, 1, 1, 0)), "runs 0: from 1 to 1000");
  EXPECT_EQ(check_profile_point(small(), profiled_layer::block, 1, 0, 5).code(), errc::invalid_argument);
  EXPECT_TRUE(check_profile_point(small(), profiled_layer::head, 2, 2, 5).ok());
  auto refused = profile_cpu_layer(small(), profiled_layer::block, 1, 3, 5);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), errc::invalid_argument);
}

}  // namespace
}  // namespace rekindle::kernels
