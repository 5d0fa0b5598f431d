// "Did you mean ...?": one nearest-name helper for config keys, optimizer, model and dataset names.
#include "lockstep/util/suggest.h"

#include <gtest/gtest.h>

using namespace lockstep;

TEST(Suggest, nearest_key_by_edit_distance) {
  EXPECT_EQ(editDistance("lrr", "lr"), 1u);
  EXPECT_EQ(editDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(nearestKey("lrr", {"lr", "betas", "eps"}), "lr");
  EXPECT_EQ(nearestKey("epoch", {"epochs", "seed"}), "epochs");
  EXPECT_EQ(nearestKey("glo", {"shm", "gloo", "mpi", "auto"}), "gloo");
  EXPECT_EQ(nearestKey("completely_different", {"lr", "eps"}), "");
}

TEST(Suggest, a_name_differing_only_in_case_comes_first) {
  // "sgd" is 3 edits from "SGD", too far by distance alone; "Adam" is 1 from "adamw".
  EXPECT_EQ(nearestKey("sgd", {"Adam", "AdamW", "SGD"}), "SGD");
  EXPECT_EQ(nearestKey("adamw", {"Adam", "AdamW", "SGD"}), "AdamW");
  EXPECT_EQ(nearestKey("MNIST", {"fashion_mnist", "mnist"}), "mnist");
}
