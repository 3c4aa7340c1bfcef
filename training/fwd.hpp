#pragma once

// Forward declarations of training/.
namespace rekindle::training {
class corpus;
class sampler;
struct state_header;
struct state_view;
struct step_timings;
struct step_result;
struct task_options;
class training_task;
}  // namespace rekindle::training
