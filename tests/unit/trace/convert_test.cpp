// The InfiniteHBD converter on a small record written here, and the synthetic generator.

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "trace/cluster.hpp"
#include "trace/convert.hpp"

namespace rekindle::trace {
namespace {

// A record in the InfiniteHBD schema, made up for the test: three servers ("srv-b" sorts before
// "srv-c" and after "srv-a"), a GPU fault, a cable fault, a file-system fault, a software fault
// and an unknown hardware class; two faults overlap on one server.
constexpr std::string_view record = R"([
  {"node_id": "srv-b", "event_time": 1.5, "event_type": "fault_start",
   "fault_type": {"Level": "Hardware Failure", "Class": "GPU", "Desc": "GPU Lost"}},
  {"node_id": "srv-a", "event_time": 2.0, "event_type": "fault_start",
   "fault_type": {"Level": "Hardware Failure", "Class": "Parameter Plane Cable", "Desc": "Link Down"}},
  {"node_id": "srv-b", "event_time": 2.0, "event_type": "fault_start",
   "fault_type": {"Level": "Software Failure", "Class": "File System", "Desc": "FS Readonly"}},
  {"node_id": "srv-a", "event_time": 2.0, "event_type": "fault_end",
   "fault_type": {"Level": "Hardware Failure", "Class": "Parameter Plane Cable", "Desc": "Link Down"}},
  {"node_id": "srv-b", "event_time": 2.25, "event_type": "fault_end",
   "fault_type": {"Level": "Hardware Failure", "Class": "GPU", "Desc": "GPU Lost"}},
  {"node_id": "srv-c", "event_time": 3.0, "event_type": "fault_start",
   "fault_type": {"Level": "Software Failure", "Class": "Other Failures", "Desc": "Unknown Error"}},
  {"node_id": "srv-b", "event_time": 3.5, "event_type": "fault_end",
   "fault_type": {"Level": "Software Failure", "Class": "File System", "Desc": "FS Readonly"}},
  {"node_id": "srv-c", "event_time": 3.75, "event_type": "fault_end",
   "fault_type": {"Level": "Software Failure", "Class": "Other Failures", "Desc": "Unknown Error"}},
  {"node_id": "srv-a", "event_time": 9.0, "event_type": "fault_start",
   "fault_type": {"Level": "Hardware Failure", "Class": "Quantum Flux", "Desc": "Capacitor"}}
])";

std::string category(const fault_event& e) {
  const auto* c = e.extension("x-category");
  return c == nullptr ? "" : *c;
}

TEST(infinitehbd, maps_each_class_and_folds_servers_onto_nodes) {
  // Two worker nodes and a spare: srv-a -> n0, srv-b -> n1, srv-c -> n0 (folded); never the spare.
  auto cluster = cluster_shape::compact(2, 4, 1);
  auto r = convert_infinitehbd(record, "rec.json", *cluster, {.time_scale = 0.5});
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.servers, 3u);
  EXPECT_EQ(r.faults, 5u);
  EXPECT_EQ(r.by_level_default, 1u);
  EXPECT_EQ(r.open_at_end, 1u);
  const auto& ev = r.value->events;
  ASSERT_EQ(ev.size(), 5u);
  const double day = 86400 * 0.5;
  // In start order: GPU (1.5), cable (2.0, entry 1), file system (2.0, entry 2), software (3.0), quantum (9.0).
  EXPECT_EQ(ev[0].kind, fault_kind::node_down);
  EXPECT_EQ(ev[0].target, fault_target::of_node("n1"));
  EXPECT_DOUBLE_EQ(*ev[0].at, 1.5 * day);
  EXPECT_DOUBLE_EQ(*ev[0].repair, 0.75 * day);
  EXPECT_EQ(category(ev[0]), "\"gpu\"");

  EXPECT_EQ(ev[1].kind, fault_kind::partition);
  EXPECT_EQ(ev[1].target, fault_target::of_node("n0"));
  EXPECT_DOUBLE_EQ(*ev[1].duration, 1e-4 * day) << "a zero-length window lasts the record's resolution";

  EXPECT_EQ(ev[2].kind, fault_kind::disk_full);
  EXPECT_EQ(ev[2].target, fault_target::of_node("n1"));
  EXPECT_DOUBLE_EQ(*ev[2].duration, 1.5 * day);

  EXPECT_EQ(ev[3].kind, fault_kind::crash);
  EXPECT_EQ(ev[3].target, fault_target::of_rank(0)) << "srv-c folds onto n0; its first rank";

  EXPECT_EQ(ev[4].kind, fault_kind::node_down) << "an unknown hardware class is a node_down";
  EXPECT_FALSE(ev[4].repair.has_value()) << "still open at the end of the record: never repaired";
  EXPECT_EQ(category(ev[4]), "\"hardware\"");
  ASSERT_NE(ev[4].extension("x-infinitehbd"), nullptr);
  EXPECT_NE(ev[4].extension("x-infinitehbd")->find("\"class\":\"Quantum Flux\""), std::string::npos);

  EXPECT_DOUBLE_EQ(*r.value->header.duration, 9 * day);
  EXPECT_EQ(r.value->header.world, 8u);
  EXPECT_EQ(r.value->header.time_scale, 0.5);
  // The result is a valid trace for this cluster.
  auto back = parse(to_jsonl(*r.value), "converted", &*cluster);
  ASSERT_TRUE(back.ok()) << back.error_text();
  EXPECT_EQ(*back.value, *r.value);
}

TEST(infinitehbd, spread_out_on_a_cluster_with_enough_nodes) {
  auto cluster = cluster_shape::compact(8, 1);
  auto r = convert_infinitehbd(record, "rec.json", *cluster, {});
  ASSERT_TRUE(r.ok()) << r.error_text();
  std::map<std::string, std::string> node_of;
  for (const auto& e : r.value->events) {
    const auto& x = *e.extension("x-infinitehbd");
    const auto server = x.substr(x.find("\"node\":\"") + 8, 5);
    node_of[server] = e.target.kind == fault_target::type::node ? e.target.node : "rank " + std::to_string(e.target.rank);
  }
  // Three servers over eight nodes: server i on node floor(8i/3).
  EXPECT_EQ(node_of["srv-a"], "n0");
  EXPECT_EQ(node_of["srv-b"], "n2");
  EXPECT_EQ(node_of["srv-c"], "rank 5") << "srv-c is the third server: n5, whose first rank is 5";
}

TEST(infinitehbd, mapping_table) {
  EXPECT_EQ(map_infinitehbd("Hardware Failure", "GPU")->kind, fault_kind::node_down);
  EXPECT_EQ(map_infinitehbd("Hardware Failure", "NIC")->kind, fault_kind::partition);
  EXPECT_EQ(map_infinitehbd("Other Failure", "Change")->kind, fault_kind::partition);
  EXPECT_EQ(map_infinitehbd("Software Failure", "File System")->kind, fault_kind::disk_full);
  EXPECT_EQ(map_infinitehbd("Software Failure", "Other Failures")->kind, fault_kind::crash);
  EXPECT_EQ(map_infinitehbd("Software Failure", "Software Tool")->kind, fault_kind::node_down);
  EXPECT_EQ(map_infinitehbd("Other Failure", "Stress Test Failure")->category, "stress-test");
  EXPECT_FALSE(map_infinitehbd("Software Failure", "Brand New")->known);
  EXPECT_EQ(map_infinitehbd("Software Failure", "Brand New")->kind, fault_kind::crash);
  EXPECT_FALSE(map_infinitehbd("Hardwear Failure", "GPU").has_value());
}

TEST(infinitehbd, bad_entries_are_named_by_line_and_field) {
  constexpr std::string_view bad = R"([
  {"node_id": "a", "event_time": 1, "event_type": "fault_strat",
   "fault_type": {"Level": "Hardware Failure", "Class": "GPU", "Desc": "x"}},
  {"node_id": "a", "event_time": 2, "event_type": "fault_end",
   "fault_type": {"Level": "Hardware Failure", "Class": "GPU", "Desc": "x"}},
  {"node_id": 7, "event_time": -1, "event_type": "fault_start",
   "fault_type": {"Level": "Hardwear Failure", "Class": "GPU"}},
  "nonsense"
])";
  auto cluster = cluster_shape::compact(2, 8);
  auto r = convert_infinitehbd(bad, "rec.json", *cluster, {});
  ASSERT_FALSE(r.ok());
  const auto text = r.error_text();
  EXPECT_NE(text.find("rec.json:2: [0].event_type: 'fault_strat' is neither fault_start nor fault_end (did you mean 'fault_start'?)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rec.json:4: [1]: fault_end of server a (GPU: x) without a fault_start"), std::string::npos) << text;
  EXPECT_NE(text.find("rec.json:6: [2].node_id: expected a non-empty string"), std::string::npos) << text;
  EXPECT_NE(text.find("rec.json:6: [2].event_time: expected a number of days of at least 0"), std::string::npos) << text;
  EXPECT_NE(text.find("rec.json:6: [2].fault_type.Desc: missing"), std::string::npos) << text;
  EXPECT_NE(text.find("rec.json:6: [2].fault_type.Level: 'Hardwear Failure' is not a level of the record (Hardware Failure, "
                      "Software Failure, Other Failure) (did you mean 'Hardware Failure'?)"),
            std::string::npos)
      << "reported at the line where the entry starts: " << text;
  EXPECT_NE(text.find("rec.json:8: [3]: expected an object"), std::string::npos) << text;
}

TEST(infinitehbd, syntax_errors_and_bad_options) {
  auto cluster = cluster_shape::compact(2, 8);
  auto r = convert_infinitehbd("[\n  {\"node_id\": \"a\",,}\n]", "rec.json", *cluster, {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line, 2u);
  EXPECT_EQ(r.errors[0].column, 19u) << "the second comma";
  EXPECT_FALSE(convert_infinitehbd("{}", "rec.json", *cluster, {}).ok());
  EXPECT_FALSE(convert_infinitehbd(record, "rec.json", *cluster, {.time_scale = 0}).ok());
}

TEST(generate, same_seed_same_trace_other_seed_other_trace) {
  auto cluster = cluster_shape::compact(16, 8);
  generate_options o;
  o.rate = 0.01;
  o.days = 30;
  o.seed = 42;
  auto a = generate(*cluster, o);
  auto b = generate(*cluster, o);
  ASSERT_TRUE(a.has_value()) << a.error();
  EXPECT_EQ(to_jsonl(*a), to_jsonl(*b));
  o.seed = 43;
  auto c = generate(*cluster, o);
  EXPECT_NE(to_jsonl(*a), to_jsonl(*c));
  // Valid for the cluster, in time order, within the days.
  auto back = parse(to_jsonl(*a), "generated", &*cluster);
  ASSERT_TRUE(back.ok()) << back.error_text();
  for (const auto& e : back.value->events)
    EXPECT_LT(*e.at, 30 * 86400.0);
}

TEST(generate, arrival_rate_and_mix) {
  // 1024 accelerators × 0.01 per day × 100 days: 1024 faults expected (Poisson, sd 32).
  auto cluster = cluster_shape::compact(128, 8);
  generate_options o;
  o.rate = 0.01;
  o.days = 100;
  o.mix = *parse_mix("gpu=3,software=1");
  o.seed = 7;
  auto t = generate(*cluster, o);
  ASSERT_TRUE(t.has_value());
  const auto n = static_cast<double>(t->events.size());
  EXPECT_NEAR(n, 1024.0, 4 * 32.0);
  std::map<std::string, int> by_category;
  for (const auto& e : t->events)
    ++by_category[*e.extension("x-category")];
  EXPECT_EQ(by_category.size(), 2u);
  const double gpu_share = by_category["\"gpu\""] / n;
  EXPECT_NEAR(gpu_share, 0.75, 4 * std::sqrt(0.75 * 0.25 / n));
  // Interarrival times average 1 / (rate × world) days.
  const double mean_gap = (*t->events.back().at - *t->events.front().at) / (n - 1);
  EXPECT_NEAR(mean_gap, 86400.0 / (0.01 * 1024), 86400.0 / (0.01 * 1024) * 0.15);
  // Node faults carry a repair time, rank faults a rank of the world.
  for (const auto& e : t->events) {
    if (e.kind == fault_kind::node_down)
      EXPECT_TRUE(e.repair.has_value());
    else
      EXPECT_LT(e.target.rank, 1024u);
  }
}

TEST(generate, mix_errors_name_the_item) {
  auto e = parse_mix("gpu=0.5,softwre=0.2");
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message().find("--mix: 'softwre' is not a category (did you mean 'software'?); categories: gpu, hbm"),
            std::string::npos)
      << e.error();
  EXPECT_NE(parse_mix("gpu=-1").error().message().find("the weight of 'gpu' must be a number of at least 0, got '-1'"),
            std::string::npos);
  EXPECT_NE(parse_mix("gpu").error().message().find("'gpu' is not CATEGORY=WEIGHT"), std::string::npos);
  EXPECT_NE(parse_mix("gpu=1,gpu=2").error().message().find("'gpu' is given twice"), std::string::npos);
  EXPECT_NE(parse_mix("gpu=0").error().message().find("add up to 0"), std::string::npos);
  EXPECT_TRUE(parse_mix(default_mix).has_value());
}

TEST(generate, whole_failure_domains_go_down_together_and_spares_fail_too) {
  auto cluster = cluster_shape::compact(64, 8, 4, 8);  // 8 racks of 8 nodes, 4 spares in rack8
  ASSERT_TRUE(cluster.has_value()) << cluster.error();
  EXPECT_EQ(cluster->domains(), 9u);
  EXPECT_EQ(cluster->nodes()[9].domain, "rack1");
  EXPECT_EQ(cluster->nodes()[64].domain, "rack8") << "spares continue the count";
  generate_options o;
  o.rate = 0.01;
  o.days = 200;
  o.seed = 3;
  o.domain_rate = 0.01;
  auto t = generate(*cluster, o);
  ASSERT_TRUE(t.has_value()) << t.error();
  // 9 domains × 0.01 a day × 200 days: about 18 domain failures, each every node of one domain
  // at one time with one repair.
  std::map<double, std::vector<const fault_event*>> domain_failures;
  bool spare_hit = false;
  for (const auto& e : t->events) {
    if (*e.extension("x-category") == "\"domain\"")
      domain_failures[*e.at].push_back(&e);
    else if (e.target.kind == fault_target::type::node && e.target.node.starts_with("spare"))
      spare_hit = true;
  }
  EXPECT_NEAR(static_cast<double>(domain_failures.size()), 18.0, 4 * std::sqrt(18.0));
  for (const auto& [at, events] : domain_failures) {
    const auto& domain = *events.front()->extension("x-domain");
    const auto n = domain == "\"rack8\"" ? 4u : 8u;
    EXPECT_EQ(events.size(), n) << at;
    for (const auto* e : events) {
      EXPECT_EQ(e->kind, fault_kind::node_down);
      EXPECT_EQ(*e->extension("x-domain"), domain);
      EXPECT_EQ(e->repair, events.front()->repair);
    }
  }
  EXPECT_TRUE(spare_hit) << "the spares' 32 accelerators fail like the others'";
  // In time order, valid for the cluster.
  auto back = parse(to_jsonl(*t), "generated", &*cluster);
  ASSERT_TRUE(back.ok()) << back.error_text();
  // Without domains, a domain rate is an error; without it, the trace is that of the same seed.
  auto flat = cluster_shape::compact(64, 8);
  auto e = generate(*flat, o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message().find("--domain-rate needs failure domains"), std::string::npos) << e.error();
}

TEST(generate, bad_options) {
  auto cluster = cluster_shape::compact(2, 8);
  generate_options o;
  o.days = 1;
  EXPECT_NE(generate(*cluster, o).error().message().find("--rate"), std::string::npos);
  o.rate = 1;
  o.days = 0;
  EXPECT_NE(generate(*cluster, o).error().message().find("--days"), std::string::npos);
}

}  // namespace
}  // namespace rekindle::trace
