#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/expected.hpp"
#include "trace/cluster.hpp"

namespace rekindle::trace {

/// Exit codes of the trace commands, for scripts.
enum exit_code : int {
  /// Done.
  exit_ok = 0,
  /// Something other than the input failed (writing the output, the simulation itself).
  exit_failure = 1,
  /// The input or an option is wrong; the messages say where. Nothing was written.
  exit_bad_input = 2,
};

/// Which cluster a command works on: a configuration file, or N nodes of K ranks.
struct cluster_options {
  /// --cluster FILE.
  std::string file;
  /// --nodes N --ranks-per-node K.
  std::uint32_t nodes = 0;
  std::uint32_t ranks_per_node = 0;
  /// --rack-size R: nodes per failure domain in the compact form (0: none).
  std::uint32_t rack_size = 0;
};

/// The cluster the options name; the error says what is missing or wrong (a configuration's
/// errors with file:line:column).
expected<cluster_shape> resolve_cluster(const cluster_options& o);

/// `rekindle trace convert FORMAT FILE`.
struct convert_options {
  /// "infinitehbd".
  std::string format;
  std::string input;
  cluster_options cluster;
  /// Default: 1.
  double time_scale = 1.0;
  /// Where the trace goes; empty or "-" is standard output.
  std::string out;
};
int convert_command(const convert_options& o, std::ostream& out, std::ostream& err);

/// `rekindle trace generate`.
struct generate_command_options {
  cluster_options cluster;
  double rate = 0;
  double days = 0;
  /// Default: trace::default_mix.
  std::string mix;
  std::uint64_t seed = 1;
  /// Mean repair time of node faults. Default: "24h".
  std::string repair = "24h";
  /// Mean length of partitions, slow-downs and full disks. Default: "30m".
  std::string outage = "30m";
  /// Spare nodes added to the cluster (named as simulate --spares names them): they fail too.
  std::uint32_t spares = 0;
  /// Whole-domain failures per failure domain per day. Default: 0.
  double domain_rate = 0;
  std::string out;
};
int generate_command(const generate_command_options& o, std::ostream& out, std::ostream& err);

/// `rekindle trace check FILE`: reads a trace, checks it (against a cluster when given) and
/// prints a summary or every error.
struct check_options {
  std::string input;
  cluster_options cluster;
};
int check_command(const check_options& o, std::ostream& out, std::ostream& err);

/// `rekindle simulate FILE`.
struct simulate_options {
  std::string input;
  cluster_options cluster;
  /// A model file (model_keys(): step_time, state_size, ...); empty: none.
  std::string job;
  /// KEY=VALUE overrides of the model, applied in order after the cluster and the job file.
  std::vector<std::string> set;
  /// Spare nodes to add (the model's `spares`); negative: leave the model's value.
  std::int64_t spares = -1;
  /// "in-place" or "restart-all". Default: "in-place".
  std::string policy = "in-place";
  /// Run both policies and print them side by side.
  bool compare = false;
  /// KEY=V1,V2,...: one simulation per value.
  std::string sweep;
  /// Where a sweep's gnuplot data goes (scripts/plot-sweep draws it); empty: nowhere.
  std::string data;
  /// Print JSON instead of tables.
  bool json = false;
};
int simulate_command(const simulate_options& o, std::ostream& out, std::ostream& err);

}  // namespace rekindle::trace
