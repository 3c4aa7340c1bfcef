#include "tests/support/faults.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "storage/snapshot_slot.hpp"

namespace rekindle::testing {

namespace fs = std::filesystem;

bool corrupt_slot(const std::string& name) {
  auto slot = storage::snapshot_slot::open(name);
  if (!slot.has_value())
    return false;
  const auto capacity = slot->capacity();
  const auto path = "/dev/shm" + name;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return false;
  bool ok = true;
  for (std::uint64_t half = 0; half < 2; ++half) {
    const auto at = static_cast<off_t>(storage::snapshot_slot::header_bytes + half * capacity + 64);
    unsigned char b = 0;
    ok = ok && ::pread(fd, &b, 1, at) == 1;
    b ^= 0x5a;
    ok = ok && ::pwrite(fd, &b, 1, at) == 1;
  }
  ::close(fd);
  return ok;
}

small_disk::small_disk(fs::path at, const std::string& size) : at_(std::move(at)) {
  fs::create_directories(at_);
  const auto options = "size=" + size + ",mode=0700";
  mounted_ = ::mount("tmpfs", at_.c_str(), "tmpfs", 0, options.c_str()) == 0;
  if (!mounted_)
    why_ = std::string{"mount tmpfs on "} + at_.string() + ": " + std::strerror(errno);
}

small_disk::~small_disk() {
  if (mounted_)
    (void)::umount2(at_.c_str(), MNT_DETACH);
}

void small_disk::fill() const {
  const auto filler = at_ / "filler";
  const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return;
  std::vector<char> block(1 << 20, 'x');
  while (::write(fd, block.data(), block.size()) > 0) {
  }
  ::close(fd);
}

void small_disk::free_up() const {
  std::error_code ec;
  fs::remove(at_ / "filler", ec);
}

}  // namespace rekindle::testing
