// rekindle checkpoint list|verify|export DIR: what a checkpoint directory holds, read from the
// directory alone (manifest files beside the shards), so it works without a cluster and on a copy.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "apps/common/cli.hpp"
#include "apps/rekindle/commands.hpp"
#include <sys/wait.h>

#include "common/files.hpp"
#include "common/process.hpp"
#include "common/text.hpp"
#include "storage/manifest_file.hpp"
#include "storage/shard_file.hpp"

namespace rekindle::apps {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string pad_right(std::string s, std::size_t width) {
  if (s.size() < width)
    s.append(width - s.size(), ' ');
  return s;
}

struct manifest {
  fs::path file;
  std::uint64_t step = 0;
  std::uint32_t world = 0;
  struct shard {
    std::uint32_t rank = 0;
    std::string file;
    std::uint64_t size = 0;
    std::uint64_t checksum = 0;
  };
  std::vector<shard> shards;
};

// More entries than any checkpoint directory holds.
constexpr std::size_t max_directory_entries = 1u << 20;

// Reads one manifest file; the error names the file and the field.
expected<manifest> read_manifest(const fs::path& file) {
  RK_ASSIGN_OR_RETURN(auto read, storage::read_manifest_file(file));
  manifest m;
  m.file = file;
  m.step = read.step.value();
  m.world = read.world_size;
  for (auto& s : read.shards)
    m.shards.push_back({s.rank.value(), std::move(s.file), s.size, s.checksum});
  return m;
}

struct directory_view {
  std::vector<manifest> manifests;
  /// Files no manifest names (shards of checkpoints that never committed, .tmp leftovers).
  std::vector<std::string> stray;
};

expected<directory_view> scan(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return status{errc::not_found, dir.string() + " is not a directory" + (ec ? " (" + ec.message() + ")" : "")};
  directory_view v;
  std::set<std::string> files;
  fs::directory_iterator it{dir, ec};
  if (ec)
    return status{errc::io_error, dir.string() + ": " + ec.message()};
  std::size_t seen = 0;
  for (; it != fs::directory_iterator{}; it.increment(ec)) {
    if (ec)
      return status{errc::io_error, dir.string() + ": " + ec.message()};
    if (++seen > max_directory_entries)
      return status{errc::invalid_argument, dir.string() + " holds more than " + std::to_string(max_directory_entries) +
                                                " entries; a checkpoint directory holds a few per checkpoint"};
    const auto& e = *it;
    const auto name = e.path().filename().string();
    if (name.ends_with(".manifest.json")) {
      RK_ASSIGN_OR_RETURN(auto m, read_manifest(e.path()));
      v.manifests.push_back(std::move(m));
    } else if (name.starts_with("ckpt-")) {
      files.insert(name);
    }
  }
  std::sort(v.manifests.begin(), v.manifests.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  for (const auto& m : v.manifests)
    for (const auto& s : m.shards)
      files.erase(s.file);
  v.stray.assign(files.begin(), files.end());
  return v;
}

// The directory's contents, or nullopt after saying why on stderr.
std::optional<directory_view> scan_or_say(const fs::path& dir, const char* command) {
  auto v = scan(dir);
  if (!v) {
    std::cerr << "rekindle checkpoint " << command << ": " << v.error().message() << "\n";
    return std::nullopt;
  }
  return std::move(*v);
}

int list(const fs::path& dir, bool as_json) {
  auto v = scan_or_say(dir, "list");
  if (!v)
    return 2;
  json out = json::array();
  for (const auto& m : v->manifests) {
    std::uint64_t bytes = 0;
    for (const auto& s : m.shards)
      bytes += s.size;
    out.push_back({{"step", m.step}, {"world_size", m.world}, {"shards", m.shards.size()}, {"bytes", bytes}});
  }
  if (as_json) {
    std::cout << json{{"directory", dir.string()}, {"checkpoints", out}, {"stray_files", v->stray}}.dump(2) << "\n";
    return 0;
  }
  if (out.empty())
    std::cout << "no committed checkpoint in " << dir.string() << "\n";
  else
    std::cout << "step        world  shards  size\n";
  for (const auto& c : out)
    std::cout << pad_right(std::to_string(c["step"].get<std::uint64_t>()), 12)
              << pad_right(std::to_string(c["world_size"].get<std::uint32_t>()), 7)
              << pad_right(std::to_string(c["shards"].get<std::size_t>()), 8)
              << format_bytes(static_cast<double>(c["bytes"].get<std::uint64_t>())) << "\n";
  if (!v->stray.empty())
    std::cout << v->stray.size() << " file(s) belong to no committed checkpoint (the daemon removes them at start)\n";
  return 0;
}

int verify(const fs::path& dir, bool as_json) {
  auto v = scan_or_say(dir, "verify");
  if (!v)
    return 2;
  json out = json::array();
  std::size_t bad = 0;
  for (const auto& m : v->manifests) {
    std::vector<std::string> problems;
    std::set<std::uint32_t> ranks;
    for (const auto& s : m.shards) {
      ranks.insert(s.rank);
      auto r = storage::verify_shard(dir / s.file, {.step = step_t{m.step}, .rank = rank_id{s.rank}, .size = s.size,
                                                     .checksum = s.checksum});
      if (!r)
        problems.push_back(r.error().message());
    }
    for (std::uint32_t r = 0; r < m.world; ++r)
      if (!ranks.contains(r))
        problems.push_back(m.file.filename().string() + ": no shard of rank " + std::to_string(r) + " in a world of " +
                           std::to_string(m.world));
    bad += problems.empty() ? 0 : 1;
    out.push_back({{"step", m.step}, {"ok", problems.empty()}, {"problems", problems}});
  }
  if (as_json) {
    std::cout << json{{"directory", dir.string()}, {"checkpoints", out}, {"stray_files", v->stray}}.dump(2) << "\n";
  } else {
    for (const auto& c : out) {
      std::cout << "step " << c["step"].get<std::uint64_t>() << ": " << (c["ok"].get<bool>() ? "ok" : "BAD") << "\n";
      for (const auto& p : c["problems"])
        std::cout << "  " << p.get<std::string>() << "\n";
    }
    for (const auto& s : v->stray)
      std::cout << "stray: " << s << " (no committed checkpoint names it)\n";
    std::cout << out.size() - bad << " of " << out.size() << " checkpoint(s) intact\n";
  }
  return bad == 0 ? 0 : 1;
}

// Writes a file per rank that plain torch.load reads, from a checkpoint of a program on the
// worker API: the Python package's rekindle.export does the torch side.
int export_checkpoint(const fs::path& dir, std::optional<std::uint64_t> step, const fs::path& out,
                      const std::string& python) {
  auto v = scan_or_say(dir, "export");
  if (!v)
    return 2;
  const auto say = [](const std::string& what) {
    std::cerr << "rekindle checkpoint export: " << what << "\n";
    return 2;
  };
  if (v->manifests.empty())
    return say("no committed checkpoint in " + dir.string());
  const manifest* m = &v->manifests.front();
  if (step) {
    m = nullptr;
    std::string held;
    for (const auto& c : v->manifests) {
      if (c.step == *step)
        m = &c;
      held += (held.empty() ? "" : ", ") + std::to_string(c.step);
    }
    if (m == nullptr)
      return say("no committed checkpoint of step " + std::to_string(*step) + " in " + dir.string() + " (it holds " + held + ")");
  }
  std::map<std::uint32_t, std::string> shards;
  for (const auto& s : m->shards)
    shards[s.rank] = (dir / s.file).string();
  for (std::uint32_t r = 0; r < m->world; ++r)
    if (!shards.contains(r))
      return say(m->file.filename().string() + ": no shard of rank " + std::to_string(r) + " in a world of " +
                 std::to_string(m->world));
  const auto package = fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "python";
  if (!fs::exists(package / "rekindle" / "export.py"))
    return say("the rekindle Python package is not built next to this program (" + package.string() +
               "; it needs pybind11-dev and python3-dev: scripts/setup-deps, then build again)");
  auto program = find_program(python, fs::current_path());
  if (!program)
    return say("--python " + python + ": " + program.error().message());
  std::vector<std::string> argv{program->string(), "-m", "rekindle.export", "--out", out.string(), "--step",
                                std::to_string(m->step)};
  for (const auto& [rank, file] : shards)
    argv.push_back(file + ":" + std::to_string(rank));
  const char* inherited = std::getenv("PYTHONPATH");
  auto pid = spawn_child(argv, {.env = {{"PYTHONPATH", package.string() + (inherited && *inherited ? ":" + std::string{inherited} : "")}}});
  if (!pid)
    return say(pid.error().message());
  int st = 0;
  while (::waitpid(*pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return 1;
  std::cout << "step " << m->step << " of " << dir.string() << ": " << m->world << " file(s) in " << out.string() << "\n";
  return 0;
}

}  // namespace

void add_checkpoint_commands(CLI::App& app, int& exit_code) {
  auto* ckpt = app.add_subcommand("checkpoint", "Checkpoints on disk: take one now, list them, verify every shard, export "
                                                "them for torch.load (list, verify and export work offline)");
  ckpt->require_subcommand(1);
  add_checkpoint_now_command(ckpt, exit_code);
  struct options {
    std::string dir;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* l = ckpt->add_subcommand("list", "The committed checkpoints in DIR, newest first, and stray files");
  l->add_option("dir", o->dir, "The checkpoint directory (checkpoint.directory)")->required();
  l->add_flag("--json", o->json, "JSON for scripts");
  l->callback([o, &exit_code] { exit_code = list(o->dir, o->json); });
  auto* v = ckpt->add_subcommand("verify", "Checks every committed checkpoint's shards against its manifest "
                                           "(header, size, checksum); exit 1 when one is damaged");
  v->add_option("dir", o->dir, "The checkpoint directory (checkpoint.directory)")->required();
  v->add_flag("--json", o->json, "JSON for scripts");
  v->callback([o, &exit_code] { exit_code = verify(o->dir, o->json); });
  struct export_options {
    std::string dir, out, python = "/usr/bin/python3";
    std::optional<std::uint64_t> step;
  };
  auto e = std::make_shared<export_options>();
  auto* x = ckpt->add_subcommand("export", "Writes OUT/rank-R.pt, read by plain torch.load, for every rank of a "
                                           "checkpoint of a program on the worker API (the newest, or --step)");
  x->add_option("dir", e->dir, "The checkpoint directory (checkpoint.directory)")->required();
  x->add_option("--out", e->out, "The folder for the files (created)")->required();
  x->add_option("--step", e->step, "The checkpoint's step (default: the newest committed)")
      ->check(apps::whole_number(0, std::numeric_limits<std::int64_t>::max()));
  x->add_option("--python", e->python, "The Python that has torch (default: /usr/bin/python3, Debian's)");
  x->callback([e, &exit_code] { exit_code = export_checkpoint(e->dir, e->step, e->out, e->python); });
}

}  // namespace rekindle::apps
