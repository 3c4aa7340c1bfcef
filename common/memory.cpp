#include "common/memory.hpp"

#include <malloc.h>

#include <climits>

namespace rekindle {

void keep_large_frees_in_process() noexcept {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

}  // namespace rekindle
