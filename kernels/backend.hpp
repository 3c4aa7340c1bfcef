#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "kernels/layout.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/shape.hpp"

namespace rekindle::kernels {

/// Where a backend computes.
enum class device_kind : std::uint8_t {
  cpu,   ///< host memory, OpenBLAS on the calling thread
  cuda,  ///< device memory of one GPU, cuBLAS and own kernels
};

/// "cpu" or "cuda".
[[nodiscard]] std::string_view to_string(device_kind k) noexcept;

/// Floats in a backend's memory (host for the CPU, device for CUDA). Move-only; frees on
/// destruction.
///
/// Thread-safety: like std::unique_ptr.
class device_buffer {
 public:
  using deleter = void (*)(float*) noexcept;

  device_buffer() noexcept = default;
  device_buffer(float* data, std::size_t size, deleter free) noexcept : data_(data, free_fn{free}), size_(size) {}

  [[nodiscard]] float* data() noexcept { return data_.get(); }
  [[nodiscard]] const float* data() const noexcept { return data_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct free_fn {
    deleter fn = nullptr;
    void operator()(float* p) const noexcept {
      if (fn != nullptr)
        fn(p);
    }
  };
  std::unique_ptr<float, free_fn> data_{nullptr, free_fn{}};
  std::size_t size_ = 0;
};

/// Which device a backend should use.
struct device_request {
  enum class kind : std::uint8_t {
    auto_select,  ///< a GPU when one is present, else the CPU
    cpu,
    cuda,  ///< a GPU; an error when there is none
  };
  kind type = kind::auto_select;
  /// CUDA device ordinal; -1 means 0.
  int index = -1;
};

/// What the machine offers for CUDA.
struct cuda_probe {
  /// Visible GPUs; 0 when there are none or the driver cannot be used.
  int device_count = 0;
  /// Why there is no GPU ("no CUDA device: cudaGetDeviceCount returned 35 (...)") or, when there
  /// is one, the name of device 0.
  std::string detail;
};

/// One CUDA device's part of the node check (docs/RUNTIME.md, "The node check").
struct cuda_device_figures {
  int index = 0;
  /// "NVIDIA H200 (sm_90, 139.8 GiB)".
  std::string name;
  /// "0000:3B:00.0": how the driver's management library names the same device.
  std::string pci_bus_id;
  /// cuBLAS SGEMM of 4096 a side, the best of 5 rounds, per second of device time (CUDA events).
  double gemm_gflops = 0;
  /// A CUDA or cuBLAS error while the device was measured (the device is unusable); empty when none.
  std::string error;
};

/// Measures every CUDA device the runtime sees. Errors: unsupported when there is no GPU or the
/// build has no GPU plugin.
[[nodiscard]] expected<std::vector<cuda_device_figures>> check_cuda_devices();

/// Asks the CUDA runtime for devices. Any error of cudaGetDeviceCount counts as "no GPU" (without
/// a GPU it returns error 35, "driver version is insufficient"). Builds without CUDA report 0.
[[nodiscard]] cuda_probe probe_cuda();

struct backend_options {
  device_request device;
  model_shape shape;
  /// Most sequences one forward_backward call takes (the micro-batch). Default: 1.
  std::uint32_t max_batch = 1;
  /// The pipeline stage the backend runs. Default: the whole model, one slot.
  stage_spec stage;
};

/// One replica of the transformer on one device: buffers, the forward/backward pass and the
/// optimizer, with the same results (up to rounding) on every device kind.
///
/// Every buffer argument must come from this backend's `allocate`. Host-side spans are ordinary
/// host memory. Results are bitwise reproducible run to run on the same device kind and machine.
/// The public calls check their arguments (ranges, batch shapes, tokens) once, for every device
/// kind, and only then call the device's implementation (the private `do_` functions).
///
/// Thread-safety: one thread at a time; distinct backends may be used concurrently.
class backend {
 public:
  virtual ~backend() = default;

  [[nodiscard]] virtual device_kind kind() const noexcept = 0;
  /// For people: "cpu (OpenBLAS ..., 1 thread)" or "cuda:0 (NVIDIA H200)".
  [[nodiscard]] virtual std::string describe() const = 0;
  [[nodiscard]] virtual const param_layout& layout() const noexcept = 0;
  /// The most sequences one forward or forward_backward call takes.
  [[nodiscard]] virtual std::uint32_t max_batch() const noexcept = 0;
  /// The pipeline stage the backend runs, its `layers` resolved (never 0).
  [[nodiscard]] virtual const stage_spec& stage() const noexcept = 0;
  /// Whether the stage starts with the embedding / ends with the head (both for the whole model).
  [[nodiscard]] bool embeds() const noexcept { return stage().first_layer == 0; }
  [[nodiscard]] bool has_head() const noexcept {
    return stage().first_layer + stage().layers == layout().shape().layers;
  }
  /// Whether buffers live in host memory (so their data() can be read by host code).
  [[nodiscard]] bool host_memory() const noexcept { return kind() == device_kind::cpu; }

  /// `count` zeroed floats.
  [[nodiscard]] virtual expected<device_buffer> allocate(std::size_t count) = 0;
  /// Copies `src` into `dst` at `offset`; out_of_range unless offset + src.size() <= dst.size().
  [[nodiscard]] status upload(device_buffer& dst, std::size_t offset, std::span<const float> src);
  /// Copies `dst.size()` floats of `src` from `offset`; out_of_range unless offset + dst.size() <= src.size().
  [[nodiscard]] status download(const device_buffer& src, std::size_t offset, std::span<float> dst);
  /// Sets `count` floats from `offset` to zero.
  [[nodiscard]] status zero(device_buffer& buf, std::size_t offset, std::size_t count);
  /// Multiplies `count` floats from `offset` by `factor`.
  [[nodiscard]] status scale(device_buffer& buf, std::size_t offset, std::size_t count, float factor);
  /// Σ x² over `count` floats from `offset`, in a fixed order.
  [[nodiscard]] expected<double> sum_squares(const device_buffer& buf, std::size_t offset, std::size_t count);
  /// Runs the sequences in `tokens`/`targets` (each batch · seq_len bytes as int32, batch <=
  /// max_batch), adds `loss_scale` · ∂(mean loss)/∂params to `grads`, and returns the mean loss.
  [[nodiscard]] expected<double> forward_backward(const device_buffer& params, device_buffer& grads,
                                                  std::span<const std::int32_t> tokens,
                                                  std::span<const std::int32_t> targets, float loss_scale);
  /// The mean loss of the sequences, without gradients.
  [[nodiscard]] expected<double> forward(const device_buffer& params, std::span<const std::int32_t> tokens,
                                         std::span<const std::int32_t> targets);
  /// The forward pass of a pipeline stage over one micro-batch, its activations kept in slot
  /// `slot` for stage_backward. The first stage reads `tokens`, a later one its input
  /// activations `input` ([batch, seq_len, width] floats in host memory); the last stage reads
  /// `targets` and returns the mean loss, an earlier one writes its output activations to
  /// `output` (host memory, the same size as an input) and returns 0. Spans a stage does not use
  /// are empty. Errors: invalid_argument for a slot out of range or spans that do not match the
  /// stage.
  [[nodiscard]] expected<double> stage_forward(std::uint32_t slot, const device_buffer& params,
                                               std::span<const std::int32_t> tokens,
                                               std::span<const std::int32_t> targets, std::span<const float> input,
                                               std::span<float> output);
  /// The backward pass of slot `slot` (after its stage_forward): adds the gradient of the stage's
  /// tensors to `grads`. The last stage starts from `loss_scale` · its mean loss; an earlier one
  /// from `output_gradient` (host memory, an output's size). A stage after the first writes the
  /// gradient of its input to `input_gradient`. Spans a stage does not use are empty.
  [[nodiscard]] status stage_backward(std::uint32_t slot, const device_buffer& params, device_buffer& grads,
                                      std::span<const float> output_gradient, std::span<float> input_gradient,
                                      float loss_scale);
  /// AdamW on parameters [begin, end) of the flat buffer: `grads`, `m` and `v` hold the elements
  /// of that range from their index 0. Weight decay applies only where the layout says so
  /// (`step.weight_decay` is used for those, 0 elsewhere).
  [[nodiscard]] status adamw(device_buffer& params, std::size_t begin, std::size_t end, const device_buffer& grads,
                             device_buffer& m, device_buffer& v, const adamw_step& step);
  /// Waits for queued work (a no-op on the CPU); timings call it before reading the clock.
  [[nodiscard]] virtual status synchronize() = 0;

 private:
  // The device's implementations, called with arguments already checked.
  virtual status do_upload(device_buffer& dst, std::size_t offset, std::span<const float> src) = 0;
  virtual status do_download(const device_buffer& src, std::size_t offset, std::span<float> dst) = 0;
  virtual status do_zero(device_buffer& buf, std::size_t offset, std::size_t count) = 0;
  virtual status do_scale(device_buffer& buf, std::size_t offset, std::size_t count, float factor) = 0;
  virtual expected<double> do_sum_squares(const device_buffer& buf, std::size_t offset, std::size_t count) = 0;
  /// `batch` sequences, checked against the layout and max_batch.
  virtual expected<double> do_forward_backward(const device_buffer& params, device_buffer& grads,
                                               std::span<const std::int32_t> tokens,
                                               std::span<const std::int32_t> targets, std::uint32_t batch,
                                               float loss_scale) = 0;
  virtual expected<double> do_forward(const device_buffer& params, std::span<const std::int32_t> tokens,
                                      std::span<const std::int32_t> targets, std::uint32_t batch) = 0;
  virtual status do_adamw(device_buffer& params, std::size_t begin, std::size_t end, const device_buffer& grads,
                          device_buffer& m, device_buffer& v, const adamw_step& step) = 0;
  /// Arguments checked against the stage (see stage_forward / stage_backward); `batch` sequences.
  virtual expected<double> do_stage_forward(std::uint32_t slot, const device_buffer& params,
                                            std::span<const std::int32_t> tokens,
                                            std::span<const std::int32_t> targets, std::span<const float> input,
                                            std::span<float> output, std::uint32_t batch) = 0;
  virtual status do_stage_backward(std::uint32_t slot, const device_buffer& params, device_buffer& grads,
                                   std::span<const float> output_gradient, std::span<float> input_gradient,
                                   float loss_scale) = 0;

  // The batch of each slot's last stage_forward (0: none yet), for stage_backward's checks.
  std::vector<std::uint32_t> slot_batch_;
};

/// Creates a backend for `options.device`: with `auto_select` a GPU when probe_cuda() finds one,
/// else the CPU. The CPU backend makes OpenBLAS single-threaded for the process.
[[nodiscard]] expected<std::unique_ptr<backend>> make_backend(const backend_options& options);

/// The CPU backend regardless of GPUs.
[[nodiscard]] expected<std::unique_ptr<backend>> make_cpu_backend(const model_shape& shape, std::uint32_t max_batch,
                                                                  const stage_spec& stage = {});

}  // namespace rekindle::kernels
