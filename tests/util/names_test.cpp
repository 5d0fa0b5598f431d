#include "lockstep/util/names.h"

#include <gtest/gtest.h>

using namespace lockstep;

TEST(NearestName, nearest_name_by_edit_distance) {
  EXPECT_EQ(editDistance("lrr", "lr"), 1u);
  EXPECT_EQ(editDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(nearestName("lrr", {"lr", "betas", "eps"}), "lr");
  EXPECT_EQ(nearestName("epoch", {"epochs", "seed"}), "epochs");
  EXPECT_EQ(nearestName("glo", {"shm", "gloo", "mpi", "auto"}), "gloo");
  EXPECT_EQ(nearestName("completely_different", {"lr", "eps"}), "");
}
