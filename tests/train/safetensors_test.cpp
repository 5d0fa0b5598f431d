#include "lockstep/train/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "lockstep/util/file.h"

using namespace lockstep;
using namespace lockstep::train;

namespace {
std::string tempDir() {
  std::string t = (std::filesystem::temp_directory_path() / "lockstep-st-XXXXXX").string();
  return ::mkdtemp(t.data());
}
std::string errorOf(const std::string& bytes) {
  try {
    decodeSafetensors(bytes, "x.safetensors");
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Safetensors, round_trip_all_dtypes) {
  std::string dir = tempDir();
  NamedTensors in;
  in.emplace_back("w", Tensor::fromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1));  // strided
  in.emplace_back("d", Tensor::fromVector<double>({0.5}, {}));
  in.emplace_back("i", Tensor::fromVector<int64_t>({7, -8}, {2}));
  in.emplace_back("b", Tensor::fromVector<float>({1.5f}, {1}).to(DType::bf16));
  in.emplace_back("e", Tensor::empty({0, 4}));
  saveSafetensors(dir + "/m.safetensors", in, {{"format", "pt"}});
  SafetensorsFile f = loadSafetensors(dir + "/m.safetensors");
  ASSERT_EQ(f.tensors.size(), 5u);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.at("w").shape(), (Shape{3, 2}));
  EXPECT_EQ(f.at("w").toVector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(f.at("d").dim(), 0);
  EXPECT_EQ(f.at("i").toVector<int64_t>(), (std::vector<int64_t>{7, -8}));
  EXPECT_EQ(f.at("b").dtype(), DType::bf16);
  EXPECT_EQ(f.at("e").numel(), 0);
  EXPECT_THROW(f.at("nope"), IoError);
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, python_can_read_it) {
  // Cross-check with the reference implementation when torch (and so a Python reader) is present.
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no python3-torch";
  std::string dir = tempDir();
  saveSafetensors(dir + "/m.safetensors", {{"a", Tensor::fromVector<float>({1, 2, 3}, {3})},
                                           {"b", Tensor::fromVector<int64_t>({4}, {1})}});
  // A minimal reader following the published format, in Python, independent of lockstep's code.
  std::string py =
      "import json,struct,sys\n"
      "b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); d=b[8+n:]\n"
      "a=h['a']; assert a['dtype']=='F32' and a['shape']==[3]\n"
      "s,e=a['data_offsets']; assert struct.unpack('<3f',d[s:e])==(1.0,2.0,3.0)\n"
      "s,e=h['b']['data_offsets']; assert struct.unpack('<q',d[s:e])==(4,)\n";
  file::writeAtomic(dir + "/check.py", py);
  EXPECT_EQ(std::system(("/usr/bin/python3 " + dir + "/check.py " + dir + "/m.safetensors").c_str()), 0);
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, rejects_truncated_and_tampered_files) {
  std::string good = encodeSafetensors({{"a", Tensor::fromVector<float>({1, 2, 3}, {3})}});
  EXPECT_NE(errorOf(good.substr(0, 5)).find("shorter than the 8-byte"), std::string::npos);
  EXPECT_NE(errorOf(good.substr(0, good.size() - 4)).find("truncated"), std::string::npos);
  std::string bad_json = good;
  bad_json[9] = '#';
  EXPECT_NE(errorOf(bad_json).find("not valid JSON"), std::string::npos);
  std::string huge = good;
  huge[7] = 0x7f;
  EXPECT_NE(errorOf(huge).find("exceeds the file size"), std::string::npos);
  std::string extra = good + "xx";
  EXPECT_NE(errorOf(extra).find("cover"), std::string::npos);
  EXPECT_EQ(errorOf(good), "");
  EXPECT_NE(errorOf(extra).find("x.safetensors"), std::string::npos);
}

namespace {
std::string withHeader(const std::string& json) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json;
}
}  // namespace

TEST(Safetensors, shape_whose_product_overflows_is_refused) {
  // 2^32 x 2^32 x 4 bytes wraps to 0 in 64 bits: the empty data range used to match it, and the
  // tensor crashed the process on use (issue 21).
  std::string e =
      errorOf(withHeader(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"));
  EXPECT_NE(e.find("x.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
  // A zero dimension makes the product 0, but the other dimensions still make strides that overflow.
  e = errorOf(withHeader(
      R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})"));
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
  // Numbers that are not non-negative integers are refused, not truncated or wrapped.
  e = errorOf(withHeader(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})"));
  EXPECT_NE(e.find("not a non-negative integer"), std::string::npos) << e;
  e = errorOf(withHeader(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})"));
  EXPECT_NE(e.find("not a non-negative integer"), std::string::npos) << e;
  e = errorOf(withHeader(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})") + "abcd");
  EXPECT_NE(e.find("malformed data_offsets"), std::string::npos) << e;
}

// A header nested 200,000 deep crashed the reader (its messages dumped the values, recursively);
// a long value is cut short in a message.
TEST(Safetensors, a_deeply_nested_or_huge_header_value_is_refused_in_a_short_message) {
  const int n = 200000;
  std::string e = errorOf(withHeader(R"({"w":{"dtype":"F32","shape":[],"data_offsets":)" +
                                     std::string(n, '[') + std::string(n, ']') + "}}"));
  EXPECT_NE(e.find("x.safetensors"), std::string::npos) << e.substr(0, 300);
  EXPECT_NE(e.find("nested deeper than"), std::string::npos) << e.substr(0, 300);
  std::string offsets = "[0";
  for (int i = 0; i < 100000; ++i) offsets += ",0";
  e = errorOf(withHeader(R"({"w":{"dtype":"F32","shape":[],"data_offsets":)" + offsets + "]}}"));
  EXPECT_NE(e.find("malformed data_offsets [0,0,0"), std::string::npos) << e.substr(0, 300);
  EXPECT_LT(e.size(), 300u) << e.substr(0, 300);
}

TEST(Safetensors, stream_writer_in_any_order_writes_what_saveSafetensors_writes) {
  std::string dir = tempDir();
  NamedTensors in;
  in.emplace_back("w", Tensor::fromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1));  // strided
  in.emplace_back("i", Tensor::fromVector<int64_t>({7, -8}, {2}));
  in.emplace_back("e", Tensor::empty({0, 4}));
  in.emplace_back("b", Tensor::fromVector<float>({1.5f}, {1}).to(DType::bf16));
  saveSafetensors(dir + "/whole.safetensors", in, {{"format", "pt"}});
  {
    SafetensorsStreamWriter w(dir + "/streamed.safetensors", in, {{"format", "pt"}});
    for (size_t i : {3u, 0u, 2u, 1u}) w.write(in[i].first, in[i].second);
    EXPECT_FALSE(std::filesystem::exists(dir + "/streamed.safetensors")) << "visible before commit";
    w.commit();
  }
  EXPECT_EQ(file::readAll(dir + "/streamed.safetensors"), file::readAll(dir + "/whole.safetensors"));
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, stream_writer_refuses_bad_tensors_and_leaves_nothing_uncommitted) {
  std::string dir = tempDir();
  NamedTensors in;
  in.emplace_back("a", Tensor::zeros({2, 2}));
  in.emplace_back("b", Tensor::zeros({3}));
  {
    SafetensorsStreamWriter w(dir + "/m.safetensors", in);
    EXPECT_THROW(w.write("c", Tensor::zeros({3})), ValueError);
    EXPECT_THROW(w.write("a", Tensor::zeros({4})), ValueError);
    EXPECT_THROW(w.write("a", Tensor::zeros({2, 2}, DType::f64)), ValueError);
    w.write("a", Tensor::zeros({2, 2}));
    EXPECT_THROW(w.write("a", Tensor::zeros({2, 2})), ValueError);
    try {
      w.commit();
      ADD_FAILURE() << "committed without b";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "an uncommitted stream left a file";
  std::filesystem::remove_all(dir);
}
