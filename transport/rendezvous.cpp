#include "transport/rendezvous.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

namespace rekindle::transport {

namespace fs = std::filesystem;

expected<std::vector<std::vector<std::byte>>> file_rendezvous(const fs::path& dir, int rank, int size,
                                                              const std::vector<std::byte>& address,
                                                              std::chrono::nanoseconds timeout) {
  const auto name = [&](int r) { return dir / ("rank-" + std::to_string(r) + ".addr"); };
  {
    const auto tmp = dir / ("rank-" + std::to_string(rank) + ".addr.tmp");
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      return status{errc::io_error, "cannot write " + tmp.string() + ": " + std::strerror(errno)};
    const bool ok = ::write(fd, address.data(), address.size()) == static_cast<ssize_t>(address.size()) && ::fsync(fd) == 0;
    ::close(fd);
    std::error_code ec;
    if (!ok || (fs::rename(tmp, name(rank), ec), ec))
      return status{errc::io_error, "cannot publish " + name(rank).string()};
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(size));
  std::vector<bool> have(static_cast<std::size_t>(size), false);
  int missing = size;
  while (true) {
    for (int r = 0; r < size; ++r) {
      if (have[static_cast<std::size_t>(r)])
        continue;
      std::ifstream in(name(r), std::ios::binary);
      if (!in)
        continue;
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      auto& slot = out[static_cast<std::size_t>(r)];
      slot.resize(bytes.size());
      std::memcpy(slot.data(), bytes.data(), bytes.size());
      have[static_cast<std::size_t>(r)] = true;
      --missing;
    }
    if (missing == 0)
      return out;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string list;
      for (int r = 0; r < size; ++r)
        if (!have[static_cast<std::size_t>(r)])
          list += (list.empty() ? "" : ", ") + std::to_string(r);
      return status{errc::timeout, "rendezvous in " + dir.string() + ": ranks " + list + " never published"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
}

}  // namespace rekindle::transport
