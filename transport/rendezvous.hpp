#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <vector>

#include "common/expected.hpp"

namespace rekindle::transport {

/// Exchanges one address per rank through files in a shared directory: the bootstrap for tests,
/// benchmarks and single-host tools. (A running job exchanges addresses through the supervisor.)
///
/// Rank r writes `<dir>/rank-<r>.addr` atomically (write, fsync, rename), then waits until every
/// rank's file exists, and returns all addresses in rank order, or errc::timeout naming the ranks
/// still missing.
expected<std::vector<std::vector<std::byte>>> file_rendezvous(const std::filesystem::path& dir, int rank, int size,
                                                              const std::vector<std::byte>& address,
                                                              std::chrono::nanoseconds timeout);

}  // namespace rekindle::transport
