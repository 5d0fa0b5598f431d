// image_folder against torchvision itself (Debian's python3-torchvision, with Pillow): the same
// class list, sample order and labels as torchvision.datasets.ImageFolder, and the validation
// pipeline's tensors (Resize + CenterCrop + ToTensor + Normalize) within one unit of 1/255 per
// pixel on the same JPEG and PNG files; the training pipeline's too (RandomResizedCrop +
// RandomHorizontalFlip + ToTensor + Normalize), torchvision given lockstep's crop boxes and coins.
// Skipped where torchvision is not installed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "lockstep/data/datasets/image_folder.h"
#include "lockstep/data/datasets/registry.h"
#include "lockstep/data/file_bytes.h"
#include "lockstep/data/image_codecs/jpeg_codec.h"
#include "lockstep/data/image_codecs/png_codec.h"
#include "lockstep/data/transforms/random_horizontal_flip.h"
#include "lockstep/data/transforms/random_resized_crop.h"

namespace lockstep::data {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// A photo-like image: smooth gradients plus a little texture, different per tag.
Image scene(int64_t h, int64_t w, int64_t channels, int tag) {
  Image im = Image::zeros(h, w, channels);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < channels; ++c)
        im.at(y, x, c) =
            static_cast<uint8_t>((x * 150 / w + y * 80 / h + c * 25 + tag * 13 + (x * y + tag) % 9) % 256);
  return im;
}

void put(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  writeFileBytes(path.string(), bytes);
}

TEST(ImageFolderTorchvision, same_classes_samples_and_validation_tensors_as_torchvision) {
  const std::string py = testing::pythonWith("torchvision");
  if (py.empty()) GTEST_SKIP() << "python3 with torchvision not installed: apt install python3-torchvision";
  TempDir d;
  const fs::path val = fs::path(d.str()) / "val";
  fs::create_directories(d.file("train/Zebra"));  // image_folder needs train/ too; not compared
  int tag = 0;
  for (const char* cls : {"Zebra", "apple", "b c"}) {
    put(d.file("train") + "/" + cls + "/t.jpg", encodeJpeg(scene(20, 20, 3, tag)));
    put(val / cls / "1.JPEG", encodeJpeg(scene(37 + tag, 53 - tag, 3, tag), 92));
    put(val / cls / "0.jpg", encodeJpeg(scene(61, 45 + tag, 3, tag + 1), 75));
    ++tag;
  }
  put(val / "apple/sub/grey.jpeg", encodeJpeg(scene(50, 40, 1, 7)));  // below the class folder
  put(val / "apple/rgba.png", encodePng(scene(33, 47, 4, 8)));
  put(val / "b c/small.jpg", encodeJpeg(scene(9, 14, 3, 9)));  // smaller than the crop
  put(val / "b c/notes.txt", {'h', 'i'});
  const std::string script = R"(
import json, sys, numpy, torch
from torchvision import datasets, transforms
root, out = sys.argv[1], sys.argv[2]
t = transforms.Compose([transforms.Resize(20), transforms.CenterCrop(16), transforms.ToTensor(),
                        transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
ds = datasets.ImageFolder(root + "/val", transform=t)
json.dump({"classes": ds.classes, "paths": [p for p, _ in ds.samples], "labels": ds.targets}, open(out + ".json", "w"))
numpy.stack([ds[i][0].numpy() for i in range(len(ds))]).astype(numpy.float32).tofile(out + ".f32")
)";
  std::ofstream(d.file("tv.py")) << script;
  ASSERT_EQ(std::system((py + " " + d.file("tv.py") + " " + d.str() + " " + d.file("tv")).c_str()), 0);
  const nlohmann::json tv = nlohmann::json::parse(std::ifstream(d.file("tv.json")));
  const std::vector<uint8_t> raw = readFileBytes(d.file("tv.f32"));

  DatasetOptions o;
  o.root = d.str();
  o.image_size = 16;
  o.resize_size = 20;
  const DatasetSplits s = findDataset("image_folder").load(o);
  const auto& ours = dynamic_cast<const ImageFolder&>(*s.test);
  EXPECT_EQ(s.classes, tv["classes"].get<std::vector<std::string>>());
  ASSERT_EQ(ours.files().paths, tv["paths"].get<std::vector<std::string>>());
  EXPECT_EQ(ours.files().labels, tv["labels"].get<std::vector<int64_t>>());
  const size_t per = 3 * 16 * 16;
  ASSERT_EQ(raw.size(), ours.files().paths.size() * per * sizeof(float));
  const auto* want = reinterpret_cast<const float*>(raw.data());
  const float stds[3] = {0.229f, 0.224f, 0.225f};
  for (int64_t i = 0; i < ours.size(); ++i) {
    const std::vector<float> got = ours.get(i).input.contiguous().toVector<float>();  // [3, 16, 16]
    ASSERT_EQ(got.size(), per);
    double worst = 0;  // in units of 1/255 before normalising
    for (size_t k = 0; k < per; ++k)
      worst = std::max(worst, std::abs(got[k] - want[i * per + k]) * stds[k / 256] * 255.0);
    EXPECT_LE(worst, 1.0 + 1e-3) << ours.files().paths[static_cast<size_t>(i)];
  }
}

TEST(ImageFolderTorchvision, training_tensors_match_torchvision_given_the_same_boxes_and_flips) {
  const std::string py = testing::pythonWith("torchvision");
  if (py.empty()) GTEST_SKIP() << "python3 with torchvision not installed: apt install python3-torchvision";
  TempDir d;
  // Windows from a few pixels (upscaled) to most of the image (downscaled), both flips.
  for (int tag = 0; tag < 6; ++tag)
    put(d.file("train") + "/c/" + std::to_string(tag) + ".jpg",
        encodeJpeg(scene(50 + 13 * tag, 90 - 7 * tag, 3, tag), 85 + tag));
  put(d.file("val/c/v.jpg"), encodeJpeg(scene(20, 20, 3, 0)));  // image_folder needs val/ too
  DatasetOptions o;
  o.root = d.str();
  o.image_size = 32;
  o.seed = 5;
  const DatasetSplits s = findDataset("image_folder").load(o);
  const auto& ours = dynamic_cast<const ImageFolder&>(*s.train);
  // The registry's training pipeline: RandomResizedCrop in slot 0, RandomHorizontalFlip in slot 1.
  const RandomResizedCrop crop(RandomResizedCropOptions{.height = 32, .width = 32});
  const RandomHorizontalFlip flip;
  nlohmann::json boxes = nlohmann::json::array();
  for (int64_t i = 0; i < ours.size(); ++i) {
    const Image image = ours.loadImage(i).image;
    const CropBox b = crop.cropBox(image.height, image.width, {.seed = 5, .epoch = 0, .index = i, .slot = 0});
    const bool mirror = *flip.mirrorsOnly({.seed = 5, .epoch = 0, .index = i, .slot = 1});
    boxes.push_back({ours.files().paths[static_cast<size_t>(i)], b.top, b.left, b.height, b.width, mirror});
  }
  std::ofstream(d.file("boxes.json")) << boxes.dump();
  const std::string script = R"(
import json, sys, numpy, torch
from PIL import Image
from torchvision import transforms
import torchvision.transforms.functional as F
boxes, out = json.load(open(sys.argv[1])), sys.argv[2]
norm = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
def sample(path, top, left, h, w, mirror):
    img = F.resized_crop(Image.open(path).convert("RGB"), top, left, h, w, [32, 32],
                         transforms.InterpolationMode.BILINEAR)
    return norm(F.to_tensor(F.hflip(img) if mirror else img)).numpy()
numpy.stack([sample(*b) for b in boxes]).astype(numpy.float32).tofile(out)
)";
  std::ofstream(d.file("tv.py")) << script;
  ASSERT_EQ(
      std::system((py + " " + d.file("tv.py") + " " + d.file("boxes.json") + " " + d.file("tv.f32")).c_str()),
      0);
  const std::vector<uint8_t> raw = readFileBytes(d.file("tv.f32"));
  const size_t per = 3 * 32 * 32;
  ASSERT_EQ(raw.size(), static_cast<size_t>(ours.size()) * per * sizeof(float));
  const auto* want = reinterpret_cast<const float*>(raw.data());
  const float stds[3] = {0.229f, 0.224f, 0.225f};
  int mirrored = 0;
  for (int64_t i = 0; i < ours.size(); ++i) {
    const std::vector<float> got = ours.get(i).input.contiguous().toVector<float>();  // [3, 32, 32]
    ASSERT_EQ(got.size(), per);
    double worst = 0;  // in units of 1/255 before normalising
    for (size_t k = 0; k < per; ++k)
      worst =
          std::max(worst, std::abs(got[k] - want[static_cast<size_t>(i) * per + k]) * stds[k / 1024] * 255.0);
    EXPECT_LE(worst, 1.0 + 1e-3) << boxes[static_cast<size_t>(i)].dump();
    mirrored += boxes[static_cast<size_t>(i)][5].get<bool>();
  }
  EXPECT_GT(mirrored, 0);
  EXPECT_LT(mirrored, ours.size());
}

}  // namespace
}  // namespace lockstep::data
