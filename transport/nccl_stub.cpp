// The NCCL backend of a build without CUDA: every entry point says so.

#include "transport/nccl_communicator.hpp"

namespace rekindle::transport {

namespace {
status not_built() {
  return status{errc::unsupported, "this build has no CUDA/NCCL backend (configure with REKINDLE_WITH_CUDA=ON on a "
                                   "machine with nvcc and NCCL)"};
}
}  // namespace

bool nccl_built() noexcept { return false; }
expected<int> cuda_device_count() { return not_built(); }
expected<std::vector<std::byte>> nccl_communicator::make_unique_id() { return not_built(); }
expected<std::unique_ptr<nccl_communicator>> nccl_communicator::create(int, int, std::span<const std::byte>, int,
                                                                       const nccl_options&) {
  return not_built();
}

class nccl_communicator::impl {};
nccl_communicator::~nccl_communicator() = default;
int nccl_communicator::rank() const noexcept { return 0; }
int nccl_communicator::size() const noexcept { return 0; }
status nccl_communicator::allreduce(void*, std::size_t, dtype, reduce_op) { return not_built(); }
status nccl_communicator::reduce_scatter(const void*, void*, std::size_t, dtype, reduce_op) { return not_built(); }
status nccl_communicator::allgather(const void*, void*, std::size_t, dtype) { return not_built(); }
status nccl_communicator::broadcast(void*, std::size_t, dtype, int) { return not_built(); }
status nccl_communicator::barrier() { return not_built(); }
void nccl_communicator::abort() noexcept {}
bool nccl_communicator::aborted() const noexcept { return false; }

}  // namespace rekindle::transport
