#include "kernels/backend.hpp"

#include <string>

#include "common/gpu_plugin.hpp"

namespace rekindle::kernels {

std::string_view to_string(device_kind k) noexcept {
  return k == device_kind::cpu ? "cpu" : "cuda";
}

namespace {

// Checks a forward/backward call's arguments: `params_size` covers the layout, tokens and targets
// hold the same whole number of sequences (at most `max_batch`) of bytes (0..255). Returns the
// number of sequences.
expected<std::uint32_t> check_model_batch(const param_layout& layout, std::uint32_t max_batch,
                                          std::size_t params_size, std::span<const std::int32_t> tokens,
                                          std::span<const std::int32_t> targets) {
  const std::size_t seq = layout.shape().seq_len;
  if (params_size < layout.size())
    return status{errc::invalid_argument, "parameter buffer holds " + std::to_string(params_size) +
                                              " floats, the model needs " + std::to_string(layout.size())};
  if (tokens.size() != targets.size())
    return status{errc::invalid_argument, "tokens (" + std::to_string(tokens.size()) + ") and targets (" +
                                              std::to_string(targets.size()) + ") differ in length"};
  if (tokens.empty() || tokens.size() % seq != 0)
    return status{errc::invalid_argument, "a batch holds whole sequences of " + std::to_string(seq) +
                                              " tokens, got " + std::to_string(tokens.size())};
  const std::size_t batch = tokens.size() / seq;
  if (batch > max_batch)
    return status{errc::invalid_argument, "batch of " + std::to_string(batch) +
                                              " sequences exceeds the backend's maximum of " +
                                              std::to_string(max_batch)};
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= static_cast<std::int32_t>(vocab_size) || targets[i] < 0 ||
        targets[i] >= static_cast<std::int32_t>(vocab_size))
      return status{errc::invalid_argument, "token " + std::to_string(i) + " is outside the byte vocabulary"};
  }
  return static_cast<std::uint32_t>(batch);
}

// Checks `tokens` (or `targets`): whole sequences of bytes, at most `max_batch`. Returns the batch.
expected<std::uint32_t> check_sequences(std::span<const std::int32_t> ids, std::size_t seq, std::uint32_t max_batch,
                                        const char* what) {
  if (ids.empty() || ids.size() % seq != 0)
    return status{errc::invalid_argument, std::string{what} + ": a batch holds whole sequences of " +
                                              std::to_string(seq) + " tokens, got " + std::to_string(ids.size())};
  if (ids.size() / seq > max_batch)
    return status{errc::invalid_argument, std::string{what} + ": batch of " + std::to_string(ids.size() / seq) +
                                              " sequences exceeds the backend's maximum of " +
                                              std::to_string(max_batch)};
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= static_cast<std::int32_t>(vocab_size))
      return status{errc::invalid_argument, std::string{what} + ": token " + std::to_string(i) +
                                                " is outside the byte vocabulary"};
  return static_cast<std::uint32_t>(ids.size() / seq);
}

// A span the stage reads or writes (`used`) must hold `want` values; one it does not must be empty.
status check_stage_span(std::size_t size, bool used, std::size_t want, const char* what) {
  if (!used && size != 0)
    return status{errc::invalid_argument, std::string{what} + ": this stage does not use it, yet " +
                                              std::to_string(size) + " values were given"};
  if (used && size != want)
    return status{errc::invalid_argument, std::string{what} + ": holds " + std::to_string(size) +
                                              " values, the micro-batch needs " + std::to_string(want)};
  return {};
}

status check_range(std::size_t offset, std::size_t count, std::size_t size, const char* what) {
  if (offset > size || count > size - offset)
    return status{errc::out_of_range, std::string{what} + ": range [" + std::to_string(offset) + ", " +
                                          std::to_string(offset + count) + ") exceeds a buffer of " +
                                          std::to_string(size) + " floats"};
  return {};
}

}  // namespace

status backend::upload(device_buffer& dst, std::size_t offset, std::span<const float> src) {
  RK_RETURN_IF_ERROR(check_range(offset, src.size(), dst.size(), "upload"));
  return do_upload(dst, offset, src);
}

status backend::download(const device_buffer& src, std::size_t offset, std::span<float> dst) {
  RK_RETURN_IF_ERROR(check_range(offset, dst.size(), src.size(), "download"));
  return do_download(src, offset, dst);
}

status backend::zero(device_buffer& buf, std::size_t offset, std::size_t count) {
  RK_RETURN_IF_ERROR(check_range(offset, count, buf.size(), "zero"));
  return do_zero(buf, offset, count);
}

status backend::scale(device_buffer& buf, std::size_t offset, std::size_t count, float factor) {
  RK_RETURN_IF_ERROR(check_range(offset, count, buf.size(), "scale"));
  return do_scale(buf, offset, count, factor);
}

expected<double> backend::sum_squares(const device_buffer& buf, std::size_t offset, std::size_t count) {
  RK_RETURN_IF_ERROR(check_range(offset, count, buf.size(), "sum_squares"));
  return do_sum_squares(buf, offset, count);
}

expected<double> backend::forward_backward(const device_buffer& params, device_buffer& grads,
                                           std::span<const std::int32_t> tokens,
                                           std::span<const std::int32_t> targets, float loss_scale) {
  if (!embeds() || !has_head())
    return status{errc::failed_precondition, "forward_backward runs the whole model; this backend runs a stage"};
  RK_ASSIGN_OR_RETURN(const std::uint32_t batch,
                      check_model_batch(layout(), max_batch(), params.size(), tokens, targets));
  RK_RETURN_IF_ERROR(check_range(0, layout().size(), grads.size(), "gradients"));
  return do_forward_backward(params, grads, tokens, targets, batch, loss_scale);
}

expected<double> backend::forward(const device_buffer& params, std::span<const std::int32_t> tokens,
                                  std::span<const std::int32_t> targets) {
  if (!embeds() || !has_head())
    return status{errc::failed_precondition, "forward runs the whole model; this backend runs a stage"};
  RK_ASSIGN_OR_RETURN(const std::uint32_t batch,
                      check_model_batch(layout(), max_batch(), params.size(), tokens, targets));
  return do_forward(params, tokens, targets, batch);
}

expected<double> backend::stage_forward(std::uint32_t slot, const device_buffer& params,
                                        std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                                        std::span<const float> input, std::span<float> output) {
  const stage_spec& st = stage();
  if (slot >= st.slots)
    return status{errc::invalid_argument, "stage_forward: slot " + std::to_string(slot) + " of a stage with " +
                                              std::to_string(st.slots)};
  RK_RETURN_IF_ERROR(check_range(0, layout().size(), params.size(), "parameters"));
  const std::size_t seq = layout().shape().seq_len;
  const std::size_t row = seq * layout().shape().width;
  std::uint32_t batch = 0;
  if (embeds()) {
    RK_ASSIGN_OR_RETURN(batch, check_sequences(tokens, seq, max_batch(), "tokens"));
    RK_RETURN_IF_ERROR(check_stage_span(input.size(), false, 0, "input activations"));
  } else {
    RK_RETURN_IF_ERROR(check_stage_span(tokens.size(), false, 0, "tokens"));
    if (input.empty() || input.size() % row != 0 || input.size() / row > max_batch())
      return status{errc::invalid_argument, "input activations: " + std::to_string(input.size()) +
                                                " values are not 1 to " + std::to_string(max_batch()) +
                                                " sequences of " + std::to_string(row)};
    batch = static_cast<std::uint32_t>(input.size() / row);
  }
  if (has_head()) {
    RK_ASSIGN_OR_RETURN(const std::uint32_t b, check_sequences(targets, seq, max_batch(), "targets"));
    if (b != batch)
      return status{errc::invalid_argument, "targets hold " + std::to_string(b) + " sequences, the input " +
                                                std::to_string(batch)};
  } else {
    RK_RETURN_IF_ERROR(check_stage_span(targets.size(), false, 0, "targets"));
  }
  RK_RETURN_IF_ERROR(check_stage_span(output.size(), !has_head(), batch * row, "output activations"));
  slot_batch_.resize(st.slots, 0);
  slot_batch_[slot] = 0;
  RK_ASSIGN_OR_RETURN(const double loss, do_stage_forward(slot, params, tokens, targets, input, output, batch));
  slot_batch_[slot] = batch;
  return loss;
}

status backend::stage_backward(std::uint32_t slot, const device_buffer& params, device_buffer& grads,
                               std::span<const float> output_gradient, std::span<float> input_gradient,
                               float loss_scale) {
  if (slot >= slot_batch_.size() || slot_batch_[slot] == 0)
    return status{errc::failed_precondition, "stage_backward: slot " + std::to_string(slot) + " holds no forward pass"};
  RK_RETURN_IF_ERROR(check_range(0, layout().size(), params.size(), "parameters"));
  RK_RETURN_IF_ERROR(check_range(0, layout().size(), grads.size(), "gradients"));
  const std::size_t values = std::size_t{slot_batch_[slot]} * layout().shape().seq_len * layout().shape().width;
  RK_RETURN_IF_ERROR(check_stage_span(output_gradient.size(), !has_head(), values, "output gradient"));
  RK_RETURN_IF_ERROR(check_stage_span(input_gradient.size(), !embeds(), values, "input gradient"));
  return do_stage_backward(slot, params, grads, output_gradient, input_gradient, loss_scale);
}

status backend::adamw(device_buffer& params, std::size_t begin, std::size_t end, const device_buffer& grads,
                      device_buffer& m, device_buffer& v, const adamw_step& step) {
  if (begin > end)
    return status{errc::invalid_argument, "adamw: range begins after it ends"};
  const std::size_t n = end - begin;
  RK_RETURN_IF_ERROR(check_range(begin, n, params.size(), "adamw parameters"));
  RK_RETURN_IF_ERROR(check_range(0, n, grads.size(), "adamw gradients"));
  RK_RETURN_IF_ERROR(check_range(0, n, m.size(), "adamw first moments"));
  RK_RETURN_IF_ERROR(check_range(0, n, v.size(), "adamw second moments"));
  return do_adamw(params, begin, end, grads, m, v, step);
}

namespace {

// The CUDA backend lives in the GPU plugin (see common/gpu_plugin.hpp): its functions by name.
template <class Fn>
expected<Fn*> plugin_function(const char* getter) {
  RK_ASSIGN_OR_RETURN(void* get, gpu_plugin_symbol(getter));
  return reinterpret_cast<Fn*>(reinterpret_cast<void* (*)()>(get)());
}

}  // namespace

cuda_probe probe_cuda() {
  const auto gpus = probe_gpus();
  if (gpus.devices == 0)
    return cuda_probe{0, gpus.detail};
  auto probe = plugin_function<cuda_probe()>("rekindle_gpu_cuda_probe");
  if (!probe)
    return cuda_probe{0, "no usable CUDA device: " + probe.error().message()};
  return (*probe)();
}

expected<std::vector<cuda_device_figures>> check_cuda_devices() {
  const auto gpus = probe_gpus();
  if (gpus.devices == 0)
    return status{errc::unsupported, gpus.detail};
  RK_ASSIGN_OR_RETURN(auto check, plugin_function<expected<std::vector<cuda_device_figures>>()>("rekindle_gpu_check_devices"));
  return check();
}

expected<std::unique_ptr<backend>> make_backend(const backend_options& options) {
  using kind = device_request::kind;
  if (options.device.type == kind::cpu)
    return make_cpu_backend(options.shape, options.max_batch, options.stage);
  const cuda_probe probe = probe_cuda();
  if (probe.device_count == 0) {
    if (options.device.type == kind::cuda)
      return status{errc::unsupported, "a CUDA device was requested but there is none: " + probe.detail};
    return make_cpu_backend(options.shape, options.max_batch, options.stage);
  }
  const int index = options.device.index < 0 ? 0 : options.device.index;
  if (index >= probe.device_count) {
    if (options.device.type == kind::cuda)
      return status{errc::out_of_range, "CUDA device " + std::to_string(index) + " requested, the machine has " +
                                            std::to_string(probe.device_count)};
    return make_cpu_backend(options.shape, options.max_batch, options.stage);
  }
  using factory = expected<std::unique_ptr<backend>>(int, const model_shape&, std::uint32_t, const stage_spec&);
  auto make = plugin_function<factory>("rekindle_gpu_make_cuda_backend");
  if (!make) {
    if (options.device.type == kind::cuda)
      return make.error();
    return make_cpu_backend(options.shape, options.max_batch, options.stage);
  }
  return (*make)(index, options.shape, options.max_batch, options.stage);
}

}  // namespace rekindle::kernels
