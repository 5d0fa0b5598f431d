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
