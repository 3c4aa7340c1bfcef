#include "storage/posix_error.hpp"

#include <cerrno>
#include <cstring>

namespace rekindle::storage::detail {

status from_errno(int err, const std::string& what) {
  errc code = errc::io_error;
  switch (err) {
    case ENOSPC:
    case EFBIG:
    case EDQUOT:
    case ENOMEM:
      code = errc::resource_exhausted;
      break;
    case EACCES:
    case EPERM:
    case EROFS:
      code = errc::permission_denied;
      break;
    case ENOENT:
      code = errc::not_found;
      break;
    case EEXIST:
      code = errc::already_exists;
      break;
    case EINTR:
    case EAGAIN:
      code = errc::unavailable;
      break;
    default:
      break;
  }
  return status{code, what + ": " + std::strerror(err)};
}

}  // namespace rekindle::storage::detail
