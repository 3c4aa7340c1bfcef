#include "training/training_task.hpp"

#include <algorithm>
#include <future>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <tuple>
#include <string>
#include <thread>

#include "common/checksum.hpp"
#include "common/clock.hpp"
#include "common/process.hpp"
#include "kernels/float_mode.hpp"
#include "kernels/layout.hpp"
#include "kernels/optimizer.hpp"
#include "training/data.hpp"
#include "training/state.hpp"

namespace rekindle::training {

namespace {

using steady = std::chrono::steady_clock;
using transport::dtype;
using transport::reduce_op;

// The deleter of memory a task does not own (task_options::memory).
void keep_memory(float*) noexcept {}

kernels::model_shape shape_of(const config::model_spec& m) {
  return kernels::model_shape{.layers = m.layers, .heads = m.heads, .width = m.width, .seq_len = m.seq_len};
}

kernels::adamw_hyper hyper_of(const config::spec& s) {
  kernels::adamw_hyper h;
  h.learning_rate = s.optimizer.learning_rate;
  h.min_learning_rate = s.optimizer.min_learning_rate;
  h.warmup_steps = s.optimizer.warmup_steps;
  h.total_steps = s.job.steps;
  h.weight_decay = s.optimizer.weight_decay;
  h.beta1 = s.optimizer.beta1;
  h.beta2 = s.optimizer.beta2;
  h.epsilon = s.optimizer.epsilon;
  h.grad_clip = s.optimizer.grad_clip;
  return h;
}

expected<corpus> load_corpus(const config::job_spec& job, std::uint32_t seq_len) {
  if (job.data == "synthetic" && !job.data_file)
    return corpus::synthetic();
  return corpus::from_file(job.data_file ? *job.data_file : std::filesystem::path{job.data}, seq_len);
}

std::chrono::nanoseconds since(steady::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - t);
}

status mismatch(std::size_t buffer, std::string_view field, std::uint64_t have, std::uint64_t want) {
  return status{errc::invalid_argument, "state buffer " + std::to_string(buffer) + ": field '" + std::string{field} +
                                            "' (byte offset " + std::to_string(state_field_offset(field)) +
                                            "): the state has " + std::to_string(have) + ", this job has " +
                                            std::to_string(want)};
}

// The data-parallel ZeRO-1 task (see training_task).
class data_parallel_task final : public training_task {
 public:
  ~data_parallel_task() override { wait_export(); }

  data_parallel_task(const config::spec& spec, int rank, int world, transport::communicator& comm)
      : shape_(shape_of(spec.model)),
        hyper_(hyper_of(spec)),
        seed_(spec.job.seed),
        micro_batch_(spec.job.micro_batch),
        micro_batches_(spec.job.global_batch / spec.job.micro_batch),
        rank_(rank),
        world_(world),
        comm_(&comm) {}

  status set_micro_batches(std::span<const std::uint32_t> given) override {
    std::vector<std::uint32_t> counts(given.begin(), given.end());
    const int replicas = world_ / static_cast<int>(stages_);
    if (counts.empty())
      counts = equal_split(micro_batches_, replicas);
    if (counts.size() != static_cast<std::size_t>(replicas))
      return status{errc::invalid_argument,
                    "micro_batches_per_rank has " + std::to_string(counts.size()) + " entries for " +
                        (stages_ == 1 ? "a world of " + std::to_string(world_) + " ranks"
                                      : std::to_string(replicas) + " replicas (" + std::to_string(world_) +
                                            " ranks in pipelines of " + std::to_string(stages_) + " stages)")};
    const std::uint64_t total = std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
    if (total != micro_batches_)
      return status{errc::invalid_argument, "micro_batches_per_rank sums to " + std::to_string(total) +
                                                ", a step has " + std::to_string(micro_batches_) +
                                                " micro-batches (global_batch / micro_batch)"};
    counts_ = std::move(counts);
    place_rank();
    return {};
  }

  std::uint32_t pipeline_stages() const noexcept override { return stages_; }
  std::span<const std::uint32_t> stage_layers() const noexcept override { return stage_layers_; }
  void set_slowdown(double factor) noexcept override {
    slowdown_ = factor > 1.0 ? std::min(factor, max_slowdown) : 1.0;  // NaN: off
  }
  static constexpr double max_slowdown = 1000.0;

  // Runs one forward or backward pass (`pass` returns its status or value), then, under the slow
  // drill, sleeps (factor − 1) times as long as it took.
  template <class Pass>
  auto slowed(Pass&& pass) {
    if (slowdown_ <= 1.0)
      return pass();
    const auto t = steady::now();
    auto result = pass();
    std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>((steady::now() - t) * (slowdown_ - 1.0)));
    return result;
  }
  std::uint32_t stage() const noexcept override { return position().stage; }
  config::pipeline_position position() const noexcept {
    return config::position_in_pipeline(static_cast<std::uint32_t>(rank_), stages_);
  }

  // Checks and takes the stage split (before set_micro_batches).
  status set_stages(const std::vector<std::uint32_t>& layers) {
    if (layers.size() <= 1) {
      if (layers.size() == 1 && layers[0] != shape_.layers)
        return status{errc::invalid_argument, "stage_layers: one stage of " + std::to_string(layers[0]) +
                                                  " blocks, the model has " + std::to_string(shape_.layers)};
      stage_layers_ = {shape_.layers};
      stages_ = 1;
      return {};
    }
    if (layers.size() > shape_.layers)
      return status{errc::invalid_argument, "stage_layers: " + std::to_string(layers.size()) +
                                                " stages for a model of " + std::to_string(shape_.layers) + " blocks"};
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      if (layers[i] == 0)
        return status{errc::invalid_argument, "stage_layers[" + std::to_string(i) + "]: a stage holds at least one block"};
      total += layers[i];
    }
    if (total != shape_.layers)
      return status{errc::invalid_argument, "stage_layers add up to " + std::to_string(total) +
                                                " blocks, the model has " + std::to_string(shape_.layers)};
    if (world_ % static_cast<int>(layers.size()) != 0)
      return status{errc::invalid_argument, "a world of " + std::to_string(world_) + " ranks is not a whole number of " +
                                                std::to_string(layers.size()) + "-stage pipelines"};
    stage_layers_ = layers;
    stages_ = static_cast<std::uint32_t>(layers.size());
    return {};
  }

  // The stage a backend runs for this rank.
  kernels::stage_spec stage_spec_of_rank() const {
    const std::uint32_t s = stage();
    const std::uint32_t first = std::accumulate(stage_layers_.begin(), stage_layers_.begin() + s, std::uint32_t{0});
    return kernels::stage_spec{.first_layer = first, .layers = stage_layers_[s], .slots = stages_ - s};
  }

  // The rank's replica, micro-batches and optimizer shard.
  void place_rank() {
    const auto replica = position().replica;
    first_micro_ = std::accumulate(counts_.begin(), counts_.begin() + replica, std::uint32_t{0});
    my_micro_ = counts_[replica];
  }

  std::span<const std::uint32_t> micro_batches() const noexcept override { return counts_; }

  status init(const config::spec& spec, const task_options& options) {
    RK_RETURN_IF_ERROR(set_stages(options.stage_layers.empty() ? spec.job.stages : options.stage_layers));
    RK_RETURN_IF_ERROR(set_micro_batches(options.micro_batches_per_rank));
    flush_subnormals_ = options.flush_subnormals;

    RK_ASSIGN_OR_RETURN(corpus data, load_corpus(spec.job, shape_.seq_len));
    sampler_.emplace(std::move(data), seed_, shape_.seq_len, micro_batch_);

    backend_options_.device = options.device;
    backend_options_.shape = shape_;
    backend_options_.max_batch = micro_batch_;
    backend_options_.stage = stage_spec_of_rank();
    RK_ASSIGN_OR_RETURN(backend_, kernels::make_backend(backend_options_));

    params_count_ = backend_->layout().size();
    const auto w = static_cast<std::size_t>(world_);
    padded_ = (params_count_ + w - 1) / w * w;
    shard_ = padded_ / w;
    begin_ = static_cast<std::size_t>(rank_) * shard_;

    RK_ASSIGN_OR_RETURN(params_, backend_->allocate(padded_));
    const auto given = options.gradient_memory;
    if (backend_->host_memory() && given.size() >= padded_) {
      // Memory the task does not own (the ring's shared buffer), zeroed as allocate's is.
      std::fill_n(given.data(), padded_, 0.0f);
      grads_ = kernels::device_buffer{given.data(), padded_, &keep_memory};
    } else {
      RK_ASSIGN_OR_RETURN(grads_, backend_->allocate(padded_));
    }
    RK_ASSIGN_OR_RETURN(grad_shard_, backend_->allocate(shard_));
    RK_ASSIGN_OR_RETURN(m_, backend_->allocate(shard_));
    RK_ASSIGN_OR_RETURN(v_, backend_->allocate(shard_));
    if (!backend_->host_memory()) {
      host_params_.resize(padded_);
      host_grads_.resize(padded_);
      host_shard_.resize(shard_);
    }
    if (options.initialize) {
      if (backend_->host_memory()) {
        kernels::init_parameters(backend_->layout(), seed_, std::span<float>(params_.data(), padded_));
      } else {
        std::vector<float> init(padded_);
        kernels::init_parameters(backend_->layout(), seed_, init);
        RK_RETURN_IF_ERROR(backend_->upload(params_, 0, init));
      }
    }
    tokens_.resize(std::size_t{micro_batch_} * shape_.seq_len);
    targets_.resize(tokens_.size());
    if (stages_ > 1) {
      const std::size_t acts = tokens_.size() * shape_.width;
      act_in_.resize(acts);
      act_out_.resize(acts);
      grad_in_.resize(acts);
      grad_out_.resize(acts);
    }
    return {};
  }

  expected<step_result> step() override {
    if (needs_import_)
      return status{errc::failed_precondition,
                    "rank " + std::to_string(rank_) +
                        " holds no complete state (it took another rank's place, or an import failed its checksum): "
                        "import a state first"};
    const kernels::flush_subnormals float_mode{flush_subnormals_};
    step_result r;
    const auto t0 = steady::now();
    const auto cpu0 = thread_cpu_time();
    std::chrono::nanoseconds data_cpu{0};
    RK_RETURN_IF_ERROR(backend_->zero(grads_, 0, padded_));
    double loss_sum = 0;
    std::chrono::nanoseconds p2p_cpu{0};
    const auto fill = [&](std::uint32_t i) {
      const auto d0 = steady::now();
      const auto dc0 = thread_cpu_time();
      sampler_->fill(step_, i, tokens_, targets_);
      r.timings.data += since(d0);
      data_cpu += thread_cpu_time() - dc0;
    };
    if (stages_ == 1) {
      for (std::uint32_t i = first_micro_; i < first_micro_ + my_micro_; ++i) {
        fill(i);
        RK_ASSIGN_OR_RETURN(const double loss,
                            slowed([&] { return backend_->forward_backward(params_, grads_, tokens_, targets_, 1.0f); }));
        loss_sum += loss;
      }
    } else {
      RK_ASSIGN_OR_RETURN(loss_sum, pipeline_pass(fill, r.timings, p2p_cpu));
    }
    RK_RETURN_IF_ERROR(backend_->synchronize());
    r.timings.compute = since(t0) - r.timings.data - r.timings.communication;
    if (backend_->kind() == kernels::device_kind::cpu)  // computes on this thread
      r.timings.compute_cpu = thread_cpu_time() - cpu0 - data_cpu - p2p_cpu;

    // 1. Each rank receives its shard of the gradient summed over all micro-batches.
    auto t = steady::now();
    if (backend_->host_memory()) {
      RK_RETURN_IF_ERROR(collective(comm_->reduce_scatter(grads_.data(), grad_shard_.data(), shard_, dtype::f32,
                                                          reduce_op::sum),
                                    "reduce_scatter of the gradient"));
    } else {
      RK_RETURN_IF_ERROR(backend_->download(grads_, 0, host_grads_));
      RK_RETURN_IF_ERROR(collective(comm_->reduce_scatter(host_grads_.data(), host_shard_.data(), shard_,
                                                          dtype::f32, reduce_op::sum),
                                    "reduce_scatter of the gradient"));
      RK_RETURN_IF_ERROR(backend_->upload(grad_shard_, 0, host_shard_));
    }
    r.timings.communication += since(t);

    // 2. The loss and the squared gradient norm, summed over ranks in one allreduce.
    t = steady::now();
    RK_ASSIGN_OR_RETURN(const double shard_squares, backend_->sum_squares(grad_shard_, 0, shard_));
    r.timings.optimizer += since(t);
    t = steady::now();
    float sums[2] = {static_cast<float>(loss_sum), static_cast<float>(shard_squares)};
    RK_RETURN_IF_ERROR(collective(comm_->allreduce(sums, 2, dtype::f32, reduce_op::sum), "allreduce of loss and norm"));
    r.timings.communication += since(t);

    // The optimizer writes what an overlapped export reads: it waits for it here.
    t = steady::now();
    wait_export();
    r.timings.snapshot_wait = since(t);

    // 3. Mean over micro-batches, clip, AdamW on the own shard.
    t = steady::now();
    const double m = static_cast<double>(micro_batches_);
    r.loss = static_cast<double>(sums[0]) / m;
    r.grad_norm = std::sqrt(static_cast<double>(sums[1])) / m;
    r.learning_rate = kernels::learning_rate_at(hyper_, step_);
    const double clip = kernels::clip_factor(hyper_, r.grad_norm);
    const kernels::adamw_step st = kernels::make_adamw_step(hyper_, step_, static_cast<float>(clip / m));
    RK_RETURN_IF_ERROR(backend_->adamw(params_, begin_, begin_ + shard_, grad_shard_, m_, v_, st));
    RK_RETURN_IF_ERROR(backend_->synchronize());
    r.timings.optimizer += since(t);

    // 4. Every rank gathers the updated shards into its full replica.
    t = steady::now();
    if (backend_->host_memory()) {
      RK_RETURN_IF_ERROR(collective(comm_->allgather(params_.data() + begin_, params_.data(), shard_, dtype::f32),
                                    "allgather of the parameters"));
    } else {
      RK_RETURN_IF_ERROR(backend_->download(params_, begin_, std::span<float>(host_params_).subspan(begin_, shard_)));
      RK_RETURN_IF_ERROR(collective(
          comm_->allgather(host_params_.data() + begin_, host_params_.data(), shard_, dtype::f32),
          "allgather of the parameters"));
      RK_RETURN_IF_ERROR(backend_->upload(params_, 0, host_params_));
    }
    r.timings.communication += since(t);

    ++step_;
    r.step = step_t{step_};
    return r;
  }

  // The stage's forward and backward passes over the replica's micro-batches, one forward one
  // backward (see training_task); returns the sum of the micro-batches' losses on the last stage,
  // 0 elsewhere. The sends and receives count as communication.
  template <class Fill>
  expected<double> pipeline_pass(const Fill& fill, step_timings& timings, std::chrono::nanoseconds& p2p_cpu) {
    const std::uint32_t s = stage();
    const bool first = s == 0;
    const bool last = s + 1 == stages_;
    const std::uint32_t slots = backend_->stage().slots;
    const std::uint32_t warmup = std::min(stages_ - s - 1, my_micro_);
    const std::size_t bytes = act_in_.size() * sizeof(float);
    double loss_sum = 0;
    const auto p2p = [&](auto&& call, std::string_view what, std::uint32_t micro) -> status {
      const auto t = steady::now();
      const auto c = thread_cpu_time();
      status st = call();
      timings.communication += since(t);
      p2p_cpu += thread_cpu_time() - c;
      if (!st.ok())
        return st.with_context("step " + std::to_string(step_) + ": micro-batch " + std::to_string(micro) + ": " +
                               std::string{what});
      return st;
    };
    const auto forward = [&](std::uint32_t k) -> status {
      const std::uint32_t micro = first_micro_ + k;
      if (first || last)
        fill(micro);
      if (!first)
        RK_RETURN_IF_ERROR(p2p([&] { return comm_->recv(act_in_.data(), bytes, rank_ - 1); },
                               "activations from the previous stage", micro));
      RK_ASSIGN_OR_RETURN(const double loss, slowed([&] {
                            return backend_->stage_forward(
                                k % slots, params_,
                                first ? std::span<const std::int32_t>(tokens_) : std::span<const std::int32_t>{},
                                last ? std::span<const std::int32_t>(targets_) : std::span<const std::int32_t>{},
                                first ? std::span<const float>{} : std::span<const float>(act_in_),
                                last ? std::span<float>{} : std::span<float>(act_out_));
                          }));
      loss_sum += loss;
      if (!last)
        RK_RETURN_IF_ERROR(p2p([&] { return comm_->send(act_out_.data(), bytes, rank_ + 1); },
                               "activations to the next stage", micro));
      return {};
    };
    const auto backward = [&](std::uint32_t k) -> status {
      const std::uint32_t micro = first_micro_ + k;
      if (!last)
        RK_RETURN_IF_ERROR(p2p([&] { return comm_->recv(grad_in_.data(), bytes, rank_ + 1); },
                               "gradients from the next stage", micro));
      RK_RETURN_IF_ERROR(slowed([&] {
        return backend_->stage_backward(k % slots, params_, grads_,
                                        last ? std::span<const float>{} : std::span<const float>(grad_in_),
                                        first ? std::span<float>{} : std::span<float>(grad_out_), 1.0f);
      }));
      if (!first)
        RK_RETURN_IF_ERROR(p2p([&] { return comm_->send(grad_out_.data(), bytes, rank_ - 1); },
                               "gradients to the previous stage", micro));
      return {};
    };
    std::uint32_t forwards = 0;
    std::uint32_t backwards = 0;
    for (std::uint32_t i = 0; i < warmup; ++i)
      RK_RETURN_IF_ERROR(forward(forwards++));
    for (std::uint32_t i = warmup; i < my_micro_; ++i) {
      RK_RETURN_IF_ERROR(forward(forwards++));
      RK_RETURN_IF_ERROR(backward(backwards++));
    }
    for (std::uint32_t i = 0; i < warmup; ++i)
      RK_RETURN_IF_ERROR(backward(backwards++));
    return loss_sum;
  }

  step_t current_step() const noexcept override { return step_t{step_}; }
  std::uint64_t total_steps() const noexcept override { return hyper_.total_steps; }

  std::size_t state_size() const noexcept override {
    state_header h = header();
    return h.total_bytes;
  }

  expected<std::uint64_t> export_state(std::span<std::byte> out) override {
    wait_export();
    return export_into(header(), out);
  }

  status begin_export(std::span<std::byte> out) override {
    if (pending_export_.valid() || export_result_)
      return status{errc::failed_precondition, "an export is pending: finish_export first"};
    const state_header h = header();
    if (out.size() < h.total_bytes)
      return status{errc::invalid_argument, "export needs " + std::to_string(h.total_bytes) +
                                                " bytes, the buffer holds " + std::to_string(out.size())};
    if (!backend_->host_memory()) {  // a copy out of the device: in the call
      export_result_ = export_into(h, out);
      return {};
    }
    pending_export_ = std::async(std::launch::async, [this, h, out] {
      name_this_thread("rk-snapshot");
      return export_into(h, out);
    });
    return {};
  }

  std::optional<expected<std::uint64_t>> finish_export() override {
    wait_export();
    return std::exchange(export_result_, std::nullopt);
  }

  // The state with header `h` into `out`, front to back in one pass (see export_state). Reads
  // only the parameters and the moments: safe beside a step's passes, not beside its optimizer.
  expected<std::uint64_t> export_into(const state_header& h, std::span<std::byte> out) {
    if (out.size() < h.total_bytes)
      return status{errc::invalid_argument, "export needs " + std::to_string(h.total_bytes) +
                                                " bytes, the buffer holds " + std::to_string(out.size())};
    // Front to back in one pass: each piece is hashed right after it is written, while in cache.
    snapshot_checksum_stream sum;
    write_state_header(h, out);
    sum.update(out.first(state_header_bytes));
    std::uint64_t at = state_header_bytes;
    const auto section = [&](std::uint64_t offset, std::span<const float> floats) {
      // Zero padding up to the section, then the section.
      std::memset(out.data() + at, 0, offset - at);
      sum.update(out.subspan(at, offset - at));
      copy_and_checksum(out.subspan(offset, floats.size_bytes()), std::as_bytes(floats), sum);
      at = offset + floats.size_bytes();
    };
    if (backend_->host_memory()) {
      section(h.params_offset, std::span<const float>(params_.data(), params_count_));
      section(h.m_offset, std::span<const float>(m_.data(), shard_));
      section(h.v_offset, std::span<const float>(v_.data(), shard_));
    } else {
      RK_RETURN_IF_ERROR(backend_->download(params_, 0, std::span<float>(host_params_).first(params_count_)));
      section(h.params_offset, std::span<const float>(host_params_).first(params_count_));
      RK_RETURN_IF_ERROR(backend_->download(m_, 0, host_shard_));
      section(h.m_offset, host_shard_);
      RK_RETURN_IF_ERROR(backend_->download(v_, 0, host_shard_));
      section(h.v_offset, host_shard_);
    }
    std::memset(out.data() + at, 0, h.trailer_offset - at);
    sum.update(out.subspan(at, h.trailer_offset - at));
    const auto trailer = out.subspan(h.trailer_offset, state_trailer_bytes);
    write_state_trailer(sum.digest(), trailer);
    sum.update(trailer);
    return sum.digest();
  }

  status import_state(std::span<const std::span<const std::byte>> buffers) override {
    wait_export();
    if (buffers.empty())
      return status{errc::invalid_argument, "import needs at least one state buffer"};
    // This rank's own state of the same world into host memory, the restore after a failure:
    // verified while it is copied in, one pass over the bytes.
    if (buffers.size() == 1 && backend_->host_memory()) {
      auto v = parse_state(buffers[0], body_check::deferred);
      if (!v)
        return v.error().with_context("state buffer 0");
      RK_RETURN_IF_ERROR(check_matches_job(0, v->header));
      if (v->header.world_size == static_cast<std::uint32_t>(world_) &&
          v->header.rank == static_cast<std::uint32_t>(rank_))
        return import_own_state(buffers[0], *v);
    }
    std::vector<state_view> views;
    views.reserve(buffers.size());
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      auto v = parse_state(buffers[i]);
      if (!v)
        return v.error().with_context("state buffer " + std::to_string(i));
      RK_RETURN_IF_ERROR(check_matches_job(i, v->header));
      views.push_back(*v);
    }
    const state_header& first = views.front().header;
    for (std::size_t i = 1; i < views.size(); ++i) {
      const state_header& h = views[i].header;
      if (h.step != first.step)
        return mismatch_between(i, "step", h.step, first.step);
      if (h.world_size != first.world_size)
        return mismatch_between(i, "world_size", h.world_size, first.world_size);
      const auto& params = views[i].params;
      const auto& first_params = views.front().params;
      if (params.size() != first_params.size() || std::memcmp(params.data(), first_params.data(), params.size()) != 0)
        return status{errc::invalid_argument, "state buffers " + std::to_string(i) +
                                                  " and 0 hold different parameters (bytes [" +
                                                  std::to_string(h.params_offset) + ", " +
                                                  std::to_string(h.params_offset + params.size()) +
                                                  ")): they are not from the same step of one job"};
    }

    // Which old shards cover the new one.
    std::vector<const state_view*> sources;
    if (first.world_size == static_cast<std::uint32_t>(world_)) {
      for (const auto& v : views)
        if (v.header.rank == static_cast<std::uint32_t>(rank_))
          sources.push_back(&v);
      if (sources.empty())
        return status{errc::invalid_argument, "none of the " + std::to_string(views.size()) +
                                                  " state buffers holds rank " + std::to_string(rank_) +
                                                  " of the same world size " + std::to_string(world_)};
    } else {
      std::vector<const state_view*> by_rank(first.world_size, nullptr);
      for (std::size_t i = 0; i < views.size(); ++i) {
        const auto r = views[i].header.rank;
        if (by_rank[r] != nullptr)
          return status{errc::invalid_argument, "state buffer " + std::to_string(i) + " repeats rank " +
                                                    std::to_string(r) + " of the old world"};
        by_rank[r] = &views[i];
      }
      for (std::uint32_t r = 0; r < first.world_size; ++r)
        if (by_rank[r] == nullptr)
          return status{errc::invalid_argument, "resharding from " + std::to_string(first.world_size) + " to " +
                                                    std::to_string(world_) + " ranks needs the state of every old rank; rank " +
                                                    std::to_string(r) + " is missing"};
      sources = std::move(by_rank);
    }

    // All checks passed: from here on the task changes.
    RK_RETURN_IF_ERROR(load_floats(params_, 0, padded_, views.front().params, host_params_));
    RK_RETURN_IF_ERROR(load_shard(sources, m_, [](const state_view& v) { return v.m; }));
    RK_RETURN_IF_ERROR(load_shard(sources, v_, [](const state_view& v) { return v.v; }));
    step_ = first.step;
    needs_import_ = false;
    return backend_->synchronize();
  }

  status rebind(transport::communicator& comm) override {
    wait_export();
    if (comm.size() != world_ || comm.rank() < 0 || comm.rank() >= world_)
      return status{errc::invalid_argument, "the communicator is rank " + std::to_string(comm.rank()) + " of " +
                                                std::to_string(comm.size()) + ", the task is for a world of " +
                                                std::to_string(world_)};
    if (stages_ > 1 && !comm.point_to_point())
      return status{errc::unsupported, "pipeline stages send activations point to point, which the new "
                                       "communicator does not do"};
    if (comm.rank() != rank_) {
      const std::uint32_t old_stage = stage();
      const int old_rank = rank_;
      rank_ = comm.rank();
      if (stage() != old_stage) {  // another part of the model: a backend for it
        backend_options_.stage = stage_spec_of_rank();
        auto b = kernels::make_backend(backend_options_);
        if (!b) {
          rank_ = old_rank;
          return std::move(b).error().with_context("rebind to rank " + std::to_string(comm.rank()));
        }
        backend_ = std::move(b).value();
      }
      place_rank();
      begin_ = static_cast<std::size_t>(rank_) * shard_;
      needs_import_ = true;
    }
    comm_ = &comm;
    return {};
  }

  int rank() const noexcept override { return rank_; }
  int world_size() const noexcept override { return world_; }
  std::string describe() const override { return backend_->describe(); }
  kernels::device_kind device() const noexcept override { return backend_->kind(); }

 private:
  state_header header() const noexcept {
    state_header h;
    h.version = state_version;
    h.layers = shape_.layers;
    h.heads = shape_.heads;
    h.width = shape_.width;
    h.seq_len = shape_.seq_len;
    h.vocab = kernels::vocab_size;
    h.world_size = static_cast<std::uint32_t>(world_);
    h.rank = static_cast<std::uint32_t>(rank_);
    h.param_count = params_count_;
    h.padded_count = padded_;
    h.shard_begin = begin_;
    h.shard_end = begin_ + shard_;
    h.step = step_;
    h.seed = seed_;
    h.data_fingerprint = sampler_->data().fingerprint();
    set_state_layout(h);
    return h;
  }

  status collective(status s, std::string_view what) const {
    return s.ok() ? s : s.with_context("step " + std::to_string(step_) + ": " + std::string{what});
  }

  status check_matches_job(std::size_t i, const state_header& h) const {
    const state_header want = header();
    for (const auto& [name, have, expect] :
         {std::tuple{"layers", std::uint64_t{h.layers}, std::uint64_t{want.layers}},
          std::tuple{"heads", std::uint64_t{h.heads}, std::uint64_t{want.heads}},
          std::tuple{"width", std::uint64_t{h.width}, std::uint64_t{want.width}},
          std::tuple{"seq_len", std::uint64_t{h.seq_len}, std::uint64_t{want.seq_len}},
          std::tuple{"vocab", std::uint64_t{h.vocab}, std::uint64_t{want.vocab}},
          std::tuple{"param_count", h.param_count, want.param_count}, std::tuple{"seed", h.seed, want.seed},
          std::tuple{"data_fingerprint", h.data_fingerprint, want.data_fingerprint}}) {
      if (have != expect)
        return mismatch(i, name, have, expect);
    }
    return {};
  }

  static status mismatch_between(std::size_t i, std::string_view field, std::uint64_t have, std::uint64_t first) {
    return status{errc::invalid_argument, "state buffer " + std::to_string(i) + ": field '" + std::string{field} +
                                              "' (byte offset " + std::to_string(state_field_offset(field)) + ") is " +
                                              std::to_string(have) + " but " + std::to_string(first) +
                                              " in state buffer 0: the buffers are not from one snapshot"};
  }

  // Copies `bytes` (floats) into `dst` at `offset` and zeroes the rest of [offset, offset+count).
  // import_state of this rank's own state of the same world, in host memory: the sections are
  // copied in while the whole body is hashed in buffer order (the gaps between sections too),
  // and the result compared with the trailer's checksum at the end. A mismatch leaves the
  // parameters half written: the task then refuses to step until another import.
  status import_own_state(std::span<const std::byte> buf, const state_view& v) {
    snapshot_checksum_stream hs;
    std::size_t at = 0;
    const auto copy_section = [&](std::span<const std::byte> section, float* dst, std::size_t floats) {
      const auto begin = static_cast<std::size_t>(section.data() - buf.data());
      hs.update(buf.subspan(at, begin - at));  // the header, or the zero padding before a section
      copy_and_checksum(std::span<std::byte>(reinterpret_cast<std::byte*>(dst), section.size()), section, hs);
      std::fill(dst + section.size() / sizeof(float), dst + floats, 0.0f);
      at = begin + section.size();
    };
    needs_import_ = true;  // until the copy is known good
    copy_section(v.params, params_.data(), padded_);
    copy_section(v.m, m_.data(), shard_);
    copy_section(v.v, v_.data(), shard_);
    hs.update(buf.subspan(at, v.header.trailer_offset - at));
    if (const auto got = hs.digest(); got != v.body_checksum)
      return body_checksum_error(v.header, got, v.body_checksum).with_context("state buffer 0");
    step_ = v.header.step;
    needs_import_ = false;
    return backend_->synchronize();
  }

  // Waits for a pending export and keeps its result for finish_export.
  void wait_export() {
    if (pending_export_.valid())
      export_result_ = pending_export_.get();
  }

  status load_floats(kernels::device_buffer& dst, std::size_t offset, std::size_t count,
                     std::span<const std::byte> bytes, std::vector<float>& staging) {
    const std::size_t floats = bytes.size() / sizeof(float);
    if (backend_->host_memory()) {
      std::memcpy(dst.data() + offset, bytes.data(), bytes.size());
      std::fill(dst.data() + offset + floats, dst.data() + offset + count, 0.0f);
      return {};
    }
    staging.assign(count, 0.0f);
    std::memcpy(staging.data(), bytes.data(), bytes.size());
    return backend_->upload(dst, offset, std::span<const float>(staging).first(count));
  }

  // Assembles the own shard [begin_, begin_ + shard_) of a moment buffer from the old shards.
  template <class Section>
  status load_shard(const std::vector<const state_view*>& sources, kernels::device_buffer& dst, Section section) {
    std::vector<float> staging;
    float* shard = dst.data();
    if (!backend_->host_memory()) {
      staging.assign(shard_, 0.0f);
      shard = staging.data();
    } else {
      std::fill(shard, shard + shard_, 0.0f);
    }
    for (const state_view* v : sources) {
      const std::uint64_t lo = std::max<std::uint64_t>(v->header.shard_begin, begin_);
      const std::uint64_t hi = std::min<std::uint64_t>(v->header.shard_end, begin_ + shard_);
      if (lo >= hi)
        continue;
      const auto bytes = section(*v);
      std::memcpy(shard + (lo - begin_), bytes.data() + (lo - v->header.shard_begin) * sizeof(float),
                  (hi - lo) * sizeof(float));
    }
    return backend_->host_memory() ? status{} : backend_->upload(dst, 0, staging);
  }

  kernels::model_shape shape_;
  kernels::adamw_hyper hyper_;
  std::uint64_t seed_;
  std::uint32_t micro_batch_;
  std::uint32_t micro_batches_;
  int rank_;
  int world_;
  transport::communicator* comm_;
  std::vector<std::uint32_t> counts_;
  // Blocks of each pipeline stage ({layers} without a pipeline).
  std::vector<std::uint32_t> stage_layers_;
  std::uint32_t stages_ = 1;
  kernels::backend_options backend_options_;
  std::uint32_t first_micro_ = 0;
  std::uint32_t my_micro_ = 0;
  std::optional<sampler> sampler_;
  std::unique_ptr<kernels::backend> backend_;
  std::size_t params_count_ = 0;
  std::size_t padded_ = 0;
  std::size_t shard_ = 0;
  std::size_t begin_ = 0;
  kernels::device_buffer params_, grads_, grad_shard_, m_, v_;
  // Host copies for collectives and export when the backend computes in device memory.
  std::vector<float> host_params_, host_grads_, host_shard_;
  std::vector<std::int32_t> tokens_, targets_;
  // A pipeline stage's activations and their gradients in host memory: received, sent.
  std::vector<float> act_in_, act_out_, grad_in_, grad_out_;
  std::uint64_t step_ = 0;
  /// Set when rebind changed the rank: the optimizer shard is another rank's until an import.
  bool needs_import_ = false;
  bool flush_subnormals_ = true;
  /// The slow drill's factor (set_slowdown); 1: off.
  double slowdown_ = 1.0;
  /// The export begin_export started, and its result once waited for.
  std::future<expected<std::uint64_t>> pending_export_;
  std::optional<expected<std::uint64_t>> export_result_;
};

}  // namespace

std::vector<std::uint32_t> equal_split(std::uint32_t micro_batches, int world) {
  std::vector<std::uint32_t> out(static_cast<std::size_t>(std::max(world, 0)), 0);
  if (out.empty())
    return out;
  const auto w = static_cast<std::uint32_t>(world);
  for (std::uint32_t r = 0; r < w; ++r)
    out[r] = micro_batches / w + (r < micro_batches % w ? 1 : 0);
  return out;
}

std::size_t gradient_floats(const config::spec& spec, std::size_t max_world) {
  // Padded to a multiple of the world: at most max_world - 1 floats more.
  return kernels::parameter_count(shape_of(spec.model)) + max_world;
}

expected<std::unique_ptr<training_task>> make_training_task(const config::spec& spec, int rank, int world,
                                                            transport::communicator& comm,
                                                            const task_options& options) {
  if (world < 1 || rank < 0 || rank >= world)
    return status{errc::invalid_argument,
                  "rank " + std::to_string(rank) + " is outside a world of " + std::to_string(world)};
  if (comm.size() != world || comm.rank() != rank)
    return status{errc::invalid_argument, "the communicator is rank " + std::to_string(comm.rank()) + " of " +
                                              std::to_string(comm.size()) + ", the task rank " +
                                              std::to_string(rank) + " of " + std::to_string(world)};
  if (spec.job.micro_batch == 0 || spec.job.global_batch % spec.job.micro_batch != 0)
    return status{errc::invalid_argument, "global_batch (" + std::to_string(spec.job.global_batch) +
                                              ") must be a multiple of micro_batch (" +
                                              std::to_string(spec.job.micro_batch) + ")"};
  auto task = std::make_unique<data_parallel_task>(spec, rank, world, comm);
  RK_RETURN_IF_ERROR(task->init(spec, options).with_context("training task of rank " + std::to_string(rank)));
  return std::unique_ptr<training_task>{std::move(task)};
}

std::uint64_t snapshot_capacity(const config::spec& spec) {
  return spec.job.external() ? spec.job.state_bytes : state_bytes_for(spec, 1, 0);
}

std::size_t state_bytes_for(const config::spec& spec, int world, int rank) {
  const auto shape = shape_of(spec.model);
  const std::uint64_t params = kernels::parameter_count(shape);
  const auto w = static_cast<std::uint64_t>(std::max(world, 1));
  const std::uint64_t padded = (params + w - 1) / w * w;
  const std::uint64_t shard = padded / w;
  state_header h;
  h.param_count = params;
  h.padded_count = padded;
  h.shard_begin = static_cast<std::uint64_t>(rank) * shard;
  h.shard_end = h.shard_begin + shard;
  set_state_layout(h);
  return h.total_bytes;
}

}  // namespace rekindle::training
