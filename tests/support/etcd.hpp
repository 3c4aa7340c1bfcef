#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "tests/support/process.hpp"

namespace rekindle::testing {

/// A real etcd server (Debian's etcd-server) of one member on loopback, its data in `dir`, on free
/// ports; started by the constructor, killed with its process group by the destructor. Tests that
/// need it skip with `missing()` when etcd is not installed.
class etcd_server {
 public:
  explicit etcd_server(const std::filesystem::path& dir);
  ~etcd_server();
  etcd_server(const etcd_server&) = delete;
  etcd_server& operator=(const etcd_server&) = delete;

  /// Why etcd cannot run here, for GTEST_SKIP; nullopt when it is installed.
  [[nodiscard]] static std::optional<std::string> missing();

  /// Whether it answers (it may have failed to start: its log says why).
  [[nodiscard]] bool ready() const noexcept { return ready_; }
  [[nodiscard]] std::uint16_t client_port() const noexcept { return client_port_; }
  /// "127.0.0.1:PORT", the client endpoint.
  [[nodiscard]] std::string endpoint() const;
  [[nodiscard]] std::filesystem::path log() const { return dir_ / "etcd.log"; }
  /// Stops it (SIGKILL): every lease stops being renewable.
  void kill();
  /// SIGSTOP / SIGCONT: it stays up but answers nothing.
  void pause();
  void resume();

 private:
  std::filesystem::path dir_;
  std::uint16_t client_port_ = 0;
  std::unique_ptr<child_process> process_;
  bool ready_ = false;
};

}  // namespace rekindle::testing
