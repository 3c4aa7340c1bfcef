#include "storage/shard_file.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "common/checksum.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::storage {
namespace {

namespace fs = std::filesystem;

std::vector<std::byte> payload(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return v;
}

// The sorted names of the files in `dir`.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void flip_byte(const fs::path& p, std::uint64_t offset) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

struct shard_fixture : ::testing::Test {
  testing::temp_dir dir{"rekindle-shard"};
  const std::string name = shard_file_name(step_t{42}, rank_id{3});
  fs::path file() const { return dir.path() / name; }
};

TEST_F(shard_fixture, a_written_shard_reads_back_verified) {
  EXPECT_EQ(name, "ckpt-000000000042-r000003.shard");
  const auto data = payload(10 << 20, 1);  // spans several write chunks
  auto info = write_shard(dir.path(), name, step_t{42}, rank_id{3}, data);
  ASSERT_TRUE(info.has_value()) << info.to_status();
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(info->checksum, snapshot_checksum(data));
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{name}) << "no temporary file is left";
  EXPECT_EQ(fs::file_size(file()), shard_header_bytes + data.size());

  std::vector<std::byte> back;
  auto read = read_shard(file(), back, shard_expectation{step_t{42}, rank_id{3}, data.size(), snapshot_checksum(data)});
  ASSERT_TRUE(read.has_value()) << read.to_status();
  EXPECT_EQ(*read, *info);
  EXPECT_EQ(back, data);
  EXPECT_EQ(*verify_shard(file()), *info);
}

TEST_F(shard_fixture, an_empty_payload_is_a_valid_shard) {
  ASSERT_TRUE(write_shard(dir.path(), name, step_t{1}, rank_id{0}, {}).has_value());
  std::vector<std::byte> back{std::byte{1}};
  ASSERT_TRUE(read_shard(file(), back).has_value());
  EXPECT_TRUE(back.empty());
}

TEST_F(shard_fixture, a_shard_that_differs_from_its_manifest_is_named) {
  const auto data = payload(1000, 2);
  ASSERT_TRUE(write_shard(dir.path(), name, step_t{42}, rank_id{3}, data).has_value());
  auto st = verify_shard(file(), shard_expectation{step_t{42}, rank_id{2}, {}, {}}).to_status();
  EXPECT_EQ(st.code(), errc::data_loss);
  EXPECT_NE(st.message().find(name + " byte 24: rank 3, the manifest says 2"), std::string::npos) << st;
  st = verify_shard(file(), shard_expectation{step_t{41}, {}, {}, {}}).to_status();
  EXPECT_NE(st.message().find("byte 16: step 42, the manifest says 41"), std::string::npos) << st;
  st = verify_shard(file(), shard_expectation{{}, {}, {}, 7}).to_status();
  EXPECT_NE(st.message().find("byte 40: payload checksum"), std::string::npos) << st;
}

TEST_F(shard_fixture, damage_is_reported_with_its_place) {
  const auto data = payload(5000, 3);
  auto write = [&] { ASSERT_TRUE(write_shard(dir.path(), name, step_t{42}, rank_id{3}, data).has_value()); };
  auto error_of = [&] {
    std::vector<std::byte> back{std::byte{9}};
    auto r = read_shard(file(), back);
    EXPECT_EQ(back.size(), 1u) << "the output is untouched on error";
    EXPECT_EQ(r.to_status().code(), errc::data_loss);
    return r.to_status().message();
  };

  write();
  fs::resize_file(file(), 10);
  EXPECT_NE(error_of().find("truncated at byte 10: the header needs 64 bytes"), std::string::npos) << error_of();

  write();
  fs::resize_file(file(), 3000);
  EXPECT_NE(error_of().find("truncated at byte 3000: the header (byte 32) says 64 + 5000 = 5064 bytes"),
            std::string::npos)
      << error_of();

  write();
  fs::resize_file(file(), 5070);
  EXPECT_NE(error_of().find("6 extra bytes after the payload, from byte 5064"), std::string::npos) << error_of();

  write();
  flip_byte(file(), 2);
  EXPECT_NE(error_of().find(name + " byte 0: wrong magic"), std::string::npos) << error_of();

  write();
  flip_byte(file(), 20);
  EXPECT_NE(error_of().find("byte 56: header checksum mismatch"), std::string::npos) << error_of();

  write();
  flip_byte(file(), 64 + 4321);
  EXPECT_NE(error_of().find("payload checksum mismatch"), std::string::npos) << error_of();
  EXPECT_NE(error_of().find("over bytes [64, 5064)"), std::string::npos) << error_of();

  fs::remove(file());
  std::vector<std::byte> back;
  EXPECT_EQ(read_shard(file(), back).to_status().code(), errc::not_found);
}

// Fails the write at a chosen place, as a full disk or a failing hook would.
struct failing_hooks final : shard_file_hooks {
  std::optional<shard_sync_point> fail_at;
  std::uint64_t fail_write_at = ~0ull;
  std::size_t partial = 0;
  std::vector<shard_sync_point> seen;

  status at(shard_sync_point p, const fs::path& f) override {
    seen.push_back(p);
    if (fail_at == p)
      return status{errc::aborted, "injected at " + std::string{to_string(p)} + " " + f.filename().string()};
    return {};
  }
  int before_write(std::uint64_t offset, std::size_t size, std::size_t& part) override {
    if (offset <= fail_write_at && fail_write_at < offset + size) {
      part = partial;
      return ENOSPC;
    }
    return 0;
  }
};

TEST_F(shard_fixture, a_full_disk_leaves_no_file_and_keeps_the_previous_one) {
  const auto old_data = payload(3000, 4);
  ASSERT_TRUE(write_shard(dir.path(), name, step_t{42}, rank_id{3}, old_data).has_value());

  failing_hooks hooks;
  hooks.fail_write_at = 64 + 1000;
  hooks.partial = 500;
  shard_write_options o;
  o.hooks = &hooks;
  const auto st = write_shard(dir.path(), name, step_t{42}, rank_id{3}, payload(3000, 5), o).to_status();
  EXPECT_EQ(st.code(), errc::resource_exhausted);
  EXPECT_NE(st.message().find("step 2: write of 3000 bytes at offset 564 (after 500 bytes): No space left on device"),
            std::string::npos)
      << st;
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{name}) << "the temporary file is gone";
  std::vector<std::byte> back;
  ASSERT_TRUE(read_shard(file(), back).has_value());
  EXPECT_EQ(back, old_data) << "the earlier complete shard is untouched";
}

TEST_F(shard_fixture, a_failure_before_the_rename_leaves_nothing) {
  for (auto p : {shard_sync_point::after_write, shard_sync_point::after_fsync}) {
    failing_hooks hooks;
    hooks.fail_at = p;
    shard_write_options o;
    o.hooks = &hooks;
    const auto st = write_shard(dir.path(), name, step_t{1}, rank_id{0}, payload(100, 6), o).to_status();
    EXPECT_EQ(st.code(), errc::aborted) << to_string(p);
    EXPECT_NE(st.message().find(name + ".tmp"), std::string::npos) << st;
    EXPECT_TRUE(files_in(dir.path()).empty()) << to_string(p);
  }
}

TEST_F(shard_fixture, a_failure_after_the_rename_leaves_a_complete_file) {
  failing_hooks hooks;
  hooks.fail_at = shard_sync_point::after_rename;
  shard_write_options o;
  o.hooks = &hooks;
  const auto data = payload(100, 7);
  EXPECT_EQ(write_shard(dir.path(), name, step_t{1}, rank_id{0}, data, o).to_status().code(), errc::aborted);
  EXPECT_EQ(hooks.seen, (std::vector<shard_sync_point>{shard_sync_point::after_write, shard_sync_point::after_fsync,
                                                       shard_sync_point::after_rename}));
  std::vector<std::byte> back;
  ASSERT_TRUE(read_shard(file(), back).has_value());
  EXPECT_EQ(back, data);
}

TEST_F(shard_fixture, a_payload_that_changes_while_written_is_refused) {
  shard_write_options o;
  o.expected_checksum = 12345;
  const auto st = write_shard(dir.path(), name, step_t{1}, rank_id{0}, payload(100, 8), o).to_status();
  EXPECT_EQ(st.code(), errc::aborted);
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST_F(shard_fixture, bad_names_and_missing_directories) {
  for (const char* bad : {"x.bin", ".shard", "a/b.shard"})
    EXPECT_EQ(write_shard(dir.path(), bad, step_t{1}, rank_id{0}, {}).to_status().code(), errc::invalid_argument)
        << bad;
  EXPECT_EQ(write_shard(dir.path() / "missing", name, step_t{1}, rank_id{0}, {}).to_status().code(), errc::not_found);
  EXPECT_EQ(parse_shard_sync_point("after_fsync").value(), shard_sync_point::after_fsync);
  EXPECT_EQ(parse_shard_sync_point("later").to_status().code(), errc::parse_error);
}

TEST_F(shard_fixture, garbage_collection_keeps_what_manifests_reference) {
  const auto keep = shard_file_name(step_t{10}, rank_id{0});
  const auto orphan = shard_file_name(step_t{20}, rank_id{0});
  ASSERT_TRUE(write_shard(dir.path(), keep, step_t{10}, rank_id{0}, payload(10, 1)).has_value());
  ASSERT_TRUE(write_shard(dir.path(), orphan, step_t{20}, rank_id{0}, payload(20, 1)).has_value());
  dir.write(shard_file_name(step_t{30}, rank_id{1}) + ".tmp", "half");
  dir.write("notes.txt", "not ours");
  auto report = collect_garbage(dir.path(), {keep});
  ASSERT_TRUE(report.has_value()) << report.to_status();
  EXPECT_EQ(report->removed, (std::vector<std::string>{orphan, shard_file_name(step_t{30}, rank_id{1}) + ".tmp"}));
  EXPECT_EQ(report->bytes, 64u + 20 + 4);
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{keep, "notes.txt"}));
  EXPECT_EQ(collect_garbage(dir.path() / "missing", {}).to_status().code(), errc::not_found);
}

}  // namespace
}  // namespace rekindle::storage
