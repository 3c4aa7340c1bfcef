// bench/train_step: tokens/s and achieved GFLOP/s of one CPU training step (forward, backward,
// gradient norm, AdamW over all parameters) for two model sizes, next to OpenBLAS sgemm measured
// in the same run on the same single thread: the ceiling of a step made of matrix products.
//
// usage: train_step [--runs N] [--warmup N] [--batch B] [--long STEPS] [--json]
//
// Then, "over time": the model of bench/recovery (2 layers, width 576, 8.1 M parameters, one
// sequence of 32 tokens a step) trained for --long steps (default 300; 0 skips it) through the
// training task, twice: as the service runs it (subnormal floats flushed to zero) and with IEEE
// subnormals. A step that slows down as training goes on shows in the last window against the
// first; the CPU time per step shows it is the arithmetic, not the machine.
//
// FLOPs are counted analytically (kernels::training_flops_per_token, docs/MODEL.md):
// 72·L·C² + 6·V·C + 12·L·T·C per token. Each figure is the median of --runs timed runs after
// --warmup untimed ones; a step is verified (finite loss near ln 256, non-zero gradient, bitwise
// identical when repeated) before anything is timed.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "config/spec.hpp"
#include "kernels/backend.hpp"
#include "kernels/blas_core.hpp"
#include "kernels/cpu_ops.hpp"
#include "kernels/layout.hpp"
#include "training/training_task.hpp"
#include "transport/communicator.hpp"

namespace {

using namespace rekindle;
using clock_type = std::chrono::steady_clock;

struct options {
  int runs = 5;
  int warmup = 2;
  std::uint32_t batch = 8;
  int long_steps = 300;
  bool json = false;
};

// Windows of the long run: the median step of each.
constexpr int long_window = 25;

struct long_figures {
  bool flush = true;
  std::vector<double> window_ms, window_cpu_ms;  // median wall and CPU time per step, by window
  double final_loss = 0;
};

struct model_size {
  std::string name;
  kernels::model_shape shape;
};

struct step_figures {
  std::string name;
  kernels::model_shape shape;
  std::size_t params = 0;
  double median_s = 0;
  double tokens_per_s = 0;
  double gflops = 0;
  double flops_per_token = 0;
};

struct gemm_figures {
  std::string name;
  int m, n, k;
  double gflops = 0;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "train_step: %s\n", what.c_str());
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median seconds of fn over `runs` calls after `warmup` calls.
double time_median(const options& o, const std::function<void()>& fn) {
  for (int i = 0; i < o.warmup; ++i)
    fn();
  std::vector<double> s;
  for (int i = 0; i < o.runs; ++i) {
    const auto t0 = clock_type::now();
    fn();
    s.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return median(s);
}

gemm_figures bench_sgemm(const options& o, std::string name, int m, int n, int k) {
  std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n),
      c(static_cast<std::size_t>(m) * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& x : a)
    x = d(rng);
  for (auto& x : b)
    x = d(rng);
  // Verify one element against a plain dot product before timing.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  double want = 0;
  for (int i = 0; i < k; ++i)
    want += static_cast<double>(a[static_cast<std::size_t>(m - 1) * k + i]) * b[static_cast<std::size_t>(i) * n + n - 1];
  if (std::abs(c.back() - want) > 1e-3 * k)
    die("sgemm verification failed");
  const double s = time_median(o, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(),
                n);
  });
  return {std::move(name), m, n, k, 2.0 * m * n * k / s / 1e9};
}

step_figures bench_step(const options& o, const model_size& size) {
  auto made = kernels::make_cpu_backend(size.shape, o.batch);
  if (!made)
    die(made.error().to_string());
  kernels::backend& be = **made;
  const std::size_t P = be.layout().size();
  auto params = be.allocate(P), grads = be.allocate(P), m = be.allocate(P), v = be.allocate(P);
  if (!params || !grads || !m || !v)
    die("cannot allocate the model's buffers");
  std::vector<float> init(P);
  kernels::init_parameters(be.layout(), 1, init);
  if (!be.upload(*params, 0, init).ok())
    die("upload failed");
  const std::size_t tokens_per_step = std::size_t{o.batch} * size.shape.seq_len;
  std::vector<std::int32_t> tokens(tokens_per_step), targets(tokens_per_step);
  std::mt19937 rng(2);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>(rng() % kernels::vocab_size);
    targets[i] = static_cast<std::int32_t>(rng() % kernels::vocab_size);
  }
  kernels::adamw_hyper h;
  std::uint64_t step = 0;
  double last_loss = 0;
  // One training step of a single rank: what the data-parallel step does minus the collectives.
  const auto train_step = [&] {
    if (!be.zero(*grads, 0, P).ok())
      die("zero failed");
    auto loss = be.forward_backward(*params, *grads, tokens, targets, 1.0f);
    if (!loss)
      die(loss.error().to_string());
    last_loss = *loss;
    auto sq = be.sum_squares(*grads, 0, P);
    if (!sq)
      die(sq.error().to_string());
    const double clip = kernels::clip_factor(h, std::sqrt(*sq));
    if (!be.adamw(*params, 0, P, *grads, *m, *v, kernels::make_adamw_step(h, step++, static_cast<float>(clip))).ok())
      die("adamw failed");
  };

  // Verify before timing: a sane loss and gradient, and the same bits when repeated.
  auto l1 = be.forward_backward(*params, *grads, tokens, targets, 1.0f);
  auto sq = be.sum_squares(*grads, 0, P);
  if (!be.zero(*grads, 0, P).ok())
    die("zero failed");
  auto l2 = be.forward_backward(*params, *grads, tokens, targets, 1.0f);
  if (!l1 || !l2 || !sq || !std::isfinite(*l1) || std::abs(*l1 - std::log(256.0)) > 0.5 || !(*sq > 0) ||
      *l1 != *l2)
    die("verification of the training step failed for " + size.name);

  step_figures f;
  f.name = size.name;
  f.shape = size.shape;
  f.params = P;
  f.median_s = time_median(o, train_step);
  if (!std::isfinite(last_loss))
    die("the loss diverged while timing " + size.name);
  f.flops_per_token = kernels::training_flops_per_token(size.shape);
  f.tokens_per_s = static_cast<double>(tokens_per_step) / f.median_s;
  f.gflops = f.flops_per_token * f.tokens_per_s / 1e9;
  return f;
}

long_figures bench_long(const options& o, bool flush) {
  config::spec spec;
  spec.model = {.layers = 2, .heads = 9, .width = 576, .seq_len = 32};
  spec.job.steps = static_cast<std::uint64_t>(o.long_steps);
  spec.job.global_batch = 1;
  spec.job.micro_batch = 1;
  transport::solo_communicator comm;
  training::task_options to;
  to.device.type = kernels::device_request::kind::cpu;
  to.flush_subnormals = flush;
  auto made = training::make_training_task(spec, 0, 1, comm, to);
  if (!made)
    die(made.error().to_string());
  long_figures f;
  f.flush = flush;
  std::vector<double> wall, cpu;
  for (int i = 0; i < o.long_steps; ++i) {
    const auto c0 = thread_cpu_time();
    const auto t0 = clock_type::now();
    auto r = (*made)->step();
    if (!r)
      die(r.error().to_string());
    wall.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    cpu.push_back(std::chrono::duration<double, std::milli>(thread_cpu_time() - c0).count());
    f.final_loss = r->loss;
    if (wall.size() == long_window || i + 1 == o.long_steps) {
      f.window_ms.push_back(median(wall));
      f.window_cpu_ms.push_back(median(cpu));
      wall.clear();
      cpu.clear();
    }
  }
  if (!std::isfinite(f.final_loss))
    die("the loss diverged in the long run");
  return f;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> int {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return std::atoi(argv[++i]);
    };
    if (a == "--json")
      o.json = true;
    else if (a == "--runs")
      o.runs = std::max(1, value());
    else if (a == "--warmup")
      o.warmup = std::max(0, value());
    else if (a == "--batch")
      o.batch = static_cast<std::uint32_t>(std::max(1, value()));
    else if (a == "--long")
      o.long_steps = std::clamp(value(), 0, 100000);
    else
      die("unknown argument '" + a + "' (usage: train_step [--runs N] [--warmup N] [--batch B] [--long STEPS] [--json])");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const auto blas = kernels::ensure_blas_core(argv);  // may run the benchmark again with other kernels
  const options o = parse(argc, argv);
  kernels::use_single_threaded_blas();
  const std::vector<model_size> sizes = {
      {"small (L4 H4 C128 T64)", {.layers = 4, .heads = 4, .width = 128, .seq_len = 64}},
      {"matmul-bound (L4 H8 C512 T128)", {.layers = 4, .heads = 8, .width = 512, .seq_len = 128}},
  };
  std::vector<step_figures> steps;
  for (const auto& s : sizes)
    steps.push_back(bench_step(o, s));
  // The ceiling: sgemm at the shape of the large model's biggest products (rows × 4C × C) and a
  // square product, on the same thread.
  const int rows = static_cast<int>(o.batch * sizes[1].shape.seq_len);
  const int C = static_cast<int>(sizes[1].shape.width);
  std::vector<gemm_figures> gemms = {bench_sgemm(o, "sgemm rows x 4C x C", rows, 4 * C, C),
                                     bench_sgemm(o, "sgemm 1024^3", 1024, 1024, 1024)};
  double ceiling = 0;
  for (const auto& g : gemms)
    ceiling = std::max(ceiling, g.gflops);
  std::vector<long_figures> longs;
  if (o.long_steps > 0)
    for (const bool flush : {true, false})
      longs.push_back(bench_long(o, flush));

  if (o.json) {
    nlohmann::json j;
    j["blas"] = kernels::blas_description();
    j["blas_kernels"] = blas.describe();
    if (!blas.warning.empty())
      j["blas_warning"] = blas.warning;
    j["threads"] = 1;
    j["batch"] = o.batch;
    j["runs"] = o.runs;
    j["sgemm_ceiling_gflops"] = ceiling;
    for (const auto& g : gemms)
      j["sgemm"].push_back({{"name", g.name}, {"m", g.m}, {"n", g.n}, {"k", g.k}, {"gflops", g.gflops}});
    for (const auto& f : steps)
      j["steps"].push_back({{"name", f.name},
                            {"layers", f.shape.layers},
                            {"heads", f.shape.heads},
                            {"width", f.shape.width},
                            {"seq_len", f.shape.seq_len},
                            {"parameters", f.params},
                            {"flops_per_token", f.flops_per_token},
                            {"step_seconds", f.median_s},
                            {"tokens_per_second", f.tokens_per_s},
                            {"gflops", f.gflops},
                            {"fraction_of_sgemm", f.gflops / ceiling}});
    for (const auto& f : longs)
      j["over_time"].push_back({{"flush_subnormals", f.flush},
                                {"steps", o.long_steps},
                                {"window", long_window},
                                {"step_ms_median_by_window", f.window_ms},
                                {"cpu_ms_median_by_window", f.window_cpu_ms},
                                {"final_loss", f.final_loss}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("CPU training step, 1 thread, %s\n%s\nbatch %u sequences, median of %d runs after %d warm-up\n\n",
              kernels::blas_description().c_str(), blas.describe().c_str(), o.batch, o.runs, o.warmup);
  if (!blas.warning.empty())
    std::printf("warning: %s\n\n", blas.warning.c_str());
  std::printf("| model | parameters | step (ms) | tokens/s | GFLOP/s | of sgemm |\n|---|---|---|---|---|---|\n");
  for (const auto& f : steps)
    std::printf("| %s | %zu | %.1f | %.0f | %.1f | %.0f%% |\n", f.name.c_str(), f.params, f.median_s * 1e3,
                f.tokens_per_s, f.gflops, 100.0 * f.gflops / ceiling);
  for (const auto& g : gemms)
    std::printf("| %s (%d x %d x %d) | | | | %.1f | |\n", g.name.c_str(), g.m, g.n, g.k, g.gflops);
  if (!longs.empty()) {
    std::printf("\nover time: L2 C576 T32, one sequence a step, %d steps; median step (CPU) in ms of each %d steps\n\n",
                o.long_steps, long_window);
    std::printf("| subnormals |");
    for (std::size_t w = 0; w < longs[0].window_ms.size(); ++w)
      std::printf(" %zu-%zu |", w * long_window + 1, std::min<std::size_t>((w + 1) * long_window, o.long_steps));
    std::printf(" last / first | final loss |\n|---|");
    for (std::size_t w = 0; w <= longs[0].window_ms.size(); ++w)
      std::printf("---|");
    std::printf("---|\n");
    for (const auto& f : longs) {
      std::printf("| %s |", f.flush ? "flushed (the service)" : "IEEE");
      for (std::size_t w = 0; w < f.window_ms.size(); ++w)
        std::printf(" %.1f (%.1f) |", f.window_ms[w], f.window_cpu_ms[w]);
      std::printf(" %.2fx | %.4f |\n", f.window_ms.back() / f.window_ms.front(), f.final_loss);
    }
  }
  return 0;
}
