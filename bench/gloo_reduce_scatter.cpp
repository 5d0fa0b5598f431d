// Why the gloo backend's reduce_scatter is lockstep's own ring (gloo_reduce_scatter.h) and not
// the one reduce-scatter Debian's libgloo has, the legacy ReduceScatterHalvingDoubling: times on
// 2 ranks (threads of this process, Gloo's TCP transport over loopback), float32 sum, of
//   allreduce        gloo::allreduce (what an allreduce of the same input costs)
//   hd_per_call      ReduceScatterHalvingDoubling built for each call, as a process group
//                    handed arbitrary buffers would (it works in place: input copied in, block out)
//   hd_cached        the same built once over a fixed workspace (copies in and out still)
//   lockstep_ring    gloo_detail::ringReduceScatter
// and checks every call's output block (every 97th element); wrong_outputs counts the calls, over
// both ranks, whose block was wrong, per variant in the order above.
//   bench_gloo_reduce_scatter [--sizes 1048576,16777216,67108864] [--iters 10]
#include "lockstep/comm/gloo/gloo_reduce_scatter.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "lockstep/util/error.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"Gloo's legacy ReduceScatterHalvingDoubling vs lockstep's ring reduce-scatter, 2 ranks"};
  std::vector<size_t> sizes = {1 << 20, 16 << 20, 64 << 20};
  int iters = 10;
  app.add_option("--sizes", sizes, "input bytes per rank, comma separated")->delimiter(',');
  app.add_option("--iters", iters, "timed iterations per size and variant");
  CLI11_PARSE(app, argc, argv);
  constexpr int n = 2;
  for (size_t bytes : sizes) {
    const size_t block = bytes / 4 / n, count = block * n;
    LOCKSTEP_ENFORCE(count > 0 && count < (1u << 30) / 4, ValueError, "--sizes: ", bytes,
                     " is out of range (8 bytes .. 1 GiB; Gloo's legacy API counts bytes in an int)");
    ::gloo::rendezvous::HashStore store;
    std::vector<double> ms(4);
    std::vector<int> bad(4, 0);
    std::mutex mu;
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        ::gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto context = std::make_shared<::gloo::rendezvous::Context>(r, n);
        auto device = ::gloo::transport::tcp::CreateDevice(attr);
        context->connectFullMesh(store, device);
        std::vector<float> in(count), ws(count), out(block);
        std::vector<uint8_t> ring_ws;
        for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i + r) % 7);
        std::vector<int> wrong(4, 0);  // calls whose output block was wrong, per variant
        auto check = [&](const float* got, int variant) {
          for (size_t i = 0; i < block; i += 97) {
            const size_t g = r * block + i;
            if (got[i] != static_cast<float>(g % 7 + (g + 1) % 7)) {
              ++wrong[variant];
              return;
            }
          }
        };
        auto barrier = [&] {
          ::gloo::BarrierOptions o(context);
          ::gloo::barrier(o);
        };
        uint32_t tag = 1;
        auto time = [&](const std::function<void()>& op) {
          op();
          barrier();
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i) op();
          barrier();
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                 iters;
        };
        const std::vector<int> recv(n, static_cast<int>(block));
        std::vector<double> mine = {
            time([&] {
              std::memcpy(ws.data(), in.data(), count * 4);
              ::gloo::AllreduceOptions o(context);
              o.setOutput(ws.data(), count);
              o.setReduceFunction(
                  [](void* c, const void* a, const void* b, size_t k) { ::gloo::sum<float>(c, a, b, k); });
              o.setTag(tag++);
              ::gloo::allreduce(o);
              check(ws.data() + r * block, 0);
            }),
            time([&] {
              std::memcpy(ws.data(), in.data(), count * 4);
              ::gloo::ReduceScatterHalvingDoubling<float> hd(context, {ws.data()}, static_cast<int>(count),
                                                             recv);
              hd.run();
              std::memcpy(out.data(), ws.data(), block * 4);
              check(out.data(), 1);
            }),
            0.0, time([&] {
              comm::OpContext ctx{comm::OpType::reduceScatter, tag++,
                                  std::chrono::steady_clock::now() + std::chrono::minutes(1),
                                  std::chrono::minutes(1), "reduce_scatter"};
              comm::gloo_detail::ringReduceScatter(*context, ctx, in.data(), out.data(), block, DType::f32,
                                                   comm::ReduceOp::sum, ring_ws);
              check(out.data(), 3);
            })};
        ::gloo::ReduceScatterHalvingDoubling<float> cached(context, {ws.data()}, static_cast<int>(count),
                                                           recv);
        mine[2] = time([&] {
          std::memcpy(ws.data(), in.data(), count * 4);
          cached.run();
          std::memcpy(out.data(), ws.data(), block * 4);
          check(out.data(), 2);
        });
        barrier();
        std::lock_guard lock(mu);
        if (r == 0) ms = mine;
        for (int v = 0; v < 4; ++v) bad[v] += wrong[v];
      });
    }
    for (auto& t : ranks) t.join();
    std::printf(
        "bytes=%zu allreduce_ms=%.2f hd_per_call_ms=%.2f hd_cached_ms=%.2f lockstep_ring_ms=%.2f "
        "wrong_outputs=%d/%d/%d/%d\n",
        count * 4, ms[0], ms[1], ms[2], ms[3], bad[0], bad[1], bad[2], bad[3]);
    std::fflush(stdout);
  }
  return 0;
}
