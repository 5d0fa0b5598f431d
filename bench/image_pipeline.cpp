// Images per second through lockstep's ImageNet training input: an image folder's train/ split as
// `lockstep train` loads it (the registry's image_folder: decode, RandomResizedCrop, random
// horizontal flip, ToTensor + Normalize), batched by a DataLoader with --workers threads.
// bench/image_pipeline.bench.sh runs it beside torchvision's ImageFolder + DataLoader.
//
//   build/bench/bench_image_pipeline --root DIR [--workers 1] [--batch 64] [--epochs 3]
//                                    [--stage loader|sample|augment|decode]
//
// --stage narrows the work to a prefix of the pipeline, on the calling thread alone, to see where
// the time goes: decode (read + decode each file), augment (+ the uint8 transforms), sample
// (+ ToTensor/Normalize: Dataset::get), loader (the default: DataLoader batches, --workers threads).
// The first epoch warms caches (file pages, allocator) and is not counted.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "lockstep/data.h"

using namespace lockstep;

namespace {

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// One pass over the whole dataset at the given stage; returns the images handled.
int64_t runEpoch(const std::string& stage, data::Dataset& dataset, data::DataLoader& loader, uint64_t epoch) {
  auto* folder = dynamic_cast<data::ImageFolder*>(&dataset);
  int64_t images = 0;
  volatile uint64_t sink = 0;  // keeps the per-sample work observable
  if (stage == "loader") {
    loader.setEpoch(epoch);
    for (data::Batch& b : loader) {
      sink = sink + static_cast<uint64_t>(b.input.data<float>()[0] != 0.0f);
      images += b.size();
    }
    return images;
  }
  dataset.setEpoch(epoch);
  for (int64_t i = 0; i < dataset.size(); ++i, ++images) {
    if (stage == "sample") {
      sink = sink + static_cast<uint64_t>(dataset.get(i).input.data<float>()[0] != 0.0f);
      continue;
    }
    data::LabeledImage s = folder->loadImage(i);
    if (stage == "augment") s.image = folder->pipeline().augment(std::move(s.image), epoch, i);
    sink = sink + s.image.data[0];
  }
  return images;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Images/s of lockstep's image_folder training pipeline"};
  std::string root, stage = "loader";
  int64_t workers = 1, batch = 64, epochs = 3, image_size = 224;
  bool dct_scaling = false;
  app.add_option("--root", root, "image folder with train/CLASS/*.JPEG (lockstep data make-image-folder)")
      ->required();
  app.add_option("--workers", workers, "DataLoader worker threads");
  app.add_option("--batch", batch, "batch size");
  app.add_option("--epochs", epochs, "timed passes over train/ (after one warm-up pass)");
  app.add_option("--image-size", image_size, "RandomResizedCrop's output side");
  app.add_option("--stage", stage, "how much of the pipeline to run")
      ->check(CLI::IsMember({"loader", "sample", "augment", "decode"}));
  app.add_flag("--dct-scaling", dct_scaling,
               "data.dct_scaling: decode JPEGs at a DCT scale where it suffices");
  CLI11_PARSE(app, argc, argv);

  data::DatasetOptions options;
  options.root = root;
  options.image_size = image_size;
  options.dct_scaling = dct_scaling;
  options.seed = 1;
  const data::DatasetSplits splits = data::findDataset("image_folder").load(options);
  data::DataLoaderOptions lo;
  lo.batch_size = batch;
  lo.shuffle = true;
  lo.seed = 1;
  lo.num_workers = workers;
  data::DataLoader loader(splits.train, lo);

  runEpoch(stage, *splits.train, loader, 0);
  const auto start = std::chrono::steady_clock::now();
  int64_t images = 0;
  for (int64_t e = 1; e <= epochs; ++e)
    images += runEpoch(stage, *splits.train, loader, static_cast<uint64_t>(e));
  const double s = seconds(start);
  std::printf("stage=%s workers=%lld images=%lld seconds=%.3f images_per_second=%.1f\n", stage.c_str(),
              static_cast<long long>(workers), static_cast<long long>(images), s,
              static_cast<double>(images) / s);
  return 0;
}
