// A program that finds OpenBLAS running kernels below its CPU runs itself again with
// OPENBLAS_CORETYPE set (bin/tools/blas_probe, as the daemon and the worker do at start).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "kernels/blas_core.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::kernels {
namespace {

nlohmann::json probe(const std::vector<std::string>& args, const testing::environment& env = {}) {
  std::vector<std::string> argv{(testing::bin_dir() / "tools/blas_probe").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = testing::run_process(argv, std::chrono::seconds{60}, {}, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_TRUE(j.is_object()) << r.out << r.err;
  return j.is_object() ? j : nlohmann::json::object();
}

class blas_core_process : public ::testing::Test {
 protected:
  void SetUp() override { ::unsetenv("OPENBLAS_CORETYPE"); }
};

TEST_F(blas_core_process, openblas_s_own_sound_choice_stands) {
  const auto j = probe({});
  EXPECT_EQ(j.value("correction", "?"), "") << j.dump();
  EXPECT_EQ(j.value("warning", "?"), "") << j.dump();
  EXPECT_NE(j.value("describe", "").find("OpenBLAS's choice"), std::string::npos) << j.dump();
}

TEST_F(blas_core_process, a_misdetected_cpu_runs_again_with_the_kernels_its_features_call_for) {
  const auto want = corrected_core("Prescott", level_of_this_cpu());
  if (!want)
    GTEST_SKIP() << "this CPU has no AVX2: generic kernels are the right ones here";
  const auto j = probe({"Prescott"});
  EXPECT_EQ(j.value("core", ""), *want) << j.dump();
  EXPECT_NE(j.value("correction", "").find("OpenBLAS had picked Prescott kernels"), std::string::npos) << j.dump();
  EXPECT_NE(j.value("correction", "").find("OPENBLAS_CORETYPE=" + *want), std::string::npos) << j.dump();
  EXPECT_EQ(j.value("warning", "?"), "") << j.dump();
}

TEST_F(blas_core_process, a_users_own_slow_coretype_is_kept_with_a_warning) {
  if (!corrected_core("Prescott", level_of_this_cpu()))
    GTEST_SKIP() << "this CPU has no AVX2: generic kernels are the right ones here";
  const auto j = probe({}, {{"OPENBLAS_CORETYPE", "Prescott"}});
  EXPECT_EQ(j.value("core", ""), "Prescott") << "the user's choice is kept: " << j.dump();
  EXPECT_NE(j.value("warning", "").find("several times slower"), std::string::npos) << j.dump();
}

}  // namespace
}  // namespace rekindle::kernels
