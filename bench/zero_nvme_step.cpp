// ZeRO stage 2 with the optimizer states offloaded to NVMe (offload_optimizer device nvme), on a
// wide MLP: seconds per optimizer step, each rank's peak RSS, and the swap files' I/O. Started by
// bench/zero_nvme.bench.sh through `lockstep run --nproc-per-node 2`, which also measures the
// disk with dd for comparison.
//   bench_zero_nvme_step --nvme DIR [--in 1024] [--hidden 8192] [--layers 16] [--batch 8]
//                        [--steps 4] [--sub-group 2e7] [--buffer-count 6] [--stage 2] [--no-offload]
//                        [--max-reuse-distance N] [--max-live-parameters N]   (stage 3's gathering)
//                        [--offload-param] [--zero-init]   (stage 3: ZeRO-Infinity, zero.Init)
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/parallel.h"
#include "lockstep/tensor/allocator.h"

using namespace lockstep;

namespace {

// This process's peak resident set (VmHWM) in MiB: the kernel's own high-water mark.
int64_t statusMiB(const char* key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key))) / 1024;
  }
  return -1;
}

// Where the memory is: the process's resident and peak resident sets, and lockstep's caching
// allocator (tensors in use, freed blocks it keeps for reuse, its peak in use).
void memoryLine(int rank, const char* when) {
  const AllocatorStats a = CachingAllocator::instance().stats();
  std::printf(
      "rank %d memory %s: RSS %lld MiB (peak %lld MiB); tensors in use %zu MiB, cached %zu MiB, peak in use "
      "%zu MiB\n",
      rank, when, static_cast<long long>(statusMiB("VmRSS:")), static_cast<long long>(statusMiB("VmHWM:")),
      a.bytes_in_use >> 20, a.bytes_cached >> 20, a.peak_bytes_in_use >> 20);
  std::fflush(stdout);
}

double seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ZeRO NVMe offload: seconds per step, peak RSS, swap I/O"};
  std::string nvme;
  int64_t in = 1024, hidden = 8192, layers = 16, batch = 8, steps = 4, buffer_count = 6;
  double sub_group = 2e7;
  int stage = 2;
  bool no_offload = false;
  app.add_option("--nvme", nvme, "nvme_path: the directory of the swap files");
  app.add_option("--in", in);
  app.add_option("--hidden", hidden);
  app.add_option("--layers", layers, "hidden layers");
  app.add_option("--batch", batch, "rows per rank");
  app.add_option("--steps", steps);
  app.add_option("--sub-group", sub_group, "sub_group_size (elements)");
  app.add_option("--buffer-count", buffer_count);
  app.add_option("--stage", stage);
  app.add_flag("--no-offload", no_offload);
  int64_t reuse = 1'000'000'000, live = 1'000'000'000;
  app.add_option("--max-reuse-distance", reuse,
                 "stage 3: stage3_max_reuse_distance (0: free each layer after use)");
  app.add_option("--max-live-parameters", live, "stage 3: stage3_max_live_parameters");
  bool offload_param = false, zero_init = false;
  app.add_flag("--offload-param", offload_param,
               "stage 3: offload_param device nvme too (the parameter and gradient pieces in swap files)");
  app.add_flag("--zero-init", zero_init,
               "build the model under zero.Init (its parameters go to a file under --nvme as they are made)");
  CLI11_PARSE(app, argc, argv);

  parallel::EngineOptions o;
  o.optimizer = {"Adam", {{"lr", 1e-4}}};
  o.zero_stage = stage;
  o.zero.reduce_bucket_size = 50'000'000;
  o.zero.allgather_bucket_size = 50'000'000;
  o.zero.max_reuse_distance = reuse;
  o.zero.max_live_parameters = live;
  if (!no_offload) {
    o.zero.offload_optimizer.nvme_path = nvme;
    o.zero.offload_optimizer.sub_group_size = static_cast<int64_t>(sub_group);
    o.zero.offload_optimizer.buffer_count = buffer_count;
    o.zero.offload_optimizer.pipeline_read = o.zero.offload_optimizer.pipeline_write = true;
    if (offload_param) o.zero.offload_param_nvme_path = nvme;
  }
  auto t0 = std::chrono::steady_clock::now();
  Generator g(1);
  nn::ModelOptions mo;
  mo.in_features = in;
  mo.out_features = 10;
  mo.hidden.assign(static_cast<size_t>(layers), hidden);
  mo.generator = &g;
  std::shared_ptr<nn::Module> model;
  {
    std::optional<parallel::ZeroInit> scope;
    if (zero_init) scope.emplace(nvme);
    model = nn::makeModel("mlp", mo);
  }
  int64_t psi = 0;
  for (const auto& p : model->parameters()) psi += p.numel();
  parallel::Engine engine(model, o);
  const int rank = engine.environment().rank();
  if (rank == 0) {
    std::printf(
        "model: mlp %lld -> %lld x %lld -> 10, %.3f B f32 parameters (%.1f GB of parameters, gradients "
        "and Adam states); stage %d, world %d, batch %lld per rank; ready in %.1f s\n",
        static_cast<long long>(in), static_cast<long long>(layers), static_cast<long long>(hidden), psi / 1e9,
        16.0 * psi / 1e9, stage, engine.environment().worldSize(), static_cast<long long>(batch),
        seconds(t0));
  }
  const parallel::ZeroNvmeOffload* off = engine.zero()->nvmeOffload();
  if (off && off->swapFile()) {
    std::printf(
        "rank %d: swap file %.2f GB (O_DIRECT %s), %lld sub-groups, %lld in memory (%.2f GB of buffers)\n",
        rank, off->swapFile()->size() / 1e9, off->swapFile()->direct() ? "yes" : "no",
        static_cast<long long>(off->subGroups()), static_cast<long long>(off->residentSubGroups()),
        off->memoryBytes() / 1e9);
  }
  const parallel::ZeroPieceSwap* ps = engine.zero()->parameterSwap();
  const parallel::ZeroPieceSwap* gs = engine.zero()->gradientSwap();
  if (ps || gs) {
    std::printf("rank %d: parameter pieces %.2f GB in a swap file, gradient pieces %.2f GB in a swap file\n",
                rank, ps ? ps->totalBytes() / 1e9 : 0.0, gs ? gs->totalBytes() / 1e9 : 0.0);
  }
  memoryLine(rank, "after setup");
  // From here "peak" is the training loop's: the setup's (the whole model is built on every rank
  // before it is partitioned) is printed above. Writing 5 to clear_refs resets VmHWM.
  std::ofstream("/proc/self/clear_refs") << "5";
  Tensor x = Tensor::empty({batch, in});
  Generator(100 + rank).uniform(x, -1, 1);
  Tensor y = Tensor::zeros({batch}, DType::i64);
  // Bytes every swap file moved so far (states, and with --offload-param parameters and gradients).
  auto swapRead = [&] {
    return (off && off->swapFile() ? off->swapFile()->bytesRead() : 0) + (ps ? ps->file().bytesRead() : 0) +
           (gs ? gs->file().bytesRead() : 0);
  };
  auto swapWritten = [&] {
    return (off && off->swapFile() ? off->swapFile()->bytesWritten() : 0) +
           (ps ? ps->file().bytesWritten() : 0) + (gs ? gs->file().bytesWritten() : 0);
  };
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t r0 = swapRead(), w0 = swapWritten();
    auto t = std::chrono::steady_clock::now();
    engine.backward(autograd::crossEntropy(engine.forward(autograd::Variable(x)), y));
    const double fb = seconds(t);
    t = std::chrono::steady_clock::now();
    engine.step();
    const double st = seconds(t);
    const int64_t r = swapRead() - r0, w = swapWritten() - w0;
    std::printf(
        "rank %d step %lld: %.2f s (forward+backward %.2f s, optimizer step %.2f s); swap read %.2f GB, "
        "written %.2f GB in the whole step: %.2f GB/s\n",
        rank, static_cast<long long>(s + 1), fb + st, fb, st, r / 1e9, w / 1e9, (r + w) / 1e9 / (fb + st));
    memoryLine(rank, ("after step " + std::to_string(s + 1)).c_str());
  }
  return 0;
}
