// zero.Init (parallel/zero/init.h): models built inside the scope hold exactly the values they hold
// without it (GPT's re-initialisation after registering included), their parameters' pages are out
// of the process when the scope ends, and ZeRO stage 3 trains them to bitwise the same parameters,
// with and without the NVMe offload of the partition.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/parallel/zero/init.h"
#include "parallel/zero_engine_helpers.h"

using namespace lockstep;
using namespace lockstep::testing::zero;
namespace fs = std::filesystem;

namespace {

// Resident kB of the mapping that holds addr, from /proc/self/smaps; -1 when none does.
int64_t residentKbAt(const void* addr) {
  std::ifstream in("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(addr);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("Rss:", 0) == 0) return std::stoll(line.substr(4));
  }
  return -1;
}

std::shared_ptr<nn::Module> gpt(uint64_t seed) {
  Generator g(seed);
  nn::ModelOptions o;
  o.model_type = "gpt-nano";
  o.vocab_size = 64;
  o.block_size = 16;
  o.generator = &g;
  return nn::makeModel("gpt", o);
}

std::shared_ptr<nn::Module> wideMlp(uint64_t seed) {
  Generator g(seed);
  nn::ModelOptions o;
  o.in_features = 512;
  o.out_features = 10;
  o.hidden = {1024, 1024};  // 1.6 M parameters, 6.3 MB
  o.generator = &g;
  return nn::makeModel("mlp", o);
}

}  // namespace

TEST(ZeroInit, models_hold_the_same_values_and_their_pages_leave_the_process) {
  for (auto make : {wideMlp, gpt}) {
    const auto plain = make(3);
    std::shared_ptr<nn::Module> staged;
    int64_t moved = 0;
    {
      parallel::ZeroInit scope;
      staged = make(3);
      moved = scope.parameters();
    }
    EXPECT_EQ(moved, static_cast<int64_t>(staged->parameters().size()));
    // Before anything reads them again, no parameter of the MLP has a page in this process.
    int64_t resident = 0;
    for (auto& p : staged->parameters()) resident += residentKbAt(p.tensor().dataPtr());
    EXPECT_EQ(resident, 0);
    EXPECT_EQ(flatParams(*staged), flatParams(*plain));
  }
}

TEST(ZeroInit, the_engine_builds_a_stage_3_model_inside_it_and_others_without) {
  auto residentKb = [&](const nn::Module& m) {
    int64_t kb = 0;
    for (auto& p : m.parameters()) kb += residentKbAt(p.tensor().dataPtr());
    return kb;
  };
  EngineOptions o;
  o.zero_stage = 3;
  const auto staged = Engine::buildModel(o, Device::cpu(), [] { return wideMlp(3); });
  EXPECT_EQ(residentKb(*staged), 0) << "built under zero.Init, its pages left the process";
  o.zero_stage = 2;
  const auto plain = Engine::buildModel(o, Device::cpu(), [] { return wideMlp(3); });
  EXPECT_GT(residentKb(*plain), 0) << "below stage 3 the model is built as it is";
  EXPECT_EQ(flatParams(*staged), flatParams(*plain));
}

TEST(ZeroInit, stage_3_trains_a_model_built_inside_it_bitwise_alike) {
  std::string t = (fs::temp_directory_path() / "lockstep-zero-init-test-XXXXXX").string();
  const std::string dir = ::mkdtemp(t.data());
  for (bool nvme : {false, true}) {
    EngineOptions o = perLayer(adam());
    o.zero_stage = 3;
    if (nvme) {
      o.zero.offload_optimizer.nvme_path = o.zero.offload_param_nvme_path = dir;
      o.zero.offload_optimizer.sub_group_size = 7;
    }
    std::vector<std::vector<double>> plain(2), staged(2);
    for (bool inside : {false, true}) {
      lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
        // Inside: zero.Init in the offload's directory (else $TMPDIR). Rank 0's weights win, as
        // without the scope.
        auto make = [&] { return makeNet(7 + rank); };
        Engine engine(inside ? Engine::buildModel(o, Device::cpu(), make) : make(), o, worldOf(rank, 2, pg));
        for (int s = 0; s < 6; ++s) {
          auto [x, y] = batch(s * 2 + rank, kRows);
          engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
          engine.step();
        }
        parallel::GatheredParameters whole = engine.gatheredParameters();
        (inside ? staged : plain)[rank] = flatParams(*engine.model());
      });
    }
    for (int r = 0; r < 2; ++r) EXPECT_EQ(staged[r], plain[r]) << "rank " << r << (nvme ? " nvme" : "");
  }
  EXPECT_TRUE(fs::is_empty(dir));  // the files were unlinked at once
  fs::remove_all(dir);
}

TEST(ZeroInit, an_unusable_directory_is_an_error_naming_it) {
  try {
    parallel::ZeroInit scope("/nonexistent-lockstep-zero-init");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("zero.Init: cannot create the parameters' file in "
                                         "'/nonexistent-lockstep-zero-init'"),
              std::string::npos)
        << e.what();
  }
  // The failed scope left no hook behind: a model built now is ordinary memory.
  const auto m = wideMlp(1);
  EXPECT_GT(residentKbAt(m->parameters().front().tensor().dataPtr()), 0);
}
