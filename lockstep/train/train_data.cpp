#include "lockstep/train/train_data.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "lockstep/autograd.h"
#include "lockstep/data.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/metrics.h"
#include "lockstep/nn/models/language_model.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::train {

namespace {

data::DatasetOptions datasetOptions(const DataConfig& c, uint64_t seed) {
  data::DatasetOptions o;
  o.root = c.root;
  o.normalize_mean = c.normalize_mean;
  o.image_dtype = c.image_dtype;
  o.normalize_std = c.normalize_std;
  o.size = c.size;
  o.test_size = c.test_size;
  o.num_classes = c.num_classes;
  o.input_shape = c.input_shape;
  o.val_split = c.val_split;
  o.block_size = c.block_size;
  o.seed = seed;
  o.image_size = c.image_size;
  o.resize_size = c.resize_size;
  o.skip_bad_files = c.skip_bad_files;
  o.exif_transpose = c.exif_transpose;
  o.dct_scaling = c.dct_scaling;
  o.train_list = c.train_list;
  o.val_list = c.val_list;
  o.crop_scale = c.crop_scale;
  o.crop_ratio = c.crop_ratio;
  o.horizontal_flip = c.image_horizontal_flip;
  o.color_jitter = c.color_jitter;
  return o;
}

}  // namespace

void checkDataFiles(const DataConfig& c) {
  const data::DatasetInfo& info = data::findDataset(c.dataset);
  if (info.check_files) info.check_files(datasetOptions(c, 0));
}

TrainData loadTrainData(const DataConfig& c, uint64_t seed) {
  const data::DatasetInfo& info = data::findDataset(c.dataset);
  data::DatasetSplits s = info.load(datasetOptions(c, seed));
  TrainData d;
  d.train = s.train;
  d.val = s.val;
  d.test = s.test;
  d.vocab_size = s.vocab_size;
  d.tokenizer = s.tokenizer;
  d.classes = s.classes;
  d.label_count = s.label_count;
  if (info.language) return d;  // its validation windows come with it
  if (c.val_split > 0) {
    int64_t nval = static_cast<int64_t>(static_cast<double>(d.train->size()) * c.val_split);
    // Validation on no samples would report a loss and an accuracy of 0 as if measured.
    LOCKSTEP_ENFORCE(nval >= 1, ValueError, "data.val_split: ", c.val_split, " of the ", d.train->size(),
                     " training samples holds out none; raise it to at least ",
                     std::ceil(1e6 / static_cast<double>(d.train->size())) / 1e6, " or leave it out");
    LOCKSTEP_ENFORCE(nval < d.train->size(), ValueError, "data.val_split: ", c.val_split, " of the ",
                     d.train->size(), " training samples leaves none to train on; lower it");
    // The same indices out of the samples as evaluation sees them (image_folder's held-out files
    // are resized and center-cropped, not augmented as the training files are).
    const std::vector<int64_t> sizes{d.train->size() - nval, nval};
    auto parts = data::randomSplit(d.train, sizes, seed);
    d.train = parts[0];
    d.val = s.train_for_eval ? data::randomSplit(s.train_for_eval, sizes, seed)[1] : parts[1];
  }
  std::vector<std::shared_ptr<const data::Transform>> transforms;
  // torchvision's RandomCrop(padding=4) pads with black before Normalize: here, after it, the
  // normalised value of black (not 0, the mean).
  if (c.random_crop)
    transforms.push_back(std::make_shared<data::RandomCrop>(
        data::RandomCropOptions{.padding = 4, .fill = s.black.empty() ? std::vector<float>{0.0f} : s.black}));
  if (c.horizontal_flip) transforms.push_back(std::make_shared<data::HorizontalFlip>());
  if (!transforms.empty()) {
    data::TransformedDatasetOptions to;
    to.seed = seed;
    d.train = std::make_shared<data::TransformedDataset>(d.train, transforms, to);
  }
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

bool fusedLanguageModelLoss() {
  static const bool fused = env::getBool("LOCKSTEP_FUSED_LM_LOSS", true);
  return fused;
}

autograd::Variable microBatchLoss(parallel::Engine& engine, nn::CrossEntropyLoss& criterion,
                                  const Tensor& input, const Tensor& target) {
  auto* lm = dynamic_cast<nn::LanguageModel*>(engine.model().get());
  if (lm && fusedLanguageModelLoss()) {
    return engine.forwardWith(
        [&] { return lm->forwardLoss(autograd::Variable(input), target, criterion.options()); });
  }
  return engine.forwardLoss(autograd::Variable(input), [&](const autograd::Variable& out) {
    return criterion(flattenPositions(out), flattenPositions(target));
  });
}

int64_t evalBatchWindows(int64_t block_size, int64_t vocab) {
  const int64_t positions = vocab > 0 ? std::min<int64_t>(131072, (int64_t{64} << 20) / vocab) : 131072;
  return std::max<int64_t>(1, positions / std::max<int64_t>(1, block_size));
}

EvalResult evaluateWith(const std::shared_ptr<data::Dataset>& ds, const EvalShard& shard, Device device,
                        const std::function<autograd::Variable(const Tensor& input)>& forward,
                        int64_t vocab) {
  autograd::NoGradGuard ng;
  data::DataLoaderOptions lo;
  lo.batch_size = 500;
  if (auto* w = dynamic_cast<data::TokenWindowDataset*>(ds.get()))
    lo.batch_size = evalBatchWindows(w->blockSize(), vocab);
  std::shared_ptr<data::Sampler> sampler;
  if (shard.count > 1) {
    data::DistributedSamplerOptions so;
    so.num_replicas = shard.count;
    so.rank = shard.index;
    so.shuffle = false;
    sampler = std::make_shared<data::DistributedSampler>(ds->size(), so);
  } else {
    sampler = std::make_shared<data::SequentialSampler>(ds->size());
  }
  data::DataLoader loader(ds, sampler, lo);
  // The sums stay on the model's device until the pass ends (one read, not a copy of each batch's
  // logits); they add up in the order the host loop did, so a CPU run's results are unchanged.
  Tensor correct = Tensor::scalar(0, DType::i64, device);
  Tensor loss_sum = Tensor::scalar(0, DType::f64, device);
  double count = 0;
  // The sampler pads the ranks' shares to one length with samples from the start (every rank runs
  // as many forwards: they may be collective); rank r's k-th sample is position r + k * ranks of
  // the order, and those at n and past it are that padding: run, but not counted (the result is
  // then the one-process pass's whatever the world size, as a validation loss must be).
  const int64_t n = ds->size();
  int64_t seen = 0;
  for (data::Batch& b : loader) {
    // Evaluation runs the f32 model without autocast: bf16 images (data.transforms.to_dtype) widen,
    // which is exact.
    Tensor input = b.input.to(device);
    if (input.dtype() == DType::bf16 || input.dtype() == DType::f16) input = input.to(DType::f32);
    const int64_t rows = input.size(0);
    int64_t real = 0;
    while (real < rows && shard.index + (seen + real) * shard.count < n) ++real;
    seen += rows;
    const autograd::Variable out = forward(input);
    if (!out.defined() || real == 0) continue;  // a pipeline stage before the last; padding alone
    autograd::Variable logits = flattenPositions(out);
    Tensor target = flattenPositions(b.target.to(device)).contiguous();
    if (real < rows) {  // the padded samples' rows (positions) come last
      const int64_t kept = logits.size(0) / rows * real;
      logits = autograd::narrow(logits, 0, 0, kept);
      target = target.narrow(0, 0, kept).contiguous();
    }
    autograd::CrossEntropyOptions co;
    co.reduction = autograd::Reduction::sum;
    kernels::addInto(loss_sum, autograd::crossEntropy(logits, target, co).tensor());
    kernels::countCorrectInto(logits.tensor(), target, correct);
    count += static_cast<double>(logits.size(0));
  }
  double stats[3] = {static_cast<double>(correct.item<int64_t>()), loss_sum.item<double>(), count};
  if (shard.reduce) shard.reduce->allreduce(stats, 3, DType::f64)->wait();
  if (stats[2] == 0) return {};
  return {stats[1] / stats[2], stats[0] / stats[2]};
}

EvalResult evaluate(nn::Module& model, const std::shared_ptr<data::Dataset>& ds, comm::ProcessGroup* group,
                    int rank, int world, int64_t vocab) {
  model.eval();
  const EvalResult r = evaluateWith(
      ds, {group ? rank : 0, group ? world : 1, group}, model.device(),
      [&](const Tensor& input) { return model(autograd::Variable(input)); }, vocab);
  model.train();
  return r;
}

}  // namespace lockstep::train
