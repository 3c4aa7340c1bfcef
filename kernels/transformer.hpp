#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/check.hpp"
#include "common/expected.hpp"
#include "kernels/layout.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/shape.hpp"

namespace rekindle::kernels {

/// The decoder-only transformer's forward and backward pass, written once over an operation set.
///
/// `Ops` is `cpu_ops<float>`, `cpu_ops<double>` or `cuda::ops`; every pointer handed to it lives
/// in that set's memory. The pass is: token + position embedding; per block layernorm → qkv
/// projection → causal attention → projection → residual, layernorm → MLP (4·C, GELU) → projection
/// → residual; final layernorm; logits = h·wteᵀ (tied); softmax cross-entropy (docs/MODEL.md).
///
/// `forward` keeps every activation of up to `max_batch` sequences for `backward`. Thread-safety:
/// one thread at a time (it owns activation memory and drives `Ops`).
template <class Ops>
class transformer {
 public:
  using T = typename Ops::value_type;
  using array = typename Ops::array;

  /// Allocates the activations of `max_batch` sequences. REQUIRES: shape.validate(max_batch).ok().
  [[nodiscard]] static expected<transformer> create(Ops& ops, const model_shape& shape, std::uint32_t max_batch) {
    RK_RETURN_IF_ERROR(shape.validate(max_batch));
    transformer t(ops, shape, max_batch);
    RK_RETURN_IF_ERROR(t.allocate());
    return t;
  }

  transformer(transformer&&) noexcept = default;
  transformer& operator=(transformer&&) = delete;

  [[nodiscard]] const param_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] std::uint32_t max_batch() const noexcept { return max_batch_; }

  /// Runs `batch` sequences (tokens and targets are [batch, seq_len] in the ops' memory) and
  /// returns the mean cross-entropy over all positions. REQUIRES: 1 <= batch <= max_batch(),
  /// params holds layout().size() values.
  [[nodiscard]] expected<double> forward(const T* params, const std::int32_t* tokens, const std::int32_t* targets,
                                         std::uint32_t batch) {
    RK_CHECK(batch >= 1 && batch <= max_batch_, "batch ", batch, " outside [1, ", max_batch_, "]");
    batch_ = batch;
    tokens_ = tokens;
    targets_ = targets;
    const std::size_t B = batch, S = shape_.seq_len, C = shape_.width, H = shape_.heads;
    const std::size_t N = B * S;
    ops_->embedding_forward(d(encoded_), tokens, params + layout_.wte(), params + layout_.wpe(), B, S, C);
    for (std::size_t l = 0; l < shape_.layers; ++l) {
      const block_offsets& w = layout_.block(l);
      block_acts& a = blocks_[l];
      const T* residual = l == 0 ? d(encoded_) : d(blocks_[l - 1].res3);
      ops_->layernorm_forward(d(a.ln1), d(a.ln1_mean), d(a.ln1_rstd), residual, params + w.ln1_g,
                              params + w.ln1_b, N, C);
      ops_->matmul_forward(d(a.qkv), d(a.ln1), params + w.qkv_w, params + w.qkv_b, N, C, 3 * C);
      ops_->attention_forward(d(a.atty), d(a.att), d(a.qkv), B, S, C, H);
      ops_->matmul_forward(d(a.attproj), d(a.atty), params + w.proj_w, params + w.proj_b, N, C, C);
      ops_->residual_forward(d(a.res2), residual, d(a.attproj), N * C);
      ops_->layernorm_forward(d(a.ln2), d(a.ln2_mean), d(a.ln2_rstd), d(a.res2), params + w.ln2_g,
                              params + w.ln2_b, N, C);
      ops_->matmul_forward(d(a.fch), d(a.ln2), params + w.fc_w, params + w.fc_b, N, C, 4 * C);
      ops_->gelu_forward(d(a.fch_gelu), d(a.fch), N * 4 * C);
      ops_->matmul_forward(d(a.fcproj), d(a.fch_gelu), params + w.fcproj_w, params + w.fcproj_b, N, 4 * C, C);
      ops_->residual_forward(d(a.res3), d(a.res2), d(a.fcproj), N * C);
    }
    ops_->layernorm_forward(d(lnf_), d(lnf_mean_), d(lnf_rstd_), last_residual(), params + layout_.lnf_g(),
                            params + layout_.lnf_b(), N, C);
    ops_->matmul_forward(d(logits_), d(lnf_), params + layout_.wte(), nullptr, N, C, vocab_size);
    ops_->crossentropy_forward(d(losses_), d(probs_), d(logits_), targets, N, vocab_size);
    const double total = ops_->sum(d(losses_), N);
    RK_RETURN_IF_ERROR(ops_->check());
    return total / static_cast<double>(N);
  }

  /// Adds the gradient of `loss_scale` · (the last forward's mean loss) to `grads`
  /// (layout().size() values). REQUIRES: a forward with the same params before.
  [[nodiscard]] status backward(const T* params, T* grads, T loss_scale) {
    RK_CHECK(batch_ > 0, "backward without forward");
    const std::size_t B = batch_, S = shape_.seq_len, C = shape_.width, H = shape_.heads;
    const std::size_t N = B * S;
    ops_->zero(d(dres_), N * C);
    ops_->crossentropy_backward(d(dlogits_), d(probs_), targets_, loss_scale / static_cast<T>(N), N, vocab_size);
    ops_->matmul_backward(d(dln_), grads + layout_.wte(), nullptr, d(dlogits_), d(lnf_), params + layout_.wte(), N, C,
                          vocab_size);
    ops_->layernorm_backward(d(dres_), grads + layout_.lnf_g(), grads + layout_.lnf_b(), d(dln_), last_residual(),
                             params + layout_.lnf_g(), d(lnf_mean_), d(lnf_rstd_), N, C);
    for (std::size_t l = shape_.layers; l-- > 0;) {
      const block_offsets& w = layout_.block(l);
      block_acts& a = blocks_[l];
      const T* residual = l == 0 ? d(encoded_) : d(blocks_[l - 1].res3);
      // res3 = res2 + fcproj: the residual gradient flows to both unchanged.
      ops_->matmul_backward(d(dwide_), grads + w.fcproj_w, grads + w.fcproj_b, d(dres_), d(a.fch_gelu),
                            params + w.fcproj_w, N, 4 * C, C);
      ops_->gelu_backward(d(dwide_), d(a.fch), d(dwide_), N * 4 * C);
      ops_->matmul_backward(d(dln_), grads + w.fc_w, grads + w.fc_b, d(dwide_), d(a.ln2), params + w.fc_w, N, C,
                            4 * C);
      ops_->layernorm_backward(d(dres_), grads + w.ln2_g, grads + w.ln2_b, d(dln_), d(a.res2), params + w.ln2_g,
                               d(a.ln2_mean), d(a.ln2_rstd), N, C);
      // res2 = residual + attproj.
      ops_->matmul_backward(d(datty_), grads + w.proj_w, grads + w.proj_b, d(dres_), d(a.atty), params + w.proj_w,
                            N, C, C);
      ops_->attention_backward(d(dqkv_), d(datty_), d(a.qkv), d(a.att), B, S, C, H);
      ops_->matmul_backward(d(dln_), grads + w.qkv_w, grads + w.qkv_b, d(dqkv_), d(a.ln1), params + w.qkv_w, N, C,
                            3 * C);
      ops_->layernorm_backward(d(dres_), grads + w.ln1_g, grads + w.ln1_b, d(dln_), residual, params + w.ln1_g,
                               d(a.ln1_mean), d(a.ln1_rstd), N, C);
    }
    ops_->embedding_backward(grads + layout_.wte(), grads + layout_.wpe(), d(dres_), tokens_, B, S, C);
    return ops_->check();
  }

 private:
  // Activations of one block, each [rows, ·] for rows = max_batch · seq_len.
  struct block_acts {
    array ln1, ln1_mean, ln1_rstd, qkv, att, atty, attproj, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, fcproj,
        res3;
  };

  transformer(Ops& ops, const model_shape& shape, std::uint32_t max_batch)
      : ops_(&ops), shape_(shape), layout_(shape), max_batch_(max_batch) {}

  status allocate() {
    const std::size_t N = std::size_t{max_batch_} * shape_.seq_len;
    const std::size_t C = shape_.width;
    const std::size_t att = std::size_t{max_batch_} * shape_.heads * shape_.seq_len * shape_.seq_len;
    status failed;
    const auto take = [&](array& a, std::size_t count) {
      if (!failed.ok())
        return;
      auto r = ops_->allocate(count);
      if (!r)
        failed = std::move(r).error();
      else
        a = std::move(r).value();
    };
    take(encoded_, N * C);
    blocks_.resize(shape_.layers);
    for (auto& a : blocks_) {
      take(a.ln1, N * C);
      take(a.ln1_mean, N);
      take(a.ln1_rstd, N);
      take(a.qkv, N * 3 * C);
      take(a.att, att);
      take(a.atty, N * C);
      take(a.attproj, N * C);
      take(a.res2, N * C);
      take(a.ln2, N * C);
      take(a.ln2_mean, N);
      take(a.ln2_rstd, N);
      take(a.fch, N * 4 * C);
      take(a.fch_gelu, N * 4 * C);
      take(a.fcproj, N * C);
      take(a.res3, N * C);
    }
    take(lnf_, N * C);
    take(lnf_mean_, N);
    take(lnf_rstd_, N);
    take(logits_, N * vocab_size);
    take(probs_, N * vocab_size);
    take(losses_, N);
    take(dres_, N * C);
    take(dln_, N * C);
    take(datty_, N * C);
    take(dqkv_, N * 3 * C);
    take(dwide_, N * 4 * C);
    take(dlogits_, N * vocab_size);
    return failed;
  }

  T* d(array& a) const noexcept { return Ops::data(a); }
  const T* last_residual() noexcept { return Ops::data(blocks_.back().res3); }

  Ops* ops_;
  model_shape shape_;
  param_layout layout_;
  std::uint32_t max_batch_;
  std::uint32_t batch_ = 0;
  const std::int32_t* tokens_ = nullptr;
  const std::int32_t* targets_ = nullptr;
  array encoded_;
  std::vector<block_acts> blocks_;
  array lnf_, lnf_mean_, lnf_rstd_, logits_, probs_, losses_;
  // Gradients of activations, reused by every block.
  array dres_, dln_, datty_, dqkv_, dwide_, dlogits_;
};

}  // namespace rekindle::kernels
