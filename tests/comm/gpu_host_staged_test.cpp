// Several ranks on one GPU (cuda:0), as real processes: backend auto finds that they share it and
// moves their GPU buffers through the host backend (HostStagedProcessGroup), every collective with
// exact results; the producer stream is waited for (uploads queued behind a host function that
// holds the stream) and the result is seen by work queued on the buffers' stream after wait();
// several ops in flight at once, as DDP's buckets; the pinned staging is reused; the run says so
// once. Backend nccl asked for by name on a shared GPU is refused on every rank with the fix, and
// backend gloo by name takes GPU buffers too. The test binary re-runs itself as each rank
// (LOCKSTEP_STAGED_TEST_WORKER), since CUDA cannot be used in a forked child.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu.h"
#include "lockstep/comm/cuda/host_staged_process_group.h"
#include "lockstep/comm/device_routed_process_group.h"
#include "lockstep/comm/init.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/comm/store/tcp_store.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;

// ---- the worker: one rank -------------------------------------------------------------------

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}
void cudaOk(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device buffers on one stream; uploads and downloads through pinned memory, so that they are
// truly asynchronous and queue behind whatever holds the stream.
struct Gpu {
  cudaStream_t stream = nullptr;
  std::vector<void*> device, pinned;
  Gpu() {
    cudaOk(cudaSetDevice(0), "cudaSetDevice");
    cudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~Gpu() {
    (void)cudaStreamSynchronize(stream);
    for (void* p : device) (void)cudaFree(p);
    for (void* p : pinned) (void)cudaFreeHost(p);
    (void)cudaStreamDestroy(stream);
  }
  BufferPlace place() const { return {0, stream}; }
  void* host(size_t bytes) {
    void* p = nullptr;
    cudaOk(cudaMallocHost(&p, bytes + 16), "cudaMallocHost");
    pinned.push_back(p);
    return p;
  }
  // Device memory holding a pattern that no expected value has (written before the stream's work).
  void* alloc(size_t bytes) {
    void* p = nullptr;
    cudaOk(cudaMalloc(&p, bytes + 16), "cudaMalloc");
    // On the buffers' stream: a cudaMemset on the legacy stream is not ordered with this
    // non-blocking stream, and on the H200 it landed after an upload (the root's input was the
    // pattern, so gather and reduce reported it).
    cudaOk(cudaMemsetAsync(p, 0x7b, bytes + 16, stream), "cudaMemsetAsync");
    device.push_back(p);
    return p;
  }
  template <typename T>
  void* upload(const std::vector<T>& v, size_t elements = 0) {
    void* d = alloc(std::max(elements, v.size()) * sizeof(T));
    copyIn(d, pinnedCopy(v), v.size() * sizeof(T));
    return d;
  }
  // The two halves of upload, for a copy queued behind hold() with every allocation done before.
  template <typename T>
  void* pinnedCopy(const std::vector<T>& v) {
    void* h = host(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(h, v.data(), v.size() * sizeof(T));
    return h;
  }
  void copyIn(void* d, const void* h, size_t bytes) {
    if (bytes > 0) cudaOk(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream), "upload");
  }
  template <typename T>
  std::vector<T> download(const void* d, size_t n) {
    std::vector<T> out(n);
    if (n == 0) return out;
    void* h = host(n * sizeof(T));
    cudaOk(cudaMemcpyAsync(h, d, n * sizeof(T), cudaMemcpyDeviceToHost, stream), "download");
    cudaOk(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::memcpy(out.data(), h, n * sizeof(T));
    return out;
  }
  // Holds the stream for a while (a slow producer): work queued after it waits.
  void hold(int ms) {
    static int held_ms = 0;
    held_ms = ms;
    cudaOk(cudaLaunchHostFunc(
               stream,
               [](void* p) { std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(p))); },
               &held_ms),
           "cudaLaunchHostFunc");
  }
};

template <typename T>
void expectEqual(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  check(got.size() == want.size(), what + ": size");
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      std::ostringstream m;
      m << what << ": element " << i << " is " << +got[i] << ", expected " << +want[i];
      throw std::runtime_error(m.str());
    }
  }
}

void collectives(ProcessGroup& pg, int r, int n) {
  Gpu g;
  // allreduce over several shm blocks, queued behind a slow producer; read on the stream after wait().
  {
    const size_t count = (size_t{1} << 20) + 3;
    std::vector<float> mine(count), want(count, 0.0f);
    for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>((i * 7 + static_cast<size_t>(r)) % 1009);
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < count; ++i)
        want[i] += static_cast<float>((i * 7 + static_cast<size_t>(j)) % 1009);
    }
    void* d = g.alloc(count * sizeof(float));
    void* h = g.pinnedCopy(mine);
    g.hold(300);  // the input lands 300 ms after the op is issued: the op must wait for it
    g.copyIn(d, h, count * sizeof(float));
    AllreduceOptions o;
    o.place = g.place();
    auto work = pg.allreduce(d, count, DType::f32, o);
    check(work->description().find("cuda:0 via host") != std::string::npos, work->description());
    work->wait();
    expectEqual(g.download<float>(d, count), want, "allreduce sum f32");
  }
  // Three ops in flight at once (DDP's buckets), then waited in order.
  {
    std::vector<double> a(1000);
    std::vector<int32_t> b(4097);
    std::vector<int64_t> c(513);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i) + 4.0 * r;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>((i + static_cast<size_t>(r) * 13) % 50);
    for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<int64_t>(i) * (r + 1) - 7;
    void* da = g.alloc(a.size() * sizeof(double));
    void* db = g.alloc(b.size() * sizeof(int32_t));
    void* dc = g.alloc(c.size() * sizeof(int64_t));
    void* ha = g.pinnedCopy(a);
    void* hb = g.pinnedCopy(b);
    void* hc = g.pinnedCopy(c);
    g.hold(100);
    g.copyIn(da, ha, a.size() * sizeof(double));
    g.copyIn(db, hb, b.size() * sizeof(int32_t));
    g.copyIn(dc, hc, c.size() * sizeof(int64_t));
    AllreduceOptions avg, mx, sum;
    avg.op = ReduceOp::avg;
    mx.op = ReduceOp::max;
    avg.place = mx.place = sum.place = g.place();
    auto wa = pg.allreduce(da, a.size(), DType::f64, avg);
    auto wb = pg.allreduce(db, b.size(), DType::i32, mx);
    sum.defer = true;  // as DDP's last bucket: run by the waiting thread
    auto wc = pg.allreduce(dc, c.size(), DType::i64, sum);
    wa->wait();
    wb->wait();
    wc->wait();
    std::vector<double> want_a(a.size());
    std::vector<int32_t> want_b(b.size(), 0);
    std::vector<int64_t> want_c(c.size(), 0);
    for (size_t i = 0; i < a.size(); ++i) want_a[i] = static_cast<double>(i) + 2.0 * (n - 1);
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < b.size(); ++i)
        want_b[i] = std::max(want_b[i], static_cast<int32_t>((i + static_cast<size_t>(j) * 13) % 50));
      for (size_t i = 0; i < c.size(); ++i) want_c[i] += static_cast<int64_t>(i) * (j + 1) - 7;
    }
    expectEqual(g.download<double>(da, a.size()), want_a, "allreduce avg f64");
    expectEqual(g.download<int32_t>(db, b.size()), want_b, "allreduce max i32");
    expectEqual(g.download<int64_t>(dc, c.size()), want_c, "allreduce sum i64");
  }
  // broadcast from the last rank; the others' data is overwritten.
  {
    const int root = n - 1;
    std::vector<int64_t> v(3001), want(3001);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<int64_t>(i) * 3 - 7 + 100 * r;
      want[i] = static_cast<int64_t>(i) * 3 - 7 + 100 * root;
    }
    void* d = g.alloc(v.size() * sizeof(int64_t));
    void* h = g.pinnedCopy(v);
    g.hold(50);
    g.copyIn(d, h, v.size() * sizeof(int64_t));
    BroadcastOptions o;
    o.root = root;
    o.place = g.place();
    pg.broadcast(d, v.size(), DType::i64, o)->wait();
    expectEqual(g.download<int64_t>(d, v.size()), want, "broadcast");
  }
  // reduce to rank 0.
  {
    std::vector<float> v(777), want(777, 0.0f);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 11) * (r + 1);
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < v.size(); ++i) want[i] += static_cast<float>(i % 11) * (j + 1);
    }
    void* d = g.upload(v);
    ReduceOptions o;
    o.place = g.place();
    pg.reduce(d, v.size(), DType::f32, o)->wait();
    if (r == 0) expectEqual(g.download<float>(d, v.size()), want, "reduce");
  }
  // allgather and allgatherv (uneven).
  {
    const size_t count = 1000;
    std::vector<int32_t> in(count), want;
    for (size_t i = 0; i < count; ++i) in[i] = r * 100000 + static_cast<int32_t>(i);
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < count; ++i) want.push_back(j * 100000 + static_cast<int32_t>(i));
    }
    void* din = g.upload(in);
    void* dout = g.alloc(want.size() * sizeof(int32_t));
    AllgatherOptions o;
    o.place = g.place();
    pg.allgather(din, dout, count, DType::i32, o)->wait();
    expectEqual(g.download<int32_t>(dout, want.size()), want, "allgather");

    std::vector<size_t> counts;
    std::vector<int32_t> vin, vwant;
    for (int j = 0; j < n; ++j) {
      counts.push_back(static_cast<size_t>(10 * j + 3));
      for (size_t i = 0; i < counts.back(); ++i) vwant.push_back(j * 1000 + static_cast<int32_t>(i));
    }
    for (size_t i = 0; i < counts[static_cast<size_t>(r)]; ++i)
      vin.push_back(r * 1000 + static_cast<int32_t>(i));
    void* dvin = g.upload(vin);
    void* dvout = g.alloc(vwant.size() * sizeof(int32_t));
    pg.allgatherv(dvin, dvout, counts, DType::i32, o)->wait();
    expectEqual(g.download<int32_t>(dvout, vwant.size()), vwant, "allgatherv");
  }
  // reduce_scatter: block r of the sum.
  {
    const size_t count = 5000;
    std::vector<float> in(count * static_cast<size_t>(n)), want(count, 0.0f);
    for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(k % 13 + static_cast<size_t>(r));
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < count; ++i)
        want[i] += static_cast<float>((static_cast<size_t>(r) * count + i) % 13 + static_cast<size_t>(j));
    }
    void* din = g.upload(in);
    void* dout = g.alloc(count * sizeof(float));
    ReduceScatterOptions o;
    o.place = g.place();
    pg.reduceScatter(din, dout, count, DType::f32, o)->wait();
    expectEqual(g.download<float>(dout, count), want, "reduce_scatter");
  }
  // gather to rank 0, scatter from the last rank, alltoall.
  {
    const size_t count = 100;
    std::vector<int64_t> in(count), want;
    for (size_t i = 0; i < count; ++i) in[i] = r * 1000 + static_cast<int64_t>(i);
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < count; ++i) want.push_back(j * 1000 + static_cast<int64_t>(i));
    }
    void* din = g.upload(in);
    void* dout = g.alloc(want.size() * sizeof(int64_t));
    GatherOptions go;
    go.place = g.place();
    pg.gather(din, dout, count, DType::i64, go)->wait();
    if (r == 0) expectEqual(g.download<int64_t>(dout, want.size()), want, "gather");

    const int root = n - 1;
    std::vector<int64_t> all;
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < count; ++i) all.push_back(root * 1000000 + j * 1000 + static_cast<int64_t>(i));
    }
    void* dall = g.upload(r == root ? all : std::vector<int64_t>{}, all.size());
    void* dmine = g.alloc(count * sizeof(int64_t));
    ScatterOptions so;
    so.root = root;
    so.place = g.place();
    pg.scatter(dall, dmine, count, DType::i64, so)->wait();
    expectEqual(g.download<int64_t>(dmine, count),
                std::vector<int64_t>(all.begin() + r * static_cast<long>(count),
                                     all.begin() + (r + 1) * static_cast<long>(count)),
                "scatter");

    std::vector<double> a2a(count * static_cast<size_t>(n)), a2a_want(a2a.size());
    for (int j = 0; j < n; ++j) {
      for (size_t e = 0; e < count; ++e) {
        a2a[static_cast<size_t>(j) * count + e] = r * 10000 + j * 100 + static_cast<double>(e);
        a2a_want[static_cast<size_t>(j) * count + e] = j * 10000 + r * 100 + static_cast<double>(e);
      }
    }
    void* din2 = g.upload(a2a);
    void* dout2 = g.alloc(a2a.size() * sizeof(double));
    AlltoallOptions ao;
    ao.place = g.place();
    pg.alltoall(din2, dout2, count, DType::f64, ao)->wait();
    expectEqual(g.download<double>(dout2, a2a.size()), a2a_want, "alltoall");
  }
  // send/recv between ranks 0 and 1 (a tag, as host backends allow), a barrier, an empty op.
  {
    std::vector<float> v(2049);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
    SendRecvOptions o;
    o.tag = 3;
    o.place = g.place();
    if (r == 0) {
      void* d = g.upload(v);
      pg.send(d, v.size(), DType::f32, 1, o)->wait();
    } else if (r == 1) {
      void* d = g.alloc(v.size() * sizeof(float));
      pg.recv(d, v.size(), DType::f32, 0, o)->wait();
      expectEqual(g.download<float>(d, v.size()), v, "recv");
    }
    BarrierOptions b;
    b.place = g.place();
    pg.barrier(b)->wait();
    AllreduceOptions e;
    e.place = g.place();
    pg.allreduce(nullptr, 0, DType::f32, e)->wait();
  }
  // The group chose the host path, and reuses its pinned staging once the copies are done.
  auto* routed = dynamic_cast<DeviceRoutedProcessGroup*>(&pg);
  check(routed != nullptr, "backend auto is a DeviceRoutedProcessGroup where a GPU is visible");
  auto* staged = dynamic_cast<cuda::HostStagedProcessGroup*>(routed->deviceGroup());
  check(staged != nullptr, "GPU buffers go to a HostStagedProcessGroup where ranks share a GPU");
  std::vector<float> ones(4096, 1.0f);
  void* d = g.upload(ones);
  size_t pinned = 0;
  for (int i = 0; i < 12; ++i) {  // n^12 is exact in f32 for n <= 3
    AllreduceOptions o;
    o.place = g.place();
    pg.allreduce(d, ones.size(), DType::f32, o)->wait();
    const float want = static_cast<float>(std::pow(n, i + 1));
    check(g.download<float>(d, 1)[0] == want, "repeated allreduce " + std::to_string(i));
    if (i == 0) pinned = staged->pinnedBytes();
  }
  check(staged->pinnedBytes() == pinned, "pinned staging grew from " + std::to_string(pinned) + " to " +
                                             std::to_string(staged->pinnedBytes()) + " bytes over equal ops");
}

int stagedWorker(const std::string& spec) {
  std::istringstream in(spec);
  std::string scenario, backend;
  int rank = -1, world = 0, port = 0;
  in >> scenario >> backend >> rank >> world >> port;
  try {
    cudaOk(cudaSetDevice(0), "cudaSetDevice");  // every rank on cuda:0
    TCPStoreOptions so;
    so.port = static_cast<uint16_t>(port);
    so.timeout = 60s;
    auto store = std::make_shared<PrefixStore>("test", std::make_shared<TCPStore>(so));
    auto pg = createProcessGroup(backend, store, rank, world, 60s);
    if (scenario == "collectives") {
      collectives(*pg, rank, world);
    } else if (scenario == "nccl") {
      Gpu g;
      void* d = g.upload(std::vector<float>(8, 1.0f));
      AllreduceOptions o;
      o.place = g.place();
      try {
        pg->allreduce(d, 8, DType::f32, o)->wait();
        throw std::runtime_error("backend nccl ran with ranks that share a GPU");
      } catch (const ValueError& e) {
        std::printf("rank %d refused: %s\n", rank, e.what());
      }
    } else if (scenario == "gloo") {
      Gpu g;
      std::vector<int32_t> v(3000, rank + 1);
      void* d = g.upload(v);
      AllreduceOptions o;
      o.place = g.place();
      pg->allreduce(d, v.size(), DType::i32, o)->wait();
      expectEqual(g.download<int32_t>(d, v.size()), std::vector<int32_t>(v.size(), world * (world + 1) / 2),
                  "gloo allreduce");
      check(pg->backendName() == "gloo", "backend name " + pg->backendName());
    }
  } catch (const std::exception& e) {
    std::printf("rank %d failed: %s\n", rank, e.what());
    std::fflush(stdout);
    return 1;
  }
  std::printf("rank %d of %d ok\n", rank, world);
  std::fflush(stdout);
  return 0;
}

const int kStagedWorkerHook = [] {
  const char* spec = std::getenv("LOCKSTEP_STAGED_TEST_WORKER");
  if (spec == nullptr) return 0;
  std::exit(stagedWorker(spec));
}();

// ---- the tests: start the ranks ---------------------------------------------------------------

struct RankRun {
  int status = -1;
  std::string output;
};

std::vector<RankRun> runRanks(const std::string& scenario, const std::string& backend, int world) {
  TCPStoreOptions so;
  so.port = 0;
  so.is_server = true;
  so.timeout = 120s;
  TCPStore server(so);
  char self[4096] = {};
  EXPECT_GT(::readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  std::vector<FILE*> pipes;
  for (int r = 0; r < world; ++r) {
    const std::string cmd = "LOCKSTEP_GLOO_HOSTNAME=127.0.0.1 LOCKSTEP_STAGED_TEST_WORKER='" + scenario +
                            " " + backend + " " + std::to_string(r) + " " + std::to_string(world) + " " +
                            std::to_string(server.port()) + "' timeout 180 " + self + " 2>&1";
    pipes.push_back(::popen(cmd.c_str(), "r"));
  }
  std::vector<RankRun> runs(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    FILE* p = pipes[static_cast<size_t>(r)];
    if (p == nullptr) continue;
    std::array<char, 4096> buf;
    while (size_t k = std::fread(buf.data(), 1, buf.size(), p))
      runs[static_cast<size_t>(r)].output.append(buf.data(), k);
    runs[static_cast<size_t>(r)].status = ::pclose(p);
  }
  (void)kStagedWorkerHook;
  return runs;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void expectSharedRun(int world) {
  auto runs = runRanks("collectives", "auto", world);
  std::string all;
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].status, 0) << "rank " << r << ":\n" << runs[r].output;
    EXPECT_NE(runs[r].output.find("rank " + std::to_string(r) + " of " + std::to_string(world) + " ok"),
              std::string::npos)
        << runs[r].output;
    all += runs[r].output;
  }
  // Said once in the job, by rank 0.
  std::string ranks = world == 2 ? "ranks 0 and 1" : "ranks 0, 1 and 2";
  const std::string note =
      "lockstep: " + ranks + " share cuda:0: GPU collectives go through the host (shm), not NCCL";
  EXPECT_EQ(occurrences(all, note), 1u) << all;
  EXPECT_NE(runs[0].output.find(note), std::string::npos) << runs[0].output;
}

TEST(GpuHostStaged, two_ranks_on_cuda0_run_every_collective_through_the_host_exactly) {
  LOCKSTEP_REQUIRE_GPU();
  expectSharedRun(2);
}

TEST(GpuHostStaged, three_ranks_on_cuda0_run_every_collective_through_the_host_exactly) {
  LOCKSTEP_REQUIRE_GPU();
  expectSharedRun(3);
}

TEST(GpuHostStaged, backend_nccl_on_a_shared_gpu_is_refused_on_every_rank_with_the_fix) {
  LOCKSTEP_REQUIRE_GPU();
  auto runs = runRanks("nccl", "nccl", 2);
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::string& out = runs[r].output;
    EXPECT_EQ(runs[r].status, 0) << out;
    EXPECT_NE(out.find("rank " + std::to_string(r) + " refused: "), std::string::npos) << out;
    EXPECT_NE(out.find("backend nccl: ranks 0 and 1 share cuda:0, but NCCL runs one rank per GPU"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("use backend auto (or gloo, shm)"), std::string::npos) << out;
  }
}

TEST(GpuHostStaged, backend_gloo_by_name_takes_gpu_buffers_through_the_host) {
  LOCKSTEP_REQUIRE_GPU();
  auto runs = runRanks("gloo", "gloo", 2);
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].status, 0) << runs[r].output;
    EXPECT_NE(runs[r].output.find("rank " + std::to_string(r) + " of 2 ok"), std::string::npos)
        << runs[r].output;
    EXPECT_EQ(runs[r].output.find("share cuda:0"), std::string::npos)
        << runs[r].output;  // asked for: no note
  }
}

}  // namespace
}  // namespace lockstep::comm
