#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/expected.hpp"

namespace rekindle::training {

/// The bytes training windows are drawn from: the built-in synthetic corpus or a text file.
///
/// Thread-safety: immutable after creation; share freely.
class corpus {
 public:
  /// The built-in corpus: about 256 KiB of sentences generated from a small grammar with a fixed
  /// generator seed, the same on every machine. Its structure (words, agreement, punctuation,
  /// small sums) is learnable, so the loss falls well below ln(256) within a few hundred steps.
  [[nodiscard]] static corpus synthetic();

  /// The bytes of `path`. Errors name the file: it does not exist or is not a regular file
  /// (not_found), cannot be read (io_error), or holds fewer than `seq_len + 1` bytes, one
  /// training window (invalid_argument; an empty file says so).
  [[nodiscard]] static expected<corpus> from_file(const std::filesystem::path& path, std::uint32_t seq_len);

  /// A corpus of the given bytes (tests and tools). REQUIRES: not empty.
  [[nodiscard]] static corpus from_bytes(std::string name, std::vector<std::uint8_t> bytes);

  [[nodiscard]] std::span<const std::uint8_t> bytes() const noexcept { return *bytes_; }
  /// "synthetic" or the file's path.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// xxHash64 of the bytes: a restored state must come from training on the same data.
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return fingerprint_; }

 private:
  corpus(std::string name, std::vector<std::uint8_t> bytes);

  std::string name_;
  std::shared_ptr<const std::vector<std::uint8_t>> bytes_;
  std::uint64_t fingerprint_ = 0;
};

/// Draws the training windows of a job: the batch of (seed, step, micro-batch index) is a pure
/// function of those three numbers and the corpus, so every rank, every world size and every
/// restart sees the same data. The data cursor of a job is therefore just its step.
///
/// Sequence r of micro-batch i at step s starts at byte
///   splitmix64(splitmix64(splitmix64(seed) + s) + i·micro_batch + r) mod (size − seq_len)
/// and its targets are the next bytes. Thread-safety: immutable; share freely.
class sampler {
 public:
  /// REQUIRES: data.bytes().size() > seq_len.
  sampler(corpus data, std::uint64_t seed, std::uint32_t seq_len, std::uint32_t micro_batch);

  /// Fills `tokens` and `targets` (micro_batch · seq_len each) with micro-batch `index` of `step`.
  void fill(std::uint64_t step, std::uint64_t index, std::span<std::int32_t> tokens,
            std::span<std::int32_t> targets) const;
  /// Where sequence `row` of micro-batch `index` of `step` starts in the corpus.
  [[nodiscard]] std::uint64_t window_start(std::uint64_t step, std::uint64_t index, std::uint32_t row) const noexcept;

  [[nodiscard]] const corpus& data() const noexcept { return data_; }
  [[nodiscard]] std::uint32_t seq_len() const noexcept { return seq_len_; }
  [[nodiscard]] std::uint32_t micro_batch() const noexcept { return micro_batch_; }

 private:
  corpus data_;
  std::uint64_t seed_key_;
  std::uint32_t seq_len_;
  std::uint32_t micro_batch_;
};

}  // namespace rekindle::training
