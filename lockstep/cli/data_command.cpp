// `lockstep data tokenize TEXT -o DIR`: a text file or directory into token files in nanoGPT's
// layout (DIR/train.bin, DIR/val.bin, DIR/meta.json), for `data: {dataset: tokens, root: DIR}`.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "lockstep/cli/command.h"
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  lockstep::data::TokenDirMeta meta = lockstep::data::writeTokenDir(input, out, val_fraction);
  std::printf(
      "wrote %s/train.bin (%lld tokens), %s/val.bin (%lld tokens) and %s/meta.json: byte tokens, vocab_size "
      "%lld, uint16\n",
      out.c_str(), static_cast<long long>(meta.train_tokens), out.c_str(),
      static_cast<long long>(meta.val_tokens), out.c_str(), static_cast<long long>(meta.vocab_size));
  return 0;
}

static lockstep::cli::Registration reg{"data", "prepare training data (tokenize text for language models)",
                                       &dataMain};

}  // namespace
