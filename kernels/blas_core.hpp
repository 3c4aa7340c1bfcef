#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace rekindle::kernels {

/// The instruction sets that decide which OpenBLAS kernels suit a CPU.
enum class simd_level : int {
  unknown = 0,  ///< a core name this module does not know
  sse = 1,      ///< OpenBLAS's generic x86-64 kernels (Prescott, Core2, Nehalem, ...)
  avx = 2,      ///< Sandybridge, Bulldozer
  avx2 = 3,     ///< Haswell, Zen, Excavator: AVX2 and FMA
  avx512 = 4,   ///< SkylakeX, Cooperlake, SapphireRapids
};

/// The level OpenBLAS's kernels of core `name` use (openblas_get_corename(), any case).
[[nodiscard]] simd_level level_of_core(std::string_view name) noexcept;

/// The best level this CPU runs: from cpuid, through the compiler's feature tests.
[[nodiscard]] simd_level level_of_this_cpu() noexcept;

/// The OPENBLAS_CORETYPE to run instead of the library's choice `library_core` on a CPU of
/// `cpu`, or nullopt when the choice is sound. Only a misdetection is corrected: kernels without
/// AVX2 on a CPU that has it (OpenBLAS 0.3.21 takes some newer CPUs, and some virtual CPUs, for
/// generic ones: its sgemm ran 2.5x slower on this machine with Prescott's kernels than with its
/// own). A choice between AVX2 and AVX-512 kernels is left to OpenBLAS, which makes it on purpose.
[[nodiscard]] std::optional<std::string> corrected_core(std::string_view library_core, simd_level cpu);

/// What the process found about its BLAS kernels, to log once logging is set up.
struct blas_core_note {
  /// The kernel OpenBLAS runs, e.g. "Cooperlake".
  std::string core;
  /// What was done, e.g. "OpenBLAS had picked Prescott kernels for this AVX2 CPU; restarted with
  /// OPENBLAS_CORETYPE=Haswell"; empty when OpenBLAS's own choice stands.
  std::string correction;
  /// A warning for the log (a user's OPENBLAS_CORETYPE that runs generic kernels); empty if none.
  std::string warning;
  [[nodiscard]] std::string describe() const;
};

/// Makes sure this process runs BLAS kernels that suit its CPU. When OpenBLAS picked kernels
/// below the CPU (corrected_core) and OPENBLAS_CORETYPE is not set, sets it and executes the
/// program again (the library reads it only when it loads), with the same arguments and pid: the
/// call then does not return. Children inherit the variable, so a daemon's workers run the same
/// kernels. A user's own OPENBLAS_CORETYPE is kept, with a warning when it runs generic kernels.
/// Call first thing in main(), before any thread starts.
[[nodiscard]] blas_core_note ensure_blas_core(char** argv);
/// The same, as if OpenBLAS had picked `library_core`: how a test sees a misdetection on a CPU
/// that OpenBLAS detects right.
[[nodiscard]] blas_core_note ensure_blas_core(char** argv, std::string_view library_core);

}  // namespace rekindle::kernels
