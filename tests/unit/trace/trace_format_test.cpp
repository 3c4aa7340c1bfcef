// The trace format: every kind of parse error with its line and field, the cluster checks, and a
// round trip through the writer.

#include <gtest/gtest.h>

#include "tests/support/temp_dir.hpp"
#include "trace/cluster.hpp"
#include "trace/trace.hpp"

namespace rekindle::trace {
namespace {

constexpr std::string_view header = "{\"rekindle_trace\": 1}\n";

// The errors of `text` as "line: field: message" lines, for compact assertions.
std::vector<std::string> errors_of(std::string_view text, const cluster_shape* cluster = nullptr) {
  auto r = parse(text, "t.jsonl", cluster);
  std::vector<std::string> out;
  for (const auto& e : r.errors)
    out.push_back(e.to_string());
  EXPECT_EQ(r.ok(), out.empty());
  return out;
}

::testing::AssertionResult has_error(const std::vector<std::string>& errors, const std::string& text) {
  for (const auto& e : errors)
    if (e.find(text) != std::string::npos)
      return ::testing::AssertionSuccess();
  std::string all;
  for (const auto& e : errors)
    all += "\n  " + e;
  return ::testing::AssertionFailure() << "no error contains '" << text << "'; errors:" << all;
}

TEST(trace_format, reads_every_kind_with_its_arguments) {
  const std::string text = std::string{header} +
                           "{\"at\": 1.5, \"kind\": \"kill\", \"rank\": 3, \"signal\": 15}\n"
                           "{\"at\": 2, \"kind\": \"crash\", \"rank\": 0, \"exit_code\": 134}\n"
                           "{\"at\": 3, \"kind\": \"hang\", \"rank\": 1, \"duration\": 20}\n"
                           "{\"at\": 4, \"kind\": \"slow\", \"node\": \"n1\", \"factor\": 1.5, \"duration\": 60}\n"
                           "{\"at\": 5, \"kind\": \"node_down\", \"node\": \"n0\", \"repair\": 3600}\n"
                           "{\"at\": 6, \"kind\": \"partition\", \"link\": [\"n0\", \"n1\"], \"duration\": 30}\n"
                           "{\"at\": 7, \"kind\": \"disk_full\", \"node\": \"n1\"}\n"
                           "{\"at\": 8, \"kind\": \"corrupt_checkpoint\", \"rank\": 2}\n"
                           "\n"
                           "{\"at_step\": 500, \"kind\": \"collective_error\", \"rank\": 2, \"x-note\": {\"nic\": \"mlx5_1\"}}\n";
  auto r = parse(text, "t.jsonl");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto& ev = r.value->events;
  ASSERT_EQ(ev.size(), 9u);
  EXPECT_EQ(ev[0].kind, fault_kind::kill);
  EXPECT_EQ(ev[0].signal, 15);
  EXPECT_EQ(ev[0].at, 1.5);
  EXPECT_EQ(ev[1].exit_code, 134);
  EXPECT_EQ(ev[2].duration, 20.0);
  EXPECT_EQ(ev[3].target, fault_target::of_node("n1"));
  EXPECT_EQ(ev[3].factor, 1.5);
  EXPECT_EQ(ev[4].repair, 3600.0);
  EXPECT_EQ(ev[5].target, fault_target::of_link("n0", "n1"));
  EXPECT_FALSE(ev[6].duration.has_value()) << "no duration: until the end";
  EXPECT_EQ(ev[8].at_step, 500u);
  EXPECT_FALSE(ev[8].at.has_value());
  EXPECT_EQ(ev[8].line, 11u) << "the blank line counts";
  ASSERT_NE(ev[8].extension("x-note"), nullptr);
  EXPECT_EQ(*ev[8].extension("x-note"), "{\"nic\":\"mlx5_1\"}");
}

TEST(trace_format, header_metadata_and_time_unit) {
  auto r = parse("{\"rekindle_trace\": 1, \"source\": \"hand\", \"nodes\": 4, \"world\": 32, \"time_unit\": \"h\", "
                 "\"duration\": 48, \"x-site\": \"lab\"}\n"
                 "{\"at\": 1.5, \"kind\": \"node_down\", \"node\": \"n2\", \"repair\": 2}\n",
                 "t.jsonl");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.value->header.source, "hand");
  EXPECT_EQ(r.value->header.nodes, 4u);
  EXPECT_EQ(r.value->header.world, 32u);
  EXPECT_EQ(r.value->header.duration, 48 * 3600.0) << "the unit applies to the header's duration";
  EXPECT_EQ(r.value->events.at(0).at, 1.5 * 3600);
  EXPECT_EQ(r.value->events.at(0).repair, 2 * 3600.0);
  ASSERT_EQ(r.value->header.extensions.size(), 1u);
  EXPECT_EQ(r.value->header.extensions[0].first, "x-site");
}

TEST(trace_format, malformed_line_names_line_and_column) {
  auto e = errors_of(std::string{header} + "{\"at\": 1, \"kind\": \"kill\", \"rank\": 0}\n{\"at\": 2, kind: \"kill\"}\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_TRUE(has_error(e, "t.jsonl:3:11: malformed JSON: ")) << e[0];
}

TEST(trace_format, a_number_out_of_range_is_an_error_naming_its_field) {
  auto e = errors_of(std::string{header} + "{\"at\": 1e999, \"kind\": \"kill\", \"rank\": 0}\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_TRUE(has_error(e, "t.jsonl:2: at: 1e999 is out of the range of a number")) << e[0];
}

TEST(trace_format, a_line_that_is_not_an_object) {
  auto e = errors_of(std::string{header} + "[1, 2]\n");
  EXPECT_TRUE(has_error(e, "t.jsonl:2: expected a JSON object {...}, got an array"));
}

TEST(trace_format, unknown_kind_suggests_the_closest) {
  auto e = errors_of(std::string{header} + "{\"at\": 1, \"kind\": \"nod_down\", \"node\": \"n1\"}\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_TRUE(has_error(e, "t.jsonl:2: kind: 'nod_down' is not a fault kind (did you mean 'node_down'?); kinds: kill, crash"));
}

TEST(trace_format, missing_and_ill_typed_fields) {
  auto e = errors_of(std::string{header} +
                     "{\"kind\": \"kill\", \"rank\": 0}\n"                                   // 2: no time
                     "{\"at\": 1, \"rank\": 0}\n"                                            // 3: no kind
                     "{\"at\": \"soon\", \"kind\": \"kill\", \"rank\": 0}\n"                 // 4
                     "{\"at\": 2, \"kind\": \"crash\"}\n"                                    // 5: no target
                     "{\"at\": 3, \"kind\": \"crash\", \"rank\": -1}\n"                      // 6
                     "{\"at\": 4, \"kind\": \"slow\", \"rank\": 1}\n"                        // 7: no factor
                     "{\"at\": 5, \"kind\": \"slow\", \"rank\": 1, \"factor\": 0.5}\n"       // 8
                     "{\"at\": 6, \"kind\": \"node_down\", \"node\": \"n0\", \"repair\": -5}\n"  // 9
                     "{\"at\": 7, \"kind\": \"crash\", \"rank\": 1, \"factor\": 2}\n"        // 10
                     "{\"at\": 8, \"kind\": \"node_down\", \"rank\": 1}\n"                   // 11
                     "{\"at\": 9, \"at_step\": 3, \"kind\": \"kill\", \"rank\": 1}\n"        // 12
                     "{\"at\": 10, \"kind\": \"kill\", \"rank\": 1, \"node\": \"n0\"}\n"     // 13
                     "{\"at\": 11, \"kind\": \"partition\", \"link\": [\"n0\"]}\n"           // 14
                     "{\"at\": 12, \"kind\": \"kill\", \"rank\": 1, \"signal\": 99}\n"       // 15
                     "{\"at\": 13, \"kind\": \"kill\", \"rank\": 1, \"reapir\": 2}\n");      // 16
  EXPECT_TRUE(has_error(e, "t.jsonl:2: at: missing: every event needs a time"));
  EXPECT_TRUE(has_error(e, "t.jsonl:3: kind: missing: every event needs a kind (kill, crash,"));
  EXPECT_TRUE(has_error(e, "t.jsonl:4: at: expected a number of seconds (at least 0), got a string"));
  EXPECT_TRUE(has_error(e, "t.jsonl:5: rank: missing target: give 'rank' for crash"));
  EXPECT_TRUE(has_error(e, "t.jsonl:6: rank: expected a rank (an integer of at least 0), got -1"));
  EXPECT_TRUE(has_error(e, "t.jsonl:7: factor: missing: a slow event says how many times slower"));
  EXPECT_TRUE(has_error(e, "t.jsonl:8: factor: must be greater than 1 and at most 1000 (how many times slower), got 0.5"));
  EXPECT_TRUE(has_error(e, "t.jsonl:9: repair: must be at least 0, got -5"));
  EXPECT_TRUE(has_error(e, "t.jsonl:10: factor: 'factor' does not apply to crash"));
  EXPECT_TRUE(has_error(e, "t.jsonl:11: rank: node_down takes 'node', not 'rank'"));
  EXPECT_TRUE(has_error(e, "t.jsonl:12: at_step: give either 'at' (seconds) or 'at_step' (a step), not both"));
  EXPECT_TRUE(has_error(e, "t.jsonl:13: node: give one target ('rank', 'node' or 'link'), not several"));
  EXPECT_TRUE(has_error(e, "t.jsonl:14: link: expected the names of two nodes, e.g. [\"n1\", \"n2\"], got an array of 1"));
  EXPECT_TRUE(has_error(e, "t.jsonl:15: signal: expected an integer between 1 and 64, got 99"));
  EXPECT_TRUE(has_error(e, "t.jsonl:16: reapir: unknown field (did you mean 'repair'?); extensions must start with 'x-'"));
  EXPECT_EQ(e.size(), 15u) << "one error per bad line here";
}

TEST(trace_format, times_that_go_backwards) {
  auto e = errors_of(std::string{header} +
                     "{\"at\": 30, \"kind\": \"kill\", \"rank\": 0}\n"
                     "{\"at\": 12.5, \"kind\": \"kill\", \"rank\": 0}\n"
                     "{\"at\": 40, \"kind\": \"kill\", \"rank\": 0}\n"
                     "{\"at_step\": 100, \"kind\": \"kill\", \"rank\": 0}\n"
                     "{\"at_step\": 90, \"kind\": \"kill\", \"rank\": 0}\n");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_TRUE(has_error(e, "t.jsonl:3: at: 12.5 is earlier than the event on line 2: events must be in time order"));
  EXPECT_TRUE(has_error(e, "t.jsonl:6: at_step: step 90 is earlier than the event on line 5: events must be in step order"));
}

TEST(trace_format, header_errors) {
  EXPECT_TRUE(has_error(errors_of(""), "t.jsonl:1: empty trace: the first line must be a header"));
  EXPECT_TRUE(has_error(errors_of("{\"at\": 1, \"kind\": \"kill\", \"rank\": 0}\n"),
                        "t.jsonl:1: the first line must be the header, e.g. {\"rekindle_trace\": 1}; this line is an event"));
  EXPECT_TRUE(has_error(errors_of("{\"rekindle_trace\": 2}\n"),
                        "t.jsonl:1: rekindle_trace: format version 2 is not supported; this build reads version 1"));
  EXPECT_TRUE(has_error(errors_of("{\"rekindle_trace\": 1, \"time_unit\": \"hours\"}\n"),
                        "t.jsonl:1: time_unit: 'hours' is not a time unit; use s, ms, min, h or d"));
  EXPECT_TRUE(has_error(errors_of("{\"rekindle_trace\": 1, \"sources\": \"x\"}\n"),
                        "t.jsonl:1: sources: unknown header field (did you mean 'source'?)"));
  EXPECT_TRUE(has_error(errors_of("{\"rekindle_trace\": 1, \"duration\": 0}\n"),
                        "t.jsonl:1: duration: must be greater than 0, got 0"));
}

TEST(trace_format, every_bad_line_is_reported_and_nothing_is_returned) {
  auto r = parse(std::string{header} +
                     "{\"at\": 1, \"kind\": \"kill\", \"rank\": 0}\n"
                     "{\"at\": 2, \"kind\": \"explode\", \"rank\": 0}\n"
                     "{\"at\": 3, \"kind\": \"kill\", \"rank\": 0}\n"
                     "not json\n",
                 "t.jsonl");
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.value.has_value()) << "a trace with errors is not half-used";
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0].line, 3u);
  EXPECT_EQ(r.errors[1].line, 5u);
}

TEST(trace_format, targets_outside_the_cluster) {
  auto cluster = cluster_shape::compact(4, 8, 1);
  ASSERT_TRUE(cluster.has_value());
  auto e = errors_of(std::string{header} +
                         "{\"at\": 1, \"kind\": \"kill\", \"rank\": 31}\n"
                         "{\"at\": 2, \"kind\": \"kill\", \"rank\": 32}\n"
                         "{\"at\": 3, \"kind\": \"node_down\", \"node\": \"n9\"}\n"
                         "{\"at\": 4, \"kind\": \"node_down\", \"node\": \"spare0\"}\n"
                         "{\"at\": 5, \"kind\": \"partition\", \"link\": [\"n1\", \"n3x\"]}\n",
                     &*cluster);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_TRUE(has_error(e, "t.jsonl:3: rank: rank 32 is outside the cluster's world of 32 ranks (0-31)"));
  EXPECT_TRUE(has_error(e, "t.jsonl:4: node: 'n9' is not a node of the cluster (4 nodes × 8 ranks (32 ranks, 1 spare))"));
  EXPECT_TRUE(has_error(e, "t.jsonl:6: link[1]: 'n3x' is not a node of the cluster (4 nodes × 8 ranks (32 ranks, 1 spare)) (did you mean 'n3'?)"));
}

TEST(trace_format, unknown_node_suggests_a_name) {
  cluster_shape c;
  c.add_node({"gpu0", 8, false});
  c.add_node({"gpu1", 8, false});
  auto e = errors_of(std::string{header} + "{\"at\": 1, \"kind\": \"node_down\", \"node\": \"gpu01\"}\n", &c);
  EXPECT_TRUE(has_error(e, "t.jsonl:2: node: 'gpu01' is not a node of the cluster (2 nodes × 8 ranks (16 ranks)) (did you mean"));
}

fault_trace sample() {
  fault_trace t;
  t.header.source = "unit test";
  t.header.description = "one of each";
  t.header.nodes = 3;
  t.header.world = 24;
  t.header.duration = 86400.25;
  t.header.time_scale = 0.155;
  t.header.extensions = {{"x-origin", "{\"tool\":\"hand\"}"}};
  auto add = [&](double at, fault_kind k, fault_target target) -> fault_event& {
    fault_event e;
    e.at = at;
    e.kind = k;
    e.target = std::move(target);
    t.events.push_back(e);
    return t.events.back();
  };
  add(0.1, fault_kind::kill, fault_target::of_node("n1")).signal = 6;
  add(1.0 / 3.0, fault_kind::crash, fault_target::of_rank(7)).exit_code = 139;
  add(2, fault_kind::hang, fault_target::of_rank(3)).duration = 12.75;
  auto& slow = add(3, fault_kind::slow, fault_target::of_rank(4));
  slow.factor = 2.5;
  slow.duration = 600;
  add(4, fault_kind::node_down, fault_target::of_node("n2")).repair = 7200.5;
  add(4, fault_kind::node_down, fault_target::of_node("n0"));
  add(5, fault_kind::partition, fault_target::of_link("n0", "n2")).duration = 30;
  add(6, fault_kind::disk_full, fault_target::of_node("n1")).duration = 1e-3;
  add(7, fault_kind::corrupt_checkpoint, fault_target::of_rank(1)).extensions = {{"x-why", "\"bit flip\""},
                                                                                 {"x-n", "[1,2]"}};
  fault_event by_step;
  by_step.at_step = 123456789012ull;
  by_step.kind = fault_kind::collective_error;
  by_step.target = fault_target::of_rank(0);
  t.events.push_back(by_step);
  return t;
}

TEST(trace_format, round_trip_through_the_writer) {
  const auto t = sample();
  const auto text = to_jsonl(t);
  auto cluster = cluster_shape::compact(3, 8);
  auto r = parse(text, "written", &*cluster);
  ASSERT_TRUE(r.ok()) << r.error_text() << "\n" << text;
  EXPECT_EQ(*r.value, t);
  EXPECT_EQ(to_jsonl(*r.value), text) << "writing again gives the same bytes";
  // Lines: header first, then one event per line.
  EXPECT_EQ(r.value->events[4].line, 6u);
}

TEST(trace_format, written_file_reads_back) {
  testing::temp_dir dir;
  const auto path = dir.path() / "t.jsonl";
  ASSERT_TRUE(write_file(sample(), path).ok());
  auto r = load_file(path);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(*r.value, sample());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "t.jsonl.tmp"));
  auto missing = load_file(dir.path() / "absent.jsonl");
  ASSERT_EQ(missing.errors.size(), 1u);
  EXPECT_NE(missing.errors[0].to_string().find("absent.jsonl: cannot read trace file: No such file"), std::string::npos);
}

TEST(trace_format, deep_nesting_and_times_past_the_limit_are_errors_not_crashes_or_endless_replays) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto r = parse(std::string{header} + "{\"at\": 1, \"kind\": \"kill\", \"rank\": 0, \"x-deep\": " + deep + "}\n", "t.jsonl");
  ASSERT_EQ(r.errors.size(), 1u) << r.error_text();
  EXPECT_EQ(r.errors[0].line, 2u);
  EXPECT_NE(r.errors[0].message.find("nested 100001 levels deep; a trace line nests at most 64"), std::string::npos)
      << r.error_text();
  for (const auto* h : {"{\"rekindle_trace\": 1, \"duration\": 1e300}", "{\"rekindle_trace\": 1, \"duration\": 1e15}",
                        "{\"rekindle_trace\": 1, \"duration\": 12000000, \"time_unit\": \"d\"}"}) {
    auto d = parse(std::string{h} + "\n", "t.jsonl");
    ASSERT_FALSE(d.ok()) << h;
    EXPECT_EQ(d.errors[0].field, "duration") << d.error_text();
    EXPECT_NE(d.errors[0].message.find("a trace covers at most 1000000000 s"), std::string::npos) << d.error_text();
  }
  auto at = parse(std::string{header} + "{\"at\": 2e9, \"kind\": \"kill\", \"rank\": 0}\n", "t.jsonl");
  ASSERT_FALSE(at.ok());
  EXPECT_EQ(at.errors[0].field, "at");
  auto repair = parse(std::string{header} + "{\"at\": 1, \"kind\": \"node_down\", \"node\": \"n0\", \"repair\": 1e12}\n", "t.jsonl");
  ASSERT_FALSE(repair.ok());
  EXPECT_EQ(repair.errors[0].field, "repair");
  EXPECT_TRUE(parse(std::string{header} + "{\"at\": 999999999, \"kind\": \"kill\", \"rank\": 0}\n", "t.jsonl").ok());
  // A number no double holds: the error names the field it was given for.
  auto huge = parse(std::string{header} + "{\"at\": 1, \"kind\": \"slow\", \"rank\": 0, \"factor\": 1e400}\n", "t.jsonl");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.errors[0].field, "factor") << huge.error_text();
  EXPECT_NE(huge.errors[0].message.find("1e400 is out of the range"), std::string::npos) << huge.error_text();
  auto nested = parse(std::string{header} + "{\"at\": 1, \"kind\": \"kill\", \"rank\": 0, \"x-a\": {\"b\": [1, -2e999]}}\n", "t.jsonl");
  ASSERT_FALSE(nested.ok());
  EXPECT_EQ(nested.errors[0].field, "b") << nested.error_text();
  auto head = parse("{\"rekindle_trace\": 1, \"duration\": 1e400}\n", "t.jsonl");
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.errors[0].field, "duration") << head.error_text();
}

TEST(trace_format, check_targets_of_a_trace_made_in_memory) {
  auto t = sample();
  t.events[1].target = fault_target::of_rank(99);
  t.events[1].line = 0;
  t.events[4].line = 17;
  t.events[4].target = fault_target::of_node("n7");
  auto cluster = cluster_shape::compact(3, 8);
  auto errors = check_targets(t, *cluster, "mem");
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].to_string(), "mem: events[1].rank: rank 99 is outside the cluster's world of 24 ranks (0-23)");
  EXPECT_EQ(errors[1].line, 17u);
  EXPECT_EQ(errors[1].field, "node");
}

TEST(trace_cluster, compact_form_and_spares) {
  auto c = cluster_shape::compact(2048, 8, 2);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->world(), 16384u);
  EXPECT_EQ(c->nodes().size(), 2050u);
  EXPECT_EQ(c->find("n2047"), 2047u);
  EXPECT_EQ(c->find("spare1"), 2049u);
  EXPECT_TRUE(c->nodes()[2049].spare);
  EXPECT_EQ(c->nodes()[2049].ranks, 8u) << "a spare can take a whole node's ranks";
  EXPECT_EQ(c->describe(), "2,048 nodes × 8 ranks (16,384 ranks, 2 spares)");
  EXPECT_FALSE(cluster_shape::compact(0, 8).has_value());
  EXPECT_FALSE(cluster_shape::compact(4, 0).has_value());
  c->add_spares(1);
  EXPECT_EQ(c->find("spare2"), 2050u);
}

TEST(trace_cluster, from_a_configuration_file) {
  testing::temp_dir dir;
  auto c = load_cluster(dir.write("c.toml", "[cluster]\nranks_per_node = 8\n[[nodes]]\nname = \"a\"\n[[nodes]]\nname = \"b\"\n"
                                            "devices = [\"cpu\", \"cpu\"]\n[[nodes]]\nname = \"s\"\nspare = true\n[job]\nglobal_batch = 64\n"));
  ASSERT_TRUE(c.has_value()) << c.error();
  EXPECT_EQ(c->world(), 10u) << "8 on a, one per listed device on b";
  EXPECT_EQ(c->spares(), 1u);
  EXPECT_EQ(c->find("s"), 2u);
  EXPECT_EQ(c->nodes()[2].ranks, 8u);
  auto bad = load_cluster(dir.write("bad.toml", "[[nodes]]\nnaem = \"x\"\n"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("bad.toml:2:1: nodes[0].naem: unknown key (did you mean 'name'?)"),
            std::string::npos)
      << bad.error();
}

}  // namespace
}  // namespace rekindle::trace
