// Real DeepSpeed configs (tests/data/deepspeed_configs, copied from DeepSpeed's repository and
// DeepSpeedExamples) run as written: each either is read without a refusal or is refused only for
// the DeepSpeed features docs/config.md's table names. The table is the expectation: this test reads
// it, so the docs and the behaviour cannot drift apart.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "lockstep/train/config/config.h"
#include "lockstep/util/error.h"
#include "train/config_test_util.h"
#include "train/train_cli.h"

using namespace lockstep;
using namespace lockstep::test;

namespace {

// The source tree, from this file's path (CMake compiles sources by their absolute paths).
const std::string kSource =
    std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
const std::string kCorpus = kSource + "/tests/data/deepspeed_configs";

struct Row {
  std::string file;
  std::vector<std::string> sets;  // the --set overrides of the command line
  bool trains = false;
  std::set<std::string> refused;  // the keys named after "refused:"
};

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line.substr(1));
  for (std::string cell; std::getline(ss, cell, '|');) out.push_back(cell);
  return out;
}

// The `quoted` pieces of a table cell.
std::vector<std::string> quoted(const std::string& cell) {
  std::vector<std::string> out;
  for (size_t at = cell.find('`'); at != std::string::npos; at = cell.find('`', at + 1)) {
    const size_t end = cell.find('`', at + 1);
    if (end == std::string::npos) break;
    out.push_back(cell.substr(at + 1, end - at - 1));
    at = end;
  }
  return out;
}

// docs/config.md's table under "## DeepSpeed configs as written".
std::vector<Row> expectations() {
  std::ifstream in(kSource + "/docs/config.md");
  EXPECT_TRUE(in) << kSource << "/docs/config.md cannot be read";
  std::vector<Row> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) inside = line == "## DeepSpeed configs as written";
    if (!inside || line.rfind("| `", 0) != 0) continue;
    const std::vector<std::string> c = cells(line);
    if (c.size() < 3) continue;
    Row r;
    r.file = quoted(c[0]).at(0);
    for (const std::string& command : quoted(c[1])) {
      std::stringstream words(command);
      for (std::string w; words >> w;) {
        if (w == "--set" && words >> w) r.sets.push_back(w);
      }
    }
    const std::string outcome = c[2].substr(c[2].find_first_not_of(' '));
    r.trains = outcome.rfind("trains", 0) == 0;
    if (outcome.rfind("refused:", 0) == 0) {
      for (const std::string& key : quoted(outcome)) r.refused.insert(key);
    }
    rows.push_back(r);
  }
  return rows;
}

// The keys an error refuses: each line of a combined error ("SOURCE: N refusals:" then one per
// line), or the message alone, starts with the key's path.
std::set<std::string> refusedKeys(const std::string& message, std::string& not_a_feature) {
  std::set<std::string> keys;
  std::stringstream ss(message);
  std::string line;
  bool first = true;
  while (std::getline(ss, line)) {
    const bool header =
        first && (line.size() > 9 && (line.ends_with(" refusal:") || line.ends_with(" refusals:")));
    first = false;
    if (header) continue;
    line = line.substr(line.find_first_not_of(' '));
    if (line.find("not supported yet") == std::string::npos) not_a_feature += line + "\n";
    keys.insert(line.substr(0, line.find_first_of(" :")));
  }
  return keys;
}

}  // namespace

TEST(DeepSpeedCorpus, the_table_in_docs_names_every_config_of_the_corpus_and_no_other) {
  std::set<std::string> files, rows;
  for (const auto& e : std::filesystem::directory_iterator(kCorpus))
    if (e.path().extension() == ".json") files.insert(e.path().filename().string());
  for (const Row& r : expectations()) {
    EXPECT_TRUE(r.trains || !r.refused.empty())
        << r.file << ": the outcome is neither trains nor refused: KEYS";
    rows.insert(r.file);
  }
  EXPECT_GE(files.size(), 20u);
  EXPECT_EQ(files, rows);
}

TEST(DeepSpeedCorpus, each_config_is_read_or_refused_only_for_the_features_its_row_names) {
  for (const Row& r : expectations()) {
    std::string error;
    train::TrainConfig c;
    try {
      c = train::loadTrainConfig(kCorpus + "/" + r.file, r.sets, 1);
    } catch (const ValueError& e) {
      error = e.what();
    }
    if (r.trains) {
      EXPECT_EQ(error, "") << r.file;
      for (const std::string& n : c.notes) EXPECT_FALSE(has(n, "unknown")) << r.file << ": " << n;
      continue;
    }
    std::string not_a_feature;
    EXPECT_EQ(refusedKeys(error, not_a_feature), r.refused) << r.file << ":\n" << error;
    EXPECT_EQ(not_a_feature, "") << r.file << ": refused for something other than a missing feature";
  }
}

// As a user runs them: the file unchanged, the model and data on the command line.
TEST_F(TrainCli, deepspeed_configs_train_a_few_steps_as_written) {
  for (const std::string& args :
       {std::string("cifar.json"), std::string("bf16_master_weight_full.json"),
        std::string("hf_autotuning_fp16_z2.json --set train_micro_batch_size_per_gpu=4"),
        std::string(
            "megatron_gpt2_bs8_zero2_offload.json --set model.name=gpt --set model.model_type=gpt-nano "
            "--set model.block_size=32 --set data.dataset=text --set sample.max_new_tokens=8")}) {
    const std::string out = dir_ + "/run";
    const Result r = run(kCorpus + "/" + args + " --set max_steps=2 --output-dir " + out);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
    EXPECT_TRUE(has(r.output, "steps=2")) << args << "\n" << r.output;
    std::filesystem::remove_all(out);
  }
}
