// ZeRO with offload_optimizer device nvme: 2 thread ranks reach bitwise the parameters of the same
// run without offload (SGD+momentum and Adam, stages 1-3, sub-groups of 7 elements that divide
// neither rank's 37-element partition, every buffer count and pipeline setting); the consolidated
// state read back from the swap files is the in-memory one, and a resume from it continues alike;
// bad settings are clear errors and no file is left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "parallel/thread_ranks.h"
#include "parallel/zero_engine_helpers.h"

using namespace lockstep;
using namespace lockstep::testing::zero;
namespace fs = std::filesystem;

namespace {

struct ScratchDir {
  ScratchDir() {
    std::string t = (fs::temp_directory_path() / "lockstep-nvme-test-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~ScratchDir() { fs::remove_all(path); }
  bool empty() const { return fs::is_empty(path); }
  std::string path;
};

EngineOptions withNvme(EngineOptions o, const std::string& dir, int64_t buffer_count, bool read, bool write) {
  o.zero.offload_optimizer.nvme_path = dir;
  o.zero.offload_optimizer.sub_group_size = 7;
  o.zero.offload_optimizer.buffer_count = buffer_count;
  o.zero.offload_optimizer.pipeline_read = read;
  o.zero.offload_optimizer.pipeline_write = write;
  return o;
}

struct Snapshot {
  nn::StateDict model;
  optim::OptimizerStateDict state;
};

// Steps [from, to) on 2 thread ranks (the same 12-row global batches), from `start` when given.
Snapshot train2(const EngineOptions& o, int from, int to, const Snapshot* start) {
  Snapshot out;
  lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(makeNet(7), o, worldOf(rank, 2, pg));
    if (start) {
      engine.zero()->gatherParameters();
      engine.model()->loadStateDict(start->model);
      engine.zero()->adoptGatheredParameters();
      engine.zero()->loadConsolidatedStateDict(start->state);
    }
    for (int s = from; s < to; ++s) {
      auto [x, y] = batch(s, 12);
      engine.backward(autograd::crossEntropy(engine.forward(Variable(x.slice(rank * 6, (rank + 1) * 6))),
                                             y.slice(rank * 6, (rank + 1) * 6)));
      EXPECT_TRUE(engine.step());
    }
    if (!o.zero.offload_optimizer.nvme_path.empty()) {  // the states did go through the file
      const file::SwapFile* f = engine.zero()->nvmeOffload()->swapFile();
      EXPECT_TRUE(f != nullptr && f->bytesWritten() > 0 && (to - from < 2 || f->bytesRead() > 0));
    }
    optim::OptimizerStateDict state = engine.zero()->consolidatedStateDict();
    engine.zero()->gatherParameters();
    if (rank == 0) {
      out.model = engine.model()->stateDict().cloned();
      out.state.state = state.state.cloned();
      out.state.param_groups = state.param_groups;
    }
  });
  return out;
}

void expectSame(const nn::StateDict& a, const nn::StateDict& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : b) {
    ASSERT_TRUE(a.find(name) != nullptr) << what << ": no " << name;
    EXPECT_EQ(a.at(name).toVector<double>(), t.toVector<double>()) << what << ": " << name;
  }
}

}  // namespace

TEST(ZeroNvme, offload_reaches_the_parameters_of_no_offload_bitwise) {
  ScratchDir dir;
  for (int stage : {1, 2, 3}) {
    for (bool is_adam : {false, true}) {
      EngineOptions o = is_adam ? adam() : sgd();
      o.zero_stage = stage;
      const auto plain = train(2, o);
      const int64_t states = is_adam ? 2 : 1;
      struct Variant {
        int64_t resident;
        bool read, write;
      };
      for (Variant v : {Variant{1, false, false}, Variant{2, true, false}, Variant{2, true, true},
                        Variant{3, true, true}, Variant{3, false, true}}) {
        // buffer_count one more than needed: a remainder that holds no whole sub-group is unused.
        const auto nvme =
            train(2, withNvme(o, dir.path, v.resident * states + (v.resident == 2), v.read, v.write));
        for (int r = 0; r < 2; ++r) {
          EXPECT_EQ(nvme[r], plain[r])
              << (is_adam ? "Adam" : "SGD") << " stage " << stage << " rank " << r << " sub-groups in memory "
              << v.resident << " pipeline_read " << v.read << " pipeline_write " << v.write;
        }
      }
      EXPECT_TRUE(dir.empty());
    }
  }
}

TEST(ZeroNvme, mixed_precision_clipping_and_accumulation_match_no_offload_bitwise) {
  // fp16 brings the dynamic loss scaler, whose overflow steps are skipped (no optimizer step, so
  // the files stay as they were); clipping and accumulation act on the gradients before the step.
  ScratchDir dir;
  for (const char* precision : {"bf16", "fp16"}) {
    EngineOptions o = adam();
    o.precision = parallel::parsePrecision(precision);
    o.gradient_clipping = 0.5;
    o.gradient_accumulation_steps = 2;
    o.zero_stage = 2;
    const auto plain = train(2, o);
    const auto nvme = train(2, withNvme(o, dir.path, 4, true, true));
    for (int r = 0; r < 2; ++r) EXPECT_EQ(nvme[r], plain[r]) << precision << " rank " << r;
  }
  EXPECT_TRUE(dir.empty());
}

EngineOptions infinity(EngineOptions o, const std::string& dir, int64_t buffer_count) {
  o = withNvme(o, dir, buffer_count, true, true);
  o.zero.offload_param_nvme_path = dir;
  return o;
}

EngineOptions smallBuckets(EngineOptions o) {
  // Stage 3 gathering each layer on its own, in buckets of at most 16 elements.
  o = perLayer(o);
  o.zero.reduce_bucket_size = 16;
  o.zero.prefetch_bucket_size = 16;
  return o;
}

TEST(ZeroNvme, parameters_and_gradients_on_nvme_match_no_offload_bitwise) {
  // ZeRO-Infinity: stage 3 with offload_param and offload_optimizer on nvme keeps the parameter,
  // gradient and state pieces in swap files; the result is bitwise that of keeping them in memory.
  ScratchDir dir;
  for (int world : {1, 2, 3}) {
    for (bool is_adam : {false, true}) {
      for (bool per_layer : {false, true}) {
        EngineOptions o = is_adam ? adam() : sgd();
        o.zero_stage = 3;
        if (per_layer) o = smallBuckets(o);
        const auto plain = train(world, o);
        const auto nvme = train(world, infinity(o, dir.path, is_adam ? 6 : 3));
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(nvme[r], plain[r]) << (is_adam ? "Adam" : "SGD") << " world " << world << " rank " << r
                                       << (per_layer ? " per layer" : " whole");
        }
      }
    }
  }
  for (const char* precision : {"bf16", "fp16"}) {
    EngineOptions o = smallBuckets(adam());
    o.zero_stage = 3;
    o.precision = parallel::parsePrecision(precision);
    o.gradient_clipping = 0.5;
    o.gradient_accumulation_steps = 2;
    // DeepSpeed's bf16/fp16 sections: the swapped pieces start rounded to 16 bits too, as the
    // parameters of a run without ZeRO do (stage 0 rounds them in the engine).
    o.round_initial_parameters = true;
    EngineOptions replicated = o;
    replicated.zero_stage = 0;
    EXPECT_EQ(train(2, infinity(o, dir.path, 4), 0)[0], train(2, replicated, 0)[0]) << precision;
    const auto plain = train(2, o);
    const auto nvme = train(2, infinity(o, dir.path, 4));
    for (int r = 0; r < 2; ++r) EXPECT_EQ(nvme[r], plain[r]) << precision << " rank " << r;
  }
  EXPECT_TRUE(dir.empty());
}

TEST(ZeroNvme, swapped_pieces_are_out_of_memory_between_steps) {
  ScratchDir dir;
  EngineOptions o = smallBuckets(adam());
  o.zero_stage = 3;
  o = infinity(o, dir.path, 6);
  lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(makeNet(7), o, worldOf(rank, 2, pg));
    const parallel::ZeroOptimizer& zero = *engine.zero();
    ASSERT_NE(zero.parameterSwap(), nullptr);
    ASSERT_NE(zero.gradientSwap(), nullptr);
    EXPECT_EQ(zero.parameterSwap()->residentBytes(), 0);
    EXPECT_EQ(zero.parameterSwap()->totalBytes(), 37 * 4);
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = batch(s * 2 + rank, kRows);
      engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
      // After backward the reduced gradients are in the file, not in memory.
      EXPECT_EQ(zero.gradientSwap()->residentBytes(), 0);
      EXPECT_GT(zero.gradientSwap()->file().bytesWritten(), 0);
      ASSERT_TRUE(engine.step());
      const parallel::ModelStateBytes m = zero.memory();
      EXPECT_EQ(m.parameters, 0) << "step " << s;
      EXPECT_EQ(m.gradients, 0) << "step " << s;
    }
    EXPECT_GT(zero.parameterSwap()->file().bytesRead(), 0);
  });
  EXPECT_TRUE(dir.empty());
}

TEST(ZeroNvme, state_comes_back_from_the_files_and_resumes_alike) {
  ScratchDir dir;
  EngineOptions plain = adam();
  plain.zero_stage = 2;
  const EngineOptions nvme = withNvme(plain, dir.path, 4, true, true);
  const Snapshot straight = train2(plain, 0, 12, nullptr);
  const Snapshot half_plain = train2(plain, 0, 6, nullptr);
  const Snapshot half = train2(nvme, 0, 6, nullptr);
  expectSame(half.state.state, half_plain.state.state, "consolidated state after 6 steps");
  // Resumed with offload from either checkpoint, and without offload from the offloaded one.
  expectSame(train2(nvme, 6, 12, &half).model, straight.model, "nvme resumed from nvme");
  expectSame(train2(nvme, 6, 12, &half_plain).model, straight.model, "nvme resumed from memory");
  expectSame(train2(plain, 6, 12, &half).model, straight.model, "memory resumed from nvme");
  EngineOptions sgd3 = sgd();
  sgd3.zero_stage = 3;
  const Snapshot sgd_plain = train2(sgd3, 0, 5, nullptr);
  expectSame(train2(withNvme(sgd3, dir.path, 1, false, false), 0, 5, nullptr).state.state,
             sgd_plain.state.state, "SGD stage 3 consolidated state");
  EXPECT_TRUE(dir.empty());
}

TEST(ZeroNvme, bad_settings_are_errors_naming_them) {
  auto errorOf = [](const EngineOptions& o) -> std::string {
    try {
      Engine engine(makeNet(7), o, worldOf(0, 1, nullptr));
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EngineOptions o = adam();
  o.zero_stage = 1;
  std::string e = errorOf(withNvme(o, "/nonexistent-lockstep-nvme", 4, false, false));
  EXPECT_NE(e.find("zero_optimization.offload_optimizer.nvme_path: cannot create a swap file in "
                   "'/nonexistent-lockstep-nvme'"),
            std::string::npos)
      << e;
  ScratchDir dir;
  e = errorOf(withNvme(o, dir.path, 1, false, false));
  EXPECT_NE(e.find("offload_optimizer.buffer_count=1 is fewer than the 2 state tensors"), std::string::npos)
      << e;
  EngineOptions zero_sub = withNvme(o, dir.path, 4, false, false);
  zero_sub.zero.offload_optimizer.sub_group_size = 0;
  e = errorOf(zero_sub);
  EXPECT_NE(e.find("zero_optimization.sub_group_size=0 must be a positive number"), std::string::npos) << e;
  // offload_param nvme: stage 3 with offload_optimizer nvme, and pieces no larger than buffer_size.
  auto expectError = [&](const EngineOptions& opts, const std::string& what) {
    const std::string got = errorOf(opts);
    EXPECT_NE(got.find(what), std::string::npos) << got;
  };
  EngineOptions p3 = withNvme(o, dir.path, 4, false, false);
  p3.zero.offload_param_nvme_path = dir.path;
  expectError(p3, "offload_param: offloading parameters needs ZeRO stage 3");
  p3.zero_stage = 3;
  p3.zero.offload_optimizer.nvme_path.clear();
  expectError(p3, "offload_param.device nvme needs offload_optimizer.device nvme too");
  p3.zero.offload_optimizer.nvme_path = dir.path;
  p3.zero.offload_param_buffer_size = 10;
  expectError(
      p3, "offload_param.buffer_size=10 is smaller than rank 0's piece of parameter bucket 0 (74 elements)");
  p3.zero.offload_param_nvme_path = "/nonexistent-lockstep-nvme";
  p3.zero.offload_param_buffer_size = 100;
  expectError(
      p3,
      "zero_optimization.offload_param.nvme_path: cannot create a swap file in '/nonexistent-lockstep-nvme'");
  // One rank's directory is unusable: it says why, the other says so instead of waiting for it.
  std::vector<std::string> errors(2);
  lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    try {
      Engine engine(makeNet(7),
                    withNvme(o, rank == 0 ? "/nonexistent-lockstep-nvme" : dir.path, 4, false, false),
                    worldOf(rank, 2, pg));
    } catch (const IoError& e) {
      errors[rank] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("cannot create a swap file in '/nonexistent-lockstep-nvme'"), std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("another rank could not create its swap file"), std::string::npos) << errors[1];
  EXPECT_TRUE(dir.empty());
}
