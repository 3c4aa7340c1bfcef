#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "tests/support/temp_dir.hpp"

namespace rekindle::testing {

/// Polls `pred` every 10 ms until it holds or `timeout` passes. Tests wait on events, never on
/// speed, so timeouts here are generous.
inline bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  return true;
}

/// Waits until the file at `path` contains `text`.
inline bool wait_for_text(const std::filesystem::path& path, const std::string& text, std::chrono::milliseconds timeout) {
  return wait_until([&] { return read_file(path).find(text) != std::string::npos; }, timeout);
}

}  // namespace rekindle::testing
