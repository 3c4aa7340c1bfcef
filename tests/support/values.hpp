#pragma once

// Values tests build and compare: seeded random inputs, a small model's job, exact doubles.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "config/spec.hpp"

namespace rekindle::testing {

/// `n` normally distributed values (mean 0, `scale`), the same for the same seed.
template <class T>
std::vector<T> random_normal(std::size_t n, std::uint64_t seed, T scale = T{1}) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<T> dist(T{0}, scale);
  std::vector<T> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

/// `n` tokens below `vocab`, the same for the same seed.
inline std::vector<std::int32_t> random_tokens(std::size_t n, std::uint64_t seed, std::uint32_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> t(n);
  for (auto& x : t)
    x = static_cast<std::int32_t>(rng() % vocab);
  return t;
}

/// The bits of a double as 16 hex digits: equal exactly when the doubles are bitwise equal, and
/// readable in a failure message.
inline std::string bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(u));
  return buf;
}

/// A job small enough for a unit test: 2 layers, 2 heads, 32-token sequences, 4 micro-batches of
/// 2 per step; the caller sets steps, seed, width and the optimizer.
inline config::spec tiny_spec() {
  config::spec s;
  s.job.global_batch = 8;
  s.job.micro_batch = 2;
  s.model.layers = 2;
  s.model.heads = 2;
  s.model.seq_len = 32;
  return s;
}

}  // namespace rekindle::testing
