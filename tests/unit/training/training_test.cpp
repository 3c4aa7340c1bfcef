#include "training/training_task.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/checksum.hpp"
#include "kernels/optimizer.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/values.hpp"
#include "tests/support/thread_communicator.hpp"
#include "common/checksum.hpp"
#include "training/state.hpp"

namespace rekindle::training {
namespace {

using bytes = std::vector<std::byte>;

// A model small enough for hundreds of steps in a unit test.
config::spec tiny_spec() {
  auto s = testing::tiny_spec();
  s.job.steps = 200;
  s.job.seed = 7;
  s.model.width = 32;
  s.optimizer.learning_rate = 1e-2;
  s.optimizer.min_learning_rate = 1e-3;
  s.optimizer.warmup_steps = 10;
  return s;
}

task_options cpu_options(std::vector<std::uint32_t> counts = {}, std::vector<std::uint32_t> stages = {}) {
  task_options o;
  o.device.type = kernels::device_request::kind::cpu;
  o.micro_batches_per_rank = std::move(counts);
  o.stage_layers = std::move(stages);
  return o;
}

struct rank_run {
  std::vector<double> losses;
  bytes state;
};

struct run_args {
  int world = 1;
  std::uint64_t steps = 0;
  // States to import first: all given to every rank, or (own_only) rank r gets restore[r].
  const std::vector<bytes>* restore = nullptr;
  bool own_only = false;
  std::vector<std::uint32_t> counts;
  // Blocks per pipeline stage; empty: no pipeline.
  std::vector<std::uint32_t> stages;
};

// Trains `args.steps` steps on `args.world` ranks (threads) and exports every rank's state.
std::vector<rank_run> train(const config::spec& spec, const run_args& args) {
  testing::thread_group group(args.world);
  std::vector<rank_run> runs(static_cast<std::size_t>(args.world));
  group.run([&](int r, transport::communicator& comm) {
    auto task = make_training_task(spec, r, args.world, comm, cpu_options(args.counts, args.stages));
    ASSERT_TRUE(task.has_value()) << task.error();
    const bool reads_data = (*task)->stage() == 0 || (*task)->stage() + 1 == (*task)->pipeline_stages();
    if (args.restore != nullptr) {
      std::vector<std::span<const std::byte>> in;
      if (args.own_only)
        in.emplace_back((*args.restore)[static_cast<std::size_t>(r)]);
      else
        for (const auto& b : *args.restore)
          in.emplace_back(b);
      const status s = (*task)->import_state(in);
      ASSERT_TRUE(s.ok()) << s;
    }
    auto& run = runs[static_cast<std::size_t>(r)];
    for (std::uint64_t i = 0; i < args.steps; ++i) {
      auto res = (*task)->step();
      ASSERT_TRUE(res.has_value()) << res.error();
      EXPECT_EQ(res->step, (*task)->current_step());
      EXPECT_GT(res->timings.compute.count(), 0);
      EXPECT_GT(res->timings.compute_cpu.count(), 0) << "the CPU backend computes on the calling thread";
      EXPECT_LE(res->timings.compute_cpu, res->timings.compute + std::chrono::milliseconds{1})
          << "the thread's CPU time in the passes is part of their wall time";
      if (reads_data) {  // a middle stage of a pipeline samples no data
        EXPECT_GT(res->timings.data.count(), 0);
      }
      EXPECT_GT(res->timings.communication.count(), 0);
      EXPECT_GT(res->timings.optimizer.count(), 0);
      EXPECT_GT(res->grad_norm, 0.0);
      kernels::adamw_hyper h;
      h.learning_rate = spec.optimizer.learning_rate;
      h.min_learning_rate = spec.optimizer.min_learning_rate;
      h.warmup_steps = spec.optimizer.warmup_steps;
      h.total_steps = spec.job.steps;
      EXPECT_DOUBLE_EQ(res->learning_rate, kernels::learning_rate_at(h, res->step.value() - 1));
      run.losses.push_back(res->loss);
    }
    run.state.resize((*task)->state_size());
    const auto sum = (*task)->export_state(run.state);
    ASSERT_TRUE(sum.has_value()) << sum.error();
    EXPECT_EQ(*sum, snapshot_checksum(run.state)) << "the export's checksum is that of the bytes it wrote";
  });
  return runs;
}

std::vector<bytes> states_of(const std::vector<rank_run>& runs) {
  std::vector<bytes> out;
  for (const auto& r : runs)
    out.push_back(r.state);
  return out;
}

void expect_same_loss_on_every_rank(const std::vector<rank_run>& runs) {
  for (const auto& r : runs)
    EXPECT_EQ(r.losses, runs[0].losses);
}

double mean_of_last(const std::vector<double>& v, std::size_t n) {
  return std::accumulate(v.end() - static_cast<std::ptrdiff_t>(n), v.end(), 0.0) / static_cast<double>(n);
}

// The optimizer moments of all ranks, concatenated in rank order (the padded flat buffer).
std::vector<float> moments(const std::vector<bytes>& states, bool second) {
  std::vector<float> out;
  for (const auto& s : states) {
    auto v = parse_state(s);
    EXPECT_TRUE(v.has_value()) << v.error();
    const auto sec = second ? v->v : v->m;
    const auto* f = reinterpret_cast<const float*>(sec.data());
    out.insert(out.end(), f, f + sec.size() / sizeof(float));
  }
  return out;
}

TEST(training, same_seed_gives_bitwise_identical_losses_with_1_2_and_3_ranks) {
  const auto spec = tiny_spec();
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const auto a = train(spec, {.world = world, .steps = 6});
    const auto b = train(spec, {.world = world, .steps = 6});
    ASSERT_EQ(a.size(), static_cast<std::size_t>(world));
    expect_same_loss_on_every_rank(a);
    EXPECT_EQ(a[0].losses, b[0].losses);
    for (std::size_t r = 0; r < a.size(); ++r)
      EXPECT_TRUE(a[r].state == b[r].state) << "state of rank " << r << " differs between runs";
    // The model is learning: later steps are below the first.
    EXPECT_LT(a[0].losses.back(), a[0].losses.front());
  }
}

TEST(training, export_and_import_continue_bitwise_identically) {
  const auto spec = tiny_spec();
  const auto straight = train(spec, {.world = 2, .steps = 8});
  const auto first = train(spec, {.world = 2, .steps = 4});
  const auto saved = states_of(first);
  for (bool own_only : {false, true}) {
    SCOPED_TRACE(own_only ? "each rank imports its own buffer" : "each rank gets all buffers");
    const auto second = train(spec, {.world = 2, .steps = 4, .restore = &saved, .own_only = own_only});
    std::vector<double> joined = first[0].losses;
    joined.insert(joined.end(), second[0].losses.begin(), second[0].losses.end());
    EXPECT_EQ(joined, straight[0].losses);
    for (std::size_t r = 0; r < 2; ++r)
      EXPECT_TRUE(second[r].state == straight[r].state) << "final state of rank " << r;
  }
}

TEST(training, loss_falls_on_the_synthetic_corpus) {
  auto spec = tiny_spec();
  spec.job.steps = 300;
  spec.job.global_batch = 16;
  spec.model.width = 64;
  spec.optimizer.learning_rate = 6e-3;
  spec.optimizer.min_learning_rate = 6e-4;
  const auto start = std::chrono::steady_clock::now();
  const auto runs = train(spec, {.world = 2, .steps = spec.job.steps});
  const auto& losses = runs[0].losses;
  std::printf("synthetic: first loss %.3f, mean of the last 10 %.3f, %.1f s\n", losses.front(),
              mean_of_last(losses, 10),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.15);
  // From ln(256) ≈ 5.55 (uniform over bytes) the model learns the characters, then the words.
  EXPECT_LT(losses[100], 3.0);
  EXPECT_LT(mean_of_last(losses, 10), 2.2);
}

TEST(training, loss_falls_on_a_text_file) {
  testing::temp_dir dir;
  std::string text;
  const char* const lines[] = {"A rolling stone gathers no moss.", "The early bird catches the worm.",
                               "Every cloud has a silver lining.", "Still waters run deep."};
  for (int i = 0; i < 400; ++i)
    text += std::string(lines[(i * 7) % 4]) + (i % 3 == 0 ? "\n" : " ");
  auto spec = tiny_spec();
  spec.job.data = (dir.path() / "proverbs.txt").string();
  spec.job.data_file = dir.write("proverbs.txt", text);
  const auto runs = train(spec, {.world = 1, .steps = 150});
  const auto& losses = runs[0].losses;
  std::printf("text file: first loss %.3f, mean of the last 10 %.3f\n", losses.front(), mean_of_last(losses, 10));
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.15);
  EXPECT_LT(mean_of_last(losses, 10), 2.0);
}

TEST(training, global_batch_is_independent_of_the_world_size) {
  const auto spec = tiny_spec();  // 4 micro-batches per step
  const auto one = train(spec, {.world = 1, .steps = 5});
  for (int world : {2, 4}) {
    const auto many = train(spec, {.world = world, .steps = 5});
    expect_same_loss_on_every_rank(many);
    for (std::size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(many[0].losses[i], one[0].losses[i], 1e-5 * one[0].losses[i]) << "world " << world << " step " << i;
  }
  // Uneven shares (a faster rank takes three micro-batches) are the same step up to rounding.
  const auto uneven = train(spec, {.world = 2, .steps = 5, .counts = {3, 1}});
  for (std::size_t i = 0; i < 5; ++i)
    EXPECT_NEAR(uneven[0].losses[i], one[0].losses[i], 1e-5 * one[0].losses[i]) << "step " << i;
}

TEST(training, restoring_into_another_world_size_reshards_and_continues) {
  const auto spec = tiny_spec();
  const auto straight = train(spec, {.world = 2, .steps = 8});
  const auto first = train(spec, {.world = 2, .steps = 4});
  const auto saved = states_of(first);
  for (int world : {3, 1}) {
    SCOPED_TRACE("2 ranks -> " + std::to_string(world));
    // Moments after import, before any step, are the old ones re-cut at the new boundaries.
    const auto moved = train(spec, {.world = world, .steps = 0, .restore = &saved});
    for (bool second : {false, true}) {
      auto before = moments(saved, second), after = moments(states_of(moved), second);
      const std::size_t common = std::min(before.size(), after.size());
      EXPECT_TRUE(std::equal(before.begin(), before.begin() + static_cast<std::ptrdiff_t>(common), after.begin()));
      for (std::size_t i = common; i < after.size(); ++i)
        EXPECT_EQ(after[i], 0.0f);  // new padding
    }
    auto p_old = parse_state(saved[0]), p_new = parse_state(moved[0].state);
    ASSERT_TRUE(p_old && p_new);
    EXPECT_EQ(p_new->header.step, 4u);
    EXPECT_EQ(p_new->header.world_size, static_cast<std::uint32_t>(world));
    EXPECT_TRUE(std::equal(p_old->params.begin(), p_old->params.end(), p_new->params.begin()));
    // Training on gives the same losses up to float rounding (the sums group differently).
    const auto cont = train(spec, {.world = world, .steps = 4, .restore = &saved});
    expect_same_loss_on_every_rank(cont);
    for (std::size_t i = 0; i < 4; ++i)
      EXPECT_NEAR(cont[0].losses[i], straight[0].losses[4 + i], 1e-5 * straight[0].losses[4 + i]) << i;
  }
}

class state_errors : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = states_of(train(spec_, {.world = 2, .steps = 2}));
  }

  // Imports `buffers` into a fresh rank 0 of `world` ranks; returns the status.
  status import_into(const std::vector<bytes>& buffers, int world = 2, const config::spec* spec = nullptr) {
    testing::thread_group group(world);
    auto task = make_training_task(spec != nullptr ? *spec : spec_, 0, world, group.rank(0), cpu_options());
    EXPECT_TRUE(task.has_value());
    if (!task)
      return task.error();
    std::vector<std::span<const std::byte>> in(buffers.begin(), buffers.end());
    const status s = (*task)->import_state(in);
    if (!s.ok()) {
      EXPECT_EQ((*task)->current_step(), step_t{0}) << "a failed import changed the task";
    }
    return s;
  }

  config::spec spec_ = tiny_spec();
  std::vector<bytes> saved_;
};

TEST_F(state_errors, a_valid_set_imports) {
  EXPECT_TRUE(import_into(saved_).ok());
  EXPECT_TRUE(import_into({saved_[0]}).ok());
}

TEST_F(state_errors, a_corrupt_parameter_byte_fails_the_trailers_checksum_which_names_the_range) {
  auto bad = saved_;
  const auto view = parse_state(bad[1]);
  ASSERT_TRUE(view.has_value());
  bad[1][view->header.params_offset + 1000] ^= std::byte{0x10};
  const status s = import_into(bad);
  EXPECT_EQ(s.code(), errc::data_loss) << s;
  const auto trailer = std::to_string(view->header.trailer_offset);
  EXPECT_NE(s.message().find("state buffer 1: bytes [0, " + trailer + ") (header, parameters at 256"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("but the trailer (byte " + std::to_string(view->header.trailer_offset + 8) + ") stores"),
            std::string::npos)
      << s;
}

TEST_F(state_errors, a_corrupt_moment_byte_or_a_cut_trailer_is_found) {
  auto bad = saved_;
  const auto view = parse_state(bad[0]);
  ASSERT_TRUE(view.has_value());
  bad[0][view->header.v_offset + 7] ^= std::byte{1};
  status s = import_into({bad[0]});
  EXPECT_EQ(s.code(), errc::data_loss);
  EXPECT_NE(s.message().find("the data is corrupt"), std::string::npos) << s;
  bad = saved_;
  bad[0][view->header.trailer_offset + 3] = std::byte{'x'};
  s = import_into({bad[0]});
  EXPECT_EQ(s.code(), errc::data_loss);
  EXPECT_NE(s.message().find("the trailer (byte " + std::to_string(view->header.trailer_offset) + ") is not"),
            std::string::npos)
      << s;
}

TEST_F(state_errors, a_restore_that_fails_its_checksum_while_copied_in_leaves_a_task_that_will_not_step) {
  // A world of one: its own state imports in one pass, verified while it is copied in.
  const auto solo = states_of(train(spec_, {.world = 1, .steps = 2}));
  auto bad = solo[0];
  const auto view = parse_state(bad);
  ASSERT_TRUE(view.has_value());
  bad[view->header.m_offset + 5] ^= std::byte{0x20};
  testing::thread_group group(1);
  auto task = make_training_task(spec_, 0, 1, group.rank(0), cpu_options());
  ASSERT_TRUE(task.has_value());
  const std::vector<std::span<const std::byte>> in{bad};
  const status s = (*task)->import_state(in);
  EXPECT_EQ(s.code(), errc::data_loss) << s;
  EXPECT_NE(s.message().find("the data is corrupt"), std::string::npos) << s;
  auto step = (*task)->step();
  ASSERT_FALSE(step.has_value()) << "a task half written by a failed import must not train";
  EXPECT_EQ(step.error().code(), errc::failed_precondition) << step.error();
  // The good copy then imports, and training goes on from its step.
  const std::vector<std::span<const std::byte>> good{solo[0]};
  ASSERT_TRUE((*task)->import_state(good).ok());
  EXPECT_EQ((*task)->current_step(), step_t{2});
  EXPECT_TRUE((*task)->step().has_value());
}

TEST_F(state_errors, a_corrupt_header_byte_fails_the_header_checksum) {
  auto bad = saved_;
  bad[0][state_field_offset("width")] ^= std::byte{0x40};
  const status s = import_into({bad[0]});
  EXPECT_EQ(s.code(), errc::data_loss);
  EXPECT_NE(s.message().find("field 'header_checksum' (byte offset 160)"), std::string::npos) << s;
}

TEST_F(state_errors, wrong_magic_truncation_and_foreign_jobs_are_named) {
  auto bad = saved_[0];
  bad[2] = std::byte{'X'};
  status s = import_into({bad});
  EXPECT_NE(s.message().find("field 'magic' (byte offset 0)"), std::string::npos) << s;

  bytes cut(saved_[0].begin(), saved_[0].end() - 1);
  s = import_into({cut});
  EXPECT_NE(s.message().find("field 'total_bytes' (byte offset 128)"), std::string::npos) << s;
  bytes tiny(saved_[0].begin(), saved_[0].begin() + 100);
  s = import_into({tiny});
  EXPECT_NE(s.message().find("fewer than the 256-byte header"), std::string::npos) << s;

  auto wider = spec_;
  wider.model.width = 48;
  s = import_into({saved_[0]}, 2, &wider);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_NE(s.message().find("field 'width' (byte offset 24): the state has 32, this job has 48"), std::string::npos)
      << s;

  auto reseeded = spec_;
  reseeded.job.seed = 8;
  s = import_into({saved_[0]}, 2, &reseeded);
  EXPECT_NE(s.message().find("field 'seed' (byte offset 88)"), std::string::npos) << s;
}

TEST_F(state_errors, resharding_needs_every_old_rank_once) {
  status s = import_into({saved_[0]}, 3);
  EXPECT_NE(s.message().find("rank 1 is missing"), std::string::npos) << s;
  s = import_into({saved_[0], saved_[0]}, 3);
  EXPECT_NE(s.message().find("repeats rank 0"), std::string::npos) << s;
  // Buffers of different steps are not one snapshot.
  const auto later = states_of(train(spec_, {.world = 2, .steps = 3}));
  s = import_into({saved_[0], later[1]}, 3);
  EXPECT_NE(s.message().find("field 'step' (byte offset 80) is 3 but 2 in state buffer 0"), std::string::npos) << s;
}

TEST(training, creation_errors_are_precise) {
  testing::thread_group group(2);
  auto spec = tiny_spec();
  auto t = make_training_task(spec, 1, 2, group.rank(0), cpu_options());
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message().find("communicator is rank 0 of 2"), std::string::npos) << t.error();
  t = make_training_task(spec, 0, 2, group.rank(0), cpu_options({3, 2}));
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message().find("sums to 5, a step has 4"), std::string::npos) << t.error();
  spec.job.data = "/nonexistent/corpus.txt";
  t = make_training_task(spec, 0, 2, group.rank(0), cpu_options());
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message().find("does not exist"), std::string::npos) << t.error();
  auto ok = make_training_task(tiny_spec(), 0, 2, group.rank(0), cpu_options());
  ASSERT_TRUE(ok.has_value());
  bytes small((*ok)->state_size() - 1);
  EXPECT_EQ((*ok)->export_state(small).to_status().code(), errc::invalid_argument);
}

TEST(training, a_survivor_rebinds_and_a_standby_takes_over_a_rank_bitwise_identically) {
  const auto spec = tiny_spec();
  const auto straight = train(spec, {.world = 2, .steps = 8});
  // Epoch 1: two ranks train 4 steps and export; rank 0 trains one step more (work a failure loses).
  testing::thread_group before(2);
  std::vector<std::unique_ptr<training_task>> tasks(2);
  std::vector<bytes> saved(2);
  before.run([&](int r, transport::communicator& comm) {
    auto task = make_training_task(spec, r, 2, comm, cpu_options());
    ASSERT_TRUE(task.has_value()) << task.error();
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE((*task)->step().has_value());
    saved[static_cast<std::size_t>(r)].resize((*task)->state_size());
    ASSERT_TRUE((*task)->export_state(saved[static_cast<std::size_t>(r)]).has_value());
    tasks[static_cast<std::size_t>(r)] = std::move(*task);
  });
  ASSERT_TRUE(tasks[0] && tasks[1]);
  // Rank 1 dies. Its replacement was built ahead as rank 0 of the world on no communicator, with
  // uninitialised parameters: it cannot step there.
  tasks[1].reset();
  transport::unconnected_communicator nowhere(0, 2);
  task_options standby_options = cpu_options();
  standby_options.initialize = false;
  auto standby = make_training_task(spec, 0, 2, nowhere, standby_options);
  ASSERT_TRUE(standby.has_value()) << standby.error();
  auto refused = (*standby)->step();
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), errc::failed_precondition);
  tasks[1] = std::move(*standby);
  // Epoch 2 on new communicators: the survivor rebinds and rolls back to its snapshot, the
  // standby becomes rank 1 and must import before stepping.
  testing::thread_group after(2);
  std::vector<std::vector<double>> losses(2);
  std::vector<bytes> final_state(2);
  after.run([&](int r, transport::communicator& comm) {
    auto& task = *tasks[static_cast<std::size_t>(r)];
    ASSERT_TRUE(task.rebind(comm).ok());
    EXPECT_EQ(task.rank(), r);
    if (r == 1) {
      auto early = task.step();
      ASSERT_FALSE(early.has_value());
      EXPECT_EQ(early.error().code(), errc::failed_precondition) << early.error();
    }
    const std::vector<std::span<const std::byte>> own{saved[static_cast<std::size_t>(r)]};
    ASSERT_TRUE(task.import_state(own).ok());
    for (int i = 0; i < 4; ++i) {
      auto res = task.step();
      ASSERT_TRUE(res.has_value()) << res.error();
      losses[static_cast<std::size_t>(r)].push_back(res->loss);
    }
    final_state[static_cast<std::size_t>(r)].resize(task.state_size());
    ASSERT_TRUE(task.export_state(final_state[static_cast<std::size_t>(r)]).has_value());
  });
  EXPECT_EQ(losses[0], std::vector<double>(straight[0].losses.begin() + 4, straight[0].losses.end()));
  EXPECT_EQ(losses[1], losses[0]);
  for (std::size_t r = 0; r < 2; ++r)
    EXPECT_TRUE(final_state[r] == straight[r].state) << "final state of rank " << r;
  // A communicator of another world size is refused, and the task stays usable.
  transport::unconnected_communicator bigger(0, 3);
  const status s = tasks[0]->rebind(bigger);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_NE(s.message().find("world of 2"), std::string::npos) << s;
  EXPECT_EQ(tasks[0]->rank(), 0);
}

TEST(training, shares_set_on_a_running_task_step_as_if_it_had_been_built_with_them) {
  const auto spec = tiny_spec();  // 4 micro-batches per step
  // Reference: built with shares {3, 1}.
  const auto built = train(spec, {.world = 2, .steps = 6, .counts = {3, 1}});
  // Equal shares for three steps, then {3, 1}: the later steps differ from the equal run only
  // by rounding, and a run that switches at the same step reproduces itself bitwise.
  const auto switched = [&] {
    testing::thread_group group(2);
    std::vector<std::vector<double>> losses(2);
    group.run([&](int r, transport::communicator& comm) {
      auto task = make_training_task(spec, r, 2, comm, cpu_options());
      ASSERT_TRUE(task.has_value()) << task.error();
      EXPECT_EQ(std::vector<std::uint32_t>((*task)->micro_batches().begin(), (*task)->micro_batches().end()),
                (std::vector<std::uint32_t>{2, 2}));
      for (int i = 0; i < 6; ++i) {
        if (i == 3) {
          const std::vector<std::uint32_t> counts{3, 1};
          ASSERT_TRUE((*task)->set_micro_batches(counts).ok());
        }
        auto res = (*task)->step();
        ASSERT_TRUE(res.has_value()) << res.error();
        losses[static_cast<std::size_t>(r)].push_back(res->loss);
      }
    });
    return losses;
  };
  const auto a = switched();
  const auto b = switched();
  EXPECT_EQ(a[0], a[1]) << "every rank has the step's loss";
  EXPECT_EQ(a[0], b[0]) << "the same shares at the same step reproduce bitwise";
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_NEAR(a[0][i], built[0].losses[i], 1e-5 * built[0].losses[i]) << "step " << i;

  // A bad list leaves the task as it was.
  transport::unconnected_communicator nowhere(0, 2);
  auto task = make_training_task(spec, 0, 2, nowhere, cpu_options({1, 3}));
  ASSERT_TRUE(task.has_value()) << task.error();
  const std::vector<std::uint32_t> three{1, 1, 2}, wrong_sum{2, 3};
  auto s = (*task)->set_micro_batches(three);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_NE(s.message().find("3 entries for a world of 2"), std::string::npos) << s;
  s = (*task)->set_micro_batches(wrong_sum);
  EXPECT_NE(s.message().find("sums to 5, a step has 4"), std::string::npos) << s;
  EXPECT_EQ((*task)->micro_batches()[0], 1u);
  EXPECT_TRUE((*task)->set_micro_batches({}).ok()) << "empty: the equal split";
  EXPECT_EQ((*task)->micro_batches()[0], 2u);
}

TEST(training, equal_split_puts_the_remainder_first) {
  EXPECT_EQ(equal_split(4, 2), (std::vector<std::uint32_t>{2, 2}));
  EXPECT_EQ(equal_split(5, 3), (std::vector<std::uint32_t>{2, 2, 1}));
  EXPECT_EQ(equal_split(2, 3), (std::vector<std::uint32_t>{1, 1, 0}));
}

TEST(training, a_failed_collective_is_reported_not_hung) {
  testing::thread_group group(2, std::chrono::milliseconds{200});
  auto task = make_training_task(tiny_spec(), 0, 2, group.rank(0), cpu_options());
  ASSERT_TRUE(task.has_value());
  auto r = (*task)->step();  // rank 1 never joins
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), errc::timeout);
  EXPECT_NE(r.error().message().find("step 0: reduce_scatter of the gradient"), std::string::npos) << r.error();
}

// A snapshot written in the background while the next step's passes run (begin_export): the
// same bytes as an export at that point, and training that goes on bit for bit as without it.
struct overlap_run {
  std::vector<double> losses;
  std::vector<bytes> snapshots;  // the state after each step (overlapped or not)
  std::vector<std::uint64_t> sums;
};

// Two ranks (threads) train `steps` steps, each taking a snapshot after every step: in the
// background while the next step runs (`overlap`), or by export_state at once.
std::vector<overlap_run> train_with_snapshots(bool overlap, int steps) {
  const auto spec = tiny_spec();
  constexpr int world = 2;
  testing::thread_group group(world);
  std::vector<overlap_run> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto task = make_training_task(spec, r, world, group.rank(r), cpu_options());
      ASSERT_TRUE(task.has_value());
      auto& t = **task;
      bytes pending;
      for (int i = 0; i < steps; ++i) {
        auto s = t.step();
        ASSERT_TRUE(s.has_value()) << s.error().message();
        out[r].losses.push_back(s->loss);
        if (overlap && !pending.empty()) {
          auto done = t.finish_export();
          ASSERT_TRUE(done.has_value() && done->has_value());
          out[r].sums.push_back(**done);
          out[r].snapshots.push_back(std::move(pending));
          pending = {};
        }
        bytes buf(t.state_size());
        if (overlap) {
          ASSERT_TRUE(t.begin_export(buf).ok());
          EXPECT_EQ(t.begin_export(buf).code(), errc::failed_precondition) << "one export at a time";
          pending = std::move(buf);  // the vector's memory stays where the export writes
        } else {
          auto sum = t.export_state(buf);
          ASSERT_TRUE(sum.has_value());
          out[r].sums.push_back(*sum);
          out[r].snapshots.push_back(std::move(buf));
        }
      }
      if (overlap) {
        auto done = t.finish_export();  // the last one, waited for here
        ASSERT_TRUE(done.has_value() && done->has_value());
        out[r].sums.push_back(**done);
        out[r].snapshots.push_back(std::move(pending));
        EXPECT_FALSE(t.finish_export().has_value()) << "nothing is pending any more";
      }
    });
  for (auto& th : threads)
    th.join();
  return out;
}

TEST(overlapped_export, gives_the_bytes_of_an_export_at_that_step_and_leaves_training_bit_for_bit_the_same) {
  const auto plain = train_with_snapshots(false, 12);
  const auto overlapped = train_with_snapshots(true, 12);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(plain[r].losses.size(), overlapped[r].losses.size());
    for (std::size_t i = 0; i < plain[r].losses.size(); ++i)
      EXPECT_EQ(testing::bits(plain[r].losses[i]), testing::bits(overlapped[r].losses[i])) << "rank " << r << " step " << i;
    ASSERT_EQ(plain[r].snapshots.size(), overlapped[r].snapshots.size());
    for (std::size_t i = 0; i < plain[r].snapshots.size(); ++i) {
      EXPECT_EQ(plain[r].sums[i], overlapped[r].sums[i]) << "rank " << r << " snapshot " << i;
      EXPECT_TRUE(plain[r].snapshots[i] == overlapped[r].snapshots[i]) << "rank " << r << " snapshot " << i;
      auto v = parse_state(overlapped[r].snapshots[i]);
      ASSERT_TRUE(v.has_value()) << v.error().message();
      EXPECT_EQ(v->header.step, i + 1) << "the state after the step it was begun at";
    }
  }
}

TEST(overlapped_export, an_import_or_a_destroyed_task_waits_for_the_pending_export) {
  const auto spec = tiny_spec();
  testing::thread_group group(1);
  auto task = make_training_task(spec, 0, 1, group.rank(0), cpu_options());
  ASSERT_TRUE(task.has_value());
  ASSERT_TRUE((*task)->step().has_value());
  bytes first((*task)->state_size()), second((*task)->state_size());
  ASSERT_TRUE((*task)->begin_export(first).ok());
  // An export in the call waits for the pending one, whose result stays for finish_export.
  auto sum = (*task)->export_state(second);
  ASSERT_TRUE(sum.has_value());
  auto done = (*task)->finish_export();
  ASSERT_TRUE(done.has_value() && done->has_value());
  EXPECT_EQ(**done, *sum);
  EXPECT_TRUE(first == second);
  // The state imports back; a pending export into a buffer is finished before the task goes.
  const std::vector<std::span<const std::byte>> in{first};
  ASSERT_TRUE((*task)->begin_export(second).ok());
  EXPECT_TRUE((*task)->import_state(in).ok());
  ASSERT_TRUE((*task)->begin_export(second).code() == errc::failed_precondition)
      << "the import kept the finished export's result for finish_export";
  EXPECT_TRUE((*task)->finish_export().has_value());
  ASSERT_TRUE((*task)->begin_export(second).ok());
  task->reset();  // waits for the export into `second`, which is still alive
  EXPECT_TRUE(parse_state(second).has_value());
}

}  // namespace
}  // namespace rekindle::training

namespace rekindle::training {
namespace {

// A 4-block model for pipelines of up to 4 stages.
config::spec pipeline_spec() {
  auto s = tiny_spec();
  s.model.layers = 4;
  return s;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i])) << what << ", step " << i + 1;
}

TEST(pipeline, stages_train_as_data_parallelism_does_up_to_rounding_and_reproduce_bitwise) {
  const auto spec = pipeline_spec();  // 4 micro-batches per step
  const auto reference = train(spec, {.world = 2, .steps = 5});
  struct plan {
    int world;
    std::vector<std::uint32_t> stages;
    std::vector<std::uint32_t> counts;
    std::string name;
  };
  for (const plan& p : {plan{2, {1, 3}, {}, "1 replica of 2 uneven stages"},
                        plan{4, {2, 2}, {}, "2 replicas of 2 stages"},
                        plan{4, {3, 1}, {3, 1}, "2 replicas of 2 stages, shares 3 and 1"},
                        plan{3, {1, 2, 1}, {}, "1 replica of 3 stages"},
                        plan{4, {1, 1, 1, 1}, {}, "1 replica of 4 stages"}}) {
    SCOPED_TRACE(p.name);
    const auto a = train(spec, {.world = p.world, .steps = 5, .counts = p.counts, .stages = p.stages});
    const auto b = train(spec, {.world = p.world, .steps = 5, .counts = p.counts, .stages = p.stages});
    ASSERT_EQ(a.size(), static_cast<std::size_t>(p.world));
    expect_same_loss_on_every_rank(a);
    EXPECT_EQ(a[0].losses, b[0].losses);
    for (std::size_t r = 0; r < a.size(); ++r)
      EXPECT_TRUE(a[r].state == b[r].state) << "state of rank " << r << " differs between runs";
    expect_close(a[0].losses, reference[0].losses, p.name);
  }
}

TEST(pipeline, a_pipelines_snapshot_restores_into_the_same_plan_bitwise_and_into_another_plan) {
  const auto spec = pipeline_spec();
  const auto straight = train(spec, {.world = 2, .steps = 6, .stages = {1, 3}});
  const auto first = train(spec, {.world = 2, .steps = 3, .stages = {1, 3}});
  const auto saved = states_of(first);
  // The same plan, each rank its own buffer: bit for bit the straight run.
  const auto same = train(spec, {.world = 2, .steps = 3, .restore = &saved, .own_only = true, .stages = {1, 3}});
  EXPECT_EQ(same[0].losses, std::vector<double>(straight[0].losses.begin() + 3, straight[0].losses.end()));
  for (std::size_t r = 0; r < 2; ++r)
    EXPECT_TRUE(same[r].state == straight[r].state) << "final state of rank " << r;
  // Another split, and no pipeline at all, on the same two ranks; and two replicas of two stages
  // on four (resharding the optimizer moments): the same training up to rounding.
  const std::vector<double> rest(straight[0].losses.begin() + 3, straight[0].losses.end());
  for (const auto& [world, stages] : {std::pair{2, std::vector<std::uint32_t>{3, 1}},
                                      std::pair{2, std::vector<std::uint32_t>{}},
                                      std::pair{4, std::vector<std::uint32_t>{2, 2}}}) {
    const auto other = train(spec, {.world = world, .steps = 3, .restore = &saved, .stages = stages});
    expect_close(other[0].losses, rest, "world " + std::to_string(world) + ", " + std::to_string(stages.size()) + " stages");
  }
}

TEST(pipeline, a_standby_built_for_the_first_stage_takes_over_a_rank_of_the_last) {
  const auto spec = pipeline_spec();
  const std::vector<std::uint32_t> stages{2, 2};
  const auto straight = train(spec, {.world = 2, .steps = 6, .stages = stages});
  const auto first = train(spec, {.world = 2, .steps = 3, .stages = stages});
  transport::unconnected_communicator nowhere(0, 2);
  task_options o = cpu_options({}, stages);
  o.initialize = false;
  auto standby = make_training_task(spec, 0, 2, nowhere, o);
  ASSERT_TRUE(standby.has_value()) << standby.error();
  EXPECT_EQ((*standby)->stage(), 0u);
  testing::thread_group group(2);
  std::vector<std::vector<double>> losses(2);
  group.run([&](int r, transport::communicator& comm) {
    std::unique_ptr<training_task> task;
    if (r == 1) {
      task = std::move(*standby);
      ASSERT_TRUE(task->rebind(comm).ok());
      EXPECT_EQ(task->stage(), 1u);
    } else {
      auto t = make_training_task(spec, 0, 2, comm, cpu_options({}, stages));
      ASSERT_TRUE(t.has_value()) << t.error();
      task = std::move(*t);
    }
    const std::vector<std::span<const std::byte>> own{first[static_cast<std::size_t>(r)].state};
    ASSERT_TRUE(task->import_state(own).ok());
    for (int i = 0; i < 3; ++i) {
      auto res = task->step();
      ASSERT_TRUE(res.has_value()) << res.error();
      losses[static_cast<std::size_t>(r)].push_back(res->loss);
    }
  });
  EXPECT_EQ(losses[1], std::vector<double>(straight[0].losses.begin() + 3, straight[0].losses.end()));
  EXPECT_EQ(losses[0], losses[1]);
}

TEST(pipeline, stage_splits_that_do_not_fit_are_refused_naming_the_problem) {
  const auto spec = pipeline_spec();
  testing::thread_group group(4);
  const auto refused = [&](std::vector<std::uint32_t> stages, std::vector<std::uint32_t> counts,
                           const std::string& want) {
    auto t = make_training_task(spec, 0, 4, group.rank(0), cpu_options(std::move(counts), std::move(stages)));
    ASSERT_FALSE(t.has_value()) << want;
    EXPECT_NE(t.error().message().find(want), std::string::npos) << t.error();
  };
  refused({1, 2}, {}, "stage_layers add up to 3 blocks, the model has 4");
  refused({2, 0, 2}, {}, "stage_layers[1]: a stage holds at least one block");
  refused({1, 1, 1, 1, 0}, {}, "5 stages for a model of 4 blocks");
  refused({2, 1, 1}, {}, "a world of 4 ranks is not a whole number of 3-stage pipelines");
  refused({3}, {}, "one stage of 3 blocks, the model has 4");
  refused({2, 2}, {1, 1, 2}, "micro_batches_per_rank has 3 entries for 2 replicas");
  // A pipeline task refuses a communicator without point-to-point sends.
  auto t = make_training_task(spec, 0, 4, group.rank(0), cpu_options({}, {2, 2}));
  ASSERT_TRUE(t.has_value()) << t.error();
  struct no_p2p final : transport::communicator {
    int rank() const noexcept override { return 1; }
    int size() const noexcept override { return 4; }
    status allreduce(void*, std::size_t, transport::dtype, transport::reduce_op) override { return {}; }
    status reduce_scatter(const void*, void*, std::size_t, transport::dtype, transport::reduce_op) override { return {}; }
    status allgather(const void*, void*, std::size_t, transport::dtype) override { return {}; }
    status broadcast(void*, std::size_t, transport::dtype, int) override { return {}; }
    status barrier() override { return {}; }
    void abort() noexcept override {}
    bool aborted() const noexcept override { return false; }
  } plain;
  const status s = (*t)->rebind(plain);
  EXPECT_EQ(s.code(), errc::unsupported) << s;
  EXPECT_NE(s.message().find("point to point"), std::string::npos) << s;
  EXPECT_EQ((*t)->rank(), 0) << "a refused rebind leaves the task as it was";
}

TEST(pipeline, a_stage_whose_neighbour_is_gone_fails_its_step_instead_of_hanging) {
  const auto spec = pipeline_spec();
  testing::thread_group group(2, std::chrono::milliseconds{300});
  std::vector<status> results(2);
  group.run([&](int r, transport::communicator& comm) {
    auto t = make_training_task(spec, r, 2, comm, cpu_options({}, {2, 2}));
    ASSERT_TRUE(t.has_value()) << t.error();
    if (r == 1)
      return;  // the last stage never runs its step
    results[0] = (*t)->step().to_status();
  });
  EXPECT_EQ(results[0].code(), errc::timeout) << results[0];
  EXPECT_NE(results[0].message().find("gradients from the next stage"), std::string::npos) << results[0];
}

}  // namespace
}  // namespace rekindle::training

namespace rekindle::training {
namespace {

// The slow drill sleeps after each pass twice as long as the pass took (factor 3): the step's
// compute wall time holds at least three times the passes' CPU time, whatever else the machine
// runs; back at 1 the sleeps stop. The same steps' losses are unchanged by it.
TEST(slow_drill, a_slowed_task_sleeps_after_each_pass_and_computes_the_same) {
  const auto spec = tiny_spec();
  testing::thread_group group(1);
  std::vector<double> slowed_losses;
  group.run([&](int, transport::communicator& comm) {
    auto task = make_training_task(spec, 0, 1, comm, cpu_options());
    ASSERT_TRUE(task.has_value()) << task.error();
    (*task)->set_slowdown(3.0);
    for (int i = 0; i < 2; ++i) {
      auto r = (*task)->step();
      ASSERT_TRUE(r.has_value()) << r.error();
      EXPECT_GE(r->timings.compute.count(), static_cast<std::int64_t>(2.5 * static_cast<double>(r->timings.compute_cpu.count())))
          << "wall " << r->timings.compute.count() << " ns, CPU " << r->timings.compute_cpu.count() << " ns";
      slowed_losses.push_back(r->loss);
    }
    (*task)->set_slowdown(std::nan(""));  // off, as below 1: the step runs at its own pace
    auto r = (*task)->step();
    ASSERT_TRUE(r.has_value());
    slowed_losses.push_back(r->loss);
  });
  const auto plain = train(spec, {.world = 1, .steps = 3});
  EXPECT_EQ(slowed_losses, plain[0].losses);
}

}  // namespace
}  // namespace rekindle::training
