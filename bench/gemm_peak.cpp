// The machine's f32 matrix-product rate, as the kernels get it: oneDNN's sgemm (the JIT the linear
// layers and attention run on) on given shapes, one thread by default. A model's training FLOPs per
// sample divided into this rate is the most any framework could reach on this core, so a speed
// target can be read against the hardware (bench/gpt.bench.sh prints that ceiling).
//   bench_gemm_peak [--shapes 2048x576x192,192x576x2048 (M x N x K, row-major C = A B)] [--seconds 0.5]
//                   [--threads 1]
#include <oneapi/dnnl/dnnl.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/kernels/threads.h"

namespace {
struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> parseShapes(const std::string& list) {
  std::vector<Shape> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    Shape s{};
    char x1 = 0, x2 = 0;
    std::stringstream is(item);
    if (!(is >> s.m >> x1 >> s.n >> x2 >> s.k) || x1 != 'x' || x2 != 'x' || s.m <= 0 || s.n <= 0 || s.k <= 0)
      throw CLI::ValidationError("--shapes",
                                 "'" + item + "' is not MxNxK with positive sizes (e.g. 2048x576x192)");
    out.push_back(s);
  }
  return out;
}

double gflops(const Shape& s, double seconds) {
  std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
      c(static_cast<size_t>(s.m * s.n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * static_cast<float>(i % 97);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.001f * static_cast<float>(i % 89);
  auto run = [&] {
    if (dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.n, 0.0f, c.data(), s.n) !=
        dnnl_success) {
      std::fprintf(stderr, "bench_gemm_peak: dnnl_sgemm failed for %ldx%ldx%ld\n", static_cast<long>(s.m),
                   static_cast<long>(s.n), static_cast<long>(s.k));
      std::exit(1);
    }
  };
  for (int i = 0; i < 3; ++i) run();
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  int64_t reps = 0;
  while (elapsed < seconds) {
    run();
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return 2.0 * static_cast<double>(s.m * s.n * s.k) * static_cast<double>(reps) / elapsed / 1e9;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oneDNN sgemm GFLOP/s on given shapes: the f32 arithmetic ceiling of this core"};
  std::string shapes = "2048x576x192,2048x192x192,2048x768x192,2048x192x768,192x576x2048,1024x1024x1024";
  double seconds = 0.5;
  int threads = 1;
  app.add_option("--shapes", shapes, "comma-separated MxNxK (row-major C[M,N] = A[M,K] B[K,N])");
  app.add_option("--seconds", seconds, "time per shape")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "threads")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  std::vector<Shape> list;
  try {
    list = parseShapes(shapes);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  lockstep::kernels::setNumThreads(threads);
  double best = 0;
  for (const Shape& s : list) {
    const double g = gflops(s, seconds);
    best = std::max(best, g);
    std::printf("sgemm %ldx%ldx%ld: %.1f GFLOP/s\n", static_cast<long>(s.m), static_cast<long>(s.n),
                static_cast<long>(s.k), g);
  }
  std::printf("best_gflops=%.1f threads=%d\n", best, threads);
}
