#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "common/ids.hpp"
#include "config/spec.hpp"
#include "kernels/backend.hpp"
#include "transport/communicator.hpp"

namespace rekindle::training {

/// Where the time of one step went.
struct step_timings {
  /// Forward and backward passes of the rank's micro-batches.
  std::chrono::nanoseconds compute{};
  /// The CPU time of the calling thread in `compute`, on a backend that computes on it (host
  /// memory): the work itself, whatever else the machine runs. Zero when a device computes.
  std::chrono::nanoseconds compute_cpu{};
  /// Filling the micro-batches' tokens and targets (the data pipeline), not part of `compute`.
  std::chrono::nanoseconds data{};
  /// Collectives (gradient reduce-scatter, the loss/norm allreduce, parameter allgather) and the
  /// device↔host copies they need.
  std::chrono::nanoseconds communication{};
  /// Gradient norm, clipping and AdamW on the rank's shard.
  std::chrono::nanoseconds optimizer{};
  /// Waiting, before the optimizer, for the export begin_export started (0 when none was pending or
  /// it had finished): the training stall of an overlapped snapshot.
  std::chrono::nanoseconds snapshot_wait{};
};

/// The outcome of one optimizer step; identical on every rank.
struct step_result {
  /// Steps applied so far, this one included.
  step_t step;
  /// Mean cross-entropy over all micro-batches of the step (all ranks).
  double loss = 0;
  /// Global L2 norm of the step's gradient before clipping.
  double grad_norm = 0;
  /// Learning rate the step used.
  double learning_rate = 0;
  step_timings timings;
};

/// Options of a rank's task beyond the configuration.
struct task_options {
  /// The rank's device. Default: auto (a GPU when the machine has one, else the CPU).
  kernels::device_request device;
  /// Micro-batches each data-parallel replica runs per step (size = replicas, which is the world
  /// size without a pipeline; sum = global_batch / micro_batch; zeros allowed). Default: empty,
  /// an equal split with the remainder on the lowest replicas.
  std::vector<std::uint32_t> micro_batches_per_rank;
  /// Pipeline stages: the blocks of each stage, in order (at least 1 each, adding up to the
  /// model's layers); one entry: no pipeline. With p stages the world holds world / p replicas
  /// (world a multiple of p) and rank r runs stage r % p of replica r / p, so a replica's stages
  /// are consecutive ranks. Every rank must be given the same list. Default: empty, the job's
  /// (job.stages).
  std::vector<std::uint32_t> stage_layers;
  /// Fill the parameters with the seed's initialisation. A task that will import a state before
  /// its first step can skip it (the parameters start at zero): it is most of a large model's
  /// start-up time. Default: true.
  bool initialize = true;
  /// Run each step with subnormal floats flushed to zero (kernels/float_mode.hpp), so that a step
  /// does not slow down as the model's numbers get small. Off gives IEEE subnormals, for
  /// comparison. Default: true.
  bool flush_subnormals = true;
  /// Where the gradients go when the backend computes in host memory: a shared buffer of the ring
  /// of gradient_floats floats (transport::ring_resources::allocate_shared), from which the gradient's reduce_scatter reads the peers' parts in
  /// place. A span smaller than the padded parameter count is not used (the backend's own memory
  /// then). The task zeroes it when it starts and never frees it. Default: none.
  std::span<float> gradient_memory;
};

/// One rank of the training job, driven by the worker process.
///
/// A step runs M = global_batch / micro_batch micro-batches with global indices 0 … M−1; replica
/// r runs a contiguous block of them (its share of `micro_batches_per_rank`) and accumulates their
/// gradients. Without a pipeline a replica is one rank. With p pipeline stages
/// (task_options::stage_layers) a replica is p consecutive ranks, each running its stage's blocks
/// over the replica's micro-batches in a one-forward-one-backward schedule: stage s runs
/// min(p − s − 1, m) forwards first, then alternates a forward with a backward, then runs the
/// remaining backwards, keeping at most p − s micro-batches' activations. Activations go to the
/// next stage and their gradients back with the communicator's point-to-point sends. Every rank
/// holds the whole parameter buffer (the first and the last stage both use the tied embedding);
/// a stage adds gradients to its own tensors only, and the reduction below sums them over the
/// world. Then (ZeRO-1, the flat parameter buffer padded to a multiple of the world size):
///   1. reduce_scatter(sum) the gradient: each rank gets its shard of the sum;
///   2. allreduce one pair of floats: the loss sum and the shard's sum of squares;
///   3. scale by 1/M and the clipping factor, AdamW on the own shard (optimizer moments exist only
///      for it);
///   4. allgather the parameter shards into every rank's full replica.
/// The step's gradient is the mean over all M micro-batches, so the global batch, and the result
/// up to rounding, do not depend on the world size; the same world size reproduces it bitwise.
///
/// Thread-safety: one thread at a time.
class training_task {
 public:
  virtual ~training_task() = default;

  /// Runs one optimizer step. After an error (a collective failed or was aborted) the task's
  /// parameters are undefined: import a state before stepping again.
  [[nodiscard]] virtual expected<step_result> step() = 0;
  /// Optimizer steps applied so far.
  [[nodiscard]] virtual step_t current_step() const noexcept = 0;
  /// Steps the job runs in total (job.steps).
  [[nodiscard]] virtual std::uint64_t total_steps() const noexcept = 0;

  /// Exact size of the exported state in bytes, known before exporting.
  [[nodiscard]] virtual std::size_t state_size() const noexcept = 0;
  /// Writes the complete state of this rank (parameters, optimizer shard and its range, step,
  /// world size, shape; see state.hpp) into `out` in one pass, and returns the snapshot_checksum
  /// (common/checksum.hpp) of the state_size() bytes it wrote, computed in that pass: what a
  /// snapshot slot publishes without reading the state again. Errors: invalid_argument when `out`
  /// is smaller than state_size(); a GPU's copy error.
  [[nodiscard]] virtual expected<std::uint64_t> export_state(std::span<std::byte> out) = 0;
  /// export_state in the background: starts writing the state into `out` on a thread of the
  /// task's and returns at once. The export reads the parameters and the optimizer moments, which
  /// the next step's forward and backward passes and its gradient reduce-scatter only read, so
  /// step() runs those while the export goes on, and waits for it (step_timings::snapshot_wait)
  /// before its optimizer changes anything. `out` must stay valid and untouched until
  /// finish_export. With a pending export, export_state, import_state and rebind wait for it first
  /// (its result kept for finish_export), and so does the destructor. Where the state lies in a
  /// GPU's memory the export runs in the call instead (a copy out of the device), with the same
  /// result. Errors: failed_precondition when an export is pending already; invalid_argument as
  /// export_state.
  [[nodiscard]] virtual status begin_export(std::span<std::byte> out) = 0;
  /// The checksum (or error) of the export begin_export started, waiting for it if it still runs;
  /// nullopt when none was begun since the last finish_export.
  [[nodiscard]] virtual std::optional<expected<std::uint64_t>> finish_export() = 0;
  /// Restores a state exported by ranks of this job. Pass this rank's own buffer (same world
  /// size), or the buffers of all ranks of the old world in any order: with a different world
  /// size the optimizer moments of the new shard are assembled from the overlapping old shards.
  /// Every buffer is checked (see parse_state); the shape, seed and data must match the job's.
  /// On error the task is unchanged, with one exception: this rank's own buffer of the same world
  /// into host memory (a restore after a failure) is verified while it is copied in, in one pass,
  /// so bytes that fail the trailer's checksum leave the task needing another import (step()
  /// fails with failed_precondition until then).
  [[nodiscard]] virtual status import_state(std::span<const std::span<const std::byte>> buffers) = 0;

  /// Runs the collectives of every later step on `comm` (a new epoch's communicator); parameters,
  /// optimizer state and step stay. The previous communicator may be destroyed afterwards. When
  /// `comm` is another rank of the same world the task becomes that rank, and step() fails with
  /// failed_precondition until a state is imported (the optimizer shard it holds is the old
  /// rank's): how a warm standby's pre-built task takes over a rank.
  /// Errors: invalid_argument when `comm`'s world has another size (build a new task then).
  /// `comm` must outlive the task.
  [[nodiscard]] virtual status rebind(transport::communicator& comm) = 0;

  /// Sets how many of a step's micro-batches each replica runs, from the next step on (size =
  /// replicas, sum = global_batch / micro_batch, zeros allowed; empty: the equal split). Every rank of
  /// the world must be given the same list. The same list reproduces a step bitwise; another list
  /// gives the same step up to rounding. Errors: invalid_argument, and the task is unchanged.
  [[nodiscard]] virtual status set_micro_batches(std::span<const std::uint32_t> counts) = 0;
  /// A fault drill (`rekindle slow`): from the next step on, each forward and backward pass takes
  /// `factor` times as long (the task sleeps (factor − 1) times the pass's duration after it), as
  /// on a slower device; collectives, point-to-point sends and the optimizer are not slowed. The
  /// sleep is part of step_timings::compute, not of compute_cpu. 1 (the default) ends it; values
  /// below 1 (and NaN) count as 1, values above 1000 as 1000.
  virtual void set_slowdown(double factor) noexcept = 0;
  /// The micro-batches of every replica in force.
  [[nodiscard]] virtual std::span<const std::uint32_t> micro_batches() const noexcept = 0;
  /// Pipeline stages (1 without a pipeline) and this rank's stage.
  [[nodiscard]] virtual std::uint32_t pipeline_stages() const noexcept = 0;
  /// The blocks of each stage, in order (one entry, the whole model, without a pipeline).
  [[nodiscard]] virtual std::span<const std::uint32_t> stage_layers() const noexcept = 0;
  [[nodiscard]] virtual std::uint32_t stage() const noexcept = 0;

  [[nodiscard]] virtual int rank() const noexcept = 0;
  [[nodiscard]] virtual int world_size() const noexcept = 0;
  /// The device in words, e.g. "cpu (OpenBLAS ..., 1 thread)".
  [[nodiscard]] virtual std::string describe() const = 0;
  [[nodiscard]] virtual kernels::device_kind device() const noexcept = 0;
};

/// Creates rank `rank` of a `world`-rank job from `spec` (job, model and optimizer sections),
/// reducing through `comm` (host memory buffers; with a GPU backend the step stages through host
/// memory). Parameters start from the seed's initialisation at step 0. `comm` must outlive the
/// task. Errors: rank/world disagreeing with `comm`, a bad micro-batch split, a bad stage split
/// (or stages on a communicator without point-to-point sends), an unusable data file, a model that
/// does not fit.
[[nodiscard]] expected<std::unique_ptr<training_task>> make_training_task(const config::spec& spec, int rank,
                                                                          int world,
                                                                          transport::communicator& comm,
                                                                          const task_options& options = {});

/// Floats of task_options::gradient_memory that serve the model of `spec` in any world of up to
/// `max_world` ranks (the parameter count padded to a multiple of the world). The worker allocates
/// them as a shared buffer of its ring before the ring's first communicator (which publishes the
/// buffers that exist when it is created), once per process.
///
/// Only the gradients: shared memory comes in 4 KiB pages where the backend's own large buffers
/// are on transparent huge pages, and the parameters, which every matrix product reads, then cost
/// the passes 5–8% more time than the in-place allgather saves (docs/PERFORMANCE.md). The
/// gradients' reduce_scatter gains without that cost.
[[nodiscard]] std::size_t gradient_floats(const config::spec& spec, std::size_t max_world);

/// Bytes of the exported state of rank `rank` in a `world`-rank job of `spec`; the largest is that
/// of a single rank (it holds the whole optimizer state), which sizes snapshot slots.
[[nodiscard]] std::size_t state_bytes_for(const config::spec& spec, int world, int rank);

/// Bytes of one half of a local rank's snapshot slot: the built-in model's largest state, or
/// job.state_bytes for a job.command's ranks (their snapshots come through the worker API).
[[nodiscard]] std::uint64_t snapshot_capacity(const config::spec& spec);

/// The equal split of `micro_batches` over `world` ranks: the first micro_batches % world ranks
/// get one more.
[[nodiscard]] std::vector<std::uint32_t> equal_split(std::uint32_t micro_batches, int world);

}  // namespace rekindle::training
