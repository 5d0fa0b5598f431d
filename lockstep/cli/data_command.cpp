// `lockstep data`: training data prepared ahead of a run.
//  - `tokenize TEXT -o DIR`: a text file or directory into token files in nanoGPT's layout
//    (DIR/train.bin, DIR/val.bin, DIR/meta.json), for `data: {dataset: tokens, root: DIR}`.
//  - `make-image-folder -o DIR`: a small ImageNet-shaped folder of JPEG files made from Fashion-MNIST
//    or CIFAR-10, for `data: {dataset: image_folder, root: DIR}`.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "lockstep/cli/command.h"
#include "lockstep/data/datasets/image_folder_writer.h"
#include "lockstep/data/datasets/text_corpus.h"

namespace {

int dataMain(int argc, char** argv) {
  CLI::App app{"Prepare training data", "lockstep data"};
  app.require_subcommand(1);
  std::string input = lockstep::data::kFortunesDir, out;
  double val_fraction = 0.1;
  CLI::App* tok = app.add_subcommand(
      "tokenize",
      "byte-tokenize a text file or directory into DIR/train.bin, DIR/val.bin (uint16, nanoGPT's "
      "layout) and DIR/meta.json");
  tok->add_option("text", input,
                  "a text file, or a directory of text files (default: Debian's fortunes, " +
                      std::string(lockstep::data::kFortunesDir) + ")");
  tok->add_option("-o,--output", out, "the directory to write")->required();
  tok->add_option("--val-fraction", val_fraction, "the last fraction of the tokens held out for validation")
      ->check(CLI::Range(0.0, 0.999));

  lockstep::data::ImageFolderWriterOptions img;
  std::string img_out;
  CLI::App* make = app.add_subcommand(
      "make-image-folder",
      "write DIR/train/CLASS/*.JPEG and DIR/val/CLASS/*.JPEG (torchvision's ImageFolder layout) from "
      "Fashion-MNIST or CIFAR-10 images, upscaled to varied sizes and re-encoded");
  make->add_option("-o,--output", img_out, "the directory to write (new or empty)")->required();
  make->add_option("--source", img.source, "fashion_mnist or cifar10")
      ->check(CLI::IsMember({"fashion_mnist", "cifar10"}))
      ->capture_default_str();
  make->add_option("--source-root", img.source_root,
                   "the source's files (default for fashion_mnist: /usr/share/datasets/fashion-mnist; "
                   "cifar10: its folder or downloaded .tar.gz, as data.root)");
  make->add_option("--classes", img.classes, "number of classes (1..10)")->capture_default_str();
  make->add_option("--train-per-class", img.train_per_class, "training images per class")
      ->capture_default_str();
  make->add_option("--val-per-class", img.val_per_class, "validation images per class")
      ->capture_default_str();
  make->add_option("--min-side", img.min_side, "smallest shorter side in pixels")->capture_default_str();
  make->add_option("--max-side", img.max_side, "largest shorter side in pixels")->capture_default_str();
  make->add_option("--quality", img.quality, "JPEG quality (1..100)")->capture_default_str();
  make->add_option("--seed", img.seed, "seed of the sizes")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (make->parsed()) {
    const lockstep::data::ImageFolderWriterResult r = lockstep::data::writeImageFolder(img_out, img);
    std::printf("wrote %s/train (%lld JPEG files) and %s/val (%lld) in %zu class folders, from %s\n",
                img_out.c_str(), static_cast<long long>(r.train_files), img_out.c_str(),
                static_cast<long long>(r.val_files), r.classes.size(), img.source.c_str());
    return 0;
  }
  lockstep::data::TokenDirMeta meta = lockstep::data::writeTokenDir(input, out, val_fraction);
  const std::string val = val_fraction > 0 ? out + "/val.bin (" + std::to_string(meta.val_tokens) + " tokens)"
                                           : std::string("no val.bin (--val-fraction 0)");
  std::printf("wrote %s/train.bin (%lld tokens), %s and %s/meta.json: byte tokens, vocab_size %lld, uint16\n",
              out.c_str(), static_cast<long long>(meta.train_tokens), val.c_str(), out.c_str(),
              static_cast<long long>(meta.vocab_size));
  return 0;
}

static lockstep::cli::Registration reg{
    "data", "prepare training data (tokenize text, make a small image folder)", &dataMain};

}  // namespace
