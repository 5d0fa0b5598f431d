#include "lockstep/kernels/tables/conv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <dnnl.hpp>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <thread>

#include "common/check.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/dnnl/context.h"

using namespace lockstep;
using kernels::Conv2dParams;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
struct ConvCase {
  Shape x, w;
  Conv2dParams p;
  bool bias = true;
  bool channels_last = true;
};

std::vector<ConvCase> cases() {
  std::vector<ConvCase> cs;
  cs.push_back({{32, 1, 28, 28}, {32, 1, 3, 3}, {}, true, false});  // the CNN's first layer (C=1)
  cs.push_back({{2, 32, 13, 13}, {64, 32, 3, 3}, {}});
  cs.push_back(
      {{1, 3, 7, 5}, {5, 3, 3, 2}, {{2, 1}, {1, 0}, {1, 1}, 1, false}, false});   // batch 1, odd sizes
  cs.push_back({{3, 4, 9, 8}, {6, 2, 3, 3}, {{1, 2}, {2, 1}, {2, 1}, 2, true}});  // groups, dilation, relu
  cs.push_back({{2, 5, 6, 6}, {7, 5, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 1, true}, true, false});  // NCHW, 1x1
  cs.push_back({{2, 6, 5, 5}, {6, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 6, false}});              // depthwise
  // Winograd's shapes on AVX-512 CPUs (3x3, stride 1, >= 32 channels, >= 32 output tiles of 4x4):
  // padded; unpadded with relu and a ragged last tile; an NCHW input without bias.
  cs.push_back({{2, 32, 16, 16}, {32, 32, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1, false}});
  cs.push_back({{8, 48, 10, 10}, {64, 48, 3, 3}, {{1, 1}, {0, 0}, {1, 1}, 1, true}});
  cs.push_back({{4, 32, 9, 11}, {40, 32, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1, false}, false, false});
  return cs;
}

Tensor layout(const Tensor& t, bool channels_last) {
  return channels_last ? t.toFormat(MemoryFormat::channels_last) : t;
}
}  // namespace

TEST(Conv2d, forward_matches_reference) {
  uint64_t seed = 10;
  for (const auto& c : cases()) {
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    Tensor w = randomTensor(c.w, DType::f32, seed++);
    Tensor b = c.bias ? randomTensor({c.w[0]}, DType::f32, seed++) : Tensor();
    Tensor y = kernels::onednn::kConv.conv2dForward(x, w, b, c.p);
    EXPECT_TRUE(tensorsNear(y, kernels::reference::kConv.conv2dForward(x, w, b, c.p), 1e-4, 1e-4))
        << shapeToString(c.x) << " * " << shapeToString(c.w);
    // oneDNN computes channels_last whatever the input's layout.
    EXPECT_TRUE(y.isChannelsLast()) << shapeToString(c.x);
  }
}

TEST(Conv2d, backward_matches_reference) {
  uint64_t seed = 50;
  for (const auto& c : cases()) {
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    Tensor w = randomTensor(c.w, DType::f32, seed++);
    Shape ys = kernels::conv2dOutputShape(c.x, c.w, c.p);
    Tensor gy = layout(randomTensor(ys, DType::f32, seed++), c.channels_last);
    Tensor gx = kernels::onednn::kConv.conv2dBackwardData(gy, x, w, c.p);
    EXPECT_TRUE(tensorsNear(gx, kernels::reference::kConv.conv2dBackwardData(gy, x, w, c.p), 1e-4, 1e-4));
    EXPECT_TRUE(gx.isChannelsLast());
    auto fast = kernels::onednn::kConv.conv2dBackwardWeights(gy, x, c.w, c.bias, c.p);
    auto ref = kernels::reference::kConv.conv2dBackwardWeights(gy, x, c.w, c.bias, c.p);
    EXPECT_TRUE(tensorsNear(fast.weight, ref.weight, 1e-3, 1e-4))
        << shapeToString(c.x) << " * " << shapeToString(c.w);
    EXPECT_EQ(fast.bias.defined(), c.bias);
    if (c.bias) {
      EXPECT_TRUE(tensorsNear(fast.bias, ref.bias, 1e-3, 1e-4));
    }
  }
}

// oneDNN's library-managed scratchpad of some implementations (jit:avx2 backward-weights among
// them) belongs to the thread that created the primitive: lockstep's cached primitives, made on one
// thread and run on another (ranks as threads), wrote through the running thread's null buffer.
// Every primitive is created with scratchpad_mode::user and given lockstep's scratchpad.
TEST(Conv2d, a_primitive_made_on_one_thread_runs_on_another) {
  std::vector<ConvCase> cs = cases();
  cs.push_back(
      {{2, 512, 1, 1}, {512, 512, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1, false}, false});  // ResNet-18's last
  cs.push_back({{2, 64, 8, 8}, {64, 64, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1, false}, false});
  auto passes = [&](const ConvCase& c, uint64_t seed, bool compare) {
    Tensor x = layout(randomTensor(c.x, DType::f32, seed), c.channels_last);
    Tensor w = randomTensor(c.w, DType::f32, seed + 1);
    Tensor b = c.bias ? randomTensor({c.w[0]}, DType::f32, seed + 2) : Tensor();
    Tensor gy = layout(randomTensor(kernels::conv2dOutputShape(c.x, c.w, c.p), DType::f32, seed + 3),
                       c.channels_last);
    Tensor y = kernels::onednn::kConv.conv2dForward(x, w, b, c.p);
    Tensor gx = kernels::onednn::kConv.conv2dBackwardData(gy, x, w, c.p);
    auto gw = kernels::onednn::kConv.conv2dBackwardWeights(gy, x, c.w, c.bias, c.p);
    if (!compare) return;
    const auto& ref = kernels::reference::kConv;
    EXPECT_TRUE(tensorsNear(y, ref.conv2dForward(x, w, b, c.p), 1e-4, 1e-4)) << shapeToString(c.x);
    EXPECT_TRUE(tensorsNear(gx, ref.conv2dBackwardData(gy, x, w, c.p), 1e-4, 1e-4)) << shapeToString(c.x);
    const auto want = ref.conv2dBackwardWeights(gy, x, c.w, c.bias, c.p);
    EXPECT_TRUE(tensorsNear(gw.weight, want.weight, 1e-3, 1e-4))
        << shapeToString(c.x) << " * " << shapeToString(c.w);
    if (c.bias) {
      EXPECT_TRUE(tensorsNear(gw.bias, want.bias, 1e-3, 1e-4)) << shapeToString(c.x);
    }
  };
  auto onThread = [&](uint64_t seed, bool compare) {
    std::thread([&] {
      try {
        for (const auto& c : cs) passes(c, seed, compare);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    }).join();
  };
  // The primitives are made (and cached) on a thread that then ends (or, where the whole program
  // runs in one process, earlier tests' on the main thread); fresh threads run them.
  onThread(7, false);
  onThread(100, true);
  onThread(200, true);
}

TEST(OneDnn, a_primitive_without_lockstep_s_attributes_is_refused) {
  dnnl::memory::desc md({4, 4}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
  dnnl::eltwise_forward relu(dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, md, 0.f),
      kernels::onednn::engine()));
  Tensor x = Tensor::zeros({4, 4}), y = Tensor::zeros({4, 4});
  const std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, kernels::onednn::memory(md, x)},
                                                   {DNNL_ARG_DST, kernels::onednn::memory(md, y)}};
  try {
    kernels::onednn::execute(relu, args);
    FAIL() << "a library-scratchpad primitive ran";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("scratchpad_mode::user"), std::string::npos) << e.what();
  }
  dnnl::eltwise_forward ours(dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, md, 0.f),
      kernels::onednn::attributes(), kernels::onednn::engine()));
  EXPECT_NO_THROW(kernels::onednn::execute(ours, args));
}

TEST(Conv2d, gradient_layout_may_differ_from_input) {
  Tensor x = randomTensor({2, 3, 6, 6}, DType::f32, 1).toFormat(MemoryFormat::channels_last);
  Tensor w = randomTensor({4, 3, 3, 3}, DType::f32, 2);
  Tensor gy = randomTensor({2, 4, 4, 4}, DType::f32, 3);  // contiguous, as after a flatten's backward
  EXPECT_TRUE(tensorsNear(kernels::conv2dBackwardData(gy, x, w, {}),
                          kernels::reference::kConv.conv2dBackwardData(gy, x, w, {}), 1e-4, 1e-4));
}

TEST(Conv2d, rejects_mismatched_shapes) {
  Tensor x = Tensor::zeros({1, 3, 5, 5});
  EXPECT_THROW(kernels::conv2dForward(x, Tensor::zeros({4, 2, 3, 3}), Tensor(), {}), ValueError);
  EXPECT_THROW(kernels::conv2dForward(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({5}), {}), ValueError);
  EXPECT_THROW(kernels::conv2dForward(x, Tensor::zeros({4, 3, 7, 7}), Tensor(), {}), ValueError);
  EXPECT_THROW(kernels::conv2dForward(Tensor::zeros({3, 5, 5}), Tensor::zeros({4, 3, 3, 3}), Tensor(), {}),
               ValueError);
  try {
    kernels::conv2dForward(x, Tensor::zeros({4, 2, 3, 3}), Tensor(), {});
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 3, 5, 5]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 2, 3, 3]"), std::string::npos) << e.what();
  }
}

namespace {
// The oneDNN implementation each convolution pass ran with, from oneDNN's verbose lines
// ("onednn_verbose,exec,cpu,convolution,IMPL,PROP,...,PROBLEM,TIME"), keyed "PROP PROBLEM".
std::map<std::string, std::string> convolutionImpls(const std::function<void()>& run) {
  dnnl::set_verbose(1);
  ::testing::internal::CaptureStdout();
  run();
  const std::string out = ::testing::internal::GetCapturedStdout();
  dnnl::set_verbose(0);
  std::map<std::string, std::string> impls;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    auto conv = std::find(f.begin(), f.end(), "convolution");
    if (std::find(f.begin(), f.end(), "exec") == f.end() || conv == f.end() || f.end() - conv < 4) continue;
    impls[conv[2] + " " + f[f.size() - 2]] = conv[1];
  }
  return impls;
}

bool cpuHasAvx512Core() {
  using isa = dnnl::cpu_isa;
  const isa i = dnnl::get_effective_cpu_isa();
  return i == isa::avx512_core || i == isa::avx512_core_vnni || i == isa::avx512_core_bf16 ||
         i == isa::avx512_core_amx;
}
}  // namespace

TEST(Conv2d, winograd_runs_the_3x3_convolutions_where_it_pays) {
  if (!kernels::cpuConvWinograd()) GTEST_SKIP() << "LOCKSTEP_CONV_WINOGRAD=0";
  if (!cpuHasAvx512Core()) GTEST_SKIP() << "oneDNN's Winograd kernels need AVX-512; this CPU has none";
  // All three passes of a 32-channel convolution, with padding 1 or 0.
  auto passes = [&](const Shape& xs, int64_t pad) {
    const Conv2dParams p{{1, 1}, {pad, pad}, {1, 1}, 1, false};
    Tensor x = randomTensor(xs, DType::f32, 1).toFormat(MemoryFormat::channels_last);
    Tensor w = randomTensor({32, 32, 3, 3}, DType::f32, 2);
    Tensor gy = randomTensor(kernels::conv2dOutputShape(xs, w.shape(), p), DType::f32, 3)
                    .toFormat(MemoryFormat::channels_last);
    kernels::onednn::kConv.conv2dForward(x, w, Tensor(), p);
    kernels::onednn::kConv.conv2dBackwardData(gy, x, w, p);
    kernels::onednn::kConv.conv2dBackwardWeights(gy, x, w.shape(), false, p);
  };
  const auto impls = convolutionImpls([&] {
    passes({2, 32, 16, 16}, 1);  // 2 x (16/4)^2 = 32 output tiles, all filled: Winograd
    passes({1, 32, 16, 16}, 1);  // 16 tiles: direct
    passes({32, 32, 5, 5}, 0);   // 32 tiles, but a 3x3 output fills 9/16 of each: direct
  });
  const std::map<std::string, bool> problems{
      {"mb2_ic32oc32_ih16oh16kh3sh1dh0ph1_iw16ow16kw3sw1dw0pw1", true},
      {"mb1_ic32oc32_ih16oh16kh3sh1dh0ph1_iw16ow16kw3sw1dw0pw1", false},
      {"mb32_ic32oc32_ih5oh3kh3sh1dh0ph0_iw5ow3kw3sw1dw0pw0", false}};
  for (const char* prop : {"forward_training", "backward_data", "backward_weights"}) {
    for (const auto& [problem, winograd] : problems) {
      const std::string key = std::string(prop) + " " + problem;
      ASSERT_TRUE(impls.count(key)) << key;
      EXPECT_EQ(impls.at(key).find("wino") != std::string::npos, winograd) << key << ": " << impls.at(key);
    }
  }
  // Switched off, the Winograd problem runs the direct kernels.
  kernels::setCpuConvWinograd(false);
  const auto direct = convolutionImpls([&] { passes({2, 32, 16, 16}, 1); });
  kernels::setCpuConvWinograd(true);
  ASSERT_EQ(direct.size(), 3u);
  for (const auto& [problem, impl] : direct)
    EXPECT_EQ(impl.find("wino"), std::string::npos) << problem << ": " << impl;
}

// The fused relu keeps a NaN as torch.relu does (oneDNN's relu post-op turned it into 0, so a
// network whose weights went NaN reported a finite loss), in both layouts.
TEST(Conv2d, fused_relu_keeps_nan) {
  Tensor x = randomTensor({2, 3, 5, 5}, DType::f32, 1);
  Tensor w = randomTensor({4, 3, 1, 1}, DType::f32, 2);
  w.narrow(0, 1, 1).fill(std::numeric_limits<double>::quiet_NaN());  // output channel 1
  kernels::Conv2dParams p;
  p.fuse_relu = true;
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const Tensor y = kernels::conv2dForward(x.toFormat(f), w, Tensor(), p).contiguous();
    const std::vector<float> v = y.toVector<float>();
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t c = 0; c < 4; ++c) {
        for (int64_t i = 0; i < 25; ++i) {
          const float e = v[static_cast<size_t>((n * 4 + c) * 25 + i)];
          if (c == 1)
            ASSERT_TRUE(std::isnan(e)) << n << " " << i;
          else
            ASSERT_TRUE(e >= 0.0f) << n << " " << c << " " << i;
        }
      }
    }
  }
}
