#include "kernels/cuda_backend.hpp"

#include <optional>
#include <string>

#include "kernels/apply_adamw.hpp"
#include "kernels/cuda_ops.hpp"
#include "kernels/transformer.hpp"

namespace rekindle::kernels {

namespace {

void free_device(float* p) noexcept {
  cuda::device_free(p);
}

// The CUDA backend: cuda::ops driven by transformer<cuda::ops>. Every entry makes its device
// current first, since the calling thread may change between calls.
//
// Thread-safety: one thread at a time (see backend).
class cuda_backend final : public backend {
 public:
  cuda_backend(int index, const model_shape& shape, std::uint32_t max_batch)
      : index_(index), shape_(shape), layout_(shape), max_batch_(max_batch) {}

  status init(const stage_spec& stage) {
    RK_ASSIGN_OR_RETURN(ops_, cuda::ops::create(index_));
    auto t = transformer<cuda::ops>::create(*ops_, shape_, max_batch_, stage);
    if (!t)
      return std::move(t).error();
    model_.emplace(std::move(t).value());
    // Tokens and targets per activation slot: a slot's backward reads its forward's.
    positions_ = std::size_t{max_batch_} * shape_.seq_len;
    RK_ASSIGN_OR_RETURN(tokens_, cuda::device_array<std::int32_t>::create(positions_ * model_->stage().slots));
    RK_ASSIGN_OR_RETURN(targets_, cuda::device_array<std::int32_t>::create(positions_ * model_->stage().slots));
    name_ = "cuda:" + std::to_string(index_) + " (" + cuda::device_name(index_) + ")";
    return ops_->synchronize();
  }

  device_kind kind() const noexcept override { return device_kind::cuda; }
  const stage_spec& stage() const noexcept override { return model_->stage(); }
  std::string describe() const override { return name_; }
  const param_layout& layout() const noexcept override { return layout_; }

  expected<device_buffer> allocate(std::size_t count) override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    RK_ASSIGN_OR_RETURN(void* p, cuda::device_malloc(std::max<std::size_t>(count, 1) * sizeof(float)));
    return device_buffer{static_cast<float*>(p), count, &free_device};
  }

  status synchronize() override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    return ops_->synchronize();
  }

  std::uint32_t max_batch() const noexcept override { return max_batch_; }

 private:
  status do_upload(device_buffer& dst, std::size_t offset, std::span<const float> src) override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    return cuda::copy_to_device(dst.data() + offset, src.data(), src.size_bytes());
  }

  status do_download(const device_buffer& src, std::size_t offset, std::span<float> dst) override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    return cuda::copy_to_host(dst.data(), src.data() + offset, dst.size_bytes());
  }

  status do_zero(device_buffer& buf, std::size_t offset, std::size_t count) override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    ops_->zero(buf.data() + offset, count);
    return ops_->check();
  }

  status do_scale(device_buffer& buf, std::size_t offset, std::size_t count, float factor) override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    ops_->scale(buf.data() + offset, count, factor);
    return ops_->check();
  }

  expected<double> do_sum_squares(const device_buffer& buf, std::size_t offset, std::size_t count) override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    const double s = ops_->sum_squares(buf.data() + offset, count);
    RK_RETURN_IF_ERROR(ops_->check());
    return s;
  }

  expected<double> do_forward_backward(const device_buffer& params, device_buffer& grads,
                                       std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                                       std::uint32_t batch, float loss_scale) override {
    RK_RETURN_IF_ERROR(to_device(tokens, targets));
    RK_ASSIGN_OR_RETURN(const double loss, model_->forward(params.data(), tokens_.data(), targets_.data(), batch));
    RK_RETURN_IF_ERROR(model_->backward(params.data(), grads.data(), loss_scale));
    return loss;
  }

  expected<double> do_forward(const device_buffer& params, std::span<const std::int32_t> tokens,
                              std::span<const std::int32_t> targets, std::uint32_t batch) override {
    RK_RETURN_IF_ERROR(to_device(tokens, targets));
    return model_->forward(params.data(), tokens_.data(), targets_.data(), batch);
  }

  status do_adamw(device_buffer& params, std::size_t begin, std::size_t end, const device_buffer& grads,
                  device_buffer& m, device_buffer& v, const adamw_step& step) override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    apply_adamw(*ops_, layout_, params.data(), begin, end, grads.data(), m.data(), v.data(), step);
    return ops_->check();
  }

  expected<double> do_stage_forward(std::uint32_t slot, const device_buffer& params,
                                    std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                                    std::span<const float> input, std::span<float> output,
                                    std::uint32_t batch) override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    RK_RETURN_IF_ERROR(ops_->synchronize());  // nothing queued still reads the slot
    std::int32_t* tok = tokens_.data() + slot * positions_;
    std::int32_t* tgt = targets_.data() + slot * positions_;
    if (model_->embeds())
      RK_RETURN_IF_ERROR(cuda::copy_to_device(tok, tokens.data(), tokens.size_bytes()));
    else
      RK_RETURN_IF_ERROR(cuda::copy_to_device(model_->stage_input(slot), input.data(), input.size_bytes()));
    if (model_->has_head())
      RK_RETURN_IF_ERROR(cuda::copy_to_device(tgt, targets.data(), targets.size_bytes()));
    RK_ASSIGN_OR_RETURN(const double loss, model_->forward_stage(slot, params.data(), tok, tgt, batch));
    if (!model_->has_head()) {
      RK_RETURN_IF_ERROR(ops_->synchronize());
      RK_RETURN_IF_ERROR(cuda::copy_to_host(output.data(), model_->stage_output(slot), output.size_bytes()));
    }
    return loss;
  }

  status do_stage_backward(std::uint32_t slot, const device_buffer& params, device_buffer& grads,
                           std::span<const float> output_gradient, std::span<float> input_gradient,
                           float loss_scale) override {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    RK_RETURN_IF_ERROR(ops_->synchronize());
    if (!model_->has_head())
      RK_RETURN_IF_ERROR(
          cuda::copy_to_device(model_->output_gradient(), output_gradient.data(), output_gradient.size_bytes()));
    RK_RETURN_IF_ERROR(model_->backward_stage(slot, params.data(), grads.data(), loss_scale));
    if (!model_->embeds()) {
      RK_RETURN_IF_ERROR(ops_->synchronize());
      RK_RETURN_IF_ERROR(cuda::copy_to_host(input_gradient.data(), model_->input_gradient(), input_gradient.size_bytes()));
    }
    return ops_->check();
  }

  // Copies checked tokens and targets to the device.
  status to_device(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
    RK_RETURN_IF_ERROR(cuda::set_device(index_));
    RK_RETURN_IF_ERROR(cuda::copy_to_device(tokens_.data(), tokens.data(), tokens.size_bytes()));
    return cuda::copy_to_device(targets_.data(), targets.data(), targets.size_bytes());
  }

  int index_;
  model_shape shape_;
  param_layout layout_;
  std::uint32_t max_batch_;
  std::string name_;
  std::unique_ptr<cuda::ops> ops_;
  std::optional<transformer<cuda::ops>> model_;
  std::size_t positions_ = 0;
  cuda::device_array<std::int32_t> tokens_;
  cuda::device_array<std::int32_t> targets_;
};

}  // namespace

expected<std::unique_ptr<backend>> make_cuda_backend(int index, const model_shape& shape, std::uint32_t max_batch,
                                                     const stage_spec& stage) {
  RK_RETURN_IF_ERROR(shape.validate(max_batch));
  auto b = std::make_unique<cuda_backend>(index, shape, max_batch);
  RK_RETURN_IF_ERROR(b->init(stage));
  return std::unique_ptr<backend>{std::move(b)};
}

}  // namespace rekindle::kernels
