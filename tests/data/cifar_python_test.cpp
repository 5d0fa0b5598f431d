// CIFAR-10's python version (the pickles torchvision and Paddle download) and the downloaded
// .tar.gz: batches as Python 2's cPickle wrote the real files, as numpy and Python 3 write them at
// every protocol, read back equal to torchvision's own CIFAR10 loader, in a folder, under
// torchvision's root, inside the archive; damaged ones named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/data_test_util.h"
#include "lockstep/data.h"
#include "lockstep/data/archive_reader.h"
#include "lockstep/data/pickle_reader.h"

namespace lockstep::data {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::throwsWith;

const std::string kHelper = std::string(LOCKSTEP_DATA_HELPERS) + "/cifar_python.py";

// Pickle opcodes, written out byte by byte (a C++ hex escape would run into the next letters).
struct Pickler {
  std::string s;
  Pickler& op(char c) {
    s.push_back(c);
    return *this;
  }
  Pickler& le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Pickler& str2(std::string_view v) {  // Python 2's str: SHORT_BINSTRING or BINSTRING
    if (v.size() < 256) return op('U').le(v.size(), 1).raw(v);
    return op('T').le(v.size(), 4).raw(v);
  }
  Pickler& raw(std::string_view v) {
    s += v;
    return *this;
  }
  uint32_t next_memo = 1;
  Pickler& put() {  // BINPUT, LONG_BINPUT past 255
    const uint32_t m = next_memo++;
    return m < 256 ? op('q').le(m, 1) : op('r').le(m, 4);
  }
  Pickler& integer(int64_t v) {
    if (v >= 0 && v < 256) return op('K').le(static_cast<uint64_t>(v), 1);
    if (v >= 0 && v < 65536) return op('M').le(static_cast<uint64_t>(v), 2);
    return op('J').le(static_cast<uint64_t>(v), 4);
  }
};

// A batch as Python 2's cPickle (protocol 2) wrote cifar-10-python.tar.gz's: str keys and values
// (SHORT_BINSTRING), numpy's _reconstruct with the pixels as one BINSTRING, labels a list of ints,
// every object memoised (LONG_BINPUT past 255).
std::vector<uint8_t> python2Batch(const CifarRaw& raw) {
  const int64_t n = raw.labels.size(0);
  Pickler p;
  p.op('\x80').le(2, 1).op('}').put().op('(');
  p.str2("data").put().raw("cnumpy.core.multiarray\n_reconstruct\n").put();
  p.raw("cnumpy\nndarray\n").put().integer(0).op('\x85').str2("b").op('\x87').op('R').put();
  p.op('(').integer(1).integer(n).integer(3072).op('\x86').raw("cnumpy\ndtype\n").put();
  p.str2("u1").integer(0).integer(1).op('\x87').op('R').put();
  p.op('(').integer(3).str2("|").op('N').op('N').op('N').integer(-1).integer(-1).integer(0).op('t').op('b');
  p.op('\x89').str2(std::string_view(reinterpret_cast<const char*>(raw.images.data<uint8_t>()),
                                     static_cast<size_t>(raw.images.nbytes())));
  p.op('t').op('b');
  p.str2("labels").put().op(']').put().op('(');
  for (int64_t v : raw.labels.toVector<int64_t>()) p.integer(v);
  p.op('e');
  p.str2("batch_label").put().str2("training batch 1 of 5").put();
  p.str2("filenames").put().op(']').put().op('(');
  for (int64_t i = 0; i < n; ++i) p.str2("img_" + std::to_string(i) + ".png").put();
  p.op('e').op('u').op('.');
  return {p.s.begin(), p.s.end()};
}

CifarRaw sample(int64_t n, int seed) {
  CifarRaw raw{Tensor::empty({n, 3, 32, 32}, DType::u8), Tensor::empty({n}, DType::i64)};
  for (int64_t i = 0; i < raw.images.numel(); ++i)
    raw.images.data<uint8_t>()[i] = static_cast<uint8_t>((i * 31 + seed * 7) % 256);
  for (int64_t i = 0; i < n; ++i) raw.labels.data<int64_t>()[i] = (i * 7 + seed) % 10;
  return raw;
}

void expectSame(const CifarRaw& a, const CifarRaw& b) {
  EXPECT_EQ(a.images.shape(), b.images.shape());
  EXPECT_EQ(a.images.toVector<int64_t>(), b.images.toVector<int64_t>());
  EXPECT_EQ(a.labels.toVector<int64_t>(), b.labels.toVector<int64_t>());
}

std::string python() { return testing::pythonWith("numpy"); }

void run(const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; }

TEST(CifarPython, a_batch_as_python_2_pickled_the_real_files_is_read) {
  const CifarRaw raw = sample(300, 1);  // 300 file names: memo keys past 255
  const std::vector<uint8_t> bytes = python2Batch(raw);
  expectSame(decodeCifarPython(bytes.data(), bytes.size(), "data_batch_1"), raw);
  TempDir dir;
  for (const char* name : {"data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"})
    writeFileBytes(dir.file(name), bytes);
  writeFileBytes(dir.file("test_batch"), python2Batch(sample(4, 2)));
  EXPECT_EQ(findCifar10(dir.str()).kind, CifarSource::Kind::python_dir);
  const TensorDataset train = loadCifar10(dir.str(), Split::train);
  EXPECT_EQ(train.size(), 1500);
  const CifarOptions o;
  const double first = raw.images.data<uint8_t>()[1024 + 5];  // green, sample 0
  EXPECT_NEAR(train.inputs().data<float>()[1024 + 5], (first / 255.0 - o.mean[1]) / o.std[1], 1e-6);
  EXPECT_EQ(loadCifar10(dir.str(), Split::test).targets().toVector<int64_t>(),
            sample(4, 2).labels.toVector<int64_t>());
}

// numpy and Python 3 at protocols 2 (bytes as _codecs.encode), 4 (framing, memoize; labels an int64
// array) and 5 (numpy's _frombuffer): the same pixels and labels as torchvision.datasets.CIFAR10
// reads from the same files. (Protocols 1 and 3: tests/data/pickle_reader_test.cpp.)
TEST(CifarPython, protocols_2_4_and_5_read_as_torchvision_reads_them) {
  const std::string py = testing::pythonWith("torchvision");
  if (py.empty() || python().empty()) GTEST_SKIP() << "python3 with numpy and torchvision not installed";
  for (const char* protocol : {"2", "4", "5"}) {
    const std::string labels = std::string(protocol) == "4" ? "numpy-labels" : "list";
    SCOPED_TRACE(std::string("protocol ") + protocol + ", labels " + labels);
    TempDir dir;
    run(py + " " + kHelper + " write " + dir.str() + " 7 5 3 " + protocol + " " + labels + " " +
        dir.file("tv"));
    const std::vector<uint8_t> tv = readFileBytes(dir.file("tv"));
    std::ifstream label_file(dir.file("tv.labels"));
    std::vector<int64_t> tv_labels;
    for (int64_t v; label_file >> v;) tv_labels.push_back(v);
    ASSERT_EQ(tv.size(), 40u * 3072u);
    const CifarSource source = findCifar10(dir.str());  // torchvision's root: cifar-10-batches-py under it
    EXPECT_EQ(source.kind, CifarSource::Kind::python_dir);
    std::vector<uint8_t> pixels;
    std::vector<int64_t> all_labels;
    for (Split split : {Split::train, Split::test}) {
      for (const CifarRaw& part : readCifar10Split(source, split)) {
        const uint8_t* p = part.images.data<uint8_t>();
        pixels.insert(pixels.end(), p, p + part.images.nbytes());
        for (int64_t v : part.labels.toVector<int64_t>()) all_labels.push_back(v);
      }
    }
    EXPECT_EQ(pixels, tv);
    EXPECT_EQ(all_labels, tv_labels);
  }
}

// Paddle's data_file: the downloaded cifar-10-python.tar.gz itself, its members in the real
// archive's order (data_batch_4 first); also a folder holding it, and the binary version's archive.
TEST(CifarPython, the_downloaded_archive_is_read_where_it_lies) {
  TempDir dir;
  std::vector<CifarRaw> parts;
  fs::create_directories(dir.file("cifar-10-batches-py"));
  for (int i = 0; i < 6; ++i) {
    parts.push_back(sample(i == 5 ? 3 : 2 + i, i));
    writeFileBytes(
        dir.file("cifar-10-batches-py/") + (i == 5 ? "test_batch" : "data_batch_" + std::to_string(i + 1)),
        python2Batch(parts.back()));
  }
  const TensorDataset from_dir = loadCifar10(dir.str(), Split::train);
  EXPECT_EQ(from_dir.size(), 2 + 3 + 4 + 5 + 6);
  TempDir paddle;  // ~/.cache/paddle/dataset/cifar: the archive alone
  const std::string archive = paddle.file("cifar-10-python.tar.gz");
  run("cd " + dir.str() + " && tar czf " + archive +
      " cifar-10-batches-py/data_batch_4 cifar-10-batches-py/test_batch "
      "cifar-10-batches-py/data_batch_3 cifar-10-batches-py/data_batch_2 cifar-10-batches-py/data_batch_5 "
      "cifar-10-batches-py/data_batch_1");
  for (const std::string& root : {archive, paddle.str()}) {
    SCOPED_TRACE(root);
    EXPECT_EQ(findCifar10(root).kind, CifarSource::Kind::archive);
    const TensorDataset train = loadCifar10(root, Split::train);
    EXPECT_EQ(train.inputs().toVector<float>(), from_dir.inputs().toVector<float>());
    EXPECT_EQ(train.targets().toVector<int64_t>(), from_dir.targets().toVector<int64_t>());
    expectSame(readCifar10Split(findCifar10(root), Split::test).at(0), parts[5]);
  }
  TempDir binary;
  writeSyntheticCifar10(binary.file(""), {.train_per_file = 3, .test_samples = 2, .seed = 4});
  const std::string bin_archive = binary.file("cifar-10-binary.tar.gz");
  run("cd " + binary.str() + " && mkdir cifar-10-batches-bin && mv *.bin cifar-10-batches-bin/ && tar czf " +
      bin_archive + " cifar-10-batches-bin");
  const TensorDataset from_bin_dir = loadCifar10(binary.str(), Split::test);  // finds cifar-10-batches-bin/
  fs::remove_all(binary.file("cifar-10-batches-bin"));
  EXPECT_EQ(findCifar10(binary.str()).kind, CifarSource::Kind::archive);
  EXPECT_EQ(loadCifar10(binary.str(), Split::test).inputs().toVector<float>(),
            from_bin_dir.inputs().toVector<float>());
}

TEST(CifarPython, damaged_batches_and_archives_are_named) {
  const CifarRaw raw = sample(3, 5);
  const std::vector<uint8_t> good = python2Batch(raw);
  // Cut anywhere: an IoError naming the file, never a crash or a short batch.
  for (size_t cut = 0; cut < good.size(); cut += cut < 200 ? 1 : 997) {
    EXPECT_THROW(decodeCifarPython(good.data(), cut, "data_batch_1"), IoError) << "cut at " << cut;
  }
  EXPECT_TRUE(throwsWith<IoError>([&] { decodeCifarPython(good.data(), good.size() - 40, "data_batch_1"); },
                                  {"data_batch_1", "truncated"}));
  // A label outside 0..9, a CIFAR-100 batch, a pickle of something else.
  std::vector<uint8_t> bad = good;
  const std::string labels_at = "labels";
  const auto at = std::search(bad.begin(), bad.end(), labels_at.begin(), labels_at.end()) - bad.begin();
  bad[static_cast<size_t>(at) + 6 + 2 + 1 + 2 + 1 + 1] = 12;  // "labels" q. ] q. ( K<v>
  EXPECT_TRUE(throwsWith<IoError>([&] { decodeCifarPython(bad.data(), bad.size(), "b"); },
                                  {"sample 0 has label 12", "outside 0..9"}));
  std::string hundred(good.begin(), good.end());
  hundred.replace(hundred.find("labels"), 6, "fine_labels");
  hundred[hundred.find("fine_labels") - 1] = static_cast<char>(11);
  EXPECT_TRUE(throwsWith<IoError>(
      [&] { decodeCifarPython(reinterpret_cast<const uint8_t*>(hundred.data()), hundred.size(), "b"); },
      {"CIFAR-100"}));
  const std::string list = "\x80\x02]q\x01.";
  EXPECT_TRUE(throwsWith<IoError>(
      [&] { decodeCifarPython(reinterpret_cast<const uint8_t*>(list.data()), list.size(), "b"); },
      {"b: a CIFAR-10 python batch is a pickled dict", "list of 0"}));
  // torch.save's data.pkl: a tensor's storage is a persistent id.
  Pickler t;
  t.op('\x80').le(2, 1).op('}').put().op('X').le(1, 4).raw("w").put();
  t.raw("ctorch._utils\n_rebuild_tensor_v2\n").put().op('(').op('X').le(7, 4).raw("storage").op('Q');
  const std::string torch_save = t.s;
  EXPECT_TRUE(throwsWith<IoError>(
      [&] {
        decodeCifarPython(reinterpret_cast<const uint8_t*>(torch_save.data()), torch_save.size(), "m.pt");
      },
      {"m.pt", "persistent id", "torch.save"}));
  const std::vector<uint8_t> binary(3073, 1);
  EXPECT_TRUE(throwsWith<IoError>([&] { decodeCifarPython(binary.data(), binary.size(), "b"); },
                                  {"b", "opcode 0x01 at byte 0"}));

  TempDir dir;
  fs::create_directories(dir.file("cifar-10-batches-py"));
  for (int i = 1; i <= 5; ++i)
    writeFileBytes(dir.file("cifar-10-batches-py/data_batch_" + std::to_string(i)), good);
  writeFileBytes(dir.file("cifar-10-batches-py/test_batch"), good);
  const std::string archive = dir.file("cifar-10-python.tar.gz");
  run("cd " + dir.str() + " && tar czf " + archive +
      " cifar-10-batches-py/data_batch_1 cifar-10-batches-py/test_batch");
  EXPECT_TRUE(
      throwsWith<IoError>([&] { loadCifar10(archive, Split::train); }, {archive, "has no data_batch_2"}));
  std::vector<uint8_t> cut = readFileBytes(archive);
  cut.resize(cut.size() / 2);
  writeFileBytes(dir.file("cut.tar.gz"), cut);
  EXPECT_TRUE(throwsWith<IoError>([&] { loadCifar10(dir.file("cut.tar.gz"), Split::test); },
                                  {dir.file("cut.tar.gz"), "truncated"}));
  writeFileBytes(dir.file("notes.txt"), {'h', 'i'});
  EXPECT_TRUE(
      throwsWith<IoError>([&] { findCifar10(dir.file("notes.txt")); }, {"notes.txt", "not a .tar.gz"}));
  writeFileBytes(dir.file("junk.tar.gz"), {'h', 'i'});
  EXPECT_TRUE(
      throwsWith<IoError>([&] { loadCifar10(dir.file("junk.tar.gz"), Split::test); }, {"junk.tar.gz"}));
  EXPECT_TRUE(throwsWith<IoError>([&] { findCifar10(dir.file("nowhere")); }, {"nowhere", "does not exist"}));
}

}  // namespace
}  // namespace lockstep::data
