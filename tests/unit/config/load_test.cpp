#include <gtest/gtest.h>

#include <string>

#include "config/embedded.hpp"
#include "config/load.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::config {
namespace {

using namespace std::chrono_literals;
using testing::temp_dir;

const char* const two_nodes = R"(
[[nodes]]
name = "n0"

[[nodes]]
name = "n1"
)";

load_result parse_in(const temp_dir& dir, const std::string& text) {
  return parse(text, "test.toml", dir.path());
}

// Expects exactly one error and returns it.
diagnostic only_error(const load_result& r) {
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.errors.size(), 1u) << r.error_text();
  return r.errors.empty() ? diagnostic{} : r.errors.front();
}

TEST(config, minimal_file_gets_documented_defaults) {
  temp_dir dir;
  auto r = parse_in(dir, "[[nodes]]\nname = \"solo\"\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const spec& s = *r.value;
  EXPECT_EQ(s.cluster.supervisor, "solo");
  EXPECT_EQ(s.cluster.ranks_per_node, 1u);
  EXPECT_EQ(s.nodes[0].host, "127.0.0.1");
  EXPECT_EQ(s.nodes[0].port, 0);
  EXPECT_EQ(s.job.steps, 300u);
  EXPECT_EQ(s.job.global_batch, 16u);
  EXPECT_EQ(s.job.micro_batch, 4u);
  EXPECT_EQ(s.model.width, 128u);
  EXPECT_EQ(s.checkpoint.snapshot_every, 5u);
  EXPECT_EQ(s.timeouts.heartbeat, 250ms) << "a quarter of the node timeout";
  EXPECT_EQ(s.timeouts.node, 1s);
  EXPECT_EQ(s.timeouts.keepalive(), 250ms) << "a quarter of the node timeout";
  EXPECT_EQ(s.transport.max_frame_size, 16u << 20);
  EXPECT_EQ(s.transport.spin, 0ns) << "the control plane blocks at once: it shares the cores with training";
  EXPECT_EQ(s.daemon.data_dir, dir.path() / "rekindle-data");
  EXPECT_EQ(s.checkpoint.directory, dir.path() / "rekindle-data" / "checkpoints");
  EXPECT_TRUE(r.warnings.empty());
}

// Workers' heartbeats and the transport's keep-alives go as often as detection needs: four per
// node timeout, but never more often than the daemons' heartbeats.
TEST(config, keepalives_go_four_times_a_node_timeout_but_not_more_often_than_heartbeats) {
  timeouts_spec t;
  t.heartbeat = 100ms;
  t.node = 3s;
  EXPECT_EQ(t.keepalive(), 750ms);
  t.heartbeat = 400ms;
  t.node = 1s;
  EXPECT_EQ(t.keepalive(), 400ms);
}

// A configuration that sets no heartbeat gets a quarter of the shorter of node and hang, so that
// a lower node or hang timeout never meets a heartbeat too slow for it.
TEST(config, an_unset_heartbeat_follows_the_node_and_hang_timeouts) {
  temp_dir dir;
  auto heartbeat = [&](std::string timeouts) {
    auto r = parse_in(dir, std::string{two_nodes} + "\n[timeouts]\n" + timeouts);
    EXPECT_TRUE(r.ok()) << timeouts << ": " << r.error_text();
    return r.ok() ? r.value->timeouts.heartbeat : 0ns;
  };
  EXPECT_EQ(heartbeat("node = \"3s\"\n"), 750ms);
  EXPECT_EQ(heartbeat("node = \"20ms\"\n"), 5ms);
  EXPECT_EQ(heartbeat("node = \"2ms\"\n"), 1ms) << "never under 1ms, and still half the node timeout";
  EXPECT_EQ(heartbeat("node = \"1h\"\nhang = \"20s\"\nrendezvous = \"2h\"\n"), 5s) << "the hang timeout is shorter";
  EXPECT_EQ(heartbeat("node = \"1h\"\nhang = \"2h\"\nrendezvous = \"3h\"\n"), 1min) << "never over 1min";
  EXPECT_EQ(heartbeat("heartbeat = \"100ms\"\nnode = \"3s\"\n"), 100ms) << "a heartbeat set is kept";
}

TEST(config, unknown_key_names_place_and_suggests) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nstepz = 5\n"));
  EXPECT_EQ(e.file, "test.toml");
  EXPECT_EQ(e.line, 9u);
  EXPECT_EQ(e.column, 1u);
  EXPECT_EQ(e.field, "job.stepz");
  EXPECT_EQ(e.to_string(), "test.toml:9:1: job.stepz: unknown key (did you mean 'steps'?)");
}

TEST(config, unknown_table_suggests) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[timeout]\nnode = \"2s\"\n"));
  EXPECT_EQ(e.line, 8u);
  EXPECT_EQ(e.field, "timeout");
  EXPECT_NE(e.message.find("did you mean 'timeouts'?"), std::string::npos) << e.message;
}

TEST(config, wrong_type_names_both_types) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nsteps = \"many\"\n"));
  EXPECT_EQ(e.line, 9u);
  EXPECT_EQ(e.column, 9u);
  EXPECT_EQ(e.field, "job.steps");
  EXPECT_EQ(e.message, "expected an integer, got a string");
}

TEST(config, out_of_range_names_bounds) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[model]\nlayers = 0\n"));
  EXPECT_EQ(e.line, 9u);
  EXPECT_EQ(e.field, "model.layers");
  EXPECT_EQ(e.message, "must be between 1 and 256, got 0");
}

TEST(config, the_node_check_has_defaults_and_its_limits_are_fractions) {
  temp_dir dir;
  auto r = parse_in(dir, two_nodes);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_TRUE(r.value->checks.preflight);
  EXPECT_DOUBLE_EQ(r.value->checks.min_compute, 0.5);
  EXPECT_EQ(r.value->checks.disk_bytes, 16u << 20);
  r = parse_in(dir, std::string{two_nodes} + "\n[checks]\npreflight = false\nmin_disk = 0.1\ndisk_bytes = \"4MiB\"\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_FALSE(r.value->checks.preflight);
  EXPECT_DOUBLE_EQ(r.value->checks.min_disk, 0.1);
  EXPECT_EQ(r.value->checks.disk_bytes, 4u << 20);
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[checks]\nmin_compute = 1.5\n"));
  EXPECT_EQ(e.field, "checks.min_compute");
  EXPECT_EQ(e.line, 9u);
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[checks]\npreflight = \"yes\"\n"));
  EXPECT_EQ(e.field, "checks.preflight");
  // The GPU GEMM: a fraction of the fleet's median and of the rate expected of the part.
  r = parse_in(dir, two_nodes);
  EXPECT_DOUBLE_EQ(r.value->checks.min_gpu, 0.8);
  EXPECT_DOUBLE_EQ(r.value->checks.gpu_gflops, 0.0);
  r = parse_in(dir, std::string{two_nodes} + "\n[checks]\nmin_gpu = 0.9\ngpu_gflops = 51000\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_DOUBLE_EQ(r.value->checks.min_gpu, 0.9);
  EXPECT_DOUBLE_EQ(r.value->checks.gpu_gflops, 51000.0);
  EXPECT_EQ(only_error(parse_in(dir, std::string{two_nodes} + "\n[checks]\ngpu_gflops = -1\n")).field, "checks.gpu_gflops");
  EXPECT_EQ(only_error(parse_in(dir, std::string{two_nodes} + "\n[checks]\nmin_gpu = 2\n")).field, "checks.min_gpu");
}

TEST(config, snapshots_overlap_the_next_step_unless_turned_off) {
  testing::temp_dir dir;
  auto r = parse_in(dir, two_nodes);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_TRUE(r.value->checkpoint.overlap);
  r = parse_in(dir, std::string{two_nodes} + "\n[checkpoint]\noverlap = false\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_FALSE(r.value->checkpoint.overlap);
  const auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[checkpoint]\noverlap = 1\n"));
  EXPECT_EQ(e.field, "checkpoint.overlap");
}

TEST(config, the_recovery_policy_is_in_place_or_restart_all_with_checkpoints_on_disk) {
  temp_dir dir;
  auto r = parse_in(dir, two_nodes);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.value->recovery.policy, "in-place");
  EXPECT_FALSE(r.value->recovery.restart_all());
  r = parse_in(dir, std::string{two_nodes} + "\n[recovery]\npolicy = \"restart-all\"\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_TRUE(r.value->recovery.restart_all());
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[recovery]\npolicy = \"restart_all\"\n"));
  EXPECT_EQ(e.field, "recovery.policy");
  EXPECT_EQ(e.line, 9u);
  EXPECT_NE(e.message.find("'restart_all' is not a recovery policy"), std::string::npos) << e.message;
  // Restores only from disk: a configuration that writes no checkpoint is refused.
  e = only_error(parse_in(dir, std::string{two_nodes} +
                                   "\n[checkpoint]\npersist_every = 0\n[recovery]\npolicy = \"restart-all\"\n"));
  EXPECT_EQ(e.field, "recovery.policy");
  EXPECT_NE(e.message.find("persist_every = 0"), std::string::npos) << e.message;
  // A user's program restarts by its own level.
  e = only_error(parse_in(dir, std::string{two_nodes} +
                                   "\n[job]\ncommand = [\"sh\", \"-c\", \"true\"]\n[recovery]\npolicy = \"restart-all\"\n"));
  EXPECT_EQ(e.field, "recovery.policy");
  EXPECT_NE(e.message.find("built-in worker"), std::string::npos) << e.message;
}

TEST(config, the_re_plan_budget_is_a_duration_of_at_most_10s_for_a_re_plan_only) {
  temp_dir dir;
  auto r = parse_in(dir, two_nodes);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.value->job.replan_budget, 50ms);
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nreplan_budget = \"0s\"\n"));
  EXPECT_EQ(e.field, "job.replan_budget");
  EXPECT_NE(e.message.find("give job.plan_cluster and job.plan_model too"), std::string::npos) << e.message;
  r = parse_in(dir, std::string{two_nodes} + "\n[job]\nreplan_budget = \"11s\"\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors.front().field, "job.replan_budget");
  EXPECT_NE(r.errors.front().message.find("between 0ns and 10s"), std::string::npos) << r.error_text();
}

TEST(config, the_link_check_and_the_periodic_check) {
  temp_dir dir;
  auto r = parse_in(dir, two_nodes);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_DOUBLE_EQ(r.value->checks.min_link, 0.1);
  EXPECT_EQ(r.value->checks.link_bytes, 4u << 20);
  EXPECT_EQ(r.value->checks.every, std::chrono::nanoseconds{0});
  r = parse_in(dir, std::string{two_nodes} + "\n[checks]\nmin_link = 0.05\nlink_bytes = \"1MiB\"\nevery = \"30s\"\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_DOUBLE_EQ(r.value->checks.min_link, 0.05);
  EXPECT_EQ(r.value->checks.link_bytes, 1u << 20);
  EXPECT_EQ(r.value->checks.every, std::chrono::seconds{30});
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[checks]\nevery = \"2s\"\n"));
  EXPECT_EQ(e.field, "checks.every");
  EXPECT_NE(e.message.find("from 5s up"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[checks]\nlink_bytes = \"1GiB\"\n"));
  EXPECT_EQ(e.field, "checks.link_bytes");
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[checks]\nmin_link = -1\n"));
  EXPECT_EQ(e.field, "checks.min_link");
}

TEST(config, the_straggler_action_is_one_of_three) {
  temp_dir dir;
  auto r = parse_in(dir, std::string{two_nodes} + "\n[stragglers]\naction = \"replace\"\nwindow = 8\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.value->stragglers.action, "replace");
  EXPECT_EQ(r.value->stragglers.window, 8u);
  EXPECT_DOUBLE_EQ(r.value->stragglers.threshold, 1.25);
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[stragglers]\naction = \"restart\"\n"));
  EXPECT_EQ(e.field, "stragglers.action");
  EXPECT_NE(e.message.find("report, rebalance or replace"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[stragglers]\nthreshold = 1.0\n"));
  EXPECT_EQ(e.field, "stragglers.threshold");
}

TEST(config, duplicate_node_points_at_both) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, "[[nodes]]\nname = \"n0\"\n\n[[nodes]]\nname = \"n0\"\n"));
  EXPECT_EQ(e.line, 5u);
  EXPECT_EQ(e.column, 8u);
  EXPECT_EQ(e.field, "nodes[1].name");
  EXPECT_EQ(e.message, "duplicate node 'n0' (first defined at line 2)");
}

TEST(config, duplicate_endpoint_is_an_error) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, "[[nodes]]\nname = \"a\"\nport = 7000\n[[nodes]]\nname = \"b\"\nport = 7000\n"));
  EXPECT_EQ(e.field, "nodes[1].port");
  EXPECT_NE(e.message.find("127.0.0.1:7000"), std::string::npos);
}

TEST(config, supervisor_must_be_a_node) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, std::string{"[cluster]\nsupervisor = \"n2\"\n"} + two_nodes));
  EXPECT_EQ(e.line, 2u);
  EXPECT_EQ(e.column, 14u);
  EXPECT_EQ(e.field, "cluster.supervisor");
  EXPECT_EQ(e.message, "'n2' is not among the nodes (n0, n1) (did you mean 'n0'?)");
}

TEST(config, a_standby_is_another_node_and_needs_etcd) {
  temp_dir dir;
  struct bad_case {
    std::string cluster;
    std::string field;
    std::string message;
  };
  const bad_case cases[] = {
      {"standby = \"n7\"\netcd = \"127.0.0.1:2379\"\n", "cluster.standby", "'n7' is not among the nodes"},
      {"standby = \"n0\"\netcd = \"127.0.0.1:2379\"\n", "cluster.standby",
       "'n0' is the supervisor's node; a standby must be another node"},
      {"standby = \"n1\"\n", "cluster.standby", "a standby needs `etcd = \"host:port\"`, where the supervisor's lease lives"},
      {"etcd = \"127.0.0.1:99999\"\n", "cluster.etcd", "'127.0.0.1:99999' is not host:port"},
      {"lease = \"2500ms\"\n", "cluster.lease", "is not whole seconds (etcd leases count seconds)"},
      {"lease = \"1s\"\n", "cluster.lease", ""},
      {"lease = \"2min\"\n", "cluster.lease", ""},
  };
  for (const auto& c : cases) {
    auto e = only_error(parse_in(dir, "[cluster]\n" + c.cluster + two_nodes));
    EXPECT_EQ(e.field, c.field) << c.cluster;
    EXPECT_NE(e.message.find(c.message), std::string::npos) << c.cluster << ": " << e.message;
  }
  auto ok = parse_in(dir, std::string{"[cluster]\nstandby = \"n1\"\netcd = \"10.0.0.5:2379\"\nlease = \"5s\"\n"} + two_nodes);
  ASSERT_TRUE(ok.ok()) << ok.error_text();
  EXPECT_EQ(ok.value->cluster.standby, "n1");
  EXPECT_EQ(ok.value->cluster.etcd, "10.0.0.5:2379");
  EXPECT_EQ(ok.value->cluster.lease, std::chrono::seconds{5});
}

TEST(config, unreadable_token_file) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[security]\ntoken_file = \"missing.token\"\n"));
  EXPECT_EQ(e.line, 9u);
  EXPECT_EQ(e.column, 14u);
  EXPECT_EQ(e.field, "security.token_file");
  EXPECT_EQ(e.message, "'" + (dir.path() / "missing.token").string() +
                           "': cannot read token file: No such file or directory");
}

TEST(config, empty_and_short_tokens) {
  temp_dir dir;
  dir.write("empty.token", "\n");
  dir.write("short.token", "abc\n");
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[security]\ntoken_file = \"empty.token\"\n"));
  EXPECT_NE(e.message.find("is empty"), std::string::npos);
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[security]\ntoken_file = \"short.token\"\n"));
  EXPECT_NE(e.message.find("is 3 bytes; use at least 16"), std::string::npos);
}

TEST(config, tokens_are_read_and_readonly_must_differ) {
  temp_dir dir;
  dir.write("admin.token", "0123456789abcdef0123\n");
  dir.write("ro.token", "0123456789abcdef0123\n");
  auto r = parse_in(dir, std::string{two_nodes} + "\n[security]\ntoken_file = \"admin.token\"\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.value->security.token, "0123456789abcdef0123");
  auto e = only_error(parse_in(
      dir, std::string{two_nodes} + "\n[security]\ntoken_file = \"admin.token\"\nreadonly_token_file = \"ro.token\"\n"));
  EXPECT_EQ(e.field, "security.readonly_token_file");
  EXPECT_NE(e.message.find("equals the admin token"), std::string::npos);
}

TEST(config, remote_hosts_without_token_warn) {
  temp_dir dir;
  auto r = parse_in(dir, "[[nodes]]\nname = \"a\"\nhost = \"10.1.2.3\"\n");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].message.find("authentication is off"), std::string::npos);
}

TEST(config, syntax_error_has_position) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, "[[nodes]]\nname = \"n0\nport = 1\n"));
  EXPECT_EQ(e.line, 2u);
  EXPECT_EQ(e.field, "nodes[0].name");
  EXPECT_NE(e.message.find("syntax error"), std::string::npos);
}

TEST(config, a_number_past_64_bits_is_a_syntax_error_naming_its_field) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, "[[nodes]]\nname = \"a\"\n\n[[nodes]]\nname = \"b\"\nport = 99999999999999999999999\n"));
  EXPECT_EQ(e.line, 6u);
  EXPECT_EQ(e.field, "nodes[1].port");
  EXPECT_NE(e.message.find("64 bits"), std::string::npos) << e.message;
  EXPECT_NE(e.to_string().find("nodes[1].port"), std::string::npos) << e.to_string();
  // A sub-table and a dotted key are named as the readers name them; a line with no key, by place.
  e = only_error(parse_in(dir, "[job]\nsteps = 10\n[job.extra]\nlimit.max = 1e999999999999\n"));
  EXPECT_EQ(e.field, "job.extra.limit.max");
  e = only_error(parse_in(dir, "[job]\nsteps = 10\n= 3\n"));
  EXPECT_EQ(e.field, "");
  EXPECT_EQ(e.line, 3u);
}

TEST(config, cross_field_rules) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[model]\nwidth = 130\nheads = 4\n"));
  EXPECT_EQ(e.field, "model.heads");
  EXPECT_EQ(e.message, "width (130) must be a multiple of heads (4)");
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nglobal_batch = 10\nmicro_batch = 4\n"));
  EXPECT_EQ(e.field, "job.micro_batch");
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[timeouts]\nheartbeat = \"1s\"\nnode = \"1500ms\"\n"));
  EXPECT_EQ(e.field, "timeouts.node");
  EXPECT_NE(e.message.find("at least twice heartbeat (1s)"), std::string::npos);
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[timeouts]\nnode = \"30s\"\nrendezvous = \"20s\"\n"));
  EXPECT_EQ(e.field, "timeouts.rendezvous");
  EXPECT_NE(e.message.find("rendezvous (20s) must be longer than node (30s)"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[timeouts]\nnode = \"40s\"\n"));
  EXPECT_EQ(e.field, "timeouts.node") << "the field the file set is the one named";
  e = only_error(parse_in(dir, "[cluster]\nranks_per_node = 8\n" + std::string{two_nodes} + "\n[job]\nglobal_batch = 8\nmicro_batch = 1\n"));
  EXPECT_EQ(e.field, "job.global_batch");
  EXPECT_NE(e.message.find("fewer than the 16 ranks"), std::string::npos);
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nbalance = \"fastest\"\n"));
  EXPECT_EQ(e.field, "job.balance");
  EXPECT_NE(e.message.find("'fastest' is not a way to share micro-batches"), std::string::npos) << e.message;
  EXPECT_EQ(parse_in(dir, std::string{two_nodes} + "\n[job]\nbalance = \"measured\"\n").value->job.balance, "measured");
}

TEST(config, pipeline_stages_cover_the_model_and_divide_the_world) {
  temp_dir dir;
  auto ok = parse_in(dir, std::string{two_nodes} + "\n[job]\nstages = [1, 3]\n");
  ASSERT_TRUE(ok.ok()) << ok.error_text();
  EXPECT_EQ(ok.value->job.stages, (std::vector<std::uint32_t>{1, 3}));
  EXPECT_EQ(ok.value->job.pipeline_stages(), 2u);
  EXPECT_NE(to_toml(*ok.value).find("stages = [1, 3]"), std::string::npos);
  EXPECT_EQ(parse_in(dir, two_nodes).value->job.pipeline_stages(), 1u) << "no stages: no pipeline";
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nstages = [1, 2]\n"));
  EXPECT_EQ(e.field, "job.stages");
  EXPECT_NE(e.message.find("the stages hold 3 blocks, model.layers is 4"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nstages = [1, 1, 2]\n"));
  EXPECT_EQ(e.field, "job.stages");
  EXPECT_NE(e.message.find("3 stages need a world that is a multiple of 3"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("the nodes run 2 ranks"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nstages = [0, 4]\n"));
  EXPECT_EQ(e.field, "job.stages[0]");
  EXPECT_NE(e.message.find("must be between 1 and 256, got 0"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nstages = 2\n"));
  EXPECT_EQ(e.field, "job.stages");
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\nstages = []\n"));
  EXPECT_NE(e.message.find("is empty"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\ncommand = [\"sh\"]\nstages = [2, 2]\n"));
  EXPECT_EQ(e.field, "job.stages");
  EXPECT_NE(e.message.find("applies only to the built-in model"), std::string::npos) << e.message;
  // 16 ranks in pipelines of 2 stages are 8 replicas: 8 micro-batches a step are enough, 4 are not.
  const auto sixteen = [](int global_batch) {
    return "[cluster]\nranks_per_node = 8\n" + std::string{two_nodes} + "\n[job]\nglobal_batch = " +
           std::to_string(global_batch) + "\nmicro_batch = 1\nstages = [2, 2]\n";
  };
  EXPECT_TRUE(parse_in(dir, sixteen(8)).ok());
  e = only_error(parse_in(dir, sixteen(4)));
  EXPECT_EQ(e.field, "job.global_batch");
  EXPECT_NE(e.message.find("fewer than the 8 data-parallel replicas"), std::string::npos) << e.message;
}

// Three nodes of two ranks; a plan of two replicas of stages [1, 3] on n2 and n0, n1 left out.
const char* const three_nodes = R"(
[cluster]
ranks_per_node = 2

[[nodes]]
name = "n0"

[[nodes]]
name = "n1"

[[nodes]]
name = "n2"
)";

std::string a_plan(const std::string& first_stage = R"({"layers": 1})", const std::string& extra = "") {
  return R"({"micro_batch_size": 2, "stages": [)" + first_stage + R"(, {"layers": 3}],
      "replicas": [{"stages": [{"node": "n2", "devices": [1]}, {"node": "n0"}], "micro_batches": 5},
                   {"stages": [{"node": "n2"}, {"node": "n0"}], "micro_batches": 3}])" + extra + "}";
}

TEST(config, a_plan_file_sets_the_stages_the_placement_and_the_shares) {
  temp_dir dir;
  dir.write("plan.json", a_plan());
  const auto with_plan = std::string{three_nodes} + "\n[job]\nplan = \"plan.json\"\n";
  auto ok = parse_in(dir, with_plan);
  ASSERT_TRUE(ok.ok()) << ok.error_text();
  const auto& s = *ok.value;
  EXPECT_EQ(s.job.plan, dir.path() / "plan.json");
  EXPECT_EQ(s.job.stages, (std::vector<std::uint32_t>{1, 3}));
  EXPECT_EQ(s.job.micro_batch, 2u);
  EXPECT_EQ(s.job.plan_shares, (std::vector<std::uint32_t>{5, 3}));
  EXPECT_EQ(s.world_size(), 4u) << "the plan's ranks, not the nodes' six";
  const auto placement = s.initial_placement();
  ASSERT_EQ(placement.size(), 4u);
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> want = {{2, 1}, {0, 0}, {2, 0}, {0, 1}};
  for (std::size_t r = 0; r < placement.size(); ++r) {
    EXPECT_EQ(placement[r].rank.value(), r);
    EXPECT_EQ(placement[r].node.value(), want[r].first) << "rank " << r;
    EXPECT_EQ(placement[r].local_index, want[r].second) << "rank " << r;
  }
  // The effective configuration reads back to the same spec.
  auto again = parse_in(dir, to_toml(s));
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_EQ(*again.value, s);
  // The planner's document: its first plan; shares left out are job.balance's.
  dir.write("plans.json", R"({"plans": [{"stages": [{"layers": 4}], "replicas": [{"stages": [{"node": "n1"}]}]},
                                        {"stages": [{"layers": 4}], "replicas": [{"stages": [{"node": "n0"}]}]}]})");
  ok = parse_in(dir, std::string{three_nodes} + "\n[job]\nplan = \"plans.json\"\nmicro_batch = 1\n");
  ASSERT_TRUE(ok.ok()) << ok.error_text();
  EXPECT_TRUE(ok.value->job.plan_shares.empty());
  EXPECT_EQ(ok.value->job.pipeline_stages(), 1u);
  ASSERT_EQ(ok.value->initial_placement().size(), 1u);
  EXPECT_EQ(ok.value->initial_placement()[0].node.value(), 1u);
}

TEST(config, a_plan_the_job_cannot_run_is_refused_naming_the_plan_field) {
  temp_dir dir;
  const auto error_with = [&](const std::string& plan, const std::string& job = "") {
    dir.write("plan.json", plan);
    return only_error(parse_in(dir, std::string{three_nodes} + "\n[job]\nplan = \"plan.json\"\n" + job));
  };
  const auto file = (dir.path() / "plan.json").string();
  auto e = error_with(R"({"stages": [{"layers": 4, "tensor": 2}], "replicas": [{"stages": [{"node": "n0"}]}]})");
  EXPECT_EQ(e.field, "job.plan");
  EXPECT_EQ(e.message, file + ": stages[0].tensor: tensor degree 2: the built-in model runs each stage of a replica on "
                              "one device (tensor 1)");
  e = error_with(a_plan(R"({"layers": 1})", R"(, "recompute": true)"));
  EXPECT_NE(e.message.find(file + ": recompute: the built-in model keeps its activations"), std::string::npos) << e.message;
  e = error_with(a_plan(R"({"layers": 1, "first_layer": 1})"));
  EXPECT_NE(e.message.find("stages[0].first_layer: the stage starts at block 1"), std::string::npos) << e.message;
  e = error_with(a_plan(R"({"layers": 2})"));
  EXPECT_NE(e.message.find(": stages: the stages hold 5 blocks, model.layers is 4"), std::string::npos) << e.message;
  e = error_with(a_plan(), "micro_batch = 4\n");
  EXPECT_NE(e.message.find("micro_batch_size: 2 sequences, but job.micro_batch is 4"), std::string::npos) << e.message;
  e = error_with(a_plan(), "stages = [2, 2]\n");
  EXPECT_EQ(e.field, "job.stages");
  EXPECT_NE(e.message.find("differs from job.plan's stages [1, 3]"), std::string::npos) << e.message;
  e = error_with(R"({"stages": [{"layers": 4}], "replicas": [{"stages": [{"node": "n3"}]}]})");
  EXPECT_EQ(e.message, file + ": replicas[0].stages[0].node: unknown node 'n3' (did you mean 'n0'?)");
  e = error_with(R"({"stages": [{"layers": 4}], "replicas": [{"stages": [{"node": "n0", "devices": [2]}]}]})");
  EXPECT_EQ(e.message, file + ": replicas[0].stages[0].devices[0]: node n0 has devices 0-1");
  e = error_with(R"({"stages": [{"layers": 4}], "replicas": [{"stages": [{"node": "n0", "devices": [1]}]},
                                                              {"stages": [{"node": "n0", "devices": [1]}]}]})");
  EXPECT_EQ(e.message, file + ": replicas[1].stages[0].devices[0]: device 1 of node n0 is in another stage already");
  e = error_with(R"({"stages": [{"layers": 4}], "replicas": [{"stages": [{"node": "n0"}], "micro_batches": 3},
                                                              {"stages": [{"node": "n1"}], "micro_batches": 3}]})");
  EXPECT_EQ(e.message, file + ": replicas: the replicas' micro_batches add up to 6; a step has 16 "
                              "(job.global_batch / micro_batch_size)");
  e = error_with(R"({"stages": [{"layers": 4}], "replicas": [{"stages": [{"node": "n9"}]}]})", "steps = 0\n");
  EXPECT_EQ(e.field, "job.steps") << "a plan is read only once the rest is valid";
  e = error_with("{\"stages\": [");
  EXPECT_EQ(e.field, "job.plan");
  EXPECT_NE(e.message.find(file + ": 1:"), std::string::npos) << e.message;
  // A spare is no place for a plan's rank.
  dir.write("plan.json", R"({"stages": [{"layers": 4}], "replicas": [{"stages": [{"node": "n2"}]}]})");
  e = only_error(parse_in(dir, std::string{three_nodes} + "spare = true\n\n[job]\nplan = \"plan.json\"\nmicro_batch = 1\n"
                                                          "global_batch = 4\n"));
  EXPECT_EQ(e.message, file + ": replicas[0].stages[0].node: node n2 is a spare; a plan places its ranks on worker nodes")
      << "n2, the last node, is the spare";
  e = only_error(parse_in(dir, std::string{three_nodes} + "\n[job]\nplan = \"missing.json\"\n"));
  EXPECT_EQ(e.field, "job.plan");
  EXPECT_NE(e.message.find("missing.json"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{three_nodes} + "\n[job]\nplan = \"plan.json\"\ncommand = [\"sh\"]\nmicro_batch = 1\n"));
  EXPECT_EQ(e.field, "job.plan");
  EXPECT_NE(e.message.find("applies only to the built-in model"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{three_nodes} + "\n[job]\nplan = \"\"\nmicro_batch = 1\n"));
  EXPECT_NE(e.message.find("is empty"), std::string::npos) << e.message;
}

TEST(config, the_planners_files_for_a_re_plan_must_describe_this_job) {
  temp_dir dir;
  dir.write("plan.json", a_plan());
  const auto cluster = [&](const std::string& nodes) {
    dir.write("cluster.toml", "[types.cpu]\nbf16_tflops = 1\nmemory = \"16GB\"\nmemory_bandwidth = \"10GB/s\"\n"
                              "link_bandwidth = \"10GB/s\"\n" + nodes);
  };
  const auto model = [&](const std::string& training) {
    dir.write("model.toml", "[model]\nlayers = 4\nhidden = 128\nheads = 4\nseq_len = 64\nvocab = 256\n[training]\n" + training);
  };
  cluster("[[nodes]]\nname = \"n\"\ntype = \"cpu\"\ndevices = 2\ncount = 3\n");
  model("global_batch = 16\nmicro_batch_sizes = [2]\nrecompute = \"never\"\n");
  const auto config = [&](const std::string& keys) {
    return parse_in(dir, std::string{three_nodes} + "\n[job]\nplan = \"plan.json\"\n" + keys);
  };
  auto ok = config("plan_cluster = \"cluster.toml\"\nplan_model = \"model.toml\"\n");
  ASSERT_TRUE(ok.ok()) << ok.error_text();
  EXPECT_EQ(ok.value->job.plan_cluster, dir.path() / "cluster.toml");
  EXPECT_EQ(ok.value->job.plan_model, dir.path() / "model.toml");
  auto again = parse_in(dir, to_toml(*ok.value));
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_EQ(*again.value, *ok.value);

  auto e = only_error(config("plan_cluster = \"cluster.toml\"\n"));
  EXPECT_EQ(e.field, "job.plan_cluster");
  EXPECT_NE(e.message.find("needs plan_cluster and plan_model both"), std::string::npos) << e.message;
  e = only_error(parse_in(dir, std::string{three_nodes} +
                                   "\n[job]\nmicro_batch = 1\nplan_cluster = \"cluster.toml\"\nplan_model = \"model.toml\"\n"));
  EXPECT_NE(e.message.find("give job.plan too"), std::string::npos) << e.message;
  const auto both = "plan_cluster = \"cluster.toml\"\nplan_model = \"model.toml\"\n";
  cluster("[[nodes]]\nname = \"m\"\ntype = \"cpu\"\ndevices = 2\ncount = 1\n");
  e = only_error(config(both));
  EXPECT_EQ(e.field, "job.plan_cluster");
  EXPECT_NE(e.message.find("cluster.toml: node m: not a node of this configuration"), std::string::npos) << e.message;
  cluster("[[nodes]]\nname = \"n0\"\ntype = \"cpu\"\ndevices = 4\n");
  e = only_error(config(both));
  EXPECT_NE(e.message.find("node n0: 4 devices, but the node runs at most 2 ranks here"), std::string::npos) << e.message;
  cluster("[[nodes]]\nname = \"n\"\ntype = \"cpu\"\ndevices = 2\ncount = 3\n");
  model("global_batch = 32\nmicro_batch_sizes = [2]\nrecompute = \"never\"\n");
  e = only_error(config(both));
  EXPECT_EQ(e.field, "job.plan_model");
  EXPECT_NE(e.message.find("the files must describe this job"), std::string::npos) << e.message;
  model("global_batch = 16\nmicro_batch_sizes = [2]\n");
  e = only_error(config(both));
  EXPECT_NE(e.message.find("recompute must be \"never\""), std::string::npos) << e.message;
  model("global_batch = 16\nmicro_batch_sizes = [1, 2]\nrecompute = \"never\"\n");
  e = only_error(config(both));
  EXPECT_NE(e.message.find("micro_batch_sizes must be [2]"), std::string::npos) << e.message;
  model("global_batch = 16\nmicro_batch_sizes = [2]\nrecompute = \"never\"\nlayerz = 3\n");
  e = only_error(config(both));
  EXPECT_EQ(e.field, "job.plan_model");
  EXPECT_NE(e.message.find("model.toml"), std::string::npos) << e.message;
}

TEST(config, bad_duration_and_size_strings) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[timeouts]\nhang = \"10 minutes\"\n"));
  EXPECT_EQ(e.field, "timeouts.hang");
  EXPECT_NE(e.message.find("is not a duration"), std::string::npos);
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[transport]\nmax_frame_size = \"1KiB\"\n"));
  EXPECT_EQ(e.field, "transport.max_frame_size");
  EXPECT_EQ(e.message, "must be between 4KiB and 1GiB, got 1KiB");
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[transport]\nspin = \"1s\"\n"));
  EXPECT_EQ(e.field, "transport.spin");
  EXPECT_EQ(e.message, "must be between 0ns and 10ms, got 1s");
}

TEST(config, a_job_command_is_checked_where_it_is_written) {
  temp_dir dir;
  const auto job = [&](const std::string& keys) { return parse_in(dir, std::string{two_nodes} + "\n[job]\n" + keys); };
  // A program on PATH or beside the configuration; its directory, environment and ports.
  const auto script = dir.write("train.sh", "#!/bin/sh\nexit 0\n");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto r = job("command = [\"sh\", \"-c\", \"true\"]\nenv = [\"A=1\", \"B_2=x=y\"]\nmaster_port = 30000\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_TRUE(r.value->job.external());
  EXPECT_EQ(r.value->job.workdir, dir.path()) << "the configuration's directory by default";
  ASSERT_EQ(r.value->job.env.size(), 2u);
  EXPECT_EQ(r.value->job.env[1], (std::pair<std::string, std::string>{"B_2", "x=y"}));
  EXPECT_EQ(r.value->job.master_port, 30000);
  r = job("command = [\"./train.sh\"]\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  // Each mistake at its own place.
  auto e = only_error(job("command = []\n"));
  EXPECT_EQ(e.field, "job.command");
  EXPECT_NE(e.message.find("is empty"), std::string::npos) << e.message;
  e = only_error(job("command = [\"no-such-program-rekindle\"]\n"));
  EXPECT_EQ(e.field, "job.command");
  EXPECT_NE(e.message.find("'no-such-program-rekindle' is not on PATH"), std::string::npos) << e.message;
  e = only_error(job("command = [\"./missing.sh\"]\n"));
  EXPECT_NE(e.message.find("does not exist"), std::string::npos) << e.message;
  std::filesystem::permissions(script, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  e = only_error(job("command = [\"./train.sh\"]\n"));
  EXPECT_NE(e.message.find("is not an executable file"), std::string::npos) << e.message;
  e = only_error(job("command = [\"sh\", 3]\n"));
  EXPECT_EQ(e.field, "job.command[1]");
  e = only_error(job("command = [\"sh\", \"\"]\n"));
  EXPECT_EQ(e.field, "job.command[1]");
  e = only_error(job("command = [\"sh\"]\nenv = [\"1X=3\"]\n"));
  EXPECT_EQ(e.field, "job.env");
  EXPECT_NE(e.message.find("'1X=3' is not NAME=value"), std::string::npos) << e.message;
  e = only_error(job("env = [\"A=1\"]\n"));
  EXPECT_EQ(e.message, "applies only to a job.command");
  e = only_error(job("command = [\"sh\"]\nmaster_port = 65500\n"));
  EXPECT_EQ(e.field, "job.master_port");
  // Bounded: a command of more than 1024 words is refused without reading them all.
  std::string many = "command = [";
  for (int i = 0; i < 1100; ++i)
    many += std::string{i ? ", " : ""} + "\"x\"";
  e = only_error(job(many + "]\n"));
  EXPECT_NE(e.message.find("at most 1024"), std::string::npos) << e.message;
}

TEST(config, devices_are_checked_per_entry) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, "[[nodes]]\nname = \"g\"\ndevices = [\"cuda:0\", \"tpu\"]\n"));
  EXPECT_EQ(e.line, 3u);
  EXPECT_EQ(e.column, 22u);
  EXPECT_EQ(e.field, "nodes[0].devices[1]");
  auto r = parse_in(dir, "[[nodes]]\nname = \"g\"\ndevices = [\"cuda:0\", \"cuda:1\", \"cpu\"]\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.value->world_size(), 3u);
  EXPECT_EQ(r.value->nodes[0].devices[1].to_string(), "cuda:1");
}

TEST(config, data_file_missing_empty_or_short) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\ndata = \"corpus.txt\"\n"));
  EXPECT_EQ(e.field, "job.data");
  EXPECT_NE(e.message.find("does not exist"), std::string::npos);
  dir.write("corpus.txt", "");
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\ndata = \"corpus.txt\"\n"));
  EXPECT_NE(e.message.find("is empty"), std::string::npos);
  dir.write("corpus.txt", "too short");
  e = only_error(parse_in(dir, std::string{two_nodes} + "\n[job]\ndata = \"corpus.txt\"\n"));
  EXPECT_NE(e.message.find("holds 9 bytes"), std::string::npos);
  dir.write("corpus.txt", std::string(100, 'x'));
  auto r = parse_in(dir, std::string{two_nodes} + "\n[job]\ndata = \"corpus.txt\"\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(*r.value->job.data_file, dir.path() / "corpus.txt");
}

TEST(config, every_error_is_reported_in_file_order) {
  temp_dir dir;
  auto r = parse_in(dir, "[job]\nsteps = 0\nseed = \"x\"\n[[nodes]]\nname = \"n0\"\nprot = 5\n");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 3u) << r.error_text();
  EXPECT_EQ(r.errors[0].field, "job.steps");
  EXPECT_EQ(r.errors[1].field, "job.seed");
  EXPECT_EQ(r.errors[2].field, "nodes[0].prot");
  EXPECT_NE(r.errors[2].message.find("did you mean 'port'?"), std::string::npos);
}

TEST(config, missing_nodes_and_wrong_table_types) {
  temp_dir dir;
  auto e = only_error(parse_in(dir, "[job]\nsteps = 10\n"));
  EXPECT_EQ(e.field, "nodes");
  auto r = parse_in(dir, std::string{"job = 5\n"} + two_nodes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0].field, "job");
  EXPECT_EQ(r.errors[0].message, "expected a table ([job]), got an integer");
}

TEST(config, a_failure_domain_is_a_name) {
  temp_dir dir;
  auto r = parse_in(dir, "[[nodes]]\nname = \"a\"\ndomain = \"rack 1/2\"\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0].field, "nodes[0].domain") << r.error_text();
  EXPECT_NE(r.errors[0].message.find("'rack 1/2' is not a valid domain name"), std::string::npos) << r.error_text();
}

TEST(config, effective_config_round_trips) {
  temp_dir dir;
  dir.write("admin.token", "0123456789abcdef0123\n");
  auto r = parse_in(dir, "[cluster]\nranks_per_node = 2\n[[nodes]]\nname = \"a\"\nport = 7001\n"
                         "[[nodes]]\nname = \"b\"\ndevices = [\"cpu\", \"cuda:1\"]\nspeed = 0.5\ndomain = \"rack1\"\n"
                         "[[nodes]]\nname = \"s\"\nspare = true\n"
                         "[job]\nstages = [3, 1]\n"
                         "[optimizer]\nlearning_rate = 1e-3\n[timeouts]\nhang = \"90s\"\n"
                         "[security]\ntoken_file = \"admin.token\"\n[transport]\nchunk_size = 65536\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto text = to_toml(*r.value);
  EXPECT_EQ(text.find("0123456789abcdef"), std::string::npos) << "token contents must never be printed";
  auto again = parse(text, "effective.toml", "/");
  ASSERT_TRUE(again.ok()) << again.error_text() << "\n" << text;
  spec a = *r.value;
  spec b = *again.value;
  b.source = a.source;
  EXPECT_EQ(a, b) << text;
  EXPECT_EQ(a.world_size(), 4u);
  EXPECT_EQ(a.nodes[1].domain, "rack1");
  EXPECT_EQ(a.nodes[0].domain, "");
  auto placement = a.initial_placement();
  ASSERT_EQ(placement.size(), 4u);
  EXPECT_EQ(placement[3].node, node_id{1});
  EXPECT_EQ(placement[3].local_index, 1u);
  EXPECT_EQ(placement[3].device.to_string(), "cuda:1");
}

TEST(config, examples_validate) {
  auto local = load_file(testing::source_dir() / "config/examples/local.toml");
  ASSERT_TRUE(local.ok()) << local.error_text();
  EXPECT_EQ(local.value->world_size(), 4u);
  EXPECT_EQ(local.value->nodes.size(), 2u);

  // two-node.toml reads its token from beside itself; give it one in a scratch copy.
  temp_dir dir;
  auto copy = dir.write("two-node.toml", testing::read_file(testing::source_dir() / "config/examples/two-node.toml"));
  dir.write("cluster.token", "an-example-cluster-token-of-32-bytes\n");
  auto two = load_file(copy);
  ASSERT_TRUE(two.ok()) << two.error_text();
  EXPECT_EQ(two.value->world_size(), 16u);
  EXPECT_TRUE(two.value->nodes[2].spare);
}

TEST(config, embedded_default_is_the_local_example) {
  EXPECT_EQ(embedded_default_text(), testing::read_file(testing::source_dir() / "config/examples/local.toml"));
  auto r = parse(embedded_default_text(), std::string{embedded_default_name}, {});
  ASSERT_TRUE(r.ok()) << r.error_text();
}

TEST(config, every_field_is_documented) {
  const auto doc = testing::read_file(testing::source_dir() / "docs/CONFIG.md");
  const auto fields = known_fields();
  EXPECT_GT(fields.size(), 40u);
  for (const auto& f : fields) {
    const auto dot = f.find('.');
    const auto table = f.substr(0, dot);
    const auto key = f.substr(dot + 1);
    const auto heading = doc.find(table == "nodes" ? "## [[nodes]]" : "## [" + table + "]");
    ASSERT_NE(heading, std::string::npos) << "docs/CONFIG.md has no section for " << table;
    const auto next = doc.find("\n## ", heading + 1);
    const auto section = doc.substr(heading, next - heading);
    EXPECT_NE(section.find("| `" + key + "` |"), std::string::npos) << "docs/CONFIG.md does not document " << f;
  }
}

}  // namespace
}  // namespace rekindle::config
