// rekindle profile: the built-in model's layers measured on this machine, as a planner model file
// with [[measured]] points (docs/PLANNER.md, "rekindle profile").

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/rekindle/commands.hpp"
#include "common/files.hpp"
#include "common/text.hpp"
#include "config/load.hpp"
#include "kernels/layer_profile.hpp"
#include "kernels/shape.hpp"

namespace rekindle::apps {

namespace {

struct profile_options {
  std::string config;
  std::uint32_t layers = 0, heads = 0, width = 0, seq_len = 0, global_batch = 0;
  std::vector<std::uint32_t> micro_batches;
  std::vector<std::uint32_t> tensor;
  std::string type = "cpu";
  int runs = 5;
  std::string out;
};

struct point {
  kernels::profiled_layer layer;
  std::uint32_t micro_batch = 1;
  std::uint32_t tensor = 1;
  kernels::layer_times times;
};

std::string ns(double seconds) { return std::to_string(std::llround(seconds * 1e9)) + "ns"; }

std::string processor_name() {
  std::ifstream in{"/proc/cpuinfo"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0)
      if (const auto colon = line.find(':'); colon != std::string::npos)
        return std::string{trim(line.substr(colon + 1))};
  return "this machine's CPU";
}

// The planner's model file: the built-in model's shape, the batch, and every point measured.
std::string model_file(const profile_options& o, const kernels::model_shape& shape, const std::vector<point>& points,
                       const std::string& source) {
  std::ostringstream f;
  const auto now = std::time(nullptr);
  char date[32] = {};
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  f << "# Written by `rekindle profile` on " << date << ": the built-in model" << (source.empty() ? "" : " of " + source)
    << ", each layer\n# measured on " << processor_name()
    << " with the kernels a rank runs (one thread). Plan with it:\n"
    << "#   rekindle plan --cluster CLUSTER.toml --model THIS_FILE   (device type '" << o.type << "')\n\n";
  f << "[model]\n"
    << "name = \"built-in-" << shape.layers << "x" << shape.width << "\"\n"
    << "layers = " << shape.layers << "\n"
    << "hidden = " << shape.width << "\n"
    << "heads = " << shape.heads << "\n"
    << "ffn_hidden = " << 4 * shape.width << "\n"
    << "seq_len = " << shape.seq_len << "\n"
    << "vocab = " << kernels::vocab_size << "\n"
    << "tied_embeddings = true\n\n";
  f << "[training]\n"
    << "global_batch = " << o.global_batch << "\n"
    << "micro_batch_sizes = [";
  for (std::size_t i = 0; i < o.micro_batches.size(); ++i)
    f << (i > 0 ? ", " : "") << o.micro_batches[i];
  f << "]\n";
  for (const auto& p : points) {
    f << "\n[[measured]]\n"
      << "type = \"" << o.type << "\"\n";
    if (p.layer == kernels::profiled_layer::head)
      f << "kind = \"head\"\n";
    f << "micro_batch = " << p.micro_batch << "\n"
      << "tensor = " << p.tensor << "\n"
      << "forward = \"" << ns(p.times.forward) << "\"\n"
      << "backward = \"" << ns(p.times.backward) << "\"\n";
  }
  return f.str();
}

int run_profile(profile_options o, std::ostream& out, std::ostream& err) {
  kernels::model_shape shape;
  std::string source;
  if (!o.config.empty()) {
    auto spec = config::load(o.config);
    if (!spec) {
      err << "rekindle profile: " << spec.error().message() << "\n";
      return 2;
    }
    shape = {spec->model.layers, spec->model.heads, spec->model.width, spec->model.seq_len};
    if (o.global_batch == 0)
      o.global_batch = spec->job.global_batch;
    source = o.config;
  }
  if (o.layers > 0)
    shape.layers = o.layers;
  if (o.heads > 0)
    shape.heads = o.heads;
  if (o.width > 0)
    shape.width = o.width;
  if (o.seq_len > 0)
    shape.seq_len = o.seq_len;
  if (o.global_batch == 0)
    o.global_batch = 16;
  if (o.micro_batches.empty())
    for (std::uint32_t b = 1; b <= std::min<std::uint32_t>(o.global_batch, 8); b *= 2)
      if (o.global_batch % b == 0)
        o.micro_batches.push_back(b);
  if (o.tensor.empty())
    for (std::uint32_t t = 1; t <= std::min<std::uint32_t>(shape.heads, 8); ++t)
      if (shape.heads % t == 0 && kernels::vocab_size % t == 0)
        o.tensor.push_back(t);
  std::sort(o.micro_batches.begin(), o.micro_batches.end());
  o.micro_batches.erase(std::unique(o.micro_batches.begin(), o.micro_batches.end()), o.micro_batches.end());
  std::sort(o.tensor.begin(), o.tensor.end());
  o.tensor.erase(std::unique(o.tensor.begin(), o.tensor.end()), o.tensor.end());
  // Every point is checked before any is measured: a bad one is an error at once, not after minutes.
  for (auto b : o.micro_batches) {
    if (o.global_batch % b != 0) {
      err << "rekindle profile: --micro-batches: " << b << " does not divide the global batch " << o.global_batch << "\n";
      return 2;
    }
    for (auto t : o.tensor)
      for (auto layer : {kernels::profiled_layer::block, kernels::profiled_layer::head})
        if (auto s = kernels::check_profile_point(shape, layer, b, t, o.runs); !s.ok()) {
          err << "rekindle profile: " << (layer == kernels::profiled_layer::block ? "a block" : "the output projection")
              << " at micro-batch " << b << ", tensor degree " << t << ": " << s.message() << "\n";
          return 2;
        }
  }
  err << "rekindle profile: " << shape.layers << " blocks of width " << shape.width << ", " << shape.heads
      << " heads, " << shape.seq_len << " tokens; micro-batches " << o.micro_batches.size() << " × tensor degrees "
      << o.tensor.size() << " × 2 layers, " << o.runs << " runs each\n";
  std::vector<point> points;
  const auto total = o.micro_batches.size() * o.tensor.size() * 2;
  out << "layer  micro-batch  tensor   forward (ms)  backward (ms)  per sequence (ms)\n";
  const bool progress = isatty(STDERR_FILENO) != 0;
  for (auto layer : {kernels::profiled_layer::block, kernels::profiled_layer::head})
    for (auto t : o.tensor)
      for (auto b : o.micro_batches) {
        if (progress)
          err << "\r  [" << points.size() + 1 << "/" << total << "] "
              << (layer == kernels::profiled_layer::block ? "block" : "head") << " b=" << b << " t=" << t << "   "
              << std::flush;
        auto times = kernels::profile_cpu_layer(shape, layer, b, t, o.runs);
        if (!times) {
          err << "\nrekindle profile: " << times.error().message() << "\n";
          return 1;
        }
        points.push_back({layer, b, t, *times});
        char line[160];
        std::snprintf(line, sizeof line, "%-6s %11u %7u %13.3f %14.3f %18.3f\n",
                      layer == kernels::profiled_layer::block ? "block" : "head", b, t, times->forward * 1e3,
                      times->backward * 1e3, (times->forward + times->backward) / b * 1e3);
        out << line;
      }
  if (progress)
    err << "\r" << std::string(40, ' ') << "\r";
  const auto text = model_file(o, shape, points, source);
  if (o.out.empty() || o.out == "-") {
    out << "\n" << text;
    return 0;
  }
  if (auto s = write_file_atomically(o.out, text); !s.ok()) {
    err << "rekindle profile: " << s.message() << "\n";
    return 1;
  }
  err << "rekindle profile: " << points.size() << " points written to " << o.out << "\n";
  return 0;
}

}  // namespace

void add_profile_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<profile_options>();
  auto* cmd = app.add_subcommand("profile", "Measure the built-in model's layers on this machine, for the planner");
  cmd->footer(
      "Times one transformer block and the output projection with the loss, forward and backward, with the kernels a\n"
      "rank runs, at every micro-batch size and tensor degree asked for (a device's shard at degree t), and writes a\n"
      "planner model file with the shape, the batch and a [[measured]] point each (docs/PLANNER.md).\n"
      "Exit status: 0 measured; 1 a measurement or the file failed; 2 bad input.");
  cmd->add_option("--config", o->config, "The job's configuration: the model's shape and the global batch from it");
  cmd->add_option("--layers", o->layers, "Blocks (default: the config's, else 4)")->check(CLI::Range(1, 100000));
  cmd->add_option("--heads", o->heads, "Attention heads (default: the config's, else 4)")->check(CLI::Range(1, 4096));
  cmd->add_option("--width", o->width, "Embedding width (default: the config's, else 128)")->check(CLI::Range(1, 65536));
  cmd->add_option("--seq-len", o->seq_len, "Tokens per sequence (default: the config's, else 64)")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--global-batch", o->global_batch, "Sequences per step (default: the config's, else 16)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--micro-batches", o->micro_batches,
                  "Micro-batch sizes to measure (default: powers of two up to 8 that divide the global batch)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--tensor", o->tensor, "Tensor degrees to measure (default: those up to 8 that divide the heads)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--type", o->type, "The device type the points are for in the planner's cluster file (default cpu)");
  cmd->add_option("--runs", o->runs, "Timed runs per point; the median is kept (default 5)")->check(CLI::Range(1, 1000));
  cmd->add_option("--out", o->out, "Write the model file here (default: print it after the table)");
  cmd->callback([o, &exit_code] { exit_code = run_profile(*o, std::cout, std::cerr); });
}

}  // namespace rekindle::apps
