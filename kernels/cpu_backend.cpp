#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/check.hpp"
#include "kernels/apply_adamw.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu_ops.hpp"
#include "kernels/transformer.hpp"

namespace rekindle::kernels {

namespace {

void free_host(float* p) noexcept {
  std::free(p);
}

// The CPU backend: cpu_ops<float> driven by transformer<cpu_ops<float>>.
//
// Thread-safety: one thread at a time (see backend).
class cpu_backend final : public backend {
 public:
  cpu_backend(const model_shape& shape, std::uint32_t max_batch)
      : shape_(shape), layout_(shape), max_batch_(max_batch) {}

  status init(const stage_spec& stage) {
    use_single_threaded_blas();
    auto t = transformer<cpu_ops<float>>::create(ops_, shape_, max_batch_, stage);
    if (!t)
      return std::move(t).error();
    model_.emplace(std::move(t).value());
    return {};
  }

  const stage_spec& stage() const noexcept override { return model_->stage(); }

  device_kind kind() const noexcept override { return device_kind::cpu; }
  std::string describe() const override { return "cpu (" + blas_description() + ", 1 thread)"; }
  const param_layout& layout() const noexcept override { return layout_; }

  expected<device_buffer> allocate(std::size_t count) override {
    // Large buffers on 2 MiB boundaries, backed by transparent huge pages where the kernel offers
    // them: 512 times fewer page faults when a fresh process (a restarted rank) first touches them.
    constexpr std::size_t huge = std::size_t{2} << 20;
    const std::size_t raw = std::max<std::size_t>(count, 1) * sizeof(float);
    const std::size_t align = raw >= 2 * huge ? huge : 64;
    const std::size_t bytes = (raw + align - 1) / align * align;
    auto* p = static_cast<float*>(std::aligned_alloc(align, bytes));
    if (p != nullptr && align == huge)
      (void)madvise(p, bytes, MADV_HUGEPAGE);
    if (p == nullptr)
      return status{errc::resource_exhausted, "cannot allocate " + std::to_string(bytes) + " bytes of host memory"};
    std::memset(p, 0, bytes);
    return device_buffer{p, count, &free_host};
  }

  status synchronize() override { return {}; }
  std::uint32_t max_batch() const noexcept override { return max_batch_; }

 private:
  status do_upload(device_buffer& dst, std::size_t offset, std::span<const float> src) override {
    std::memcpy(dst.data() + offset, src.data(), src.size_bytes());
    return {};
  }

  status do_download(const device_buffer& src, std::size_t offset, std::span<float> dst) override {
    std::memcpy(dst.data(), src.data() + offset, dst.size_bytes());
    return {};
  }

  status do_zero(device_buffer& buf, std::size_t offset, std::size_t count) override {
    ops_.zero(buf.data() + offset, count);
    return {};
  }

  status do_scale(device_buffer& buf, std::size_t offset, std::size_t count, float factor) override {
    ops_.scale(buf.data() + offset, count, factor);
    return {};
  }

  expected<double> do_sum_squares(const device_buffer& buf, std::size_t offset, std::size_t count) override {
    return ops_.sum_squares(buf.data() + offset, count);
  }

  expected<double> do_forward_backward(const device_buffer& params, device_buffer& grads,
                                       std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                                       std::uint32_t batch, float loss_scale) override {
    RK_ASSIGN_OR_RETURN(const double loss, model_->forward(params.data(), tokens.data(), targets.data(), batch));
    RK_RETURN_IF_ERROR(model_->backward(params.data(), grads.data(), loss_scale));
    return loss;
  }

  expected<double> do_forward(const device_buffer& params, std::span<const std::int32_t> tokens,
                              std::span<const std::int32_t> targets, std::uint32_t batch) override {
    return model_->forward(params.data(), tokens.data(), targets.data(), batch);
  }

  status do_adamw(device_buffer& params, std::size_t begin, std::size_t end, const device_buffer& grads,
                  device_buffer& m, device_buffer& v, const adamw_step& step) override {
    apply_adamw(ops_, layout_, params.data(), begin, end, grads.data(), m.data(), v.data(), step);
    return {};
  }

  expected<double> do_stage_forward(std::uint32_t slot, const device_buffer& params,
                                    std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                                    std::span<const float> input, std::span<float> output,
                                    std::uint32_t batch) override {
    if (!model_->embeds())
      std::memcpy(model_->stage_input(slot), input.data(), input.size_bytes());
    // The slot's backward reads its tokens and targets: copies the caller may not overwrite.
    slot_ids_.resize(model_->stage().slots);
    auto& [tok, tgt] = slot_ids_[slot];
    tok.assign(tokens.begin(), tokens.end());
    tgt.assign(targets.begin(), targets.end());
    RK_ASSIGN_OR_RETURN(const double loss, model_->forward_stage(slot, params.data(), tok.data(), tgt.data(), batch));
    if (!model_->has_head())
      std::memcpy(output.data(), model_->stage_output(slot), output.size_bytes());
    return loss;
  }

  status do_stage_backward(std::uint32_t slot, const device_buffer& params, device_buffer& grads,
                           std::span<const float> output_gradient, std::span<float> input_gradient,
                           float loss_scale) override {
    if (!model_->has_head())
      std::memcpy(model_->output_gradient(), output_gradient.data(), output_gradient.size_bytes());
    RK_RETURN_IF_ERROR(model_->backward_stage(slot, params.data(), grads.data(), loss_scale));
    if (!model_->embeds())
      std::memcpy(input_gradient.data(), model_->input_gradient(), input_gradient.size_bytes());
    return {};
  }

  model_shape shape_;
  param_layout layout_;
  std::uint32_t max_batch_;
  cpu_ops<float> ops_;
  std::optional<transformer<cpu_ops<float>>> model_;
  // Each slot's tokens and targets (a pipeline stage's), from its forward to its backward.
  std::vector<std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>>> slot_ids_;
};

}  // namespace

expected<std::unique_ptr<backend>> make_cpu_backend(const model_shape& shape, std::uint32_t max_batch,
                                                    const stage_spec& stage) {
  RK_RETURN_IF_ERROR(shape.validate(max_batch));
  auto b = std::make_unique<cpu_backend>(shape, max_batch);
  RK_RETURN_IF_ERROR(b->init(stage));
  return std::unique_ptr<backend>{std::move(b)};
}

}  // namespace rekindle::kernels
