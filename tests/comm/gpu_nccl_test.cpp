// The nccl backend on cuda:0 at world size 1 (one GPU: NCCL allows one rank per GPU): every
// collective through the registry's group on device buffers, with values checked and stream
// order (the caller's copies are queued on its own stream, not synchronised before the op), and
// the failure paths that one rank can reach: an op stuck past its timeout aborts the
// communicator and names the op and rank, a peer that never joins times the creation out.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "common/gpu.h"
#include "lockstep/comm/backend_registry.h"
#include "lockstep/comm/init.h"
#include "lockstep/comm/nccl/nccl_process_group.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// A caller stream and device buffers filled and read on it (no host synchronisation in between).
class NcclGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    LOCKSTEP_REQUIRE_GPU();
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    for (void* p : buffers_) (void)cudaFree(p);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  BufferPlace place() const { return {0, stream_}; }
  std::shared_ptr<ProcessGroup> group() {
    return createProcessGroup("nccl", std::make_shared<HashStore>(), 0, 1, std::chrono::milliseconds(60000));
  }
  template <typename T>
  void* upload(const std::vector<T>& values, size_t extra_elements = 0) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, (values.size() + extra_elements) * sizeof(T) + 16), cudaSuccess);
    buffers_.push_back(p);
    EXPECT_EQ(cudaMemsetAsync(p, 0xff, (values.size() + extra_elements) * sizeof(T) + 16, stream_),
              cudaSuccess);
    if (!values.empty()) {
      EXPECT_EQ(cudaMemcpyAsync(p, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice, stream_),
                cudaSuccess);
    }
    return p;
  }
  template <typename T>
  std::vector<T> download(const void* p, size_t n) {
    std::vector<T> out(n);
    if (n > 0) {
      EXPECT_EQ(cudaMemcpyAsync(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    }
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return out;
  }
  template <typename T>
  static std::vector<T> iota(size_t n, int start = 1) {
    std::vector<T> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(static_cast<int>((i * 7 + start) % 101) - 50);
    return v;
  }
  cudaStream_t stream_ = nullptr;
  std::vector<void*> buffers_;
};

TEST_F(NcclGpu, registry_group_allreduces_every_op_and_size_on_cuda0) {
  auto pg = group();
  ASSERT_EQ(pg->backendName(), "nccl");
  for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{1} << 20}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max, ReduceOp::product}) {
      auto values = iota<float>(n);
      void* d = upload(values);
      AllreduceOptions o;
      o.op = op;
      o.place = place();
      pg->allreduce(d, n, DType::f32, o)->wait();  // the caller's stream waits; then read on it
      EXPECT_EQ(download<float>(d, n), values) << reduceOpName(op) << " n=" << n;  // one rank: identity
    }
  }
  EXPECT_EQ(pg->sequenceNumber(), 20u);
}

TEST_F(NcclGpu, allreduce_moves_every_dtype) {
  auto pg = group();
  const size_t n = 333;
  AllreduceOptions o;
  o.place = place();
  auto f64 = iota<double>(n);
  void* a = upload(f64);
  pg->allreduce(a, n, DType::f64, o)->wait();
  EXPECT_EQ(download<double>(a, n), f64);
  auto i32 = iota<int32_t>(n);
  void* b = upload(i32);
  pg->allreduce(b, n, DType::i32, o)->wait();
  EXPECT_EQ(download<int32_t>(b, n), i32);
  auto i64 = iota<int64_t>(n);
  void* c = upload(i64);
  pg->allreduce(c, n, DType::i64, o)->wait();
  EXPECT_EQ(download<int64_t>(c, n), i64);
  std::vector<uint8_t> u8(n);
  for (size_t i = 0; i < n; ++i) u8[i] = static_cast<uint8_t>(i * 13);
  void* d = upload(u8);
  pg->allreduce(d, n, DType::u8, o)->wait();
  EXPECT_EQ(download<uint8_t>(d, n), u8);
  // bf16 and f16 as their bit patterns: one rank's sum is the value itself.
  std::vector<uint16_t> bf16(n), f16(n);
  for (size_t i = 0; i < n; ++i) {
    bf16[i] = BFloat16(static_cast<float>(i) - 100.5f).bits;
    f16[i] = static_cast<uint16_t>(0x3c00 + i);  // 1.0 and up, finite
  }
  void* e = upload(bf16);
  pg->allreduce(e, n, DType::bf16, o)->wait();
  EXPECT_EQ(download<uint16_t>(e, n), bf16);
  void* f = upload(f16);
  pg->allreduce(f, n, DType::f16, o)->wait();
  EXPECT_EQ(download<uint16_t>(f, n), f16);
}

TEST_F(NcclGpu, broadcast_reduce_and_barrier) {
  auto pg = group();
  const size_t n = 4097;
  auto values = iota<float>(n, 3);
  void* d = upload(values);
  BroadcastOptions b;
  b.place = place();
  pg->broadcast(d, n, DType::f32, b)->wait();
  EXPECT_EQ(download<float>(d, n), values);
  ReduceOptions r;
  r.op = ReduceOp::max;
  r.place = place();
  pg->reduce(d, n, DType::f32, r)->wait();
  EXPECT_EQ(download<float>(d, n), values);
  BarrierOptions bar;
  bar.place = place();
  auto w = pg->barrier(bar);
  w->wait();
  EXPECT_TRUE(w->isCompleted());
  EXPECT_EQ(w->exception(), nullptr);
  EXPECT_NE(w->description().find("barrier #3 (nccl, rank 0/1"), std::string::npos) << w->description();
  // A barrier without a place uses the communicator's device.
  pg->barrier()->wait();
  b.root = 1;
  EXPECT_THROW(pg->broadcast(d, n, DType::f32, b), ValueError);
}

TEST_F(NcclGpu, allgather_reduce_scatter_gather_scatter_alltoall_at_world_one) {
  auto pg = group();
  const size_t n = 777;
  auto in_values = iota<int64_t>(n, 5);
  void* in = upload(in_values);
  void* out = upload(std::vector<int64_t>(n, 0));
  AllgatherOptions ag;
  ag.place = place();
  pg->allgather(in, out, n, DType::i64, ag)->wait();
  EXPECT_EQ(download<int64_t>(out, n), in_values);
  void* out2 = upload(std::vector<int64_t>(n, 0));
  pg->allgatherv(in, out2, {n}, DType::i64, ag)->wait();
  EXPECT_EQ(download<int64_t>(out2, n), in_values);
  EXPECT_THROW(pg->allgatherv(in, out2, {n, n}, DType::i64, ag), ValueError);
  void* out3 = upload(std::vector<int64_t>(n, 0));
  ReduceScatterOptions rs;
  rs.place = place();
  pg->reduceScatter(in, out3, n, DType::i64, rs)->wait();
  EXPECT_EQ(download<int64_t>(out3, n), in_values);
  void* out4 = upload(std::vector<int64_t>(n, 0));
  GatherOptions g;
  g.place = place();
  pg->gather(in, out4, n, DType::i64, g)->wait();
  EXPECT_EQ(download<int64_t>(out4, n), in_values);
  void* out5 = upload(std::vector<int64_t>(n, 0));
  ScatterOptions s;
  s.place = place();
  pg->scatter(in, out5, n, DType::i64, s)->wait();
  EXPECT_EQ(download<int64_t>(out5, n), in_values);
  void* out6 = upload(std::vector<int64_t>(n, 0));
  AlltoallOptions a;
  a.place = place();
  pg->alltoall(in, out6, n, DType::i64, a)->wait();
  EXPECT_EQ(download<int64_t>(out6, n), in_values);
}

TEST_F(NcclGpu, host_buffers_self_peers_and_tags_are_clear_errors) {
  auto pg = group();
  std::vector<float> host(4, 1.0f);
  try {
    pg->allreduce(host.data(), host.size(), DType::f32);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("backend nccl moves GPU memory only"), std::string::npos)
        << e.what();
  }
  void* d = upload(host);
  SendRecvOptions o;
  o.place = place();
  EXPECT_THROW(pg->send(d, 4, DType::f32, 0, o), ValueError);  // no peer at world size 1
  EXPECT_THROW(pg->recv(d, 4, DType::f32, 0, o), ValueError);
  AllreduceOptions bad;
  bad.place = {1 << 20, stream_};
  EXPECT_THROW(pg->allreduce(d, 4, DType::f32, bad), ValueError);  // no such device
}

TEST_F(NcclGpu, auto_sends_gpu_buffers_to_nccl_and_host_buffers_to_shm) {
  auto pg = createProcessGroup("auto", std::make_shared<HashStore>(), 0, 1);
  EXPECT_EQ(pg->backendName(), "auto");
  auto values = iota<float>(513);
  void* d = upload(values);
  AllreduceOptions o;
  o.place = place();
  auto on_gpu = pg->allreduce(d, values.size(), DType::f32, o);
  on_gpu->wait();
  EXPECT_NE(on_gpu->description().find("(nccl, rank 0/1"), std::string::npos) << on_gpu->description();
  EXPECT_EQ(download<float>(d, values.size()), values);
  std::vector<float> host = values;
  auto on_host = pg->allreduce(host.data(), host.size(), DType::f32);
  on_host->wait();
  EXPECT_NE(on_host->description().find("(shm, rank 0/1"), std::string::npos) << on_host->description();
  EXPECT_EQ(host, values);
}

// The caller's stream is held by a host function until `release` is set, so the op (which waits
// for it on the communication stream) cannot finish: as a peer that never arrives.
struct StreamBlocker {
  std::atomic<bool> release{false};
  std::thread releaser;
  explicit StreamBlocker(cudaStream_t s, std::chrono::milliseconds hold) {
    EXPECT_EQ(cudaLaunchHostFunc(
                  s,
                  [](void* self) {
                    auto* b = static_cast<StreamBlocker*>(self);
                    while (!b->release.load()) std::this_thread::sleep_for(1ms);
                  },
                  this),
              cudaSuccess);
    // ncclCommAbort may wait for the device; let the stream go after a while in any case.
    releaser = std::thread([this, hold] {
      std::this_thread::sleep_for(hold);
      release = true;
    });
  }
  ~StreamBlocker() {
    release = true;
    releaser.join();
  }
};

TEST_F(NcclGpu, wait_that_times_out_aborts_the_communicator_and_names_op_and_rank) {
  auto pg = group();
  void* d = upload(std::vector<float>(16, 1.0f));
  AllreduceOptions o;
  o.place = place();
  pg->allreduce(d, 16, DType::f32, o)->wait();  // the communicator exists and works
  {
    StreamBlocker blocker(stream_, 3000ms);
    auto work = pg->allreduce(d, 16, DType::f32, o);
    try {
      work->wait(200ms);
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const TimeoutError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("allreduce #2 (nccl, rank 0/1"), std::string::npos) << m;
      EXPECT_NE(m.find("Work::wait timed out after 200 ms"), std::string::npos) << m;
      EXPECT_NE(m.find("ncclCommAbort"), std::string::npos) << m;
    }
    EXPECT_TRUE(work->isCompleted());
    CUDA_OK(cudaStreamSynchronize(stream_));
  }
  // Errors after the abort are clear, and come at once.
  try {
    pg->allreduce(d, 16, DType::f32, o)->wait();
    ADD_FAILURE() << "expected PeerError";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce #3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("aborted earlier"), std::string::npos) << e.what();
  }
}

TEST_F(NcclGpu, op_past_its_timeout_is_aborted_by_the_watchdog) {
  auto pg = group();
  void* d = upload(std::vector<float>(16, 1.0f));
  BroadcastOptions o;
  o.place = place();
  pg->broadcast(d, 16, DType::f32, o)->wait();
  StreamBlocker blocker(stream_, 3000ms);
  o.timeout = 300ms;
  auto work = pg->broadcast(d, 16, DType::f32, o);
  work->wait();  // kForever: queues the caller's stream behind the op, does not block the host
  for (int i = 0; i < 2000 && !work->isCompleted(); ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(work->isCompleted());
  try {
    std::rethrow_exception(work->exception());
  } catch (const TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("broadcast #2 (nccl, rank 0/1"), std::string::npos) << m;
    EXPECT_NE(m.find("timed out (the op's timeout)"), std::string::npos) << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected TimeoutError, got " << e.what();
  }
}

TEST_F(NcclGpu, a_rank_that_never_joins_times_out_creating_the_communicator) {
  NcclOptions opts;
  opts.timeout = 1500ms;
  NcclProcessGroup pg(std::make_shared<HashStore>(), 0, 2, opts);  // rank 1 never comes
  void* d = upload(std::vector<float>(4, 1.0f));
  AllreduceOptions o;
  o.place = place();
  try {
    pg.allreduce(d, 4, DType::f32, o);
    ADD_FAILURE() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 0 of 2 on cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("not every rank joined"), std::string::npos) << m;
  }
  try {
    pg.allreduce(d, 4, DType::f32, o);
    ADD_FAILURE() << "expected PeerError";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("creating the NCCL communicator failed earlier"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lockstep::comm
