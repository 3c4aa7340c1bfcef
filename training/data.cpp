#include "training/data.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>
#include <system_error>

#include "common/check.hpp"
#include "common/checksum.hpp"
#include "kernels/layout.hpp"

namespace rekindle::training {

namespace {

using kernels::splitmix64;

// A counter-based generator for the synthetic corpus.
class generator {
 public:
  explicit generator(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() noexcept { return splitmix64(state_++); }
  std::size_t below(std::size_t n) noexcept { return static_cast<std::size_t>(next() % n); }
  template <std::size_t N>
  std::string_view pick(const std::array<std::string_view, N>& words) noexcept {
    return words[below(N)];
  }

 private:
  std::uint64_t state_;
};

constexpr std::array<std::string_view, 12> nouns = {"cat",   "dog",   "river", "engine", "teacher", "bird",
                                                     "child", "clock", "ship",  "garden", "miller",  "lamp"};
constexpr std::array<std::string_view, 10> verbs = {"sees",    "follows", "finds", "carries", "watches",
                                                    "repairs", "paints",  "hears", "guards",  "keeps"};
constexpr std::array<std::string_view, 10> adjectives = {"red",   "small", "quiet", "old",   "bright",
                                                         "heavy", "slow",  "green", "tired", "silver"};
constexpr std::array<std::string_view, 4> determiners = {"the", "a", "every", "one"};
constexpr std::array<std::string_view, 5> prepositions = {"near", "under", "behind", "with", "beside"};
constexpr std::array<std::string_view, 4> adverbs = {"slowly", "again", "at night", "today"};

void noun_phrase(generator& g, std::string& out) {
  out += g.pick(determiners);
  out += ' ';
  if (g.below(2) == 0) {
    out += g.pick(adjectives);
    out += ' ';
  }
  out += g.pick(nouns);
}

// One sentence: a clause with optional modifiers, or a small sum ("7 plus 5 is 12.").
void sentence(generator& g, std::string& out) {
  const std::size_t start = out.size();
  if (g.below(6) == 0) {
    const std::size_t a = g.below(10), b = g.below(10);
    out += std::to_string(a) + " plus " + std::to_string(b) + " is " + std::to_string(a + b) + ".";
  } else {
    noun_phrase(g, out);
    out += ' ';
    out += g.pick(verbs);
    out += ' ';
    noun_phrase(g, out);
    if (g.below(3) == 0) {
      out += ' ';
      out += g.pick(prepositions);
      out += ' ';
      noun_phrase(g, out);
    }
    if (g.below(4) == 0) {
      out += ' ';
      out += g.pick(adverbs);
    }
    out += '.';
    out[start] = static_cast<char>(out[start] - 'a' + 'A');
  }
  out += g.below(5) == 0 ? '\n' : ' ';
}

std::uint64_t hash_bytes(const std::vector<std::uint8_t>& bytes) {
  return xxh64(std::as_bytes(std::span<const std::uint8_t>(bytes)));
}

}  // namespace

corpus::corpus(std::string name, std::vector<std::uint8_t> bytes)
    : name_(std::move(name)),
      bytes_(std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes))),
      fingerprint_(hash_bytes(*bytes_)) {}

corpus corpus::synthetic() {
  constexpr std::size_t target = 256 * 1024;
  generator g(0x72656b696e646c65ull);  // fixed: the corpus is part of the program
  std::string text;
  text.reserve(target + 256);
  while (text.size() < target)
    sentence(g, text);
  return corpus{"synthetic", std::vector<std::uint8_t>(text.begin(), text.end())};
}

expected<corpus> corpus::from_file(const std::filesystem::path& path, std::uint32_t seq_len) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    return status{errc::not_found, "data file '" + path.string() + "' does not exist"};
  if (!std::filesystem::is_regular_file(st))
    return status{errc::not_found, "data file '" + path.string() + "' is not a regular file"};
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return status{errc::io_error, "cannot open data file '" + path.string() + "': " + std::strerror(errno)};
  std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad())
    return status{errc::io_error, "cannot read data file '" + path.string() + "': " + std::strerror(errno)};
  if (bytes.empty())
    return status{errc::invalid_argument, "data file '" + path.string() + "' is empty"};
  const std::uint64_t need = std::uint64_t{seq_len} + 1;
  if (bytes.size() < need)
    return status{errc::invalid_argument, "data file '" + path.string() + "' holds " + std::to_string(bytes.size()) +
                                              " bytes, fewer than one training window needs (seq_len + 1 = " +
                                              std::to_string(need) + ")"};
  return corpus{path.string(), std::move(bytes)};
}

corpus corpus::from_bytes(std::string name, std::vector<std::uint8_t> bytes) {
  RK_CHECK(!bytes.empty(), "a corpus needs at least one byte");
  return corpus{std::move(name), std::move(bytes)};
}

sampler::sampler(corpus data, std::uint64_t seed, std::uint32_t seq_len, std::uint32_t micro_batch)
    : data_(std::move(data)), seed_key_(splitmix64(seed)), seq_len_(seq_len), micro_batch_(micro_batch) {
  RK_CHECK(data_.bytes().size() > seq_len_, "the corpus is shorter than one window of ", seq_len_ + 1, " bytes");
}

std::uint64_t sampler::window_start(std::uint64_t step, std::uint64_t index, std::uint32_t row) const noexcept {
  const std::uint64_t windows = data_.bytes().size() - seq_len_;
  const std::uint64_t sequence = index * micro_batch_ + row;
  return splitmix64(splitmix64(seed_key_ + step) + sequence) % windows;
}

void sampler::fill(std::uint64_t step, std::uint64_t index, std::span<std::int32_t> tokens,
                   std::span<std::int32_t> targets) const {
  const std::size_t n = std::size_t{micro_batch_} * seq_len_;
  RK_CHECK(tokens.size() == n && targets.size() == n, "a micro-batch holds ", n, " tokens");
  const auto bytes = data_.bytes();
  for (std::uint32_t r = 0; r < micro_batch_; ++r) {
    const std::uint64_t start = window_start(step, index, r);
    for (std::uint32_t t = 0; t < seq_len_; ++t) {
      tokens[std::size_t{r} * seq_len_ + t] = bytes[start + t];
      targets[std::size_t{r} * seq_len_ + t] = bytes[start + t + 1];
    }
  }
}

}  // namespace rekindle::training
