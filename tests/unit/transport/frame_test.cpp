#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "transport/auth.hpp"
#include "transport/frame.hpp"

namespace rekindle::transport {
namespace {

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

frame_header sample_header() {
  frame_header h;
  h.type = 42;
  h.epoch = 7;
  h.src_node = 1;
  h.dst_node = 2;
  h.src_actor = "agent";
  h.dst_actor = "supervisor";
  return h;
}

TEST(frame, round_trips) {
  auto h = sample_header();
  const auto payload = bytes_of("rank 3 exited with signal 9");
  const auto wire = encode_header(h, payload);
  EXPECT_EQ(wire.size(), frame_fixed_size + 5 + 10);
  frame_header out;
  ASSERT_EQ(decode_header(wire, 1 << 20, out), drop_reason::none);
  EXPECT_EQ(out, h);
  EXPECT_EQ(check_payload(out, payload), drop_reason::none);
}

TEST(frame, each_corruption_has_its_reason) {
  auto h = sample_header();
  const auto payload = bytes_of("payload");
  const auto wire = encode_header(h, payload);
  frame_header out;
  std::string detail;

  auto bad = wire;
  bad[0] = std::byte{'X'};
  EXPECT_EQ(decode_header(bad, 1 << 20, out, &detail), drop_reason::bad_magic);
  EXPECT_EQ(detail, "byte 0: magic is not RKND");

  bad = wire;
  bad[4] = std::byte{9};
  EXPECT_EQ(decode_header(bad, 1 << 20, out, &detail), drop_reason::bad_version);
  EXPECT_EQ(detail, "byte 4: version 9, this build speaks 1");

  EXPECT_EQ(decode_header(std::span{wire}.first(20), 1 << 20, out), drop_reason::truncated);
  EXPECT_EQ(decode_header(std::span{wire}.first(wire.size() - 1), 1 << 20, out), drop_reason::truncated);

  bad = wire;
  bad[40] = std::byte{200};
  EXPECT_EQ(decode_header(bad, 1 << 20, out), drop_reason::bad_header);

  EXPECT_EQ(decode_header(wire, 3, out, &detail), drop_reason::oversize);
  EXPECT_EQ(detail, "byte 24: payload of 7 bytes exceeds the limit of 3");

  ASSERT_EQ(decode_header(wire, 1 << 20, out), drop_reason::none);
  auto tampered = payload;
  tampered[2] = std::byte{'X'};
  EXPECT_EQ(check_payload(out, tampered), drop_reason::bad_checksum);
  EXPECT_EQ(check_payload(out, std::span{payload}.first(3)), drop_reason::bad_length);

  bad = wire;
  bad[8] = std::byte{99};  // epoch changed after the checksum was taken
  ASSERT_EQ(decode_header(bad, 1 << 20, out), drop_reason::none);
  EXPECT_EQ(check_payload(out, payload), drop_reason::bad_checksum);
}

// Seeded random garbage, and random mutations of valid frames, never crash the decoder and are
// never accepted with a wrong checksum.
TEST(frame, fuzzed_input_is_rejected_or_consistent) {
  std::mt19937_64 rng{20261130};
  auto h = sample_header();
  const auto payload = bytes_of("a control message body");
  const auto wire = encode_header(h, payload);
  std::size_t accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<std::byte> buf;
    if (i % 2 == 0) {
      buf.resize(rng() % (max_header_size + 8));
      for (auto& b : buf)
        b = std::byte(rng());
      if (i % 4 == 0 && buf.size() >= 4)
        std::memcpy(buf.data(), &frame_magic, 4);
    } else {
      buf = wire;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f)
        buf[rng() % buf.size()] = std::byte(rng());
    }
    frame_header out;
    if (decode_header(buf, 1 << 20, out) != drop_reason::none)
      continue;
    if (check_payload(out, payload) == drop_reason::none) {
      ++accepted;
      EXPECT_EQ(out, h) << "a mutated header passed the checksum";
    }
  }
  EXPECT_LT(accepted, 200000u);
}

TEST(auth, proofs_bind_token_label_and_nonces) {
  const auto a = random_nonce();
  const auto b = random_nonce();
  EXPECT_NE(a, b);
  const auto p = make_proof("secret-token-0123456789", "client", a, b);
  EXPECT_TRUE(proofs_equal(p, make_proof("secret-token-0123456789", "client", a, b)));
  EXPECT_FALSE(proofs_equal(p, make_proof("secret-token-0123456788", "client", a, b)));
  EXPECT_FALSE(proofs_equal(p, make_proof("secret-token-0123456789", "server", a, b)));
  EXPECT_FALSE(proofs_equal(p, make_proof("secret-token-0123456789", "client", b, a)));
  EXPECT_EQ(verify_client(p, "secret-token-0123456789", "", a, b), peer_role::admin);
  EXPECT_EQ(verify_client(p, "other", "secret-token-0123456789", a, b), peer_role::readonly);
  EXPECT_EQ(verify_client(p, "other", "", a, b), std::nullopt);
}

}  // namespace
}  // namespace rekindle::transport
