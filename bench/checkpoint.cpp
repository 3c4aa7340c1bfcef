// bench/checkpoint: what a snapshot costs the training loop, next to its limits measured in the same
// run: the training stall per snapshot (the worker's path: export the state straight into the slot's
// free half, publish it with its checksum) against a plain memcpy of the same bytes (the physical
// limit) and against torch.save + fsync of the same bytes (Debian's python3-torch). Also the time to
// persist a snapshot as a shard file (write, fsync, rename) and to restore it from each source.
//
//   build/bench/checkpoint [--sizes-mb 100,1000] [--runs 5] [--dir DIR] [--json FILE] [--torch auto|on|off]

#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "bench/model_choice.hpp"
#include "common/memory.hpp"
#include "common/process.hpp"
#include "config/load.hpp"
#include "storage/shard_file.hpp"
#include "storage/snapshot_slot.hpp"
#include "training/training_task.hpp"
#include "transport/communicator.hpp"

namespace rekindle::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct options {
  std::vector<double> sizes_mb{100, 1000};
  int runs = 5;
  fs::path dir;
  std::string json_path;
  std::string torch = "auto";
};

struct result {
  model_choice model;
  std::size_t bytes = 0;
  double stall = 0, memcpy = 0, torch_save = -1, persist = 0, restore_slot = 0, restore_disk = 0;
};

// torch.save of a uint8 tensor of `bytes` into DIR/torch.pt, flushed and fsynced, `runs` times; the
// median seconds, or nullopt when python3-torch is missing or the script fails.
std::optional<double> time_torch_save(std::size_t bytes, int runs, const fs::path& dir) {
  const auto script = dir / "torch_save.py";
  std::ofstream(script) << "import os, sys, time, statistics, torch\n"
                           "n, runs, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
                           "t = torch.ones(n, dtype=torch.uint8)\n"
                           "ts = []\n"
                           "for _ in range(runs):\n"
                           "    t0 = time.perf_counter()\n"
                           "    with open(path, 'wb') as f:\n"
                           "        torch.save(t, f)\n"
                           "        f.flush()\n"
                           "        os.fsync(f.fileno())\n"
                           "    ts.append(time.perf_counter() - t0)\n"
                           "    os.remove(path)\n"
                           "print(statistics.median(ts))\n";
  const auto out = dir / "torch_save.out";
  auto pid = spawn_child({"/usr/bin/python3", script.string(), std::to_string(bytes), std::to_string(runs),
                          (dir / "torch.pt").string()},
                         {.log = out});
  if (!pid)
    return std::nullopt;
  int st = 0;
  ::waitpid(*pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return std::nullopt;
  std::ifstream in(out);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty())
      last = line;
  try {
    return std::stod(last);
  } catch (...) {
    return std::nullopt;
  }
}

expected<result> measure(double target_bytes, const options& o) {
  result r;
  r.model = choose_model(target_bytes);
  const auto& m = r.model;
  const auto config = o.dir / "bench.toml";
  std::ofstream(config) << "[cluster]\nname = \"bench\"\n\n[[nodes]]\nname = \"n0\"\nhost = \"127.0.0.1\"\n"
                        << "\n[job]\nname = \"checkpoint\"\nsteps = 10\nglobal_batch = 1\nmicro_batch = 1\nseed = 1\n"
                        << "\n[model]\nlayers = " << m.layers << "\nheads = " << m.heads << "\nwidth = " << m.width
                        << "\nseq_len = " << m.seq_len << "\n\n[daemon]\ndata_dir = \"" << (o.dir / "data").string()
                        << "\"\n";
  RK_ASSIGN_OR_RETURN(auto spec, config::load(config));
  transport::unconnected_communicator comm{0, 1};
  training::task_options topt;
  topt.device.type = kernels::device_request::kind::cpu;  // the state in host memory, as the memcpy's
  RK_ASSIGN_OR_RETURN(auto task, training::make_training_task(spec, 0, 1, comm, topt));
  r.bytes = task->state_size();

  const auto name = storage::snapshot_slot::name_for(o.dir, "checkpoint", 0);
  (void)storage::snapshot_slot::remove(name);
  RK_ASSIGN_OR_RETURN(auto slot, storage::snapshot_slot::create(name, r.bytes));
  struct remove_slot {
    std::string n;
    ~remove_slot() { (void)storage::snapshot_slot::remove(n); }
  } cleanup{name};

  // Verify before timing: an exported state imports back.
  std::vector<std::byte> exported(r.bytes);
  RK_RETURN_IF_ERROR(task->export_state(exported).to_status());
  RK_RETURN_IF_ERROR(task->import_state(std::vector<std::span<const std::byte>>{exported}));
  std::vector<std::byte> target(r.bytes, std::byte{1});  // touched, like a slot

  std::vector<double> stall, copy, persist, from_slot, from_disk;
  for (int i = 0; i < o.runs + 1; ++i) {  // the first of each is a warm-up
    const step_t step{static_cast<std::uint64_t>(10 + 2 * i)};
    // The worker's stall, and its limit: one memcpy of the same bytes into touched memory. Each is
    // timed on its second run in a row: on this VM memory left idle between iterations comes back
    // through page faults (the first copy into it runs 10-25x slower), which both would pay alike.
    const auto snapshot = [&](step_t at) -> status {
      RK_ASSIGN_OR_RETURN(auto t, slot.begin_write(storage::snapshot_meta::of_step(at)));
      RK_ASSIGN_OR_RETURN(const auto sum, task->export_state(t.half.first(r.bytes)));
      return slot.publish(r.bytes, sum);
    };
    RK_RETURN_IF_ERROR(snapshot(step_t{step.value() - 1}));
    auto t0 = clock_type::now();
    RK_RETURN_IF_ERROR(snapshot(step));
    const double s = seconds_since(t0);
    std::memcpy(target.data(), exported.data(), r.bytes);
    t0 = clock_type::now();
    std::memcpy(target.data(), exported.data(), r.bytes);
    const double c = seconds_since(t0);
    // Persisting the published snapshot: shard file written, fsynced, renamed, directory synced.
    RK_ASSIGN_OR_RETURN(auto view, slot.at_step(step, false));
    t0 = clock_type::now();
    RK_ASSIGN_OR_RETURN(auto info, storage::write_shard(o.dir, storage::shard_file_name(step, rank_id{0}), step,
                                                        rank_id{0}, view.data, {.expected_checksum = view.checksum}));
    const double p = seconds_since(t0);
    // Restores: from the slot (verified, imported in place), from the shard file (read, verified).
    t0 = clock_type::now();
    RK_ASSIGN_OR_RETURN(auto verified, slot.at_step(step, true));
    RK_RETURN_IF_ERROR(task->import_state(std::vector<std::span<const std::byte>>{verified.data}));
    const double rs = seconds_since(t0);
    t0 = clock_type::now();
    std::vector<std::byte> payload;
    RK_ASSIGN_OR_RETURN(auto read, storage::read_shard(o.dir / storage::shard_file_name(step, rank_id{0}), payload,
                                                       {.step = step, .rank = {}, .size = {}, .checksum = info.checksum}));
    (void)read;
    RK_RETURN_IF_ERROR(task->import_state(std::vector<std::span<const std::byte>>{payload}));
    const double rd = seconds_since(t0);
    fs::remove(o.dir / storage::shard_file_name(step, rank_id{0}));
    if (i == 0)
      continue;
    stall.push_back(s);
    copy.push_back(c);
    persist.push_back(p);
    from_slot.push_back(rs);
    from_disk.push_back(rd);
  }
  r.stall = median(stall);
  r.memcpy = median(copy);
  r.persist = median(persist);
  r.restore_slot = median(from_slot);
  r.restore_disk = median(from_disk);
  if (o.torch != "off") {
    if (auto t = time_torch_save(r.bytes, o.runs, o.dir))
      r.torch_save = *t;
    else if (o.torch == "on")
      return status{errc::unavailable, "torch.save could not be timed (is python3-torch installed?)"};
  }
  return r;
}

int main_impl(int argc, char** argv) {
  keep_large_frees_in_process();  // as the service's processes
  options o;
  CLI::App app{"The training stall of a snapshot against memcpy and torch.save + fsync; persist and restore times"};
  std::string sizes = "100,1000";
  app.add_option("--sizes-mb", sizes, "Sizes of training state to measure, in MB (comma-separated)");
  app.add_option("--runs", o.runs, "Timed runs per figure (the median is reported)")->check(CLI::Range(1, 100));
  std::string dir;
  app.add_option("--dir", dir, "Directory for shard files and torch.save (default: a new one under /tmp)");
  app.add_option("--json", o.json_path, "Also write the results to this file");
  app.add_option("--torch", o.torch, "torch.save baseline: auto (when python3-torch is there), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  CLI11_PARSE(app, argc, argv);
  o.sizes_mb.clear();
  for (std::size_t at = 0; at < sizes.size();) {
    const auto comma = sizes.find(',', at);
    const auto part = sizes.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    try {
      o.sizes_mb.push_back(std::stod(part));
    } catch (...) {
      std::cerr << "checkpoint: --sizes-mb: '" << part << "' is not a number\n";
      return 2;
    }
    at = comma == std::string::npos ? sizes.size() : comma + 1;
  }
  bool made_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/rekindle-bench-checkpoint-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      std::perror("checkpoint: mkdtemp");
      return 1;
    }
    o.dir = tmpl;
    made_dir = true;
  } else {
    o.dir = dir;
    fs::create_directories(o.dir);
  }
  json out = json::array();
  std::printf("snapshot of the training state: median of %d runs; directory %s\n", o.runs, o.dir.c_str());
  std::printf("%10s %12s %10s %10s %8s %12s %9s %10s %12s %12s\n", "state", "params", "stall", "memcpy", "stall/",
              "torch.save", "torch/", "persist", "restore", "restore");
  std::printf("%10s %12s %10s %10s %8s %12s %9s %10s %12s %12s\n", "", "", "", "", "memcpy", "+ fsync", "stall",
              "(fsync)", "from slot", "from disk");
  int rc = 0;
  for (double mb : o.sizes_mb) {
    auto r = measure(mb * 1e6, o);
    if (!r) {
      std::cerr << "checkpoint: " << mb << " MB: " << r.error().message() << "\n";
      rc = 1;
      continue;
    }
    const auto ms = [](double s) { return s * 1e3; };
    char torch_col[32] = "-", ratio_col[32] = "-";
    if (r->torch_save >= 0) {
      std::snprintf(torch_col, sizeof torch_col, "%.1f ms", ms(r->torch_save));
      std::snprintf(ratio_col, sizeof ratio_col, "%.1fx", r->torch_save / r->stall);
    }
    std::printf("%7.0f MB %12llu %7.1f ms %7.1f ms %7.2fx %12s %9s %7.0f ms %9.1f ms %9.1f ms\n",
                static_cast<double>(r->bytes) / 1e6, static_cast<unsigned long long>(r->model.params), ms(r->stall),
                ms(r->memcpy), r->stall / r->memcpy, torch_col, ratio_col, ms(r->persist), ms(r->restore_slot),
                ms(r->restore_disk));
    out.push_back({{"bytes", r->bytes},
                   {"params", r->model.params},
                   {"width", r->model.width},
                   {"stall_s", r->stall},
                   {"memcpy_s", r->memcpy},
                   {"torch_save_fsync_s", r->torch_save >= 0 ? json(r->torch_save) : json(nullptr)},
                   {"persist_s", r->persist},
                   {"restore_slot_s", r->restore_slot},
                   {"restore_disk_s", r->restore_disk}});
  }
  if (!o.json_path.empty())
    std::ofstream(o.json_path) << out.dump(2) << "\n";
  if (made_dir)
    fs::remove_all(o.dir);
  return rc;
}

}  // namespace
}  // namespace rekindle::bench

int main(int argc, char** argv) { return rekindle::bench::main_impl(argc, argv); }
