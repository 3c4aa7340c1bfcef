// rekindle checkpoint list|verify on directories made by hand: bad input is named precisely.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/checksum.hpp"
#include "storage/shard_file.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using testing::run_process;

std::string rekindle_bin() { return (testing::bin_dir() / "rekindle").string(); }

TEST(rekindle_checkpoint, a_manifest_without_a_field_is_named_with_the_field_and_exits_2) {
  testing::temp_dir dir;
  dir.write("ckpt-000000000020.manifest.json",
            R"({"step": 20, "world_size": 1, "shards": [{"rank": 0, "file": "x.shard", "size": 10}]})");
  auto r = run_process({rekindle_bin(), "checkpoint", "verify", dir.path().string()});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("ckpt-000000000020.manifest.json: shards[0].checksum is missing"), std::string::npos) << r.err;
}

TEST(rekindle_checkpoint, a_missing_rank_and_a_stray_file_are_reported) {
  testing::temp_dir dir;
  std::vector<std::byte> payload(1000, std::byte{7});
  auto info = storage::write_shard(dir.path(), storage::shard_file_name(step_t{40}, rank_id{0}), step_t{40},
                                   rank_id{0}, payload);
  ASSERT_TRUE(info.has_value());
  nlohmann::json m{{"step", 40},
                   {"world_size", 2},
                   {"layout_version", 1},
                   {"shards", {{{"rank", 0}, {"file", storage::shard_file_name(step_t{40}, rank_id{0})},
                                {"size", 1000}, {"checksum", info->checksum}}}}};
  dir.write("ckpt-000000000040.manifest.json", m.dump());
  dir.write(storage::shard_file_name(step_t{60}, rank_id{0}) + ".tmp", "half");
  auto r = run_process({rekindle_bin(), "checkpoint", "verify", dir.path().string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("no shard of rank 1 in a world of 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stray: ckpt-000000000060-r000000.shard.tmp"), std::string::npos) << r.out;
  auto l = run_process({rekindle_bin(), "checkpoint", "list", dir.path().string()});
  EXPECT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.out.find("40"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("1 file(s) belong to no committed checkpoint"), std::string::npos) << l.out;
}

}  // namespace
}  // namespace rekindle
