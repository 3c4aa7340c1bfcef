#include "planner/test_set.hpp"

#include "planner/search.hpp"

namespace rekindle::planner {

namespace {

// splitmix64: a tiny generator whose sequence is the same on every platform.
class generator {
 public:
  explicit generator(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n).
  std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>(next() % n); }
  template <class T, std::size_t N>
  T pick(const T (&xs)[N]) {
    return xs[below(N)];
  }

 private:
  std::uint64_t state_;
};

device_type random_type(generator& g, std::string name) {
  static constexpr double tflops[] = {65, 125, 312, 362, 756, 989};
  static constexpr double memory_gb[] = {16, 24, 40, 48, 80};
  static constexpr double bandwidth_gb[] = {320, 864, 1555, 2039, 3350};
  static constexpr double link_gb[] = {16, 32, 150, 300, 450};
  device_type t;
  t.name = std::move(name);
  t.flops = g.pick(tflops) * 1e12;
  t.efficiency = 0.5;
  t.memory = g.pick(memory_gb) * 1e9;
  t.reserved_memory = 1e9;
  t.memory_bandwidth = g.pick(bandwidth_gb) * 1e9;
  t.link_bandwidth = g.pick(link_gb) * 1e9;
  t.link_latency = 5e-6;
  return t;
}

}  // namespace

std::vector<reference_case> reference_cases(std::uint32_t count, std::uint64_t seed, std::uint64_t limit) {
  std::vector<reference_case> out;
  generator g{seed};
  static constexpr std::uint32_t node_sizes[] = {1, 2, 4};
  static constexpr std::uint32_t hiddens[] = {1024, 2048, 4096, 6144};
  static constexpr std::uint32_t seqs[] = {1024, 2048};
  static constexpr std::uint32_t vocabs[] = {32000, 50257};
  static constexpr std::uint32_t batches[] = {8, 16, 32};
  static constexpr double networks_gb[] = {12.5, 25, 50};
  for (std::uint32_t attempt = 0; out.size() < count && attempt < 100 * count; ++attempt) {
    problem p;
    auto& hw = p.hardware;
    hw.name = "generated";
    hw.types = {random_type(g, "x-a"), random_type(g, "x-b")};
    hw.net = network{g.pick(networks_gb) * 1e9, 10e-6};
    const std::uint32_t nodes = 2 + g.below(2);
    std::string shape;
    for (std::uint32_t i = 0; i < nodes; ++i) {
      node n;
      n.name = "n" + std::to_string(i);
      n.type = g.below(2);
      const auto size = g.pick(node_sizes);
      for (std::uint32_t d = 0; d < size; ++d)
        n.devices.push_back(d);
      shape += (shape.empty() ? "" : ", ") + std::to_string(size) + " " + hw.types[n.type].name;
      hw.nodes.push_back(std::move(n));
    }
    if (g.below(3) == 0) {
      const auto group = hw.net.add_group(hw.net.default_bandwidth() * 4);
      hw.nodes[0].group = group;
      hw.nodes[1].group = group;
    }
    auto& m = p.workload;
    m.name = "generated";
    m.layers = 2 + g.below(5);
    m.hidden = g.pick(hiddens);
    m.heads = m.hidden / 128;
    m.ffn_hidden = 4 * m.hidden;
    m.seq_len = g.pick(seqs);
    m.vocab = g.pick(vocabs);
    m.global_batch = g.pick(batches);
    m.micro_batch_sizes = {1, 2, 4};
    m.recompute = config::recompute_policy::auto_select;
    m.zero = g.below(4) != 0;
    if (exhaustive_size(p, limit) > limit)
      continue;
    reference_case c;
    c.name = "case " + std::to_string(out.size()) + ": " + std::to_string(nodes) + " nodes (" + shape + "), " +
             std::to_string(m.layers) + " layers h=" + std::to_string(m.hidden) + " s=" + std::to_string(m.seq_len) +
             " B=" + std::to_string(m.global_batch);
    c.target = std::move(p);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace rekindle::planner
