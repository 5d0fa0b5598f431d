// Tensors on a GPU: creation, copies between host and device in every layout and dtype, pinned
// asynchronous copies, the caching allocator (reuse, statistics, streams, out of memory), and the
// errors for host code handed a GPU tensor. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "common/gpu.h"
#include "lockstep/tensor/cuda/allocator.h"
#include "lockstep/tensor/cuda/graph.h"
#include "lockstep/tensor/cuda/runtime.h"
#include "lockstep/tensor/device_copy.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep {
namespace {

Tensor iota(const Shape& shape, DType dtype = DType::f32, float offset = 0.0f) {
  std::vector<float> v(static_cast<size_t>(shapeNumel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 3.0f + offset;
  return Tensor::fromVector(v, shape).to(dtype);
}

TEST(GpuTensor, round_trips_through_the_device_in_every_dtype) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
    Tensor h = iota({3, 5, 7}, DType::f64).to(t);
    if (t == DType::u8) h = Tensor::arange(105, DType::u8).view({3, 5, 7});
    Tensor d = h.to(Device::cuda(0));
    EXPECT_TRUE(d.isCuda());
    EXPECT_EQ(deviceName(d.device()), "cuda:0");
    EXPECT_EQ(d.dtype(), t);
    Tensor back = d.to(Device::cpu());
    EXPECT_FALSE(back.isCuda());
    EXPECT_EQ(back.toVector<double>(), h.toVector<double>()) << dtypeName(t);
  }
}

TEST(GpuTensor, copies_casts_and_transposes_on_the_device) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor h = iota({4, 6});
  Tensor d = h.to(Device::cuda(0));
  // A strided view made contiguous on the device, a cast on the device, a channels-last layout.
  EXPECT_EQ(d.transpose(0, 1).contiguous().toVector<float>(),
            h.transpose(0, 1).contiguous().toVector<float>());
  EXPECT_EQ(d.to(DType::bf16).to(DType::f32).toVector<float>(),
            h.to(DType::bf16).to(DType::f32).toVector<float>());
  Tensor img = iota({2, 3, 4, 5});
  Tensor cl = img.to(Device::cuda(0)).toFormat(MemoryFormat::channels_last);
  EXPECT_TRUE(cl.isChannelsLast());
  EXPECT_TRUE(cl.isCuda());
  EXPECT_EQ(cl.toVector<float>(), img.toVector<float>());
  // Host -> device into a non-dense destination (a column of a wider tensor), and back.
  Tensor wide = Tensor::zeros({4, 8}, DType::f32, Device::cuda(0));
  wide.narrow(1, 2, 6).copyFrom(h);
  Tensor expect = Tensor::zeros({4, 8});
  expect.narrow(1, 2, 6).copyFrom(h);
  EXPECT_EQ(wide.toVector<float>(), expect.toVector<float>());
  // Device -> host from a transposed view into a transposed host view, with a cast.
  Tensor host64 = Tensor::zeros({6, 4}, DType::f64);
  host64.copyFrom(d.transpose(0, 1));
  EXPECT_EQ(host64.toVector<double>(), h.transpose(0, 1).to(DType::f64).contiguous().toVector<double>());
}

// Strided copies and casts move 16 bytes per access where the innermost dim is contiguous on both
// sides and everything is aligned to it (copy.cu), one element otherwise: each layout a transformer
// makes (heads transposed out of and back into [B, T, H, D], the q/k/v slices of a fused projection
// written into its gradient, broadcast rows), inner sizes that are not a multiple of the run, and
// views that start off the alignment, in every dtype pair that casts, against the host's copies.
TEST(GpuTensor, strided_copies_in_runs_and_single_elements_match_the_host) {
  LOCKSTEP_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const std::pair<DType, DType> pairs[] = {{DType::bf16, DType::bf16}, {DType::f32, DType::bf16},
                                           {DType::bf16, DType::f32},  {DType::f32, DType::f32},
                                           {DType::f16, DType::f32},   {DType::f64, DType::f32},
                                           {DType::u8, DType::u8},     {DType::i64, DType::i32}};
  for (const auto& [from, to] : pairs) {
    const std::string what = std::string(dtypeName(from)) + " -> " + dtypeName(to);
    auto same = [&](const Tensor& got, const Tensor& want, const std::string& how) {
      EXPECT_TRUE(got.isCuda()) << what << " " << how;
      EXPECT_EQ(got.dtype(), want.dtype()) << what << " " << how;
      EXPECT_EQ(got.shape(), want.shape()) << what << " " << how;
      EXPECT_EQ(got.to(Device::cpu()).toVector<double>(), want.toVector<double>()) << what << " " << how;
    };
    for (int64_t d : {64, 8, 7, 1}) {
      const Tensor h = iota({2, 33, 4, d}, DType::f64).to(from);
      const Tensor g = h.to(gpu);
      same(g.transpose(1, 2).to(to).contiguous(), h.transpose(1, 2).to(to).contiguous(),
           "heads out, D=" + std::to_string(d));
      const Tensor back = h.transpose(1, 2).contiguous();
      same(back.to(gpu).transpose(1, 2).to(to).contiguous(), back.transpose(1, 2).to(to).contiguous(),
           "heads back, D=" + std::to_string(d));
      // A slice of a fused [B, T, 3, H, D] gradient written from [B, T, H, D].
      Tensor wide = Tensor::zeros({2, 33, 3, 4, d}, to, gpu);
      Tensor wide_h = Tensor::zeros({2, 33, 3, 4, d}, to);
      wide.narrow(2, 1, 1).squeeze(2).copyFrom(g);
      wide_h.narrow(2, 1, 1).squeeze(2).copyFrom(h);
      same(wide, wide_h, "slice of a fused gradient, D=" + std::to_string(d));
    }
    // A broadcast row (stride 0), a view starting one element in (misaligned), contiguous casts of
    // a run multiple and of a remainder.
    const Tensor row = iota({1, 40}, DType::f64).to(from);
    same(row.to(gpu).expand({5, 40}).to(to).contiguous(), row.expand({5, 40}).to(to).contiguous(),
         "broadcast");
    const Tensor m = iota({6, 17}, DType::f64).to(from);
    same(m.to(gpu).narrow(1, 1, 16).to(to).contiguous(), m.narrow(1, 1, 16).to(to).contiguous(),
         "misaligned");
    for (int64_t n : {1024, 1001}) {
      const Tensor flat = iota({n}, DType::f64).to(from);
      same(flat.to(gpu).to(to), flat.to(to), "contiguous " + std::to_string(n));
      same(flat.to(gpu).narrow(0, 1, n - 8).to(to), flat.narrow(0, 1, n - 8).to(to), "contiguous from 1");
    }
  }
}

// NCHW <-> NHWC reorders on the device (a tiled transpose per image, with the cast when the dtypes
// differ): sizes that are not multiples of the 32x32 tiles, 1x1 planes, one channel, and a
// conv weight's shape, against the host's reorder.
TEST(GpuTensor, channels_last_reorders_in_every_direction_and_dtype) {
  LOCKSTEP_REQUIRE_GPU();
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{3, 67, 9, 7}, Shape{5, 40, 1, 1}, Shape{4, 1, 33, 35},
                             Shape{512, 256, 3, 3}}) {
    for (DType from : {DType::f32, DType::bf16}) {
      for (DType to : {DType::f32, DType::bf16, DType::f16}) {
        const std::string what = shapeToString(shape) + " " + dtypeName(from) + " -> " + dtypeName(to);
        Tensor h = iota(shape, from);
        Tensor nhwc = Tensor::empty(shape, to, MemoryFormat::channels_last, Device::cuda(0));
        nhwc.copyFrom(h.to(Device::cuda(0)));
        EXPECT_TRUE(nhwc.isChannelsLast()) << what;
        EXPECT_EQ(nhwc.to(Device::cpu()).toVector<double>(), h.to(to).toVector<double>()) << what;
        Tensor nchw = Tensor::empty(shape, from, MemoryFormat::contiguous, Device::cuda(0));
        nchw.copyFrom(nhwc);
        EXPECT_EQ(nchw.to(Device::cpu()).toVector<double>(), h.to(to).to(from).toVector<double>()) << what;
      }
    }
  }
}

// Tensor::copyMany: the pairs of contiguous floating tensors on the GPU go through multi-tensor
// launches (more pairs than one launch holds, spans of several chunks, odd sizes and offsets, every
// dtype pair), the rest one copyFrom each; every result equals copyFrom's bitwise.
TEST(GpuTensor, copy_many_equals_copy_from_pair_by_pair) {
  LOCKSTEP_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const DType floats[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
  std::vector<Tensor> dst, src, want;
  int64_t seed = 0;
  for (int rep = 0; rep < 30; ++rep) {
    for (DType dt : floats) {
      for (DType st : floats) {
        const int64_t n = (rep == 0 ? 3 * 4096 + 17 : 1 + (seed * 7919) % 9000);
        // Values of each pair's own (a block reading another span's source would show), from an
        // odd offset.
        Tensor s = (iota({n + 1}, DType::f64, static_cast<float>(seed % 97)).to(st).to(gpu)).narrow(0, 1, n);
        Tensor d = Tensor::zeros({n}, dt, gpu), w = Tensor::zeros({n}, dt, gpu);
        w.copyFrom(s);
        EXPECT_TRUE(detail::copyManyTakes(d, s)) << d.describe() << " <- " << s.describe();
        dst.push_back(d);
        src.push_back(s);
        want.push_back(w);
        ++seed;
      }
    }
  }
  // One dtype pair past a launch's 96 spans, and one span past its 4,096 blocks of work (the
  // launches flush mid-span and take the rest up again).
  for (int i = 0; i < 200; ++i) {
    const int64_t n = 1 + (i * 104729) % 5000;
    Tensor s = iota({n}, DType::bf16, static_cast<float>(i)).to(gpu);
    Tensor d = Tensor::zeros({n}, DType::f32, gpu);
    dst.push_back(d);
    src.push_back(s);
    want.push_back(s.to(DType::f32));
  }
  {
    const int64_t n = int64_t{4096} * 4096 + 4097;
    Tensor s = Tensor::arange(n, DType::f32).to(gpu).to(DType::bf16);
    dst.push_back(Tensor::zeros({n}, DType::f32, gpu));
    src.push_back(s);
    want.push_back(s.to(DType::f32));
    EXPECT_TRUE(detail::copyManyTakes(dst.back(), src.back()));
  }
  // Taken one at a time: a transposed source, an integer pair, a host source.
  Tensor m = iota({6, 5}).to(gpu);
  dst.push_back(Tensor::zeros({5, 6}, DType::bf16, gpu));
  src.push_back(m.transpose(0, 1));
  want.push_back(m.transpose(0, 1).to(DType::bf16));
  dst.push_back(Tensor::zeros({7}, DType::i32, gpu));
  src.push_back(Tensor::arange(7, DType::i64).to(gpu));
  want.push_back(Tensor::arange(7, DType::i32).to(gpu));
  dst.push_back(Tensor::zeros({7}, DType::f32, gpu));
  src.push_back(iota({7}));
  want.push_back(iota({7}).to(gpu));
  ASSERT_GT(dst.size(), 600u);
  Tensor::copyMany(dst, src);
  for (size_t i = 0; i < dst.size(); ++i) {
    EXPECT_EQ(dst[i].toVector<double>(), want[i].toVector<double>())
        << i << ": " << dst[i].describe() << " <- " << src[i].describe();
  }
}

TEST(GpuTensor, fills_and_items) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor z = Tensor::zeros({1000}, DType::f32, Device::cuda(0));
  EXPECT_EQ(z.toVector<float>(), std::vector<float>(1000, 0.0f));
  Tensor f = Tensor::full({3, 3}, 2.5, DType::bf16, Device::cuda(0));
  EXPECT_EQ(f.toVector<float>(), std::vector<float>(9, 2.5f));
  f.transpose(0, 1).narrow(0, 1, 1).fill(-1.0);  // a strided fill: column 1
  EXPECT_EQ(f.toVector<float>(), (std::vector<float>{2.5f, -1, 2.5f, 2.5f, -1, 2.5f, 2.5f, -1, 2.5f}));
  EXPECT_EQ(Tensor::scalar(7, DType::i64, Device::cuda(0)).item<int64_t>(), 7);
}

TEST(GpuTensor, pinned_memory_copies_asynchronously_in_stream_order) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor h = iota({1 << 20}).pinMemory();
  EXPECT_TRUE(h.isPinned());
  EXPECT_FALSE(h.isCuda());
  Tensor d = h.to(Device::cuda(0), /*non_blocking=*/true);
  Tensor back = Tensor::empty({1 << 20}).pinMemory();
  back.copyFrom(d, /*non_blocking=*/true);
  cuda::currentStream(0).synchronize();  // the copies are ordered on the current stream
  EXPECT_EQ(back.toVector<float>(), h.toVector<float>());
}

TEST(GpuTensor, caching_allocator_reuses_blocks_and_counts_them) {
  LOCKSTEP_REQUIRE_GPU();
  auto& alloc = cuda::CudaCachingAllocator::forDevice(0);
  alloc.emptyCache();
  const cuda::MemoryStats s0 = alloc.stats();
  {
    Tensor a = Tensor::empty({1 << 18}, DType::f32, MemoryFormat::contiguous, Device::cuda(0));  // 1 MiB
  }
  const cuda::MemoryStats s1 = alloc.stats();
  EXPECT_EQ(s1.cuda_mallocs, s0.cuda_mallocs + 1);
  EXPECT_EQ(s1.allocated_current, s0.allocated_current);
  EXPECT_GE(s1.allocated_peak, s0.allocated_current + (size_t(1) << 20));
  EXPECT_GE(s1.reserved_current, s0.reserved_current + (size_t(1) << 20));
  for (int i = 0; i < 10; ++i) {
    Tensor a = Tensor::empty({1 << 18}, DType::f32, MemoryFormat::contiguous, Device::cuda(0));
  }
  const cuda::MemoryStats s2 = alloc.stats();
  EXPECT_EQ(s2.cuda_mallocs, s1.cuda_mallocs) << "a freed block of the same size class is reused";
  EXPECT_EQ(s2.allocations, s1.allocations + 10);
  alloc.emptyCache();
  EXPECT_EQ(alloc.stats().reserved_current, alloc.stats().allocated_current);
}

// LOCKSTEP_CUDA_EXACT_SIZES=1 (set by the GPU check's compute-sanitizer reruns), read once per
// process, so the check runs in a process of its own (a death test's re-run of this program): each
// block is exactly the bytes asked for, and a freed block serves only a request of its size.
TEST(GpuTensor, exact_sizes_hand_out_exactly_the_bytes_asked_for) {
  LOCKSTEP_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ASSERT_EQ(setenv("LOCKSTEP_CUDA_EXACT_SIZES", "1", 1), 0);
  EXPECT_EXIT(
      {
        auto& alloc = cuda::CudaCachingAllocator::forDevice(0);
        const cuda::Stream stream = cuda::currentStream(0);
        const cuda::MemoryStats s0 = alloc.stats();
        alloc.release(alloc.allocate(1000, stream));
        const cuda::MemoryStats s1 = alloc.stats();
        alloc.release(alloc.allocate(1004, stream));  // not the freed 1,000-byte block
        const cuda::MemoryStats s2 = alloc.stats();
        alloc.release(alloc.allocate(1000, stream));  // that block again
        const cuda::MemoryStats s3 = alloc.stats();
        std::fprintf(stderr, "reserved +%zu +%zu +%zu, cudaMallocs +%llu +%llu +%llu\n",
                     s1.reserved_current - s0.reserved_current, s2.reserved_current - s1.reserved_current,
                     s3.reserved_current - s2.reserved_current,
                     static_cast<unsigned long long>(s1.cuda_mallocs - s0.cuda_mallocs),
                     static_cast<unsigned long long>(s2.cuda_mallocs - s1.cuda_mallocs),
                     static_cast<unsigned long long>(s3.cuda_mallocs - s2.cuda_mallocs));
        std::exit(s1.reserved_current - s0.reserved_current == 1000 &&
                          s2.reserved_current - s1.reserved_current == 1004 &&
                          s3.reserved_current == s2.reserved_current &&
                          s1.cuda_mallocs == s0.cuda_mallocs + 1 && s2.cuda_mallocs == s1.cuda_mallocs + 1 &&
                          s3.cuda_mallocs == s2.cuda_mallocs
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "reserved \\+1000 \\+1004 \\+0, cudaMallocs \\+1 \\+1 \\+0");
  unsetenv("LOCKSTEP_CUDA_EXACT_SIZES");
}

TEST(GpuTensor, a_block_used_on_another_stream_waits_for_it_before_reuse) {
  LOCKSTEP_REQUIRE_GPU();
  auto& alloc = cuda::CudaCachingAllocator::forDevice(0);
  cuda::Stream side = cuda::streamFromPool(0);
  void* p = nullptr;
  {
    Tensor a = Tensor::full({1 << 16}, 1.0, DType::f32, Device::cuda(0));
    p = a.devicePtr();
    {
      cuda::Event filled;  // the side stream reads a only after the fill queued on the current one
      filled.record(cuda::currentStream(0));
      filled.block(side);
      cuda::StreamGuard g(side);
      // b is the side stream's own block: a cudaMalloc when that stream's cache has none of its size
      // (blocks are cached per stream, so a's stream's blocks never serve it).
      Tensor b = Tensor::empty({1 << 16}, DType::f32, MemoryFormat::contiguous, Device::cuda(0));
      b.copyFrom(a);  // a is read on the side stream
    }
    alloc.recordStream(p, side);
  }
  side.synchronize();
  const uint64_t mallocs = alloc.stats().cuda_mallocs;
  Tensor c = Tensor::empty({1 << 16}, DType::f32, MemoryFormat::contiguous, Device::cuda(0));
  // Once the side stream's work is done the block comes back (pending events are checked on
  // allocate): c gets a's block, without a cudaMalloc.
  EXPECT_EQ(c.devicePtr(), p);
  EXPECT_EQ(alloc.stats().cuda_mallocs, mallocs);
}

TEST(GpuTensor, out_of_memory_names_the_request_and_what_to_do) {
  LOCKSTEP_REQUIRE_GPU();
  try {
    Tensor huge = Tensor::empty({int64_t(1) << 40}, DType::f32, MemoryFormat::contiguous, Device::cuda(0));
    FAIL() << "4 TiB was allocated";
  } catch (const cuda::OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_GE(cuda::CudaCachingAllocator::forDevice(0).stats().ooms, 1u);
  // The device still works afterwards.
  EXPECT_EQ(Tensor::full({4}, 3.0, DType::f32, Device::cuda(0)).toVector<float>(),
            std::vector<float>(4, 3.0f));
}

TEST(GpuTensor, host_code_refuses_a_gpu_tensor_and_says_so) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor d = Tensor::zeros({2, 3}, DType::f32, Device::cuda(0));
  try {
    (void)d.dataPtr();
    FAIL();
  } catch (const NotSupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_NE(d.describe().find("cuda:0"), std::string::npos);
  EXPECT_THROW(checkDeviceAvailable(Device::cuda(cudaDeviceCount())), NotSupportedError);
}

TEST(GpuTensor, stream_and_device_guards_restore_what_they_replaced) {
  LOCKSTEP_REQUIRE_GPU();
  cuda::Stream before = cuda::currentStream(0);
  cuda::Stream side = cuda::streamFromPool(0, /*high_priority=*/true);
  {
    cuda::StreamGuard g(side);
    EXPECT_EQ(cuda::currentStream(0), side);
  }
  EXPECT_EQ(cuda::currentStream(0), before);
  EXPECT_EQ(before, cuda::defaultStream(0));
  cuda::Event start(true), stop(true);
  start.record(before);
  Tensor::full({1 << 20}, 1.0, DType::f32, Device::cuda(0));
  stop.record(before);
  stop.synchronize();
  EXPECT_GE(start.elapsedMs(stop), 0.0f);
  EXPECT_NE(cuda::describeDevice(0).find("sm_"), std::string::npos);
}

TEST(GpuTensor, a_captured_graph_replays_on_refilled_inputs_into_the_same_outputs) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor src = iota({64, 32}).to(Device::cuda(0));
  Tensor out;
  cuda::Graph g;
  g.capture(0, [&] {
    Tensor t = src.transpose(0, 1).contiguous();  // allocated inside: from the graph's pool
    out = t.to(DType::bf16);
  });
  EXPECT_TRUE(g.captured());
  EXPECT_GE(g.numNodes(), 2u);
  // Nothing ran yet: capture records. Replay on new input values.
  for (int round = 0; round < 3; ++round) {
    Tensor shifted = Tensor::fromVector(std::vector<float>(64 * 32, static_cast<float>(round)), {64, 32});
    src.copyFrom(shifted);
    g.replay();
    EXPECT_EQ(out.toVector<float>(), shifted.transpose(0, 1).contiguous().to(DType::bf16).toVector<float>());
  }
  // A host read inside a capture is refused with CUDA's reason, and the device still works.
  cuda::Graph bad;
  EXPECT_THROW(bad.capture(0, [&] { (void)src.to(Device::cpu()); }), Error);
  EXPECT_FALSE(bad.captured());
  EXPECT_EQ(Tensor::full({2}, 1.0, DType::f32, Device::cuda(0)).toVector<float>(),
            std::vector<float>(2, 1.0f));
}

}  // namespace
}  // namespace lockstep
