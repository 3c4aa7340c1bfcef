// blas_probe [PICKED]: runs ensure_blas_core first thing, as the daemon does (as if OpenBLAS had
// picked PICKED's kernels, when given), then prints the kernels it runs and what was done, as
// JSON, with its pid: a program executed again keeps it.
#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "kernels/blas_core.hpp"

int main(int argc, char** argv) {
  using namespace rekindle::kernels;
  const auto note = argc > 1 ? ensure_blas_core(argv, argv[1]) : ensure_blas_core(argv);
  nlohmann::json j{{"core", openblas_get_corename()},
                   {"describe", note.describe()},
                   {"correction", note.correction},
                   {"warning", note.warning},
                   {"pid", ::getpid()}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
