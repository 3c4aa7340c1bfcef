#include <gtest/gtest.h>

#include "common/files.hpp"
#include "config/planner_files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using testing::run_process;

std::string rekindle_bin() { return (testing::bin_dir() / "rekindle").string(); }

// A small model so that the whole profile takes well under a second.
std::vector<std::string> profile_args(const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {rekindle_bin(), "profile",           "--width", "64", "--heads",   "4",
                                   "--seq-len",    "16",    "--layers", "3",       "--global-batch", "8",
                                   "--runs",       "2",     "--out",    out};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(rekindle_profile, writes_a_model_file_the_planner_reads_and_plans_with) {
  testing::temp_dir dir{"rekindle-profile"};
  const auto model = (dir.path() / "model.toml").string();
  auto r = run_process(profile_args(model, {"--micro-batches", "1,2,4", "--tensor", "1,2", "--type", "vm"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The table: a row per point, blocks and the head, each with positive times.
  EXPECT_NE(r.out.find("layer  micro-batch  tensor"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("12 points written to " + model), std::string::npos) << r.err;
  auto text = read_file_bounded(model, 1 << 20, "model file");
  ASSERT_TRUE(text) << text.error();
  auto parsed = config::parse_plan_model(*text, model);
  ASSERT_TRUE(parsed.ok()) << parsed.error_text() << "\n" << *text;
  const auto& m = *parsed.value;
  EXPECT_EQ(m.layers, 3u);
  EXPECT_EQ(m.hidden, 64u);
  EXPECT_EQ(m.heads, 4u);
  EXPECT_EQ(m.ffn_hidden, 256u);
  EXPECT_EQ(m.seq_len, 16u);
  EXPECT_EQ(m.vocab, 256u);
  EXPECT_EQ(m.global_batch, 8u);
  EXPECT_EQ(m.micro_batch_sizes, (std::vector<std::uint32_t>{1, 2, 4}));
  ASSERT_EQ(m.measured.size(), 12u) << "3 micro-batch sizes x 2 tensor degrees x (block, head)";
  int heads = 0;
  for (const auto& x : m.measured) {
    EXPECT_EQ(x.type, "vm");
    EXPECT_GT(x.forward, 0);
    EXPECT_GT(x.backward, 0);
    EXPECT_TRUE(x.layers.empty()) << "a point for every block";
    heads += x.kind == config::plan_layer_kind::head;
  }
  EXPECT_EQ(heads, 6);

  // The planner plans with the points on a cluster of that device type.
  const auto cluster = dir.write("cluster.toml", R"([cluster]
name = "vm"
[types.vm]
bf16_tflops = 0.05
memory = "4GB"
reserved_memory = "0B"
memory_bandwidth = "10GB/s"
link_bandwidth = "5GB/s"
[[nodes]]
name = "n"
type = "vm"
devices = 2
)");
  auto plan = run_process({rekindle_bin(), "plan", "--cluster", cluster.string(), "--model", model, "--explain"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err << plan.out;
  EXPECT_NE(plan.out.find("model built-in-3x64"), std::string::npos) << plan.out;
}

TEST(rekindle_profile, a_point_the_model_cannot_have_is_refused_before_anything_is_measured) {
  testing::temp_dir dir{"rekindle-profile"};
  const auto model = (dir.path() / "model.toml").string();
  auto r = run_process(profile_args(model, {"--tensor", "3"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("tensor degree 3 does not divide the 4 heads"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "nothing measured: " << r.out;
  EXPECT_FALSE(std::filesystem::exists(model));
  r = run_process(profile_args(model, {"--micro-batches", "3"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--micro-batches: 3 does not divide the global batch 8"), std::string::npos) << r.err;
  r = run_process(profile_args(model, {"--config", (dir.path() / "missing.toml").string()}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.toml"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rekindle
