#include "apps/rekindle/trace_commands.hpp"

#include <CLI/CLI.hpp>

#include <iostream>
#include <limits>
#include <memory>

#include "apps/common/cli.hpp"
#include "trace/commands.hpp"

namespace rekindle::apps {

namespace {

// Ends the command with its exit code; main() returns it.
void done(int code) {
  if (code != trace::exit_ok)
    throw CLI::RuntimeError(code);
}

void add_cluster_options(CLI::App* cmd, trace::cluster_options& o) {
  auto* file = cmd->add_option("--cluster", o.file,
                               "The cluster: a rekindle configuration file (its [[nodes]]; simulate also takes its "
                               "[checkpoint], [timeouts] and [recovery] settings)")
                   ->check(CLI::ExistingFile);
  auto* nodes = cmd->add_option("--nodes", o.nodes, "The cluster in compact form: N nodes named n0..n<N-1> ...")
                    ->check(apps::whole_number(1, std::numeric_limits<std::uint32_t>::max()));
  auto* width = cmd->add_option("--ranks-per-node", o.ranks_per_node, "... of K ranks (accelerators) each")
                    ->check(apps::whole_number(1, std::numeric_limits<std::uint32_t>::max()));
  auto* racks = cmd->add_option("--rack-size", o.rack_size,
                                "... in failure domains (racks) of R nodes: n0..n<R-1> in rack0, and so on; a node's buddy "
                                "is chosen in another rack")
                    ->check(apps::whole_number(1, std::numeric_limits<std::uint32_t>::max()));
  racks->needs(nodes)->excludes(file);
  nodes->needs(width)->excludes(file);
  width->needs(nodes)->excludes(file);
}

}  // namespace

void add_trace_commands(CLI::App& app) {
  auto* trace = app.add_subcommand("trace", "Failure traces: convert public fault records, generate synthetic ones, check one "
                                            "(format: docs/TRACES.md)");
  trace->require_subcommand(1);

  {
    auto o = std::make_shared<trace::convert_options>();
    auto* cmd = trace->add_subcommand("convert", "Convert a fault record into a rekindle trace for a cluster");
    cmd->add_option("format", o->format, "The record's format: infinitehbd")->required();
    cmd->add_option("file", o->input, "The record, e.g. ../shared/data/infinitehbd/fault_trace.json")->required();
    add_cluster_options(cmd, o->cluster);
    cmd->add_option("--time-scale", o->time_scale,
                    "Seconds of trace per second of the record (1: real time; 54/349 puts 349 days into 54)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    cmd->add_option("--out,-o", o->out, "Write the trace here (default: standard output)");
    cmd->callback([o] { done(trace::convert_command(*o, std::cout, std::cerr)); });
  }
  {
    auto o = std::make_shared<trace::generate_command_options>();
    auto* cmd = trace->add_subcommand("generate", "Generate a synthetic trace: Poisson arrivals from a failure rate and a mix");
    add_cluster_options(cmd, o->cluster);
    cmd->add_option("--rate", o->rate, "Faults per accelerator per day, e.g. 0.0006")->required();
    cmd->add_option("--days", o->days, "Days the trace covers")->required();
    cmd->add_option("--mix", o->mix,
                    "Category weights, e.g. 'gpu=0.5,software=0.2' (categories: gpu, hbm, host, network, link, software, "
                    "hang, slow, disk, collective, checkpoint; default: gpu=0.4,hbm=0.1,host=0.15,network=0.1,"
                    "software=0.15,hang=0.05,collective=0.05)");
    cmd->add_option("--seed", o->seed, "Seed of the random draws; the same seed gives the same trace")
        ->check(apps::whole_number(0, std::numeric_limits<std::uint64_t>::max()))
        ->capture_default_str();
    cmd->add_option("--repair", o->repair, "Mean repair time of a node fault")->capture_default_str();
    cmd->add_option("--outage", o->outage, "Mean length of a partition, slow-down or full disk")->capture_default_str();
    cmd->add_option("--spares", o->spares,
                    "Spare nodes in the cluster (spare0..., as simulate --spares adds them): they fail like the others")
        ->check(apps::whole_number(0, 65536));
    cmd->add_option("--domain-rate", o->domain_rate,
                    "Failures of a whole failure domain (every node of a rack at once) per domain per day, e.g. 0.01")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--out,-o", o->out, "Write the trace here (default: standard output)");
    cmd->callback([o] { done(trace::generate_command(*o, std::cout, std::cerr)); });
  }
  {
    auto o = std::make_shared<trace::check_options>();
    auto* cmd = trace->add_subcommand("check", "Check a trace (against a cluster when given) and summarise it");
    cmd->add_option("file", o->input, "The trace (JSON Lines)")->required();
    add_cluster_options(cmd, o->cluster);
    cmd->callback([o] { done(trace::check_command(*o, std::cout, std::cerr)); });
  }
  {
    auto o = std::make_shared<trace::simulate_options>();
    auto* cmd = app.add_subcommand("simulate",
                                   "Replay a trace through the supervisor policy in a discrete-event simulation and report "
                                   "the effective training time and where the rest went");
    cmd->add_option("file", o->input, "The trace (JSON Lines)")->required();
    add_cluster_options(cmd, o->cluster);
    cmd->add_option("--job", o->job, "A model file: step_time, state_size, snapshot_every, bandwidths, ... (docs/TRACES.md)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--set", o->set, "Override one model value, e.g. --set step_time=8s (repeatable)");
    cmd->add_option("--spares", o->spares, "Add this many spare nodes to the cluster")
        ->check(apps::whole_number(0, 1'000'000));
    cmd->add_option("--policy", o->policy, "in-place (restart failed ranks, memory snapshots) or restart-all")
        ->capture_default_str();
    cmd->add_flag("--compare", o->compare, "Run both policies and print them side by side");
    cmd->add_option("--sweep", o->sweep, "Vary one model value: KEY=V1,V2,... (e.g. snapshot_every=1,5,10,20)");
    cmd->add_option("--data", o->data, "With --sweep: write the points for scripts/plot-sweep here");
    cmd->add_flag("--json", o->json, "Print JSON instead of tables");
    cmd->callback([o] { done(trace::simulate_command(*o, std::cout, std::cerr)); });
  }
}

}  // namespace rekindle::apps
