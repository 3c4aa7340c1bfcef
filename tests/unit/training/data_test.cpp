#include "training/data.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"

namespace rekindle::training {
namespace {

TEST(corpus, synthetic_is_fixed_text_with_structure) {
  const corpus a = corpus::synthetic();
  const corpus b = corpus::synthetic();
  EXPECT_GE(a.bytes().size(), 256u * 1024);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(a.name(), "synthetic");
  // Few distinct bytes, all printable or newline: far less entropy than ln(256) per byte.
  std::set<std::uint8_t> distinct(a.bytes().begin(), a.bytes().end());
  EXPECT_LT(distinct.size(), 64u);
  for (auto c : distinct)
    EXPECT_TRUE(c == '\n' || (c >= 32 && c < 127)) << int{c};
  const std::string text(a.bytes().begin(), a.bytes().begin() + 2000);
  EXPECT_NE(text.find(" plus "), std::string::npos);
  EXPECT_NE(text.find(". "), std::string::npos);
}

TEST(corpus, file_errors_name_the_file_and_the_problem) {
  testing::temp_dir dir;
  auto missing = corpus::from_file(dir.path() / "nope.txt", 8);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), errc::not_found);
  EXPECT_NE(missing.error().message().find("nope.txt' does not exist"), std::string::npos) << missing.error();

  auto empty = corpus::from_file(dir.write("empty.txt", ""), 8);
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.error().message().find("is empty"), std::string::npos) << empty.error();

  auto shorter = corpus::from_file(dir.write("short.txt", "12345678"), 8);
  ASSERT_FALSE(shorter.has_value());
  EXPECT_NE(shorter.error().message().find("holds 8 bytes"), std::string::npos) << shorter.error();
  EXPECT_NE(shorter.error().message().find("seq_len + 1 = 9"), std::string::npos) << shorter.error();

  auto dir_as_file = corpus::from_file(dir.path(), 8);
  ASSERT_FALSE(dir_as_file.has_value());
  EXPECT_NE(dir_as_file.error().message().find("not a regular file"), std::string::npos);

  auto ok = corpus::from_file(dir.write("ok.txt", "123456789"), 8);
  ASSERT_TRUE(ok.has_value()) << ok.error();
  EXPECT_EQ(ok->bytes().size(), 9u);
}

TEST(sampler, batches_depend_only_on_seed_step_and_index) {
  const corpus data = corpus::synthetic();
  const sampler s1(data, 5, 16, 3), s2(data, 5, 16, 3), other_seed(data, 6, 16, 3);
  std::vector<std::int32_t> t1(48), y1(48), t2(48), y2(48);
  s1.fill(10, 2, t1, y1);
  s2.fill(10, 2, t2, y2);
  EXPECT_EQ(t1, t2);
  EXPECT_EQ(y1, y2);
  // Targets are the next bytes.
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t t = 0; t + 1 < 16; ++t)
      EXPECT_EQ(y1[r * 16 + t], t1[r * 16 + t + 1]);
  // Other steps, indices, rows and seeds start elsewhere.
  std::set<std::uint64_t> starts;
  for (std::uint64_t step = 0; step < 4; ++step)
    for (std::uint64_t i = 0; i < 4; ++i)
      for (std::uint32_t r = 0; r < 3; ++r)
        starts.insert(s1.window_start(step, i, r));
  EXPECT_EQ(starts.size(), 48u);
  EXPECT_NE(s1.window_start(1, 0, 0), other_seed.window_start(1, 0, 0));
  for (auto st : starts)
    EXPECT_LT(st + 16, data.bytes().size());
}

TEST(sampler, windows_cover_a_small_corpus) {
  // 22 bytes, windows of 20 tokens plus one target: only starts 0 and 1 exist; both appear.
  std::vector<std::uint8_t> bytes(22);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<std::uint8_t>('a' + i);
  const sampler s(corpus::from_bytes("tiny", bytes), 1, 20, 1);
  std::set<std::uint64_t> seen;
  for (std::uint64_t step = 0; step < 64; ++step)
    seen.insert(s.window_start(step, 0, 0));
  EXPECT_EQ(seen, (std::set<std::uint64_t>{0, 1}));
}

}  // namespace
}  // namespace rekindle::training
