#include "storage/manifest_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/files.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::storage {
namespace {

checkpoint_manifest two_ranks() {
  checkpoint_manifest m;
  m.step = step_t{40};
  m.world_size = 2;
  m.layout_version = 2;
  m.committed = true;
  m.shards = {{rank_id{0}, "ckpt-000000000040-r000000.shard", 812, 99},
              {rank_id{1}, "ckpt-000000000040-r000001.shard", 813, 100}};
  return m;
}

TEST(manifest_file, what_the_supervisor_writes_a_tool_reads_back) {
  testing::temp_dir dir;
  const auto m = two_ranks();
  ASSERT_TRUE(write_manifest_file(dir.path(), m).ok());
  EXPECT_EQ(manifest_file_name(step_t{40}), "ckpt-000000000040.manifest.json");
  const auto back = read_manifest_file(dir.path() / manifest_file_name(step_t{40}));
  ASSERT_TRUE(back.has_value()) << back.error();
  EXPECT_EQ(*back, m);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "ckpt-000000000040.manifest.json.tmp"));
}

TEST(manifest_file, a_bad_manifest_is_refused_naming_the_file_and_the_field) {
  const auto error = [](const std::string& text) {
    auto r = parse_manifest_file(text, "m.json");
    return r.has_value() ? std::string{"accepted"} : r.error().message();
  };
  EXPECT_EQ(error(R"({"step": 1, "world_size": 0, "shards": []})"), "m.json: world_size 0 is not from 1 to 1048576");
  EXPECT_EQ(error(R"({"step": 1, "world_size": 4000000000, "shards": []})"),
            "m.json: world_size 4000000000 is not from 1 to 1048576");
  EXPECT_EQ(error(R"({"step": -1, "world_size": 1, "shards": []})"), "m.json: step is missing or not a whole number");
  EXPECT_EQ(error(R"({"step": 1, "world_size": 1})"), "m.json: shards is missing or not a list");
  EXPECT_EQ(error(R"({"step": 1, "world_size": 1, "shards": [{"rank": 0, "file": "a", "size": 1, "checksum": 1},
                                                             {"rank": 0, "file": "b", "size": 1, "checksum": 1}]})"),
            "m.json: 2 shards for a world_size of 1 (one shard per rank)");
  EXPECT_EQ(error(R"({"step": 1, "world_size": 2, "shards": [{"rank": 2, "file": "a", "size": 1, "checksum": 1}]})"),
            "m.json: shards[0].rank 2 is not below world_size 2");
  EXPECT_EQ(error(R"({"step": 1, "world_size": 1, "shards": [{"rank": 0, "file": "../../etc/hostname", "size": 1,
                                                              "checksum": 1}]})"),
            "m.json: shards[0].file '../../etc/hostname' is not a file name in the checkpoint's directory");
  EXPECT_EQ(error(R"({"step": 1, "world_size": 1, "shards": [{"rank": 0, "size": 1, "checksum": 1}]})"),
            "m.json: shards[0].file is missing or not text");
  EXPECT_EQ(error(std::string(100, '[') + std::string(100, ']')), "m.json: nested 100 levels deep; a manifest has 2");
  EXPECT_EQ(error("{").substr(0, 16), "m.json: not JSON");
}

TEST(manifest_file, a_directory_or_a_fifo_is_not_a_manifest) {
  testing::temp_dir dir;
  const auto r = read_manifest_file(dir.path());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find(dir.path().string()), std::string::npos) << r.error();
}

}  // namespace
}  // namespace rekindle::storage
