#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
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
/// A transformer runs the whole model or one pipeline stage (`stage_spec`): blocks
/// [first, first + layers), with the embedding when first is 0 and the head (final layernorm,
/// logits, loss) when the stage ends at the last block. A stage after the first reads its input
/// activations ([batch, seq_len, width]) from stage_input(slot), which the caller fills; a stage
/// before the last leaves its output in stage_output(slot), and its backward reads the gradient
/// of that output from output_gradient(), which the caller fills. After a backward, a stage after
/// the first leaves the gradient of its input in input_gradient(). The parameters and gradients
/// are always the whole flat buffer (layout()); a stage reads and adds to its own tensors only.
///
/// `forward` keeps every activation of up to `max_batch` sequences per slot for `backward`.
/// Thread-safety: one thread at a time (it owns activation memory and drives `Ops`).
template <class Ops>
class transformer {
 public:
  using T = typename Ops::value_type;
  using array = typename Ops::array;

  /// Allocates the activations of `max_batch` sequences per slot. REQUIRES:
  /// shape.validate(max_batch).ok(); errors: a stage outside the model, no slots.
  [[nodiscard]] static expected<transformer> create(Ops& ops, const model_shape& shape, std::uint32_t max_batch,
                                                    stage_spec stage = {}) {
    RK_RETURN_IF_ERROR(shape.validate(max_batch));
    if (stage.layers == 0 && stage.first_layer < shape.layers)
      stage.layers = shape.layers - stage.first_layer;
    if (stage.layers == 0 || stage.first_layer >= shape.layers || stage.layers > shape.layers - stage.first_layer)
      return status{errc::invalid_argument, "stage of blocks [" + std::to_string(stage.first_layer) + ", " +
                                                std::to_string(std::uint64_t{stage.first_layer} + stage.layers) +
                                                ") outside a model of " + std::to_string(shape.layers) + " blocks"};
    if (stage.slots == 0 || stage.slots > max_slots)
      return status{errc::invalid_argument, "a stage keeps 1 to " + std::to_string(max_slots) +
                                                " micro-batches' activations, not " + std::to_string(stage.slots)};
    transformer t(ops, shape, max_batch, stage);
    RK_RETURN_IF_ERROR(t.allocate());
    return t;
  }

  /// Most activation slots of one stage.
  static constexpr std::uint32_t max_slots = 1024;

  transformer(transformer&&) noexcept = default;
  transformer& operator=(transformer&&) = delete;

  [[nodiscard]] const param_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] std::uint32_t max_batch() const noexcept { return max_batch_; }
  [[nodiscard]] const stage_spec& stage() const noexcept { return stage_; }
  /// Whether the stage starts with the embedding (it reads tokens) / ends with the head (it reads
  /// targets and computes the loss).
  [[nodiscard]] bool embeds() const noexcept { return stage_.first_layer == 0; }
  [[nodiscard]] bool has_head() const noexcept { return stage_.first_layer + stage_.layers == shape_.layers; }

  /// Runs `batch` sequences (tokens and targets are [batch, seq_len] in the ops' memory) and
  /// returns the mean cross-entropy over all positions. REQUIRES: the whole model,
  /// 1 <= batch <= max_batch(), params holds layout().size() values.
  [[nodiscard]] expected<double> forward(const T* params, const std::int32_t* tokens, const std::int32_t* targets,
                                         std::uint32_t batch) {
    RK_CHECK(embeds() && has_head(), "forward of a pipeline stage: use forward_stage");
    return forward_stage(0, params, tokens, targets, batch);
  }

  /// Adds the gradient of `loss_scale` · (the last forward's mean loss) to `grads`
  /// (layout().size() values). REQUIRES: the whole model, a forward with the same params before.
  [[nodiscard]] status backward(const T* params, T* grads, T loss_scale) {
    RK_CHECK(embeds() && has_head(), "backward of a pipeline stage: use backward_stage");
    return backward_stage(0, params, grads, loss_scale);
  }

  /// The stage's input activations of slot `slot` ([max_batch, seq_len, width]), for the caller
  /// to fill before forward_stage. REQUIRES: !embeds().
  [[nodiscard]] T* stage_input(std::uint32_t slot) {
    RK_CHECK(!embeds() && slot < stage_.slots, "stage_input of slot ", slot);
    return d(slots_[slot].input);
  }
  /// The stage's output activations of slot `slot` after forward_stage. REQUIRES: !has_head().
  [[nodiscard]] const T* stage_output(std::uint32_t slot) {
    RK_CHECK(!has_head() && slot < stage_.slots, "stage_output of slot ", slot);
    return d(slots_[slot].blocks.back().res3);
  }
  /// Where the caller puts the gradient of the stage's output before backward_stage; after it,
  /// the gradient of the stage's input (input_gradient). REQUIRES: !has_head() / !embeds().
  [[nodiscard]] T* output_gradient() {
    RK_CHECK(!has_head(), "output_gradient of the last stage");
    return d(dres_);
  }
  [[nodiscard]] const T* input_gradient() {
    RK_CHECK(!embeds(), "input_gradient of the first stage");
    return d(dres_);
  }

  /// The stage's forward pass of `batch` sequences into slot `slot`: from `tokens` when the stage
  /// embeds, else from stage_input(slot); returns the mean loss when it has the head (`targets`
  /// used), else 0 with the output in stage_output(slot). Pointers not used may be null; those
  /// used must stay valid until the slot's backward_stage.
  [[nodiscard]] expected<double> forward_stage(std::uint32_t slot, const T* params, const std::int32_t* tokens,
                                               const std::int32_t* targets, std::uint32_t batch) {
    RK_CHECK(batch >= 1 && batch <= max_batch_, "batch ", batch, " outside [1, ", max_batch_, "]");
    RK_CHECK(slot < stage_.slots, "slot ", slot, " of ", stage_.slots);
    slot_acts& s = slots_[slot];
    s.batch = batch;
    s.tokens = tokens;
    s.targets = targets;
    const std::size_t B = batch, S = shape_.seq_len, C = shape_.width, H = shape_.heads;
    const std::size_t N = B * S;
    if (embeds())
      ops_->embedding_forward(d(s.input), tokens, params + layout_.wte(), params + layout_.wpe(), B, S, C);
    for (std::size_t i = 0; i < stage_.layers; ++i) {
      const block_offsets& w = layout_.block(stage_.first_layer + i);
      block_acts& a = s.blocks[i];
      const T* residual = i == 0 ? d(s.input) : d(s.blocks[i - 1].res3);
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
    if (!has_head()) {
      RK_RETURN_IF_ERROR(ops_->check());
      return 0.0;
    }
    head_acts& h = *s.head;
    ops_->layernorm_forward(d(h.lnf), d(h.lnf_mean), d(h.lnf_rstd), last_residual(s), params + layout_.lnf_g(),
                            params + layout_.lnf_b(), N, C);
    ops_->matmul_forward(d(h.logits), d(h.lnf), params + layout_.wte(), nullptr, N, C, vocab_size);
    ops_->crossentropy_forward(d(h.losses), d(h.probs), d(h.logits), targets, N, vocab_size);
    const double total = ops_->sum(d(h.losses), N);
    RK_RETURN_IF_ERROR(ops_->check());
    return total / static_cast<double>(N);
  }

  /// The stage's backward pass of slot `slot`: adds the gradient of its tensors to `grads`. With
  /// the head, of `loss_scale` · (the slot's mean loss); without, from output_gradient(), which
  /// the caller filled (`loss_scale` unused). REQUIRES: a forward_stage into the slot before.
  [[nodiscard]] status backward_stage(std::uint32_t slot, const T* params, T* grads, T loss_scale) {
    RK_CHECK(slot < stage_.slots && slots_[slot].batch > 0, "backward of slot ", slot, " without forward");
    slot_acts& s = slots_[slot];
    const std::size_t B = s.batch, S = shape_.seq_len, C = shape_.width, H = shape_.heads;
    const std::size_t N = B * S;
    if (has_head()) {
      head_acts& h = *s.head;
      ops_->zero(d(dres_), N * C);
      ops_->crossentropy_backward(d(dlogits_), d(h.probs), s.targets, loss_scale / static_cast<T>(N), N,
                                  vocab_size);
      ops_->matmul_backward(d(dln_), grads + layout_.wte(), nullptr, d(dlogits_), d(h.lnf), params + layout_.wte(), N,
                            C, vocab_size);
      ops_->layernorm_backward(d(dres_), grads + layout_.lnf_g(), grads + layout_.lnf_b(), d(dln_), last_residual(s),
                               params + layout_.lnf_g(), d(h.lnf_mean), d(h.lnf_rstd), N, C);
    }
    for (std::size_t i = stage_.layers; i-- > 0;) {
      const block_offsets& w = layout_.block(stage_.first_layer + i);
      block_acts& a = s.blocks[i];
      const T* residual = i == 0 ? d(s.input) : d(s.blocks[i - 1].res3);
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
    if (embeds())
      ops_->embedding_backward(grads + layout_.wte(), grads + layout_.wpe(), d(dres_), s.tokens, B, S, C);
    return ops_->check();
  }

 private:
  // Activations of one block, each [rows, ·] for rows = max_batch · seq_len.
  struct block_acts {
    array ln1, ln1_mean, ln1_rstd, qkv, att, atty, attproj, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, fcproj,
        res3;
  };
  // Activations of the head (the last stage only).
  struct head_acts {
    array lnf, lnf_mean, lnf_rstd, logits, probs, losses;
  };
  // One micro-batch in flight: the stage input (the embedding's output on the first stage), the
  // blocks' activations, the head's.
  struct slot_acts {
    array input;
    std::vector<block_acts> blocks;
    std::optional<head_acts> head;
    std::uint32_t batch = 0;
    const std::int32_t* tokens = nullptr;
    const std::int32_t* targets = nullptr;
  };

  transformer(Ops& ops, const model_shape& shape, std::uint32_t max_batch, stage_spec stage)
      : ops_(&ops), shape_(shape), layout_(shape), max_batch_(max_batch), stage_(stage) {}

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
    slots_.resize(stage_.slots);
    for (auto& s : slots_) {
      take(s.input, N * C);
      s.blocks.resize(stage_.layers);
      for (auto& a : s.blocks) {
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
      if (has_head()) {
        head_acts& h = s.head.emplace();
        take(h.lnf, N * C);
        take(h.lnf_mean, N);
        take(h.lnf_rstd, N);
        take(h.logits, N * vocab_size);
        take(h.probs, N * vocab_size);
        take(h.losses, N);
      }
    }
    take(dres_, N * C);
    take(dln_, N * C);
    take(datty_, N * C);
    take(dqkv_, N * 3 * C);
    take(dwide_, N * 4 * C);
    if (has_head())
      take(dlogits_, N * vocab_size);
    return failed;
  }

  T* d(array& a) const noexcept { return Ops::data(a); }
  const T* last_residual(slot_acts& s) noexcept { return Ops::data(s.blocks.back().res3); }

  Ops* ops_;
  model_shape shape_;
  param_layout layout_;
  std::uint32_t max_batch_;
  stage_spec stage_;
  std::vector<slot_acts> slots_;
  // Gradients of activations, reused by every block and slot.
  array dres_, dln_, datty_, dqkv_, dwide_, dlogits_;
};

}  // namespace rekindle::kernels
