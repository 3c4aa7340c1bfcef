// The float environment the CPU training step runs in, and the choice of BLAS kernels.
#include <gtest/gtest.h>

#include <cfloat>
#include <cstring>

#include "kernels/blas_core.hpp"
#include "kernels/float_mode.hpp"

namespace rekindle::kernels {
namespace {

// Kept out of the compiler's reach, so the products happen at run time under the thread's mode.
volatile float tiny = 1e-30f;
volatile float subnormal = FLT_MIN / 8;

TEST(float_mode, subnormals_are_flushed_inside_the_guard_and_ieee_again_after_it) {
#if defined(__x86_64__)
  ASSERT_FALSE(flush_subnormals::active()) << "a thread starts with IEEE subnormals";
  EXPECT_GT(tiny * 1e-9f, 0.0f) << "an IEEE product underflows gradually, not to zero";
  {
    const flush_subnormals on;
    EXPECT_TRUE(flush_subnormals::active());
    EXPECT_EQ(tiny * 1e-9f, 0.0f) << "a result below FLT_MIN is flushed to zero";
    EXPECT_EQ(subnormal * 2.0f, 0.0f) << "a subnormal operand is read as zero";
    {
      const flush_subnormals off{false};
      EXPECT_FALSE(flush_subnormals::active());
      EXPECT_GT(subnormal * 2.0f, 0.0f);
    }
    EXPECT_TRUE(flush_subnormals::active()) << "an inner guard gives back the outer mode";
  }
  EXPECT_FALSE(flush_subnormals::active()) << "the guard gives back the thread's mode";
  EXPECT_GT(subnormal * 2.0f, 0.0f);
#else
  GTEST_SKIP() << "the float mode is set on x86-64 only";
#endif
}

TEST(blas_core, each_known_core_has_its_level_and_unknown_names_have_none) {
  EXPECT_EQ(level_of_core("Prescott"), simd_level::sse);
  EXPECT_EQ(level_of_core("NEHALEM"), simd_level::sse);
  EXPECT_EQ(level_of_core("Sandybridge"), simd_level::avx);
  EXPECT_EQ(level_of_core("Haswell"), simd_level::avx2);
  EXPECT_EQ(level_of_core("Zen"), simd_level::avx2);
  EXPECT_EQ(level_of_core("SkylakeX"), simd_level::avx512);
  EXPECT_EQ(level_of_core("Cooperlake"), simd_level::avx512);
  EXPECT_EQ(level_of_core("armv8"), simd_level::unknown);
  EXPECT_EQ(level_of_core(""), simd_level::unknown);
}

TEST(blas_core, only_kernels_without_avx2_on_a_cpu_that_has_it_are_corrected) {
  EXPECT_EQ(corrected_core("Prescott", simd_level::avx512).value_or(""), "SkylakeX");
  EXPECT_EQ(corrected_core("Prescott", simd_level::avx2).value_or(""), "Haswell");
  EXPECT_EQ(corrected_core("Sandybridge", simd_level::avx2).value_or(""), "Haswell");
  EXPECT_FALSE(corrected_core("Prescott", simd_level::avx)) << "the CPU has nothing better";
  EXPECT_FALSE(corrected_core("Haswell", simd_level::avx512)) << "AVX2 against AVX-512 is OpenBLAS's own choice";
  EXPECT_FALSE(corrected_core("Zen", simd_level::avx2));
  EXPECT_FALSE(corrected_core("Cooperlake", simd_level::avx512));
  EXPECT_FALSE(corrected_core("armv8", simd_level::avx512)) << "a core this module does not know is left alone";
}

}  // namespace
}  // namespace rekindle::kernels
