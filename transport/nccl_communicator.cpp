// The NCCL communicator, built into the GPU plugin (gpu/), never into the transport library.

#include "transport/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "common/check.hpp"

namespace rekindle::transport {

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

status cuda_status(cudaError_t e, const char* what, const char* file, int line) {
  return status{errc::cuda_error, std::string{what} + ": " + cudaGetErrorString(e) + " (" + file + ":" +
                                      std::to_string(line) + ")"};
}

status nccl_status(ncclResult_t r, const char* what, const char* file, int line) {
  return status{errc::nccl_error, std::string{what} + ": " + ncclGetErrorString(r) + " (" + file + ":" +
                                      std::to_string(line) + ")"};
}

// CUDA and NCCL calls return a status naming the call and its place, never exit.
#define RK_CUDA_OK(call)                                             \
  do {                                                               \
    if (cudaError_t rk_e_ = (call); rk_e_ != cudaSuccess)            \
      return cuda_status(rk_e_, #call, __FILE__, __LINE__);          \
  } while (false)

ncclDataType_t nccl_type(dtype t) { return t == dtype::f32 ? ncclFloat32 : ncclBfloat16; }

ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::average: return ncclAvg;
    case reduce_op::max: return ncclMax;
  }
  return ncclSum;
}

}  // namespace

namespace detail {

expected<int> plugin_cuda_device_count() {
  int n = 0;
  if (auto e = cudaGetDeviceCount(&n); e != cudaSuccess) {
    (void)cudaGetLastError();
    return status{errc::unsupported, "no CUDA device: cudaGetDeviceCount returned " + std::to_string(static_cast<int>(e)) +
                                         " (" + cudaGetErrorString(e) + ")"};
  }
  if (n == 0)
    return status{errc::unsupported, "no CUDA device: cudaGetDeviceCount found 0 devices"};
  return n;
}

}  // namespace detail

namespace {

class nccl_impl {
 public:
  nccl_impl(int rank, int size, int device, nccl_options options)
      : rank_(rank), size_(size), device_(device), options_(options) {}

  ~nccl_impl() {
    if (comm_ != nullptr) {
      // A healthy communicator is finalised (flushes), a broken one aborted.
      if (broken_.ok()) {
        ncclCommFinalize(comm_);
        (void)wait_async("finalising NCCL");
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (scratch_ != nullptr)
      cudaFree(scratch_);
    if (stream_ != nullptr)
      cudaStreamDestroy(stream_);
  }

  status init(std::span<const std::byte> id_bytes) {
    if (id_bytes.size() != sizeof(ncclUniqueId))
      return status{errc::invalid_argument, "an NCCL unique id has " + std::to_string(sizeof(ncclUniqueId)) +
                                                " bytes, got " + std::to_string(id_bytes.size())};
    RK_ASSIGN_OR_RETURN(int devices, detail::plugin_cuda_device_count());
    if (device_ < 0 || device_ >= devices)
      return status{errc::invalid_argument, "CUDA device " + std::to_string(device_) + " does not exist (" +
                                                std::to_string(devices) + " present)"};
    RK_CUDA_OK(cudaSetDevice(device_));
    RK_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    RK_CUDA_OK(cudaMalloc(&scratch_, sizeof(float)));
    ncclUniqueId id;
    std::memcpy(&id, id_bytes.data(), sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const auto r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress)
      return fail(nccl_status(r, "ncclCommInitRankConfig", __FILE__, __LINE__));
    return wait_async("initialising NCCL");
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  void abort() noexcept { aborted_.store(true, std::memory_order_release); }
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }

  template <class Enqueue>
  status run(const char* what, Enqueue enqueue) {
    if (!broken_.ok())
      return broken_;
    if (aborted())
      return fail(status{errc::aborted, "communicator aborted"});
    RK_CUDA_OK(cudaSetDevice(device_));
    const auto r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress)
      return fail(nccl_status(r, what, __FILE__, __LINE__));
    RK_RETURN_IF_ERROR(wait_async(what));
    // Poll the stream, so a dead peer or abort() ends the wait.
    const auto deadline = clock_type::now() + options_.timeout;
    for (;;) {
      const auto q = cudaStreamQuery(stream_);
      if (q == cudaSuccess)
        return {};
      if (q != cudaErrorNotReady)
        return fail(cuda_status(q, what, __FILE__, __LINE__));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        return fail(nccl_status(async, what, __FILE__, __LINE__));
      if (aborted())
        return fail(status{errc::aborted, "communicator aborted during " + std::string{what}});
      if (clock_type::now() > deadline)
        return fail(status{errc::timeout, std::string{what} + " did not complete within " +
                                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count()) +
                                              " ms (rank " + std::to_string(rank_) + ")"});
      std::this_thread::sleep_for(20us);
    }
  }

  status allreduce(void* data, std::size_t count, dtype type, reduce_op op) {
    return run("ncclAllReduce", [&] { return ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), comm_, stream_); });
  }
  status reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op op) {
    return run("ncclReduceScatter",
               [&] { return ncclReduceScatter(send, recv, recv_count, nccl_type(type), nccl_op(op), comm_, stream_); });
  }
  status allgather(const void* send, void* recv, std::size_t send_count, dtype type) {
    return run("ncclAllGather", [&] { return ncclAllGather(send, recv, send_count, nccl_type(type), comm_, stream_); });
  }
  status broadcast(void* data, std::size_t count, dtype type, int root) {
    if (root < 0 || root >= size_)
      return status{errc::invalid_argument, "broadcast root " + std::to_string(root) + " is not a rank of " +
                                                std::to_string(size_)};
    return run("ncclBroadcast", [&] { return ncclBroadcast(data, data, count, nccl_type(type), root, comm_, stream_); });
  }
  status barrier() {
    return run("barrier", [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); });
  }

 private:
  // Non-blocking NCCL: poll the communicator's state against the deadline and the abort flag.
  status wait_async(const char* what) {
    const auto deadline = clock_type::now() + options_.timeout;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const auto r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess)
        return fail(nccl_status(r, what, __FILE__, __LINE__));
      if (state == ncclSuccess)
        return {};
      if (state != ncclInProgress)
        return fail(nccl_status(state, what, __FILE__, __LINE__));
      if (aborted())
        return fail(status{errc::aborted, std::string{"communicator aborted while "} + what});
      if (clock_type::now() > deadline)
        return fail(status{errc::timeout, std::string{what} + " did not complete within " +
                                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count()) +
                                              " ms"});
      std::this_thread::sleep_for(50us);
    }
  }

  status fail(status why) {
    if (broken_.ok())
      broken_ = why;
    return why;
  }

  int rank_;
  int size_;
  int device_;
  nccl_options options_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  status broken_;
};

// The communicator interface over nccl_impl.
class nccl_communicator final : public communicator {
 public:
  explicit nccl_communicator(std::unique_ptr<nccl_impl> p) : impl_(std::move(p)) {}
  int rank() const noexcept override { return impl_->rank(); }
  int size() const noexcept override { return impl_->size(); }
  bool device_memory() const noexcept override { return true; }
  status allreduce(void* data, std::size_t count, dtype type, reduce_op op) override {
    return impl_->allreduce(data, count, type, op);
  }
  status reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op op) override {
    return impl_->reduce_scatter(send, recv, recv_count, type, op);
  }
  status allgather(const void* send, void* recv, std::size_t send_count, dtype type) override {
    return impl_->allgather(send, recv, send_count, type);
  }
  status broadcast(void* data, std::size_t count, dtype type, int root) override {
    return impl_->broadcast(data, count, type, root);
  }
  status barrier() override { return impl_->barrier(); }
  void abort() noexcept override { impl_->abort(); }
  bool aborted() const noexcept override { return impl_->aborted(); }

 private:
  std::unique_ptr<nccl_impl> impl_;
};

}  // namespace

namespace detail {

expected<std::vector<std::byte>> plugin_nccl_unique_id() {
  ncclUniqueId id;
  if (auto r = ncclGetUniqueId(&id); r != ncclSuccess)
    return nccl_status(r, "ncclGetUniqueId", __FILE__, __LINE__);
  std::vector<std::byte> out(sizeof id);
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

expected<std::unique_ptr<communicator>> plugin_nccl_create(int rank, int size, std::span<const std::byte> unique_id,
                                                            int device, const nccl_options& options) {
  if (size < 1 || rank < 0 || rank >= size)
    return status{errc::invalid_argument, "an NCCL communicator of " + std::to_string(size) + " ranks cannot have rank " +
                                              std::to_string(rank)};
  auto p = std::make_unique<nccl_impl>(rank, size, device, options);
  RK_RETURN_IF_ERROR(p->init(unique_id));
  return std::unique_ptr<communicator>{std::make_unique<nccl_communicator>(std::move(p))};
}

}  // namespace detail

}  // namespace rekindle::transport
