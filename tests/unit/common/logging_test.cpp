#include "common/logging.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace rekindle {
namespace {

// 2026-11-30T07:31:02.123Z
constexpr std::int64_t when_ms = 1796023862123;

class logging_context : public ::testing::Test {
 protected:
  void TearDown() override {
    set_log_node("");
    set_log_rank(std::nullopt);
  }
};

TEST_F(logging_context, a_json_line_is_one_object_with_time_level_process_node_rank_epoch_and_message) {
  set_log_node("n1");
  set_log_rank(3);
  set_log_epoch(7);
  const auto line = format_log_line(log_format::json, when_ms, log_level::warn, "worker[n1/0]",
                                    "a \"quoted\" word\nand a second line\ttab \\ \x01");
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per event";
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["time"], "2026-11-30T07:31:02.123Z");
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["process"], "worker[n1/0]");
  EXPECT_EQ(j["node"], "n1");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_GE(j["epoch"].get<std::uint64_t>(), 7u);
  EXPECT_EQ(j["message"], "a \"quoted\" word\nand a second line\ttab \\ \x01");
}

TEST_F(logging_context, without_a_rank_or_node_they_are_null) {
  const auto j = nlohmann::json::parse(format_log_line(log_format::json, when_ms, log_level::info, "rekindle", "hi"));
  EXPECT_TRUE(j["node"].is_null());
  EXPECT_TRUE(j["rank"].is_null());
}

TEST_F(logging_context, a_text_line_names_the_node_rank_and_epoch_before_the_message) {
  set_log_node("n0");
  set_log_epoch(12);
  const auto line = format_log_line(log_format::text, when_ms, log_level::info, "rekindled[n0]", "event x");
  EXPECT_EQ(line.substr(0, 25), "2026-11-30T07:31:02.123Z ");
  EXPECT_NE(line.find(" I rekindled[n0] node=n0 epoch="), std::string::npos) << line;
  EXPECT_TRUE(line.ends_with(" event x")) << line;
  set_log_rank(2);
  EXPECT_NE(format_log_line(log_format::text, when_ms, log_level::error, "p", "m").find(" E p node=n0 rank=2 epoch="),
            std::string::npos);
}

TEST_F(logging_context, the_epoch_only_moves_forward) {
  set_log_epoch(100);
  set_log_epoch(5);
  const auto j = nlohmann::json::parse(format_log_line(log_format::json, when_ms, log_level::info, "p", "m"));
  EXPECT_GE(j["epoch"].get<std::uint64_t>(), 100u);
}

TEST(log_format, parses_text_and_json_and_names_the_choices_otherwise) {
  EXPECT_EQ(*parse_log_format("json"), log_format::json);
  EXPECT_EQ(*parse_log_format("text"), log_format::text);
  auto bad = parse_log_format("xml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("use text or json"), std::string::npos);
}

}  // namespace
}  // namespace rekindle
