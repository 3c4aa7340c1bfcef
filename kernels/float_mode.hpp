#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace rekindle::kernels {

/// Subnormal floats flushed to zero on this thread while it lives: results too small for a
/// normal float become zero (FTZ) and subnormal operands are read as zero (DAZ); the thread's
/// previous mode comes back when it goes.
///
/// Why: as a model trains, gradients and optimizer moments drift into the subnormal range, and on
/// many x86 CPUs every product of a subnormal takes a microcode assist (on an Intel Xeon a
/// training step slowed from 60 ms to 200 ms by step 130; with FTZ/DAZ it stayed at 60 ms). The
/// CPU backend's work runs under it, so a step's speed does not depend on how small its numbers
/// get. Results stay bitwise reproducible (the mode is the same on every run and rank), and differ
/// from IEEE arithmetic only in values below 1.2e-38. GPUs are not affected: their kernels choose
/// for themselves.
///
/// Thread-safety: the mode is the calling thread's (MXCSR); nest freely, one thread per object.
class flush_subnormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  static constexpr unsigned bits = 0x8040u;  // MXCSR's FTZ (bit 15) and DAZ (bit 6)
  explicit flush_subnormals(bool on = true) noexcept : saved_(_mm_getcsr()) {
    _mm_setcsr(on ? (saved_ | bits) : (saved_ & ~bits));
  }
  ~flush_subnormals() { _mm_setcsr(saved_); }
  /// Whether this thread flushes subnormals now.
  [[nodiscard]] static bool active() noexcept { return (_mm_getcsr() & bits) == bits; }

 private:
  unsigned saved_;
#else
  // Other architectures keep their default mode: the setting is not known to be needed there.
  explicit flush_subnormals(bool = true) noexcept {}
  [[nodiscard]] static bool active() noexcept { return false; }
#endif

 public:
  flush_subnormals(const flush_subnormals&) = delete;
  flush_subnormals& operator=(const flush_subnormals&) = delete;
};

}  // namespace rekindle::kernels
