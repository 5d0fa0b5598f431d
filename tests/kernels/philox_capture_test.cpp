// Where dropout's Philox draws start (kernels::PhiloxState): eagerly the generator's own state, in
// a CUDA graph capture a device slot plus the counters drawn since the capture began (the capture
// itself: tests/parallel/gpu_step_graph_test.cpp). Runs anywhere.
#include "lockstep/kernels/philox_capture.h"

#include <gtest/gtest.h>

#include "lockstep/kernels/dropout.h"

using namespace lockstep;

namespace {

TEST(PhiloxState, outside_a_capture_kernels_get_the_generator_s_state) {
  Generator g(42);
  g.setState(42, 1000);
  const kernels::PhiloxState s = kernels::philoxState(g, Device::cpu());
  EXPECT_EQ(s.key, 42u);
  EXPECT_EQ(s.offset, 1000u);
  EXPECT_EQ(s.device, nullptr);
  const kernels::PhiloxState r = s.resolved();
  EXPECT_EQ(r.key, 42u);
  EXPECT_EQ(r.offset, 1000u);
  EXPECT_EQ(kernels::PhiloxCapture::active(), nullptr);
}

TEST(PhiloxState, a_slot_gives_its_key_and_starts_the_draws_past_its_base) {
  // What a kernel reads from the slot the host wrote before a replay: {key, base}.
  const uint64_t slot[2] = {7, 5000};
  const kernels::PhiloxState s{0, 96, slot};
  const kernels::PhiloxState r = s.resolved();
  EXPECT_EQ(r.key, 7u);
  EXPECT_EQ(r.offset, 5096u);
  EXPECT_EQ(r.device, nullptr);
  // The same draws as eagerly from a generator at 5096.
  EXPECT_EQ(kernels::dropoutKeeps(r.offset + 3, r.key, 0.5), kernels::dropoutKeeps(5099, 7, 0.5));
}

TEST(PhiloxState, a_capture_needs_a_gpu) {
  EXPECT_THROW(kernels::PhiloxCapture capture(Device::cpu()), ValueError);
}

}  // namespace
