#include "tests/support/temp_dir.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace rekindle::testing {

namespace fs = std::filesystem;

temp_dir::temp_dir(std::string_view prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = (tmp != nullptr && *tmp != '\0' ? std::string{tmp} : std::string{"/tmp"}) + "/" +
                        std::string{prefix} + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = pattern;
}

temp_dir::~temp_dir() {
  // REKINDLE_KEEP_TEMP=1 keeps every test's directory (logs, data, events) to look at afterwards.
  if (const char* keep = std::getenv("REKINDLE_KEEP_TEMP"); keep != nullptr && std::string_view{keep} == "1")
    return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

fs::path temp_dir::write(const std::string& name, std::string_view contents) const {
  auto p = path_ / name;
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  return p;
}

fs::path source_dir() { return REKINDLE_SOURCE_DIR; }
fs::path bin_dir() {
  // A copy of the programs elsewhere (a long campaign keeps running while the tree is rebuilt).
  if (const char* dir = std::getenv("REKINDLE_TEST_BIN_DIR"); dir != nullptr && *dir != '\0')
    return dir;
  return REKINDLE_BIN_DIR;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

}  // namespace rekindle::testing
