// A user's own training program as every rank (job.command, without rekindle's API): the torchrun
// environment, a failure that starts every rank's program again in a new epoch (each resumes from
// its own checkpoint), and completion when every program exits with status 0.

#include <gtest/gtest.h>

#include <chrono>
#include <iterator>
#include <random>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/support/cluster.hpp"
#include "tests/support/process.hpp"
#include "tests/support/wait.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// "key=value" fields of a line of the program's log.
std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream words{line};
  for (std::string w; words >> w;)
    if (const auto eq = w.find('='); eq != std::string::npos)
      out[w.substr(0, eq)] = w.substr(eq + 1);
  return out;
}

std::vector<std::string> lines_of_text(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(prefix))
      out.push_back(line);
  return out;
}

std::string text_of(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>{in}, {}};
}

std::vector<std::string> lines_of(const fs::path& file, const std::string& prefix) {
  return lines_of_text(text_of(file), prefix);
}

int step_of(const fs::path& file) {
  std::ifstream in(file);
  int step = 0;
  in >> step;
  return step;
}

const fs::path steps_script = REKINDLE_SOURCE_DIR "/tests/fault/apps/programs/steps.sh";

// Two nodes of two ranks running steps.sh (200 steps of 50 ms) in `work`, which holds its
// checkpoints and its log.
testing::cluster_options steps_job(const fs::path& work) {
  return {.steps = 1,
          .persist_every = 0,
          .job_extra = "command = [\"bash\", \"" + steps_script.string() + "\"]\n" + "workdir = \"" + work.string() +
                       "\"\n" + "env = [\"STEPS=200\", \"CKPT_DIR=" + work.string() + "\", \"SLEEP=0.05\"]\n"};
}

TEST(program, a_users_program_runs_as_every_rank_and_a_failure_starts_every_one_again_from_its_checkpoint) {
  const auto& script = steps_script;
  testing::temp_dir work;
  const auto ckpt = work.path();
  testing::local_cluster c{steps_job(work.path())};
  c.start_all();
  // Started is as registered as a program without the API gets: every rank runs.
  ASSERT_TRUE(c.wait_for(
      [](const nlohmann::json& s) {
        if (s.value("state", "") != "running" || s["ranks"].size() != 4)
          return false;
        for (const auto& r : s["ranks"])
          if (r["state"] != "running" || r["pid"].get<int>() <= 0)
            return false;
        return true;
      },
      120s))
      << c.status().dump(2) << c.log("n0");
  ASSERT_TRUE(testing::wait_until([&] { return step_of(ckpt / "rank-1.step") >= 10; }, 60s)) << c.log("n1");
  auto st = c.admin({"status"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_NE(st.out.find("4 ranks running: bash " + script.string()), std::string::npos) << st.out;

  // Drills that need the API are refused, saying why; a kill is a failure like any other.
  auto r = c.admin({"hang", "rank", "0", "--yes"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("need the rekindle worker"), std::string::npos) << r.err;
  r = c.admin({"kill", "rank", "1", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const auto report = c.wait_done(180s);
  ASSERT_FALSE(report.is_null()) << c.status().dump(2) << c.log("n0");
  EXPECT_EQ(report["state"], "completed") << report.dump(2) << c.log("n0");
  ASSERT_EQ(report["recoveries"].size(), 1u) << report.dump(2);
  const auto& rec = report["recoveries"][0];
  EXPECT_EQ(rec["rank"], 1) << rec.dump();
  EXPECT_NE(rec["cause"].get<std::string>().find("signal 9"), std::string::npos) << rec.dump();
  EXPECT_TRUE(rec["done"].get<bool>()) << rec.dump();

  // Every rank's program started twice, in epochs 1 and 2, with the torchrun environment; the
  // second time each resumed from its own checkpoint, and each finished every step once.
  const auto starts = lines_of(ckpt / "starts.log", "start ");
  ASSERT_EQ(starts.size(), 8u) << "4 ranks, 2 epochs";
  std::map<std::string, int> resumed;
  for (const auto& line : starts) {
    const auto f = fields(line);
    EXPECT_EQ(f.at("world"), "4") << line;
    EXPECT_EQ(f.at("local_world"), "2") << line;
    EXPECT_EQ(f.at("local"), std::to_string(std::stoi(f.at("rank")) % 2)) << line;
    EXPECT_EQ(f.at("cwd"), work.path().string()) << line;
    const int epoch = std::stoi(f.at("epoch"));
    EXPECT_EQ(f.at("restart"), std::to_string(epoch - 1)) << line;
    EXPECT_EQ(f.at("master"), "127.0.0.1:" + std::to_string(29500 + epoch)) << line;
    if (epoch == 2)
      resumed[f.at("rank")] = std::stoi(f.at("from"));
  }
  ASSERT_EQ(resumed.size(), 4u) << "every rank started again in epoch 2";
  for (const auto& [rank, from] : resumed)
    EXPECT_GT(from, 0) << "rank " << rank << " resumed from its checkpoint";
  const auto done = lines_of(ckpt / "starts.log", "done ");
  ASSERT_EQ(done.size(), 4u);
  for (const auto& line : done)
    EXPECT_EQ(fields(line).at("step"), "200") << line;
}

TEST(program, a_lost_node_shrinks_the_world_and_the_programs_left_finish_the_job) {
  testing::temp_dir work;
  const auto ckpt = work.path();
  testing::local_cluster c{steps_job(work.path())};
  c.start_all();
  ASSERT_TRUE(testing::wait_until([&] { return step_of(ckpt / "rank-3.step") >= 10; }, 120s)) << c.log("n1");
  // n1's daemon dies, and its ranks' programs with it; no spare: the world shrinks to n0's two
  // ranks, whose programs start again with the new world and finish the job.
  c.signal_node("n1", SIGKILL);
  const auto report = c.wait_done(180s);
  ASSERT_FALSE(report.is_null()) << c.status().dump(2) << c.log("n0");
  EXPECT_EQ(report["state"], "completed") << report.dump(2) << c.log("n0");
  EXPECT_EQ(report["world"], 2) << report.dump(2);
  ASSERT_EQ(report["recoveries"].size(), 1u) << report.dump(2);
  EXPECT_NE(report["recoveries"][0]["cause"].get<std::string>().find("node n1"), std::string::npos) << report.dump(2);
  std::set<std::string> finished;
  for (const auto& line : lines_of(ckpt / "starts.log", "start ")) {
    const auto f = fields(line);
    if (f.at("epoch") != "1") {
      EXPECT_EQ(f.at("world"), "2") << line;
      EXPECT_TRUE(f.at("rank") == "0" || f.at("rank") == "1") << line;
    }
  }
  for (const auto& line : lines_of(ckpt / "starts.log", "done "))
    finished.insert(fields(line).at("rank"));
  EXPECT_EQ(finished, (std::set<std::string>{"0", "1"})) << "n1's ranks never finished; n0's did";
}

// A first MASTER_PORT whose next `span` ports are free now, below the kernel's ephemeral range
// (32768 and up), where no connection of a parallel test takes one meanwhile; epoch e uses
// port + e % 64.
int free_ports(int span = 8) {
  std::random_device seed;
  std::mt19937 pick{seed()};
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = std::uniform_int_distribution<int>{20000, 32000 - span}(pick);
    bool all = true;
    for (int p = base; p < base + span && all; ++p) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<std::uint16_t>(p));
      all = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      ::close(fd);
    }
    if (all)
      return base;
  }
  return 0;
}

TEST(program, an_unmodified_torch_ddp_script_completes_across_a_kill_resuming_from_its_own_checkpoint) {
  // Debian's python3-torch (scripts/setup-deps), with Debian's interpreter: another python3 on the
  // PATH may lack it.
  const std::string python = "/usr/bin/python3";
  if (::access(python.c_str(), X_OK) != 0)
    GTEST_SKIP() << python << " is missing (Debian package python3; scripts/setup-deps installs it)";
  if (testing::run_process({python, "-c", "import torch"}, 60s).exit_code != 0)
    GTEST_SKIP() << "python3-torch is not installed (scripts/setup-deps installs it)";
  const fs::path script = REKINDLE_SOURCE_DIR "/examples/torch/train.py";
  testing::temp_dir work;
  const auto ckpt = work.path() / "ckpt";
  // Its own rendezvous port: parallel tests must not meet (epoch e uses port + e % 64).
  const int port = free_ports();
  ASSERT_GT(port, 0);
  testing::local_cluster c{{.steps = 1,
                            .persist_every = 0,
                            .job_extra = "command = [\"" + python + "\", \"" + script.string() +
                                         "\", \"--steps\", \"100\", \"--save-every\", \"5\", \"--step-delay\", "
                                         "\"0.05\", \"--checkpoint-dir\", \"" +
                                         ckpt.string() + "\"]\nmaster_port = " + std::to_string(port) + "\n"}};
  c.start_all();
  // Once the script saved its first checkpoint, rank 1 is killed: every rank's program starts
  // again in a new epoch and resumes from that checkpoint.
  ASSERT_TRUE(testing::wait_until([&] { return fs::exists(ckpt / "checkpoint.pt"); }, 180s))
      << c.status().dump(2) << c.log("n0");
  const auto r = c.admin({"kill", "rank", "1", "--yes"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = c.wait_done(300s);
  ASSERT_FALSE(report.is_null()) << c.status().dump(2) << c.log("n0");
  EXPECT_EQ(report["state"], "completed") << report.dump(2) << c.log("n0");
  ASSERT_EQ(report["recoveries"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["recoveries"][0]["rank"], 1) << report.dump(2);
  // Each rank's output, both epochs: started from scratch, started again from a checkpoint past
  // step 0, and done at the last step with the same mean loss everywhere.
  std::set<std::string> losses;
  for (const auto& [node, ranks] : std::vector<std::pair<std::string, std::vector<int>>>{{"n0", {0, 1}}, {"n1", {2, 3}}}) {
    for (const int rank : ranks) {
      const auto log = c.data_dir() / node / ("rank-" + std::to_string(rank) + ".log");
      const auto prefix = "rank " + std::to_string(rank) + " of 4: ";
      const auto starts = lines_of(log, prefix + "starting at step ");
      ASSERT_EQ(starts.size(), 2u) << log << "\n" << c.log(node);
      EXPECT_EQ(starts[0], prefix + "starting at step 0");
      EXPECT_NE(starts[1], prefix + "starting at step 0") << "resumed from its checkpoint";
      const auto done = lines_of(log, prefix + "done at step 100, loss ");
      ASSERT_EQ(done.size(), 1u) << log;
      losses.insert(done[0].substr(done[0].rfind(' ') + 1));
    }
  }
  EXPECT_EQ(losses.size(), 1u) << "every rank reports the same mean loss";
}

// ---- level 1: programs on the worker API (api/rekindle.h, the rekindle Python package) ----------

const std::string debian_python = "/usr/bin/python3";

// Why a torch program on the API cannot run here, or empty.
std::string api_missing() {
  if (::access(debian_python.c_str(), X_OK) != 0)
    return debian_python + " is missing (Debian package python3; scripts/setup-deps installs it)";
  if (!fs::exists(fs::path{REKINDLE_BIN_DIR} / ".." / "python" / "rekindle" / "__init__.py"))
    return "the rekindle Python package was not built (needs pybind11-dev and python3-dev: scripts/setup-deps)";
  if (testing::run_process({debian_python, "-c", "import torch"}, 60s).exit_code != 0)
    return "python3-torch is not installed (scripts/setup-deps installs it)";
  return {};
}

// `nodes` nodes of `ranks_per_node` ranks running `args` with Debian's python on its own
// rendezvous ports.
testing::cluster_options api_job(const std::vector<std::string>& args, int nodes = 2, int ranks_per_node = 1) {
  const int port = free_ports();
  std::string command = "command = [\"" + debian_python + "\"";
  for (const auto& a : args)
    command += ", \"" + a + "\"";
  command += "]\nmaster_port = " + std::to_string(port) + "\nstate_bytes = \"8MiB\"\n";
  return {.nodes = nodes, .ranks_per_node = ranks_per_node, .steps = 1, .snapshot_every = 5, .persist_every = 20, .job_extra = command};
}

struct torch_run {
  nlohmann::json report;
  /// Rank 0's output and rank 3's (the one a kill hits).
  std::string log0, log3;
  /// n1's daemon log.
  std::string daemon1;
};

// examples/torch/train_rekindle.py for 100 steps on four ranks (two nodes of two); `kill_at` > 0
// kills rank 3 (n1's second) with SIGKILL once the job passed that step: its ring neighbours fail
// out of their collective at once, the others once those leave the old process group.
torch_run run_train_rekindle(std::uint64_t kill_at, std::vector<int>* pids_before = nullptr,
                              std::optional<fs::path> export_to = std::nullopt) {
  const std::string script = REKINDLE_SOURCE_DIR "/examples/torch/train_rekindle.py";
  testing::local_cluster c{api_job({script, "--steps", "100", "--step-delay", "0.05"}, 2, 2)};
  c.start_all();
  torch_run out;
  if (kill_at > 0) {
    // Past `kill_at`, with n1's warm standby of the program ready to take rank 1's place.
    EXPECT_TRUE(c.wait_for(
        [&](const nlohmann::json& s) {
          return s.value("step", 0ull) >= kill_at && s["nodes"].size() == 2 && s["nodes"][1].value("standby_ready", false);
        },
        180s))
        << c.status().dump(2) << c.log("n0") << c.log("n1");
    const auto st = c.status();
    if (pids_before && st.contains("ranks"))
      for (const auto& r : st["ranks"])
        pids_before->push_back(r["pid"].get<int>());
    const auto r = c.admin({"kill", "rank", "3", "--yes"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  out.report = c.wait_done(300s);
  if (export_to) {
    // The checkpoints on disk, as files plain torch.load reads.
    const auto r = testing::run_process({(testing::bin_dir() / "rekindle").string(), "checkpoint", "export",
                                         (c.data_dir() / "checkpoints").string(), "--out", export_to->string()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  out.daemon1 = c.log("n1");
  out.log0 = c.data_dir() / "n0" / "rank-0.log";
  out.log3 = c.data_dir() / "n1" / "rank-3.log";
  if (out.report.is_null() || out.report["state"] != "completed")
    ADD_FAILURE() << c.status().dump(2) << c.log("n0") << c.log("n1");
  // The logs outlive the cluster's folder: keep their text.
  out.log0 = text_of(out.log0);
  out.log3 = text_of(out.log3);
  return out;
}

std::vector<std::map<std::string, std::string>> starts_in(const std::string& log) {
  // "rank R of W: pid P epoch E starting at step S"
  std::vector<std::map<std::string, std::string>> out;
  std::istringstream in{log};
  for (std::string line; std::getline(in, line);) {
    if (line.find(" starting at step ") == std::string::npos)
      continue;
    std::istringstream words{line};
    std::vector<std::string> w{std::istream_iterator<std::string>{words}, {}};
    if (w.size() >= 12)
      out.push_back({{"pid", w[5]}, {"epoch", w[7]}, {"step", w[11]}});
  }
  return out;
}

std::string final_loss(const std::string& log) {
  const auto at = log.find(" done at step ");
  if (at == std::string::npos)
    return {};
  const auto open = log.find('(', at), close = log.find(')', at);
  return log.substr(open + 1, close - open - 1);
}

TEST(worker_api, a_killed_torch_rank_restarts_alone_in_a_standby_and_the_survivors_roll_back_in_memory_to_a_bitwise_equal_loss) {
  if (const auto why = api_missing(); !why.empty())
    GTEST_SKIP() << why;
  const auto clean = run_train_rekindle(0);
  ASSERT_FALSE(lines_of_text(clean.log0, "rank 0 of 4: done at step 100, loss ").empty()) << clean.log0;
  std::vector<int> pids;
  testing::temp_dir exported;
  const auto failed = run_train_rekindle(15, &pids, exported.path());
  ASSERT_EQ(pids.size(), 4u);
  ASSERT_EQ(failed.report["recoveries"].size(), 1u) << failed.report.dump(2);
  const auto& rec = failed.report["recoveries"][0];
  EXPECT_EQ(rec["rank"], 3) << rec.dump();
  EXPECT_NE(rec["cause"].get<std::string>().find("signal 9"), std::string::npos) << rec.dump();
  EXPECT_GE(rec["restored_step"].get<int>(), 10) << "rolled back to a snapshot in memory: " << rec.dump();
  EXPECT_EQ(rec["source"], "local memory") << rec.dump();

  // A survivor kept its process: one pid, two epochs, the second from the snapshot's step.
  const auto s0 = starts_in(failed.log0), s1 = starts_in(failed.log3);
  ASSERT_EQ(s0.size(), 2u) << failed.log0;
  EXPECT_EQ(s0[0].at("pid"), std::to_string(pids[0])) << failed.log0;
  EXPECT_EQ(s0[1].at("pid"), s0[0].at("pid")) << "rank 0 kept its process\n" << failed.log0;
  EXPECT_EQ(s0[1].at("epoch"), "2") << failed.log0;
  EXPECT_EQ(s0[1].at("step"), std::to_string(rec["restored_step"].get<int>())) << failed.log0;
  // Only the killed rank started again, in n1's warm standby of the program (torch imported, the
  // model built), resuming from its own slot at the same step.
  ASSERT_EQ(s1.size(), 2u) << failed.log3;
  EXPECT_EQ(s1[0].at("pid"), std::to_string(pids[3])) << failed.log3;
  EXPECT_NE(s1[1].at("pid"), s1[0].at("pid")) << failed.log3;
  EXPECT_NE(failed.daemon1.find("agent activates standby pid=" + s1[1].at("pid") + " as local rank 1"), std::string::npos)
      << failed.daemon1;
  EXPECT_EQ(s1[1].at("step"), s0[1].at("step")) << failed.log3;

  // The same final loss, bit for bit, as the run without a failure.
  EXPECT_EQ(final_loss(failed.log0), final_loss(clean.log0)) << failed.log0 << "\n---\n" << clean.log0;
  EXPECT_EQ(final_loss(failed.log3), final_loss(clean.log0)) << failed.log3;

  // `rekindle checkpoint export` wrote the newest checkpoint (persisted every 20 steps) as a file per rank that plain torch.load reads, and the model it holds loads into the script's.
  for (const int rank : {0, 1, 2, 3}) {
    const auto file = exported.path() / ("rank-" + std::to_string(rank) + ".pt");
    const auto r = testing::run_process(
        {debian_python, "-c",
         "import sys, torch\nsys.path.insert(0, '" REKINDLE_SOURCE_DIR "/examples/torch')\nfrom train import TinyGPT\n"
         "s = torch.load(sys.argv[1])\nm = TinyGPT(32, 2, 1, 32)\nm.load_state_dict(s['model'])\n"
         "print('step', s['step'], 'optimizer', len(s['optimizer']['state']), 'rng', s['rng']['torch'].numel() > 0)\n",
         file.string()},
        120s);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto f = lines_of_text(r.out, "step ");
    ASSERT_EQ(f.size(), 1u) << r.out << r.err;
    const int step = std::stoi(f[0].substr(5));
    EXPECT_TRUE(step >= 20 && step % 20 == 0) << "a persisted step: " << f[0];
    EXPECT_NE(f[0].find(" rng True"), std::string::npos) << f[0];
  }
}

TEST(worker_api, a_lost_node_shrinks_the_world_and_the_survivor_keeps_its_process_and_the_global_batch) {
  if (const auto why = api_missing(); !why.empty())
    GTEST_SKIP() << why;
  const std::string script = REKINDLE_SOURCE_DIR "/examples/torch/train_rekindle.py";
  testing::local_cluster c{api_job({script, "--steps", "150", "--step-delay", "0.05"})};
  c.start_all();
  ASSERT_TRUE(c.wait_for([](const nlohmann::json& s) { return s.value("step", 0ull) >= 15; }, 180s))
      << c.status().dump(2) << c.log("n0");
  // n1's daemon dies and its rank's program with it; no spare: the world shrinks to rank 0, whose
  // program stays, restores from memory and trains the same global batch alone.
  c.signal_node("n1", SIGKILL);
  const auto report = c.wait_done(300s);
  const auto log = text_of(c.data_dir() / "n0" / "rank-0.log");
  ASSERT_FALSE(report.is_null()) << c.status().dump(2) << c.log("n0") << log;
  EXPECT_EQ(report["state"], "completed") << report.dump(2) << c.log("n0") << log;
  EXPECT_EQ(report["world"], 1) << report.dump(2);
  ASSERT_EQ(report["recoveries"].size(), 1u) << report.dump(2);
  EXPECT_NE(report["recoveries"][0]["cause"].get<std::string>().find("node n1"), std::string::npos) << report.dump(2);
  const auto starts = starts_in(log);
  ASSERT_EQ(starts.size(), 2u) << log;
  EXPECT_EQ(starts[1].at("pid"), starts[0].at("pid")) << "rank 0 kept its process\n" << log;
  EXPECT_GT(std::stoi(starts[1].at("step")), 0) << log;
  EXPECT_FALSE(lines_of_text(log, "rank 0 of 2: 8 of the global batch's 16 sequences").empty()) << log;
  EXPECT_FALSE(lines_of_text(log, "rank 0 of 1: 16 of the global batch's 16 sequences").empty()) << log;
  EXPECT_FALSE(lines_of_text(log, "rank 0 of 1: done at step 150, loss ").empty()) << log;
}

TEST(worker_api, misuse_gets_a_precise_error_and_nothing_is_lost) {
  if (const auto why = api_missing(); !why.empty())
    GTEST_SKIP() << why;
  const std::string script = REKINDLE_SOURCE_DIR "/tests/fault/apps/programs/api_misuse.py";
  testing::local_cluster c{api_job({script}, 1)};
  c.start_all();
  const auto report = c.wait_done(180s);
  const auto log = text_of(c.data_dir() / "n0" / "rank-0.log");
  ASSERT_FALSE(report.is_null()) << c.status().dump(2) << c.log("n0") << log;
  EXPECT_EQ(report["state"], "completed") << report.dump(2) << c.log("n0") << log;
  const auto has = [&](const std::string& text) { return log.find(text) != std::string::npos; };
  // Too large for the slot: the sizes and the key to change.
  EXPECT_TRUE(has("check too_large: SnapshotTooLarge: the snapshot of step 1 takes ")) << log;
  EXPECT_TRUE(has("this rank's slot holds 8388608 (job.state_bytes)")) << log;
  // A non-tensor: where it is and what a snapshot holds.
  EXPECT_TRUE(has("check non_tensor: TypeError: extra['loader'] is a TextIOWrapper: a snapshot holds tensors")) << log;
  EXPECT_TRUE(has("check step_zero: Error: snapshot of step 0: steps after the restore step 0 only")) << log;
  // Step times out of range are refused, naming the part.
  EXPECT_TRUE(has("check negative_time: Error: step_done: data=-1 is not a step's time in seconds (0 to 3600)")) << log;
  EXPECT_TRUE(has("check hour_long_step: Error: step_done: compute=7200 is not a step's time in seconds")) << log;
  // The split of step 5 reached the supervisor, the refused ones did not.
  ASSERT_EQ(report["ranks"].size(), 1u) << report.dump(2);
  EXPECT_DOUBLE_EQ(report["ranks"][0].value("compute_time_s", 0.0), 0.25) << report.dump(2);
  EXPECT_DOUBLE_EQ(report["ranks"][0].value("data_time_s", 0.0), 0.5) << report.dump(2);
  // The failed program's snapshot survived in its slot: the restarted one restores it exactly.
  const auto snap_at = log.find("snapshot weight ");
  ASSERT_NE(snap_at, std::string::npos) << log;
  const auto weight = log.substr(snap_at + 16, log.find('\n', snap_at) - snap_at - 16);
  EXPECT_TRUE(has("restored step 5 extra {'position': 5, 'note': 'kept'} weight " + weight)) << log;
  // In epoch 2, or later when a restarted program failed again for a reason of the machine's.
  EXPECT_TRUE(has("check restore_twice: OrderError: restore was already called in epoch ")) << log;
  EXPECT_TRUE(has(": once per epoch")) << log;
}

}  // namespace
}  // namespace rekindle
