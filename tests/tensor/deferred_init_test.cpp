// Deferred initialisation: storages created in a DeferredInit scope hold no memory until used, and
// when materialised hold exactly what an eager build wrote, the generator's draws included.
#include "lockstep/tensor/deferred_init.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "lockstep/tensor.h"

using namespace lockstep;

namespace {

bool sameBytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.dataPtr(), y.dataPtr(), x.nbytes()) == 0;
}

// What a layer's constructor does: a weight and a bias from the generator, a constant, zeros.
struct Built {
  Tensor weight, bias, scale, zeros, count;
  uint64_t offset_after = 0;
};

Built build(Generator& gen) {
  Built b;
  b.weight = Tensor::empty({256, 1024});
  gen.uniform(b.weight, -0.5, 0.5);
  b.bias = Tensor::empty({256});
  gen.normal(b.bias, 0.0, 0.02);
  b.bias.fill(0.0);  // GPT zeroes its biases after the normal draw
  b.scale = Tensor::ones({256});
  b.zeros = Tensor::zeros({3, 5}, DType::f64);
  b.count = Tensor::scalar(0, DType::i64);
  b.offset_after = gen.offset();
  return b;
}

}  // namespace

TEST(DeferredInit, storages_hold_no_memory_and_materialise_to_the_eager_values) {
  Generator eager_gen(42);
  Built eager = build(eager_gen);

  Generator gen(42);
  const size_t in_use = CachingAllocator::instance().stats().bytes_in_use;
  Built lazy;
  {
    DeferredInit scope;
    EXPECT_TRUE(DeferredInit::active());
    lazy = build(gen);
  }
  EXPECT_FALSE(DeferredInit::active());
  // The draws were counted: what is built next draws the same numbers as after an eager build.
  EXPECT_EQ(gen.offset(), eager.offset_after);
  // A megabyte of weight and nothing of it allocated.
  EXPECT_LT(CachingAllocator::instance().stats().bytes_in_use, in_use + 4096);
  for (const Tensor* t : {&lazy.weight, &lazy.bias, &lazy.scale, &lazy.zeros, &lazy.count}) {
    EXPECT_TRUE(t->storage()->deferred());
    EXPECT_FALSE(t->storage()->resident());
  }
  // release() leaves a deferred storage deferred (a pipeline releases the other stages' state).
  lazy.weight.storage()->release();
  EXPECT_TRUE(lazy.weight.storage()->deferred());

  lazy.weight.storage()->materialize();
  EXPECT_TRUE(lazy.weight.storage()->resident());
  EXPECT_FALSE(lazy.weight.storage()->deferred());
  EXPECT_TRUE(sameBytes(lazy.weight, eager.weight));
  // First access materialises the rest; the fills replay in the order they were written.
  EXPECT_TRUE(sameBytes(lazy.bias, eager.bias));
  EXPECT_TRUE(sameBytes(lazy.scale, eager.scale));
  EXPECT_TRUE(sameBytes(lazy.zeros, eager.zeros));
  EXPECT_EQ(lazy.count.item<int64_t>(), 0);
}

TEST(DeferredInit, writes_it_does_not_record_materialise_first) {
  Generator gen(3), eager_gen(3);
  Tensor eager = Tensor::empty({4, 6});
  eager_gen.normal(eager, 1.0, 2.0);
  eager.transpose(0, 1).narrow(0, 1, 2).fill(7.0);
  Tensor copied = Tensor::fromVector<float>({1, 2, 3}, {3});

  Tensor lazy, lazy_copy;
  {
    DeferredInit scope;
    lazy = Tensor::empty({4, 6});
    gen.normal(lazy, 1.0, 2.0);
    EXPECT_TRUE(lazy.storage()->deferred());
    // A strided fill is not recorded: the storage materialises (the normal draw replayed) first.
    lazy.transpose(0, 1).narrow(0, 1, 2).fill(7.0);
    EXPECT_TRUE(lazy.storage()->resident());
    lazy_copy = Tensor::empty({3});
    lazy_copy.copyFrom(copied);  // a copy writes through dataPtr: materialised
    EXPECT_TRUE(lazy_copy.storage()->resident());
    // A view of part of a deferred tensor records its own fill, replayed after the whole one's.
    Tensor v = Tensor::empty({2, 8});
    gen.uniform(v, 0.0, 1.0);
    v.narrow(0, 1, 1).fill(-1.0);
    EXPECT_TRUE(v.storage()->deferred());
    EXPECT_EQ(v.toVector<float>()[8], -1.0f);
    EXPECT_GE(v.toVector<float>()[0], 0.0f);
  }
  EXPECT_TRUE(sameBytes(lazy, eager));
  EXPECT_TRUE(sameBytes(lazy_copy, copied));
}

TEST(DeferredInit, scopes_nest_and_belong_to_their_thread) {
  DeferredInit outer;
  {
    DeferredInit inner;
    EXPECT_TRUE(DeferredInit::active());
  }
  EXPECT_TRUE(DeferredInit::active());
  bool other_thread_active = true;
  std::thread([&] { other_thread_active = DeferredInit::active(); }).join();
  EXPECT_FALSE(other_thread_active);
  // Empty tensors have nothing to defer.
  EXPECT_FALSE(Tensor::empty({0, 3}).storage()->deferred());
}

// Random fills write f32 in place (no f64 scratch copy of the tensor): the values are those of a
// f64 fill cast to f32, as they were when every fill went through the scratch copy.
TEST(DeferredInit, in_place_f32_fills_round_as_the_f64_fill_cast) {
  Generator a(5), b(5);
  Tensor f = Tensor::empty({300, 301}), d = Tensor::empty({300, 301}, DType::f64);
  a.normal(f, 0.1, 0.7);
  b.normal(d, 0.1, 0.7);
  EXPECT_TRUE(sameBytes(f, d.to(DType::f32)));
  a.uniform(f, -3.0, 2.0);
  b.uniform(d, -3.0, 2.0);
  EXPECT_TRUE(sameBytes(f, d.to(DType::f32)));
}
