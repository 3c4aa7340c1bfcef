#include <gtest/gtest.h>

#include <string>

#include "config/device_presets.hpp"
#include "config/planner_files.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle::config {
namespace {

// A valid cluster: line numbers in the tests below count from the first line of this text.
const char* const small_cluster = R"([types.a100]
preset = "a100-80gb"

[[nodes]]
name = "a"
type = "a100"
devices = 4
count = 2
)";

const char* const small_model = R"([model]
layers = 4
hidden = 256
heads = 4
seq_len = 128
vocab = 1000

[training]
global_batch = 16
)";

template <class T>
diagnostic only_error(const file_result<T>& r) {
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.errors.size(), 1u) << r.error_text();
  return r.errors.empty() ? diagnostic{} : r.errors.front();
}

TEST(plan_cluster_file, a_cluster_past_the_device_limit_is_refused_naming_the_entry_not_allocated) {
  auto r = parse_plan_cluster("[types.a100]\npreset = \"a100-80gb\"\n\n[[nodes]]\nname = \"a\"\ntype = \"a100\"\n"
                              "devices = 1024\ncount = 100000\n",
                              "c.toml");
  const auto e = only_error(r);
  EXPECT_EQ(e.field, "nodes[0].count");
  EXPECT_NE(e.message.find("102400000 devices; a cluster has at most 131072"), std::string::npos) << e.message;
  auto ok = parse_plan_cluster("[types.a100]\npreset = \"a100-80gb\"\n\n[[nodes]]\nname = \"a\"\ntype = \"a100\"\n"
                               "devices = 1024\ncount = 128\n",
                               "c.toml");
  EXPECT_TRUE(ok.ok()) << ok.error_text();
}

TEST(plan_cluster_file, preset_fills_figures_and_fields_override_them) {
  auto r = parse_plan_cluster(std::string{small_cluster} + "\n[types.h100]\npreset = \"h100-sxm\"\nefficiency = 0.4\n"
                                                          "memory = \"64GiB\"\n",
                              "c.toml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto& c = *r.value;
  EXPECT_EQ(c.name, "c");
  ASSERT_EQ(c.types.size(), 2u);
  const auto& a = c.types[static_cast<std::size_t>(c.find_type("a100"))];
  EXPECT_DOUBLE_EQ(a.bf16_flops, 312e12);
  EXPECT_DOUBLE_EQ(a.memory, 80e9);
  EXPECT_DOUBLE_EQ(a.memory_bandwidth, 2039e9);
  EXPECT_DOUBLE_EQ(a.link_bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(a.efficiency, 0.5);
  const auto& h = c.types[static_cast<std::size_t>(c.find_type("h100"))];
  EXPECT_DOUBLE_EQ(h.bf16_flops, 989e12);
  EXPECT_DOUBLE_EQ(h.efficiency, 0.4);
  EXPECT_DOUBLE_EQ(h.memory, 64.0 * (1ull << 30));
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[0].name, "a0");
  EXPECT_EQ(c.nodes[1].name, "a1");
  EXPECT_EQ(c.nodes[1].devices, 4u);
  EXPECT_EQ(c.nodes[1].entry_name, "a");
  EXPECT_DOUBLE_EQ(c.network.bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(c.network.latency, 10e-6);
}

TEST(plan_cluster_file, every_preset_has_dense_figures) {
  for (const auto& p : device_presets()) {
    EXPECT_GT(p.fp16_flops, 1e12) << p.name;
    EXPECT_GT(p.memory, 1e9) << p.name;
    EXPECT_GT(p.memory_bandwidth, 1e11) << p.name;
    EXPECT_GT(p.link_bandwidth, 1e9) << p.name;
    EXPECT_EQ(find_device_preset(p.name), &p);
  }
  // Dense, not the doubled "with sparsity" figure of the datasheet.
  EXPECT_DOUBLE_EQ(find_device_preset("h100-sxm")->bf16_flops, 989e12);
  EXPECT_DOUBLE_EQ(find_device_preset("mi300x")->bf16_flops, 1307.4e12);
  EXPECT_EQ(find_device_preset("t4")->bf16_flops, 0.0) << "T4 has no bf16 matrix units";
  EXPECT_EQ(find_device_preset("a100"), nullptr);
}

TEST(plan_cluster_file, syntax_error_names_place) {
  auto e = only_error(parse_plan_cluster("[types.a100]\npreset = \"a100-80gb\n", "c.toml"));
  EXPECT_EQ(e.file, "c.toml");
  EXPECT_EQ(e.line, 2u);
  EXPECT_GT(e.column, 0u);
  EXPECT_NE(e.message.find("syntax error"), std::string::npos) << e.message;
}

TEST(plan_model_file, a_number_past_64_bits_names_its_field) {
  auto e = only_error(parse_plan_model("[model]\nlayers = 99999999999999999999999\n", "m.toml"));
  EXPECT_EQ(e.line, 2u);
  EXPECT_EQ(e.field, "model.layers");
  EXPECT_NE(e.message.find("not representable in 64 bits"), std::string::npos) << e.message;
  e = only_error(parse_plan_cluster(std::string{small_cluster} + "\n[[nodes]]\nname = \"b\"\ncount = 1" +
                                        std::string(30, '9') + "\n",
                                    "c.toml"));
  EXPECT_EQ(e.field, "nodes[1].count");
}

TEST(plan_cluster_file, unknown_top_level_table_suggests) {
  auto e = only_error(parse_plan_cluster(std::string{small_cluster} + "[netwrok]\nbandwidth = \"25GB/s\"\n", "c.toml"));
  EXPECT_EQ(e.line, 9u);
  EXPECT_EQ(e.column, 2u) << "the table's name inside the brackets";
  EXPECT_EQ(e.field, "netwrok");
  EXPECT_EQ(e.message, "unknown table or key (did you mean 'network'?)");
}

TEST(plan_cluster_file, unknown_type_key_suggests) {
  auto e = only_error(parse_plan_cluster(std::string{small_cluster} + "[types.x]\npreset = \"t4\"\nefficency = 0.3\n", "c.toml"));
  EXPECT_EQ(e.to_string(), "c.toml:11:1: types.x.efficency: unknown key (did you mean 'efficiency'?)");
}

TEST(plan_cluster_file, unknown_preset_suggests_and_lists) {
  auto e = only_error(parse_plan_cluster("[types.a100]\npreset = \"a100-80\"\n[[nodes]]\nname = \"n\"\ntype = \"a100\"\n", "c.toml"));
  EXPECT_EQ(e.line, 2u);
  EXPECT_EQ(e.column, 10u);
  EXPECT_EQ(e.field, "types.a100.preset");
  EXPECT_NE(e.message.find("unknown preset 'a100-80' (did you mean 'a100-80gb'?)"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("h100-sxm"), std::string::npos) << "lists the presets: " << e.message;
}

TEST(plan_cluster_file, type_without_preset_needs_its_figures) {
  auto r = parse_plan_cluster("[types.x]\nbf16_tflops = 100\n[[nodes]]\nname = \"n\"\ntype = \"x\"\n", "c.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 3u) << r.error_text();
  for (const auto& e : r.errors) {
    EXPECT_EQ(e.line, 1u);
    EXPECT_NE(e.message.find("missing"), std::string::npos);
  }
  EXPECT_EQ(r.errors[0].field, "types.x.memory");
  EXPECT_EQ(r.errors[1].field, "types.x.memory_bandwidth");
  EXPECT_EQ(r.errors[2].field, "types.x.link_bandwidth");
}

TEST(plan_cluster_file, custom_type_with_every_figure) {
  auto r = parse_plan_cluster(R"([types.x]
fp16_tflops = 100.5
memory = "48GB"
memory_bandwidth = "864GB/s"
link_bandwidth = "200Gb/s"
link_latency = "3us"
reserved_memory = "512MiB"
layer_overhead = "35us"
[[nodes]]
name = "n"
type = "x"
nic_bandwidth = "400Gb/s"
)",
                              "c.toml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto& t = r.value->types[0];
  EXPECT_DOUBLE_EQ(t.layer_overhead, 35e-6);
  EXPECT_DOUBLE_EQ(r.value->nodes[0].nic_bandwidth, 50e9) << "shared by the node's devices";
  EXPECT_DOUBLE_EQ(t.fp16_flops, 100.5e12);
  EXPECT_EQ(t.bf16_flops, 0.0);
  EXPECT_DOUBLE_EQ(t.memory, 48e9);
  EXPECT_DOUBLE_EQ(t.memory_bandwidth, 864e9);
  EXPECT_DOUBLE_EQ(t.link_bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(t.link_latency, 3e-6);
  EXPECT_DOUBLE_EQ(t.reserved_memory, 512.0 * 1024 * 1024);
  EXPECT_EQ(r.value->nodes[0].devices, 8u) << "the default";
}

TEST(plan_cluster_file, bad_values_name_field_and_place) {
  auto r = parse_plan_cluster(R"([types.a100]
preset = "a100-80gb"
efficiency = 1.5
memory = "80 gigs"
link_bandwidth = "300GB"
bf16_tflops = "fast"
[[nodes]]
name = "a"
type = "a100"
devices = 0
)",
                              "c.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 5u) << r.error_text();
  EXPECT_EQ(r.errors[0].to_string(), "c.toml:3:14: types.a100.efficiency: must be between 0.01 and 1, got 1.5");
  EXPECT_EQ(r.errors[1].line, 4u);
  EXPECT_EQ(r.errors[1].field, "types.a100.memory");
  EXPECT_NE(r.errors[1].message.find("is not a size"), std::string::npos);
  EXPECT_EQ(r.errors[2].line, 5u);
  EXPECT_NE(r.errors[2].message.find("'300GB' is not a bandwidth"), std::string::npos) << r.errors[2].message;
  EXPECT_EQ(r.errors[3].to_string(), "c.toml:6:15: types.a100.bf16_tflops: expected a number, got a string");
  EXPECT_EQ(r.errors[4].to_string(), "c.toml:10:11: nodes[0].devices: must be between 1 and 1024, got 0");
}

TEST(plan_cluster_file, node_with_unknown_type_suggests) {
  auto e = only_error(parse_plan_cluster("[types.a100]\npreset = \"a100-80gb\"\n[[nodes]]\nname = \"n\"\ntype = \"a10O\"\n", "c.toml"));
  EXPECT_EQ(e.to_string(), "c.toml:5:8: nodes[0].type: unknown device type 'a10O' (did you mean 'a100'?)");
}

TEST(plan_cluster_file, node_without_name_or_type) {
  auto r = parse_plan_cluster("[types.a100]\npreset = \"a100-80gb\"\n[[nodes]]\ndevices = 2\n", "c.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 2u) << r.error_text();
  EXPECT_EQ(r.errors[0].field, "nodes[0].name");
  EXPECT_EQ(r.errors[0].line, 3u);
  EXPECT_EQ(r.errors[1].field, "nodes[0].type");
}

TEST(plan_cluster_file, no_types_and_no_nodes) {
  auto r = parse_plan_cluster("", "c.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 2u) << r.error_text();
  EXPECT_EQ(r.errors[0].field, "types");
  EXPECT_EQ(r.errors[1].field, "nodes");
}

TEST(plan_cluster_file, duplicate_node_from_count_expansion) {
  auto e = only_error(parse_plan_cluster(std::string{small_cluster} + "[[nodes]]\nname = \"a1\"\ntype = \"a100\"\n", "c.toml"));
  EXPECT_EQ(e.line, 10u);
  EXPECT_EQ(e.field, "nodes[1].name");
  EXPECT_EQ(e.message, "duplicate node 'a1' (first defined at line 5)");
}

TEST(plan_cluster_file, groups_and_links) {
  auto r = parse_plan_cluster(std::string{small_cluster} + R"([[nodes]]
name = "b"
type = "a100"
[network]
bandwidth = "100Gb/s"
latency = "8us"
[[network.groups]]
name = "rack"
nodes = ["a"]
bandwidth = "50GB/s"
[[network.links]]
nodes = ["a1", "b"]
bandwidth = "5GB/s"
)",
                              "c.toml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto& net = r.value->network;
  EXPECT_DOUBLE_EQ(net.bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(net.latency, 8e-6);
  ASSERT_EQ(net.groups.size(), 1u);
  EXPECT_EQ(net.groups[0].nodes, (std::vector<std::string>{"a0", "a1"})) << "an entry name stands for its nodes";
  ASSERT_EQ(net.links.size(), 1u);
  EXPECT_EQ(net.links[0].a, "a1");
  EXPECT_EQ(net.links[0].b, "b");
  EXPECT_DOUBLE_EQ(net.links[0].bandwidth, 5e9);
}

TEST(plan_cluster_file, group_and_link_errors) {
  auto r = parse_plan_cluster(std::string{small_cluster} + R"([[network.groups]]
nodes = ["a0", "a3"]
bandwidth = "50GB/s"
[[network.groups]]
nodes = ["a0"]
bandwidth = "50GB/s"
[[network.links]]
nodes = ["a0", "a1", "a0"]
bandwidth = "1GB/s"
[[network.links]]
nodes = ["a1", "a1"]
bandwidth = "1GB/s"
[[network.links]]
nodes = ["a0"]
)",
                              "c.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 6u) << r.error_text();
  EXPECT_EQ(r.errors[0].to_string(), "c.toml:10:9: network.groups[0].nodes: unknown node 'a3' (did you mean 'a0'?)");
  EXPECT_EQ(r.errors[1].line, 13u);
  EXPECT_NE(r.errors[1].message.find("node 'a0' is already in group 'group0'"), std::string::npos) << r.errors[1].message;
  EXPECT_EQ(r.errors[2].line, 16u);
  EXPECT_EQ(r.errors[2].message, "a link joins exactly two nodes, got 3");
  EXPECT_EQ(r.errors[3].line, 19u);
  EXPECT_EQ(r.errors[3].message, "a link joins two different nodes, got 'a1' twice");
  EXPECT_EQ(r.errors[4].line, 21u);
  EXPECT_EQ(r.errors[4].field, "network.links[2].bandwidth");
  EXPECT_EQ(r.errors[5].line, 22u);
}

TEST(plan_cluster_file, unreadable_file) {
  auto r = load_plan_cluster("/nonexistent/cluster.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0].to_string(), "/nonexistent/cluster.toml: cannot read file: No such file or directory");
}

TEST(plan_model_file, defaults) {
  auto r = parse_plan_model(small_model, "dir/gpt-small.toml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto& m = *r.value;
  EXPECT_EQ(m.name, "gpt-small");
  EXPECT_EQ(m.ffn_hidden, 1024u);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.precision, plan_precision::bf16);
  EXPECT_EQ(m.micro_batch_sizes, (std::vector<std::uint32_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(m.recompute, recompute_policy::auto_select);
  EXPECT_EQ(m.zero, 1u);
  EXPECT_TRUE(m.measured.empty());
}

TEST(plan_model_file, missing_required_fields) {
  auto r = parse_plan_model("[model]\nlayers = 2\n", "m.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 5u) << r.error_text();
  EXPECT_EQ(r.errors[0].to_string(), "m.toml:1:1: model.hidden: missing; the model width (hidden size)");
  EXPECT_EQ(r.errors[4].field, "training.global_batch");
}

TEST(plan_model_file, shape_and_training_errors) {
  auto r = parse_plan_model(R"([model]
layers = 4
hidden = 250
heads = 4
seq_len = 128
vocab = 1000
precision = "bf61"
[training]
global_batch = 12
micro_batch_sizes = [1, 5, 3]
recompute = "sometimes"
zero = 3
)",
                            "m.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 5u) << r.error_text();
  EXPECT_EQ(r.errors[0].to_string(), "m.toml:4:9: model.heads: hidden (250) must be a multiple of heads (4)");
  EXPECT_EQ(r.errors[1].to_string(), "m.toml:7:13: model.precision: 'bf61' is not one of \"bf16\", \"fp16\" (did you mean 'bf16'?)");
  EXPECT_EQ(r.errors[2].to_string(), "m.toml:10:25: training.micro_batch_sizes[1]: 5 does not divide global_batch (12)");
  EXPECT_EQ(r.errors[3].line, 11u);
  EXPECT_EQ(r.errors[4].to_string(), "m.toml:12:8: training.zero: must be between 0 and 1, got 3");
}

TEST(plan_model_file, gradient_precision_and_memory_margin) {
  auto defaults = parse_plan_model(small_model, "m.toml");
  ASSERT_TRUE(defaults.ok()) << defaults.error_text();
  EXPECT_TRUE(defaults.value->fp32_gradients) << "mixed-precision trainers keep fp32 main gradients";
  EXPECT_DOUBLE_EQ(defaults.value->memory_margin, 0.1);
  auto set = parse_plan_model(std::string{small_model} + "gradients = \"model\"\nmemory_margin = 0.25\n", "m.toml");
  ASSERT_TRUE(set.ok()) << set.error_text();
  EXPECT_FALSE(set.value->fp32_gradients);
  EXPECT_DOUBLE_EQ(set.value->memory_margin, 0.25);
  auto bad = parse_plan_model(std::string{small_model} + "gradients = \"fp64\"\nmemory_margin = 1.5\n", "m.toml");
  ASSERT_FALSE(bad.ok());
  ASSERT_EQ(bad.errors.size(), 2u) << bad.error_text();
  EXPECT_EQ(bad.errors[0].field, "training.gradients");
  EXPECT_EQ(bad.errors[1].to_string(), "m.toml:11:17: training.memory_margin: must be between 0 and 1, got 1.5");
}

TEST(plan_model_file, measured_layers) {
  auto r = parse_plan_model(std::string{small_model} + R"([[measured]]
type = "a100"
layers = [0, 1]
micro_batch = 2
tensor = 2
forward = "1.5ms"
backward = "3ms"
activation_memory = "64MiB"
)",
                            "m.toml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.value->measured.size(), 1u);
  const auto& x = r.value->measured[0];
  EXPECT_EQ(x.type, "a100");
  EXPECT_EQ(x.layers, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(x.micro_batch, 2u);
  EXPECT_EQ(x.tensor, 2u);
  EXPECT_DOUBLE_EQ(x.forward, 1.5e-3);
  EXPECT_DOUBLE_EQ(x.backward, 3e-3);
  EXPECT_DOUBLE_EQ(*x.activation_memory, 64.0 * 1024 * 1024);
  EXPECT_EQ(x.type_place.line, 11u);
  EXPECT_EQ(x.type_place.column, 8u);
}

TEST(plan_model_file, measured_points_of_the_head_and_repeated_points) {
  auto r = parse_plan_model(std::string{small_model} + R"([[measured]]
type = "a100"
kind = "head"
micro_batch = 2
forward = "1ms"
backward = "2ms"

[[measured]]
type = "a100"
forward = "1ms"
backward = "2ms"

[[measured]]
type = "a100"
tensor = 2
forward = "0.6ms"
backward = "1.2ms"
)",
                            "m.toml");
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.value->measured.size(), 3u);
  EXPECT_EQ(r.value->measured[0].kind, plan_layer_kind::head);
  EXPECT_EQ(r.value->measured[1].kind, plan_layer_kind::block);
  EXPECT_EQ(r.value->measured[2].tensor, 2u) << "another tensor degree is another point";

  auto bad = parse_plan_model(std::string{small_model} + R"([[measured]]
type = "a100"
forward = "1ms"
backward = "2ms"

[[measured]]
type = "a100"
layers = [2, 3]
forward = "1.1ms"
backward = "2.2ms"

[[measured]]
type = "a100"
kind = "embedding"
layers = [0]
forward = "1ms"
backward = "2ms"

[[measured]]
type = "a100"
kind = "head"
layers = [0]
forward = "1ms"
backward = "2ms"
)",
                              "m.toml");
  ASSERT_FALSE(bad.ok());
  ASSERT_EQ(bad.errors.size(), 3u) << bad.error_text();
  EXPECT_EQ(bad.errors[0].field, "measured[1].layers");
  EXPECT_NE(bad.errors[0].message.find("measured[0] already gives layer 2 on 'a100' at micro-batch 1 and tensor degree 1"),
            std::string::npos)
      << bad.errors[0].message;
  EXPECT_EQ(bad.errors[1].field, "measured[2].kind");
  EXPECT_NE(bad.errors[1].message.find("\"embedding\""), std::string::npos) << bad.errors[1].message;
  EXPECT_EQ(bad.errors[2].field, "measured[3].layers");
}

TEST(plan_model_file, measured_errors) {
  auto r = parse_plan_model(std::string{small_model} + R"([[measured]]
type = "a100"
layers = [1, 4]
forward = "fast"
backwrd = "3ms"
)",
                            "m.toml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 4u) << r.error_text();
  EXPECT_EQ(r.errors[0].to_string(), "m.toml:10:1: measured[0].backward: missing; the backward time of one micro-batch "
                                     "through one layer, e.g. \"6.2ms\"");
  EXPECT_EQ(r.errors[1].to_string(), "m.toml:12:10: measured[0].layers: layer 4 does not exist: the model has layers 0-3");
  EXPECT_EQ(r.errors[2].line, 13u);
  EXPECT_NE(r.errors[2].message.find("'fast' is not a duration"), std::string::npos);
  EXPECT_EQ(r.errors[3].to_string(), "m.toml:14:1: measured[0].backwrd: unknown key (did you mean 'backward'?)");
}

TEST(plan_files, cross_checks_name_the_model_file_place) {
  auto c = parse_plan_cluster(std::string{small_cluster} + "[types.t4]\npreset = \"t4\"\n[[nodes]]\nname = \"t\"\ntype = \"t4\"\n",
                              "c.toml");
  ASSERT_TRUE(c.ok()) << c.error_text();
  auto m = parse_plan_model(std::string{small_model} + "[[measured]]\ntype = \"a10\"\nforward = \"1ms\"\nbackward = \"2ms\"\n",
                            "m.toml");
  ASSERT_TRUE(m.ok()) << m.error_text();
  auto errors = check_plan_files(*c.value, *m.value);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].to_string(), "c.toml:9:1: types.t4: has no bf16 rate, which the model m (m.toml) trains in "
                                   "(the t4 has no bf16 matrix units); set bf16_tflops, use other devices, or train in fp16")
      << "sorted by file";
  EXPECT_EQ(errors[1].to_string(),
            "m.toml:11:8: measured[0].type: device type 'a10' is not in the cluster file c.toml (did you mean 'a100'?)");
  m.value->precision = plan_precision::fp16;
  m.value->measured.clear();
  EXPECT_TRUE(check_plan_files(*c.value, *m.value).empty());
}

TEST(plan_files, examples_parse_and_agree) {
  const auto dir = testing::source_dir() / "config/examples";
  auto c = load_plan_cluster(dir / "mixed-cluster.toml");
  ASSERT_TRUE(c.ok()) << c.error_text();
  auto m = load_plan_model(dir / "gpt-1.3b.toml");
  ASSERT_TRUE(m.ok()) << m.error_text();
  EXPECT_TRUE(check_plan_files(*c.value, *m.value).empty());
  EXPECT_EQ(c.value->nodes.size(), 4u);
  EXPECT_EQ(c.value->network.groups[0].nodes, (std::vector<std::string>{"h0", "h1"}));
  EXPECT_EQ(m.value->layers, 24u);
  EXPECT_EQ(m.value->measured.size(), 1u);
}

}  // namespace
}  // namespace rekindle::config
