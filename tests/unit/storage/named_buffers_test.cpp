#include "storage/named_buffers.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/checksum.hpp"

namespace rekindle::storage {
namespace {

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span{v}); }

TEST(named_buffers, round_trip_keeps_names_order_and_bytes_and_the_checksum_is_of_the_written_bytes) {
  const std::vector<float> weight{1.5f, -2.0f, 3.25f};
  const std::vector<float> empty;
  const std::string meta = "small record";
  const std::vector<named_buffer> in{{"model.weight", bytes_of(weight)},
                                     {"empty", bytes_of(empty)},
                                     {"__meta__", std::as_bytes(std::span{meta.data(), meta.size()})}};
  auto size = named_buffers_size(in);
  ASSERT_TRUE(size) << size.error().message();
  std::vector<std::byte> dst(*size + 100, std::byte{0x5a});
  auto written = write_named_buffers(dst, in);
  ASSERT_TRUE(written) << written.error().message();
  EXPECT_EQ(written->first, *size);
  EXPECT_EQ(written->second, snapshot_checksum(std::span{dst.data(), *size}));
  auto out = read_named_buffers(std::span{dst.data(), *size});
  ASSERT_TRUE(out) << out.error().message();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0].name, "model.weight");
  ASSERT_EQ((*out)[0].bytes.size(), weight.size() * sizeof(float));
  EXPECT_EQ(std::memcmp((*out)[0].bytes.data(), weight.data(), (*out)[0].bytes.size()), 0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>((*out)[0].bytes.data()) % 64, reinterpret_cast<std::uintptr_t>(dst.data()) % 64);
  EXPECT_TRUE((*out)[1].bytes.empty());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*out)[2].bytes.data()), (*out)[2].bytes.size()), meta);
}

TEST(named_buffers, a_state_larger_than_the_destination_is_refused_with_both_sizes) {
  const std::vector<float> big(1000, 1.0f);
  const std::vector<named_buffer> in{{"w", bytes_of(big)}};
  std::vector<std::byte> dst(512);
  auto written = write_named_buffers(dst, in);
  ASSERT_FALSE(written);
  EXPECT_EQ(written.error().code(), errc::resource_exhausted);
  EXPECT_NE(written.error().message().find("slot holds 512"), std::string::npos) << written.error().message();
}

TEST(named_buffers, bad_names_are_refused_naming_the_buffer) {
  const std::vector<float> v{1};
  EXPECT_NE(named_buffers_size(std::vector<named_buffer>{{"a", bytes_of(v)}, {"a", bytes_of(v)}})
                .error()
                .message()
                .find("'a' is given twice"),
            std::string::npos);
  EXPECT_FALSE(named_buffers_size(std::vector<named_buffer>{{"", bytes_of(v)}}));
  const std::string longname(2000, 'x');
  EXPECT_FALSE(named_buffers_size(std::vector<named_buffer>{{longname, bytes_of(v)}}));
}

TEST(named_buffers, damaged_layouts_are_refused_naming_the_byte) {
  const std::vector<float> v{1, 2, 3, 4};
  const std::vector<named_buffer> in{{"w", bytes_of(v)}};
  std::vector<std::byte> good(*named_buffers_size(in));
  ASSERT_TRUE(write_named_buffers(good, in));
  // Not a layout at all.
  auto r = read_named_buffers(std::span{good.data(), 10});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::data_loss);
  // A huge count.
  auto bad = good;
  const std::uint32_t huge = 0xffffffffu;
  std::memcpy(bad.data() + 8, &huge, 4);
  r = read_named_buffers(bad);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("byte 8"), std::string::npos) << r.error().message();
  // A buffer whose range runs past the end.
  bad = good;
  const std::uint64_t far = 1ull << 40;
  std::memcpy(bad.data() + 24 + 8, &far, 8);
  r = read_named_buffers(bad);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("buffer 'w'"), std::string::npos) << r.error().message();
  // Truncated: the stated length is over the bytes there.
  r = read_named_buffers(std::span{good.data(), good.size() - 1});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("byte 16"), std::string::npos) << r.error().message();
}

}  // namespace
}  // namespace rekindle::storage
