// torchvision's ImageNet ResNets in the zoo (resnet18, resnet50): parameter counts, names and
// state_dict order as torchvision's; torchvision's init; and, where Debian's python3-torchvision is
// installed, torchvision's own models load lockstep's state dicts strictly and give the same logits
// on the same input in training and evaluation mode.
#include "lockstep/nn/models/resnet_imagenet.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/kernels/threads.h"
#include "lockstep/nn.h"

using namespace lockstep;
using namespace lockstep::nn;

namespace {

namespace fs = std::filesystem;

// Built once: drawing ResNet-50's 25M initial values takes a while on a loaded machine.
Module& imagenetModel(const std::string& name) {
  static const std::shared_ptr<Module> r18 = makeModel("resnet18", ModelOptions{.num_classes = 1000});
  static const std::shared_ptr<Module> r50 = makeModel("resnet50", ModelOptions{.num_classes = 1000});
  return name == "resnet18" ? *r18 : *r50;
}

std::vector<std::string> paramNames(const Module& m) {
  std::vector<std::string> out;
  for (auto& [n, p] : m.namedParameters()) out.push_back(n);
  return out;
}

double stddev(const std::vector<float>& v) {
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(v.size());
  return std::sqrt(s2 / n - (s / n) * (s / n));
}

// /usr/bin/python3 (Debian's torch and torchvision) when it imports torchvision, else "".
std::string torchvisionPython() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    // find_spec: found without importing torch (a second each).
    const std::string cmd =
        std::string(py) +
        " -c 'import importlib.util as u, sys; sys.exit(u.find_spec(\"torchvision\") is None)'"
        " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

Tensor input(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shapeNumel(shape)));
  for (size_t j = 0; j < v.size(); ++j)
    v[j] = static_cast<float>(std::cos(0.11 * static_cast<double>(j)) +
                              0.5 * std::sin(1.3 * static_cast<double>(j)));
  return Tensor::fromVector<float>(v, shape);
}

void writeFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> readFloats(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  std::vector<float> v(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

// For each NAME given: loads DIR/NAME.f32 (the state dict's tensors one after another, as f32) into
// torchvision's model strictly, checks the key order, and writes the logits of a training forward
// (when asked) then an evaluation forward of DIR/NAME.input.f32. One process: torch imports once.
constexpr const char* kScript = R"(
import json, sys, numpy, torch, torchvision
torch.set_num_threads(1)
d = sys.argv[1]
for name in sys.argv[2:]:
    manifest = json.load(open(f"{d}/{name}.json"))
    flat = numpy.fromfile(f"{d}/{name}.f32", dtype=numpy.float32)
    model = getattr(torchvision.models, name)()
    ref = model.state_dict()
    assert list(ref.keys()) == [e["name"] for e in manifest["entries"]], name + ": state_dict order differs"
    sd, at = {}, 0
    for e in manifest["entries"]:
        n = int(numpy.prod(e["shape"]))
        sd[e["name"]] = torch.from_numpy(flat[at:at + n].copy()).reshape(e["shape"]).to(ref[e["name"]].dtype)
        at += n
    model.load_state_dict(sd, strict=True)
    x = torch.from_numpy(numpy.fromfile(f"{d}/{name}.input.f32", dtype=numpy.float32))
    x = x.reshape(manifest["input_shape"])
    out = []
    with torch.no_grad():
        if manifest["train"]:
            model.train()
            out.append(model(x).flatten())
        model.eval()
        out.append(model(x).flatten())
    torch.cat(out).numpy().astype(numpy.float32).tofile(f"{d}/{name}.torch.f32")
)";

struct OneThread {
  int prev = kernels::numThreads();
  OneThread() { kernels::setNumThreads(1); }
  ~OneThread() { kernels::setNumThreads(prev); }
};

}  // namespace

TEST(ResNetImageNet, parameter_counts_are_torchvisions) {
  EXPECT_EQ(imagenetModel("resnet18").numParameters(), 11689512);
  EXPECT_EQ(imagenetModel("resnet50").numParameters(), 25557032);
  // The classifier follows num_classes (512 features in).
  EXPECT_EQ(makeModel("resnet18", ModelOptions{.num_classes = 10})->numParameters(), 11689512 - 990 * 513);
  EXPECT_THROW(ResNet(ResNetOptions{.depth = 34}), ValueError);
}

TEST(ResNetImageNet, names_and_state_dict_order_are_torchvisions) {
  Module &r18 = imagenetModel("resnet18"), &r50 = imagenetModel("resnet50");
  // torchvision 0.14: 62 and 161 parameters, 122 and 320 state_dict entries (BN buffers included).
  EXPECT_EQ(paramNames(r18).size(), 62u);
  EXPECT_EQ(paramNames(r50).size(), 161u);
  const std::vector<std::string> k18 = r18.stateDict().keys(), k50 = r50.stateDict().keys();
  ASSERT_EQ(k18.size(), 122u);
  ASSERT_EQ(k50.size(), 320u);
  const std::vector<std::string> stem = {"conv1.weight",         "bn1.weight",      "bn1.bias",
                                         "bn1.running_mean",     "bn1.running_var", "bn1.num_batches_tracked",
                                         "layer1.0.conv1.weight"};
  EXPECT_EQ(std::vector<std::string>(k18.begin(), k18.begin() + 7), stem);
  EXPECT_EQ(std::vector<std::string>(k50.begin(), k50.begin() + 7), stem);
  EXPECT_EQ(k18[20], "layer1.1.bn1.bias");
  EXPECT_EQ(k50[24], "layer1.0.downsample.0.weight");  // ResNet-50's first block widens 64 -> 256
  EXPECT_EQ(k50[k50.size() - 3], "layer4.2.bn3.num_batches_tracked");
  EXPECT_EQ(k18.back(), "fc.bias");
  EXPECT_EQ(k50.back(), "fc.bias");
  // v1.5: the stride is on the 3x3 conv of a stage's first Bottleneck.
  const auto conv2 = r50.child("layer2")->child("0")->child("conv2");
  EXPECT_NE(conv2->describe().find("128, 128, kernel_size=(3, 3), stride=(2, 2)"), std::string::npos)
      << conv2->describe();
}

TEST(ResNetImageNet, initialised_as_torchvision) {
  const StateDict sd = imagenetModel("resnet50").stateDict();
  // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std sqrt(2 / (out * kh * kw)).
  const std::vector<float> w = sd.at("layer3.0.conv2.weight").toVector<float>();  // [256, 256, 3, 3]
  EXPECT_NEAR(stddev(w), std::sqrt(2.0 / (256 * 9)), 0.03 * std::sqrt(2.0 / (256 * 9)));
  const std::vector<float> stem = sd.at("conv1.weight").toVector<float>();  // [64, 3, 7, 7]
  EXPECT_NEAR(stddev(stem), std::sqrt(2.0 / (64 * 49)), 0.05 * std::sqrt(2.0 / (64 * 49)));
  for (float v : sd.at("layer2.1.bn3.weight").toVector<float>()) ASSERT_EQ(v, 1.0f);
  for (float v : sd.at("layer2.1.bn3.bias").toVector<float>()) ASSERT_EQ(v, 0.0f);
  // Linear's default: U(-1/sqrt(2048), 1/sqrt(2048)).
  float lim = 0;
  for (float v : sd.at("fc.weight").toVector<float>()) lim = std::max(lim, std::abs(v));
  EXPECT_LE(lim, 1 / std::sqrt(2048.0f));
  EXPECT_GT(lim, 0.99f / std::sqrt(2048.0f));
}

TEST(ResNetImageNet, torchvision_loads_the_state_dict_strictly_and_gives_the_same_logits) {
  const std::string py = torchvisionPython();
  if (py.empty()) GTEST_SKIP() << "python3 with torchvision not installed: apt install python3-torchvision";
  OneThread one_thread;
  const fs::path dir = fs::temp_directory_path() / ("lockstep_resnet_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "check.py") << kScript;
  // ResNet-18 in both modes (40x40 leaves layer4 2x2: training-mode BN sees 8 values per channel);
  // ResNet-50, whose blocks run the same layers, evaluates one image: the test stays quick on the
  // reference kernels too.
  struct Case {
    std::string name;
    Shape shape;
    bool train;
  };
  const std::vector<Case> cases = {{"resnet18", {2, 3, 40, 40}, true}, {"resnet50", {1, 3, 40, 40}, false}};
  std::map<std::string, std::vector<float>> ours;
  std::string names;
  for (const Case& c : cases) {
    Generator gen(3);
    auto model = makeModel(c.name, ModelOptions{.num_classes = 1000, .generator = &gen});
    nlohmann::json manifest = {
        {"input_shape", c.shape}, {"train", c.train}, {"entries", nlohmann::json::array()}};
    std::vector<float> flat;
    for (const auto& [key, t] : model->stateDict()) {
      manifest["entries"].push_back({{"name", key}, {"shape", t.shape()}});
      const std::vector<float> v = t.to(DType::f32).contiguous().toVector<float>();
      flat.insert(flat.end(), v.begin(), v.end());
    }
    std::ofstream(dir / (c.name + ".json")) << manifest.dump();
    writeFloats((dir / (c.name + ".f32")).string(), flat);
    const Tensor x = input(c.shape);
    writeFloats((dir / (c.name + ".input.f32")).string(), x.toVector<float>());
    for (bool train : {true, false}) {
      if (train && !c.train) continue;
      model->train(train);
      const std::vector<float> logits =
          model->forward(autograd::Variable(x)).tensor().contiguous().toVector<float>();
      ours[c.name].insert(ours[c.name].end(), logits.begin(), logits.end());
    }
    names += " " + c.name;
  }
  const std::string cmd = py + " " + (dir / "check.py").string() + " " + dir.string() + names;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<float>& mine = ours[c.name];
    const std::vector<float> theirs = readFloats((dir / (c.name + ".torch.f32")).string());
    ASSERT_EQ(mine.size(), theirs.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(mine[i] - theirs[i])));
      scale = std::max(scale, static_cast<double>(std::abs(theirs[i])));
    }
    EXPECT_GT(scale, 1e-3);  // the comparison is not of zeros
    EXPECT_LE(worst, 1e-4 + 1e-3 * scale) << "largest |logit| " << scale;
  }
  fs::remove_all(dir);
}
