// Cutting a layer sequence into pipeline stages: DeepSpeed's partition methods and explicit
// boundaries, and clear errors naming the key.
#include <gtest/gtest.h>

#include <string>

#include "lockstep/parallel/pipeline/partition.h"
#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::parallel;

namespace {

std::vector<PipelineLayerInfo> layersOf(const std::vector<int64_t>& params,
                                        const std::string& type = "Block") {
  std::vector<PipelineLayerInfo> layers;
  for (int64_t p : params) layers.push_back({type, p});
  return layers;
}

std::string errorOf(const std::vector<PipelineLayerInfo>& layers, const PartitionOptions& o) {
  try {
    partitionLayers(layers, o);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PipelinePartition, uniform_gives_the_first_stages_the_extra_layers) {
  EXPECT_EQ(partitionUniform(10, 4), (std::vector<int64_t>{0, 3, 6, 8, 10}));
  EXPECT_EQ(partitionUniform(8, 4), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(partitionUniform(3, 3), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(partitionUniform(5, 1), (std::vector<int64_t>{0, 5}));
}

TEST(PipelinePartition, balanced_matches_deepspeeds_dynamic_program) {
  // Values from DeepSpeed's ds_utils.partition_balanced on the same weights.
  EXPECT_EQ(partitionBalanced({1, 1, 1, 1}, 2), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(partitionBalanced({10, 1, 1, 1, 1, 1, 1, 10}, 2), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(partitionBalanced({10, 1, 1, 1, 1, 1, 1, 10}, 3), (std::vector<int64_t>{0, 1, 7, 8}));
  EXPECT_EQ(partitionBalanced({100, 30, 30, 30, 30, 0}, 3), (std::vector<int64_t>{0, 1, 3, 6}));
  EXPECT_EQ(partitionBalanced({1, 2, 3, 4, 5, 6, 7, 8, 9}, 3), (std::vector<int64_t>{0, 5, 7, 9}));
  // Ties go to the later cut.
  EXPECT_EQ(partitionBalanced({5, 0, 0, 5}, 2), (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(partitionBalanced({0, 0, 0, 0}, 2), (std::vector<int64_t>{0, 3, 4}));
}

TEST(PipelinePartition, parameters_balances_parameter_counts_not_layer_counts) {
  // A heavy embedding, four blocks and a parameterless head: the embedding gets a stage to itself.
  auto layers = layersOf({120, 30, 30, 30, 30, 0});
  EXPECT_EQ(partitionLayers(layers, {.stages = 2}), (std::vector<int64_t>{0, 1, 6}));
  EXPECT_EQ(partitionLayers(layers, {.stages = 2, .method = "uniform"}), (std::vector<int64_t>{0, 3, 6}));
}

TEST(PipelinePartition, type_regex_balances_the_matching_layers) {
  std::vector<PipelineLayerInfo> layers = {{"Embedding", 1000}, {"Block", 10}, {"Block", 10},
                                           {"Block", 10},       {"Block", 10}, {"Head", 1000}};
  // Two blocks a stage, whatever the embedding and the head weigh.
  auto b = partitionLayers(layers, {.stages = 2, .method = "type:block"});
  EXPECT_EQ(b, (std::vector<int64_t>{0, 3, 6}));
  EXPECT_NE(errorOf(layers, {.stages = 2, .method = "type:Conv"}).find("matches no layer"),
            std::string::npos);
  EXPECT_NE(errorOf(layers, {.stages = 2, .method = "type:(("}).find("pipeline.partition_method"),
            std::string::npos);
}

TEST(PipelinePartition, every_stage_gets_a_layer_and_all_layers_are_covered) {
  for (int64_t n = 1; n <= 9; ++n) {
    std::vector<int64_t> params;
    for (int64_t i = 0; i < n; ++i) params.push_back((i * 37) % 11);
    for (int64_t s = 1; s <= n; ++s) {
      for (const char* method : {"parameters", "uniform"}) {
        auto b = partitionLayers(layersOf(params), {.stages = s, .method = method});
        ASSERT_EQ(b.size(), static_cast<size_t>(s + 1));
        EXPECT_EQ(b.front(), 0);
        EXPECT_EQ(b.back(), n);
        for (size_t i = 0; i + 1 < b.size(); ++i)
          EXPECT_LT(b[i], b[i + 1]) << n << " layers, " << s << " stages";
      }
    }
  }
}

TEST(PipelinePartition, explicit_boundaries_are_used_as_given) {
  auto layers = layersOf({1, 1, 1, 1, 1});
  EXPECT_EQ(partitionLayers(layers, {.stages = 3, .boundaries = {0, 1, 4, 5}}),
            (std::vector<int64_t>{0, 1, 4, 5}));
}

TEST(PipelinePartition, bad_settings_are_errors_naming_the_key) {
  auto layers = layersOf({1, 1, 1});
  EXPECT_NE(errorOf(layers, {.stages = 4}).find("pipeline.stages is 4 but the model has only 3 layers"),
            std::string::npos);
  EXPECT_NE(errorOf(layers, {.stages = 0}).find("pipeline.stages"), std::string::npos);
  EXPECT_NE(errorOf(layers, {.stages = 2, .method = "balanced"}).find("pipeline.partition_method 'balanced'"),
            std::string::npos);
  EXPECT_NE(errorOf(layers, {.stages = 2, .boundaries = {0, 2, 2, 3}}).find("pipeline.boundaries"),
            std::string::npos);
  EXPECT_NE(
      errorOf(layers, {.stages = 2, .boundaries = {0, 2, 1}}).find("start at 0 and end at the layer count 3"),
      std::string::npos);
  EXPECT_NE(errorOf(layers, {.stages = 2, .boundaries = {0, 3, 3}}).find("strictly increasing"),
            std::string::npos);
  EXPECT_NE(errorOf(layers, {.stages = 2, .boundaries = {1, 2, 3}}).find("start at 0"), std::string::npos);
}
