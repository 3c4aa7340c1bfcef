#include "kernels/blas_core.hpp"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace rekindle::kernels {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

constexpr std::string_view level_name(simd_level l) noexcept {
  switch (l) {
    case simd_level::sse: return "SSE";
    case simd_level::avx: return "AVX";
    case simd_level::avx2: return "AVX2";
    case simd_level::avx512: return "AVX-512";
    case simd_level::unknown: break;
  }
  return "unknown";
}

// Set by ensure_blas_core before it executes the program again: the core OpenBLAS had picked.
constexpr const char* picked_variable = "REKINDLE_BLAS_PICKED";

}  // namespace

simd_level level_of_core(std::string_view name) noexcept {
  const auto n = lower(name);
  for (const char* c : {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "barcelona", "bobcat",
                        "opteron", "opteron_sse3", "katmai", "coppermine", "northwood", "banias", "nano"})
    if (n == c)
      return simd_level::sse;
  for (const char* c : {"sandybridge", "bulldozer", "piledriver", "steamroller"})
    if (n == c)
      return simd_level::avx;
  for (const char* c : {"haswell", "zen", "excavator"})
    if (n == c)
      return simd_level::avx2;
  for (const char* c : {"skylakex", "cooperlake", "sapphirerapids"})
    if (n == c)
      return simd_level::avx512;
  return simd_level::unknown;
}

simd_level level_of_this_cpu() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return simd_level::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return simd_level::avx2;
  if (__builtin_cpu_supports("avx"))
    return simd_level::avx;
  return simd_level::sse;
#else
  return simd_level::unknown;
#endif
}

std::optional<std::string> corrected_core(std::string_view library_core, simd_level cpu) {
  const auto library = level_of_core(library_core);
  if (library == simd_level::unknown || library >= simd_level::avx2 || cpu < simd_level::avx2)
    return std::nullopt;
  return cpu >= simd_level::avx512 ? "SkylakeX" : "Haswell";
}

std::string blas_core_note::describe() const {
  return "BLAS kernels: " + core + (correction.empty() ? " (OpenBLAS's choice)" : " (" + correction + ")");
}

blas_core_note ensure_blas_core(char** argv) { return ensure_blas_core(argv, openblas_get_corename()); }

blas_core_note ensure_blas_core(char** argv, std::string_view library_core) {
  blas_core_note note;
  note.core = openblas_get_corename();
  const std::string picked_now{library_core};
  const auto cpu = level_of_this_cpu();
  if (const char* set = std::getenv("OPENBLAS_CORETYPE"); set != nullptr && *set != '\0') {
    if (const char* picked = std::getenv(picked_variable); picked != nullptr && *picked != '\0') {
      note.correction = "OpenBLAS had picked " + std::string{picked} + " kernels for this " +
                        std::string{level_name(cpu)} + " CPU; running with OPENBLAS_CORETYPE=" + set;
    } else {
      note.correction = "OPENBLAS_CORETYPE=" + std::string{set} + " from the environment";
      if (corrected_core(note.core, cpu))
        note.warning = "OPENBLAS_CORETYPE=" + std::string{set} + " runs " + note.core + "'s " +
                       std::string{level_name(level_of_core(note.core))} + " kernels on a CPU with " +
                       std::string{level_name(cpu)} + ": matrix products run several times slower; unset it";
    }
    return note;
  }
  const auto better = corrected_core(picked_now, cpu);
  if (!better)
    return note;
  // The library has chosen already: only a fresh image with the variable set runs other kernels.
  ::setenv("OPENBLAS_CORETYPE", better->c_str(), 1);
  ::setenv(picked_variable, picked_now.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // Not executed again (no /proc): say so, and go on with the library's kernels.
  note.warning = "OpenBLAS picked " + picked_now + " kernels for this " + std::string{level_name(cpu)} +
                 " CPU, and running again with OPENBLAS_CORETYPE=" + *better + " failed (" + std::strerror(errno) +
                 "): matrix products run several times slower";
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv(picked_variable);
  return note;
}

}  // namespace rekindle::kernels
