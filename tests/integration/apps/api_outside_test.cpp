// The worker API used outside rekindle: a helpful error at once, not a hang.

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "tests/support/process.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;

TEST(worker_api, a_program_started_outside_rekindle_is_told_so_at_once) {
  const std::string python = "/usr/bin/python3";
  const std::filesystem::path package = REKINDLE_BIN_DIR "/../python";
  if (::access(python.c_str(), X_OK) != 0)
    GTEST_SKIP() << python << " is missing (Debian package python3; scripts/setup-deps installs it)";
  if (!std::filesystem::exists(package / "rekindle" / "__init__.py"))
    GTEST_SKIP() << "the rekindle Python package was not built (needs pybind11-dev and python3-dev: scripts/setup-deps)";
  if (testing::run_process({python, "-c", "import torch"}, 60s).exit_code != 0)
    GTEST_SKIP() << "python3-torch is not installed (scripts/setup-deps installs it)";
  const auto r = testing::run_process(
      {"/usr/bin/env", "-u", "REKINDLE_AGENT", "PYTHONPATH=" + package.string(), python, "-c",
       "import rekindle\ntry:\n  rekindle.init()\nexcept rekindle.NotUnderRekindle as e:\n  print('refused:', e)\n"},
      60s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("refused: this program was not started by rekindled"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("job.command"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace rekindle
