#include "lockstep/data/datasets/registry.h"

#include <filesystem>
#include <numeric>

#include "lockstep/data/datasets/cifar.h"
#include "lockstep/data/datasets/mnist.h"
#include "lockstep/data/datasets/subset.h"
#include "lockstep/data/datasets/synthetic_dataset.h"
#include "lockstep/data/datasets/text_corpus.h"
#include "lockstep/data/datasets/token_window_dataset.h"
#include "lockstep/util/error.h"
#include "lockstep/util/suggest.h"

namespace lockstep::data {

namespace {

void checkMnistFiles(const DatasetOptions& o) {
  for (const char* base : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    findMnistFile(o.root, base);
  }
}

// MNIST and Fashion-MNIST differ only in their pixel statistics.
DatasetSplits loadMnistSplits(const DatasetOptions& o, double mean, double std) {
  MnistOptions mo;
  mo.mean = o.normalize_mean.value_or(mean);
  mo.std = o.normalize_std.value_or(std);
  DatasetSplits s;
  s.train = std::make_shared<TensorDataset>(loadMnist(o.root, Split::train, mo));
  s.test = std::make_shared<TensorDataset>(loadMnist(o.root, Split::test, mo));
  return s;
}

DatasetSplits loadCifar10Splits(const DatasetOptions& o) {
  CifarOptions co;
  if (o.normalize_mean) co.mean = {*o.normalize_mean, *o.normalize_mean, *o.normalize_mean};
  if (o.normalize_std) co.std = {*o.normalize_std, *o.normalize_std, *o.normalize_std};
  DatasetSplits s;
  s.train = std::make_shared<TensorDataset>(loadCifar10(o.root, Split::train, co));
  s.test = std::make_shared<TensorDataset>(loadCifar10(o.root, Split::test, co));
  return s;
}

// One synthetic set (one teacher) split into train and test by position.
DatasetSplits loadSyntheticSplits(const DatasetOptions& o) {
  SyntheticDatasetOptions so;
  so.size = o.size + o.test_size;
  so.input_shape = Shape(o.input_shape.begin(), o.input_shape.end());
  so.num_classes = o.num_classes;
  so.seed = o.seed;
  auto all = std::make_shared<SyntheticDataset>(so);
  std::vector<int64_t> train(static_cast<size_t>(o.size)), test(static_cast<size_t>(o.test_size));
  std::iota(train.begin(), train.end(), 0);
  std::iota(test.begin(), test.end(), o.size);
  DatasetSplits s;
  s.train = std::make_shared<Subset>(all, train);
  s.test = std::make_shared<Subset>(all, test);
  return s;
}

// Train and validation windows from the two token streams; the validation set is also the test set.
DatasetSplits tokenWindowSplits(const DatasetOptions& o, const TokenSplit& split, int64_t vocab_size) {
  LOCKSTEP_ENFORCE(split.val, ValueError, "data: ", o.root,
                   " has no validation tokens (val.bin, or data.val_split > 0 for text)");
  DatasetSplits s;
  s.train = std::make_shared<TokenWindowDataset>(split.train, o.block_size);
  s.val = std::make_shared<TokenWindowDataset>(split.val, o.block_size);
  s.test = s.val;
  s.vocab_size = vocab_size;
  return s;
}

std::vector<DatasetInfo> builtinDatasets() {
  std::vector<DatasetInfo> r;
  {
    DatasetInfo d;
    d.name = "fashion_mnist";
    d.default_root = "/usr/share/datasets/fashion-mnist";
    d.keys = {"transforms"};
    d.check_files = checkMnistFiles;
    d.load = [](const DatasetOptions& o) { return loadMnistSplits(o, 0.2860, 0.3530); };
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "mnist";
    d.keys = {"transforms"};
    d.check_files = checkMnistFiles;
    d.load = [](const DatasetOptions& o) {
      return loadMnistSplits(o, MnistOptions{}.mean, MnistOptions{}.std);
    };
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "cifar10";
    d.keys = {"transforms"};
    d.check_files = [](const DatasetOptions& o) {
      if (!std::filesystem::is_directory(o.root)) {
        throw IoError("data.root: CIFAR-10 directory " + o.root + " does not exist");
      }
    };
    d.load = loadCifar10Splits;
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "synthetic";
    d.shape_from_options = true;
    d.keys = {"transforms", "size", "test_size", "num_classes", "input_shape"};
    d.load = loadSyntheticSplits;
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "text";
    d.language = true;
    d.default_root = kFortunesDir;
    d.default_val_split = 0.1;
    d.check_files = [](const DatasetOptions& o) {
      if (!std::filesystem::exists(o.root)) readTextCorpus(o.root);  // its IoError says what to install
    };
    d.load = [](const DatasetOptions& o) {
      return tokenWindowSplits(o, splitTokens(readTextCorpus(o.root), o.val_split),
                               TokenDirMeta{}.vocab_size);
    };
    r.push_back(std::move(d));
  }
  {
    DatasetInfo d;
    d.name = "tokens";
    d.language = true;
    d.root_hint = "set it to a directory written by `lockstep data tokenize TEXT -o DIR`";
    d.check_files = [](const DatasetOptions& o) {
      if (!std::filesystem::exists(o.root + "/meta.json")) openTokenDir(o.root);
    };
    d.load = [](const DatasetOptions& o) {
      TokenDirMeta meta;
      TokenSplit split = openTokenDir(o.root, &meta);
      return tokenWindowSplits(o, split, meta.vocab_size);
    };
    r.push_back(std::move(d));
  }
  return r;
}

const std::vector<DatasetInfo>& registry() {
  static const std::vector<DatasetInfo> r = builtinDatasets();
  return r;
}

}  // namespace

const DatasetInfo& findDataset(const std::string& name) {
  for (const DatasetInfo& d : registry()) {
    if (d.name == name) return d;
  }
  const std::vector<std::string> names = datasetNames();
  std::string near = nearestKey(name, names), known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw ValueError("unknown dataset " + name + (near.empty() ? "" : " (did you mean " + near + "?)") +
                   "; known: " + known);
}

std::vector<std::string> datasetNames() {
  std::vector<std::string> names;
  for (const DatasetInfo& d : registry()) names.push_back(d.name);
  return names;
}

std::vector<std::string> languageDatasetNames() {
  std::vector<std::string> names;
  for (const DatasetInfo& d : registry()) {
    if (d.language) names.push_back(d.name);
  }
  return names;
}

}  // namespace lockstep::data
