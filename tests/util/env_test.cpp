#include <gtest/gtest.h>

#include <cstdlib>

#include "lockstep/util.h"

using namespace lockstep;

TEST(Util, env_int_parses_and_rejects) {
  ::setenv("LOCKSTEP_TEST_INT", "42", 1);
  EXPECT_EQ(env::getInt("LOCKSTEP_TEST_INT", 0), 42);
  ::setenv("LOCKSTEP_TEST_INT", "4x2", 1);
  try {
    env::getInt("LOCKSTEP_TEST_INT", 0);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_TEST_INT"), std::string::npos);
  }
  ::unsetenv("LOCKSTEP_TEST_INT");
  EXPECT_EQ(env::getInt("LOCKSTEP_TEST_INT", 5), 5);
}

TEST(Util, check_reports_operands) {
  try {
    int a = 3;
    LOCKSTEP_CHECK(a == 4, "a=", a);
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("a == 4"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("a=3"), std::string::npos);
  }
}

TEST(Util, env_bytes_read_sizes_with_units_and_reject_the_rest) {
  EXPECT_EQ(env::parseBytes("X", "4096"), 4096);
  EXPECT_EQ(env::parseBytes("X", "8GiB"), int64_t{8} << 30);
  EXPECT_EQ(env::parseBytes("X", "8g"), int64_t{8} << 30);
  EXPECT_EQ(env::parseBytes("X", "1.5G"), int64_t{3} << 29);
  EXPECT_EQ(env::parseBytes("X", "500 MB"), 500'000'000);
  EXPECT_EQ(env::parseBytes("X", "2kib"), 2048);
  EXPECT_EQ(env::parseBytes("X", "3B"), 3);
  for (const char* bad : {"", "lots", "8 GiBs", "-1G", "0.3", "1e30", "nan"}) {
    try {
      env::parseBytes("LOCKSTEP_CUDA_MEMORY_LIMIT", bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("LOCKSTEP_CUDA_MEMORY_LIMIT"), std::string::npos) << e.what();
    }
  }
  ::setenv("LOCKSTEP_TEST_BYTES", "2M", 1);
  EXPECT_EQ(env::getBytes("LOCKSTEP_TEST_BYTES"), int64_t{2} << 20);
  ::unsetenv("LOCKSTEP_TEST_BYTES");
  EXPECT_FALSE(env::getBytes("LOCKSTEP_TEST_BYTES").has_value());
}
