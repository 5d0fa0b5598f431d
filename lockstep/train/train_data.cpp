#include "lockstep/train/train_data.h"

#include <filesystem>
#include <numeric>

#include "lockstep/autograd.h"
#include "lockstep/data.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/metrics.h"
#include "lockstep/util/error.h"

namespace lockstep::train {

namespace {

bool isMnist(const DataConfig& c) { return c.dataset == "mnist" || c.dataset == "fashion_mnist"; }

}  // namespace

void checkDataFiles(const DataConfig& c) {
  if (c.dataset == "text") {
    if (!std::filesystem::exists(c.root)) data::readTextCorpus(c.root);  // its IoError says what to install
  } else if (c.dataset == "tokens") {
    if (!std::filesystem::exists(c.root + "/meta.json")) data::openTokenDir(c.root);
  } else if (isMnist(c)) {
    for (const char* base : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                             "t10k-labels-idx1-ubyte"}) {
      data::findMnistFile(c.root, base);
    }
  } else if (c.dataset == "cifar10") {
    if (!std::filesystem::is_directory(c.root)) {
      throw IoError("data.root: CIFAR-10 directory " + c.root + " does not exist");
    }
  }
}

TrainData loadTrainData(const DataConfig& c, uint64_t seed) {
  TrainData d;
  if (c.isLanguage()) {
    // Train and validation windows from the two streams; the validation set is also the test set.
    data::TokenDirMeta meta;
    data::TokenSplit split = c.dataset == "text"
                                 ? data::splitTokens(data::readTextCorpus(c.root), c.val_split)
                                 : data::openTokenDir(c.root, &meta);
    d.vocab_size = meta.vocab_size;
    LOCKSTEP_ENFORCE(split.val, ValueError, "data: ", c.root,
                     " has no validation tokens (val.bin, or data.val_split > 0 for text)");
    d.train = std::make_shared<data::TokenWindowDataset>(split.train, c.block_size);
    d.val = std::make_shared<data::TokenWindowDataset>(split.val, c.block_size);
    d.test = d.val;
    return d;
  }
  std::shared_ptr<data::Dataset> full;
  if (isMnist(c)) {
    data::MnistOptions mo;
    if (c.dataset == "fashion_mnist") mo.mean = 0.2860, mo.std = 0.3530;
    if (c.normalize_mean) mo.mean = *c.normalize_mean;
    if (c.normalize_std) mo.std = *c.normalize_std;
    full = std::make_shared<data::TensorDataset>(data::loadMnist(c.root, data::Split::train, mo));
    d.test = std::make_shared<data::TensorDataset>(data::loadMnist(c.root, data::Split::test, mo));
  } else if (c.dataset == "cifar10") {
    data::CifarOptions co;
    if (c.normalize_mean) co.mean = {*c.normalize_mean, *c.normalize_mean, *c.normalize_mean};
    if (c.normalize_std) co.std = {*c.normalize_std, *c.normalize_std, *c.normalize_std};
    full = std::make_shared<data::TensorDataset>(data::loadCifar10(c.root, data::Split::train, co));
    d.test = std::make_shared<data::TensorDataset>(data::loadCifar10(c.root, data::Split::test, co));
  } else {
    // One synthetic set (one teacher) split into train and test by position.
    data::SyntheticDatasetOptions so;
    so.size = c.size + c.test_size;
    so.input_shape = Shape(c.input_shape.begin(), c.input_shape.end());
    so.num_classes = c.num_classes;
    so.seed = seed;
    auto all = std::make_shared<data::SyntheticDataset>(so);
    std::vector<int64_t> tr(static_cast<size_t>(c.size)), te(static_cast<size_t>(c.test_size));
    std::iota(tr.begin(), tr.end(), 0);
    std::iota(te.begin(), te.end(), c.size);
    full = std::make_shared<data::Subset>(all, tr);
    d.test = std::make_shared<data::Subset>(all, te);
  }
  if (c.val_split > 0) {
    int64_t nval = static_cast<int64_t>(static_cast<double>(full->size()) * c.val_split);
    auto parts = data::randomSplit(full, {full->size() - nval, nval}, seed);
    full = parts[0];
    d.val = parts[1];
  }
  std::vector<std::shared_ptr<const data::Transform>> transforms;
  if (c.random_crop) transforms.push_back(std::make_shared<data::RandomCrop>());
  if (c.horizontal_flip) transforms.push_back(std::make_shared<data::HorizontalFlip>());
  if (!transforms.empty()) {
    data::TransformedDatasetOptions to;
    to.seed = seed;
    full = std::make_shared<data::TransformedDataset>(full, transforms, to);
  }
  d.train = full;
  return d;
}

autograd::Variable flattenPositions(const autograd::Variable& logits) {
  if (logits.dim() != 3) return logits;
  return autograd::reshape(logits, {logits.size(0) * logits.size(1), logits.size(2)});
}

Tensor flattenPositions(const Tensor& target) {
  if (target.dim() != 2) return target;
  return target.reshape({target.size(0) * target.size(1)});
}

EvalResult evaluate(nn::Module& model, const std::shared_ptr<data::Dataset>& ds, comm::ProcessGroup* group,
                    int rank, int world) {
  autograd::NoGradGuard ng;
  model.eval();
  data::DataLoaderOptions lo;
  // About 128K positions per batch for language models (e.g. 512 windows of 256), 500 samples else.
  lo.batch_size = 500;
  if (auto* w = dynamic_cast<data::TokenWindowDataset*>(ds.get()))
    lo.batch_size = std::max<int64_t>(1, 131072 / w->blockSize());
  std::shared_ptr<data::Sampler> sampler;
  if (group) {
    data::DistributedSamplerOptions so;
    so.num_replicas = world;
    so.rank = rank;
    so.shuffle = false;
    sampler = std::make_shared<data::DistributedSampler>(ds->size(), so);
  } else {
    sampler = std::make_shared<data::SequentialSampler>(ds->size());
  }
  data::DataLoader loader(ds, sampler, lo);
  // The sums stay on the model's device until the pass ends (one read, not a copy of each batch's
  // logits); they add up in the order the host loop did, so a CPU run's results are unchanged.
  const Device device = model.device();
  Tensor correct = Tensor::scalar(0, DType::i64, device);
  Tensor loss_sum = Tensor::scalar(0, DType::f64, device);
  double count = 0;
  for (data::Batch& b : loader) {
    autograd::Variable logits = flattenPositions(model(autograd::Variable(b.input.to(device))));
    Tensor target = flattenPositions(b.target.to(device)).contiguous();
    autograd::CrossEntropyOptions co;
    co.reduction = autograd::Reduction::sum;
    kernels::addInto(loss_sum, autograd::crossEntropy(logits, target, co).tensor());
    kernels::countCorrectInto(logits.tensor(), target, correct);
    count += static_cast<double>(logits.size(0));
  }
  double stats[3] = {static_cast<double>(correct.item<int64_t>()), loss_sum.item<double>(), count};
  if (group) group->allreduce(stats, 3, DType::f64)->wait();
  model.train();
  if (stats[2] == 0) return {};
  return {stats[1] / stats[2], stats[0] / stats[2]};
}

}  // namespace lockstep::train
