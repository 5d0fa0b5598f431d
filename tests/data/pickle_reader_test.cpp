// The data-only pickle reader against what CPython's pickle writes at protocols 1-5 (every
// opcode those write for ints, floats, str, bytes, containers, shared objects and globals), and
// against hostile input: nothing runs, limits hold, every refusal names the file.
#include "lockstep/data/pickle_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "data/data_test_util.h"
#include "lockstep/data/file_bytes.h"
#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

using Kind = PickleNode::Kind;
using testing::TempDir;
using testing::throwsWith;

// A byte string literal with its NULs (a C++ hex escape runs into the next hex letters: split the
// literal there).
template <size_t N>
std::string bin(const char (&s)[N]) {
  return std::string(s, N - 1);
}

Pickle parse(const std::string& bytes, const std::string& what = "x.pkl") {
  return Pickle::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what);
}

// Python writes {'i': [0, 255, 65535, -1, 2**31, -2**63, 2**63 - 1], 'f': -1.5, 's': 'é', 'b':
// b'\x00\xff', 't': (1, (2,), ()), 'n': None, 'y': True, 'set': {7}, 'shared': [L, L]} where L is
// one list, and a class reference: decimal.Decimal (a global, never imported here).
TEST(PickleReader, reads_what_python_writes_at_every_protocol) {
  const std::string py = testing::pythonWith("pickle");
  if (py.empty()) GTEST_SKIP() << "no python3";
  TempDir dir;
  for (int protocol = 1; protocol <= 5; ++protocol) {
    SCOPED_TRACE("protocol " + std::to_string(protocol));
    const std::string file = dir.file("p" + std::to_string(protocol));
    const std::string script =
        "import pickle, decimal\n"
        "L = [1]\n"
        "o = {'i': [0, 255, 65535, -1, 2**31, -2**63, 2**63 - 1], 'f': -1.5, 's': '\\xe9', 'b': "
        "b'\\x00\\xff',\n"
        "     't': (1, (2,), ()), 'n': None, 'y': True, 'set': {7}, 'shared': [L, L], 'g': decimal.Decimal}\n"
        "open('" +
        file + "', 'wb').write(pickle.dumps(o, protocol=" + std::to_string(protocol) + "))\n";
    ASSERT_EQ(std::system((py + " -c \"" + script + "\"").c_str()), 0);
    const std::vector<uint8_t> bytes = readFileBytes(file);
    const Pickle p = Pickle::parse(bytes.data(), bytes.size(), file);
    const int32_t root = p.root();
    ASSERT_EQ(p.node(root).kind, Kind::dict) << p.describe(root);
    std::vector<int64_t> ints;
    for (int32_t id : p.node(p.dictGet(root, "i")).items) ints.push_back(p.node(id).integer);
    EXPECT_EQ(ints, (std::vector<int64_t>{0, 255, 65535, -1, int64_t{1} << 31, INT64_MIN, INT64_MAX}));
    EXPECT_EQ(p.node(p.dictGet(root, "f")).real, -1.5);
    EXPECT_EQ(p.stringOf(p.dictGet(root, "s")), "\xc3\xa9");  // UTF-8
    EXPECT_EQ(p.stringOf(p.dictGet(root, "b")), bin("\x00\xff"));
    EXPECT_EQ(p.node(p.dictGet(root, "b")).kind, Kind::bytes);
    const PickleNode& t = p.node(p.dictGet(root, "t"));
    ASSERT_EQ(t.kind, Kind::tuple);
    ASSERT_EQ(t.items.size(), 3u);
    EXPECT_EQ(p.node(t.items[1]).items.size(), 1u);
    EXPECT_EQ(p.node(t.items[2]).items.size(), 0u);
    EXPECT_EQ(p.node(p.dictGet(root, "n")).kind, Kind::none);
    EXPECT_EQ(p.node(p.dictGet(root, "y")).kind, Kind::boolean);
    EXPECT_EQ(p.node(p.dictGet(root, "y")).integer, 1);
    const int32_t set = p.dictGet(root, "set");
    // Protocols below 4 write a set as a call of builtins.set (or __builtin__.set) on a list.
    EXPECT_TRUE(p.node(set).kind == Kind::set || p.isCallOf(set, {"builtins", "__builtin__"}, "set"))
        << p.describe(set);
    const PickleNode& shared = p.node(p.dictGet(root, "shared"));
    ASSERT_EQ(shared.items.size(), 2u);
    EXPECT_EQ(shared.items[0], shared.items[1]) << "one list, memoised";
    EXPECT_TRUE(p.isGlobal(p.dictGet(root, "g"), {"decimal", "_decimal"}, "Decimal"))
        << p.describe(p.dictGet(root, "g"));
    EXPECT_EQ(p.dictGet(root, "absent"), -1);
  }
}

TEST(PickleReader, hostile_input_is_refused_naming_the_file) {
  // A call is a node, never made: os.system('...') stays data.
  const std::string system =
      bin("\x80\x02"
          "cos\nsystem\n"
          "X\x02\x00\x00\x00id"
          "\x85R.");
  const Pickle calls = parse(system);  // its views point into `system`
  EXPECT_TRUE(calls.isCallOf(calls.root(), {"os"}, "system"));
  EXPECT_EQ(calls.describe(calls.root()), "os.system(...)");
  struct Case {
    std::string bytes;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"", "without its STOP"},
      {bin("\x80\x06N."), "protocol 6"},
      {bin("\x80\x02N"), "without its STOP"},
      {".", "pops an empty stack"},
      {bin("\x80\x02h\x05."), "memo key 5 was never stored"},
      {bin("\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\x7f."), "truncated"},
      {bin("\x80\x02T\xff\xff\xff\xff."), "negative string length"},
      {bin("\x80\x02\x8a\x09") + std::string(9, '\x01') + ".", "wider than 64 bits"},
      {bin("\x80\x02NQ."), "persistent id"},
      {bin("\x80\x02\x82\x01."), "extension code"},
      {bin("\x80\x05\x97."), "out-of-band buffer"},
      {"S'x'\n.", "protocol 0's text opcodes"},
      {"I99999999999999999999\n.", "within 64 bits"},
      {bin("\x80\x02NK\x01"
           "a."),
       "needs a list"},
      {bin("\x80\x02}K\x01u."), "needs a MARK"},
      {bin("\x80\x02(K\x01\x85\x86."), "pops an empty stack"},
      {bin("\x80\x02"
           "c_codecs\nencode\n"
           "NR."),
       "a call's arguments must be a tuple"},
      {bin("\x80\x02"
           "c_codecs\nencode\n"
           "X\x02\x00\x00\x00\xc5\x81"
           "X\x06\x00\x00\x00latin1"
           "\x86R."),
       "character above U+00FF"},
      {"\x7f", "not a pickle opcode"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(throwsWith<IoError>([&] { parse(c.bytes, "evil.pkl"); }, {"evil.pkl", c.says})) << c.says;
  }
  // Two million Nones in a list, memo entries, copies on the stack, open MARKs: refused at the
  // limit, not after gigabytes.
  const std::string many = bin("\x80\x02(") + std::string(2'000'000, 'N') + "l.";
  EXPECT_TRUE(
      throwsWith<IoError>([&] { parse(many, "many.pkl"); }, {"many.pkl", "more than 1048576 objects"}));
  const std::string memos = bin("\x80\x04N") + std::string(2'000'000, '\x94') + ".";
  EXPECT_TRUE(throwsWith<IoError>([&] { parse(memos, "m.pkl"); }, {"more than 1048576 memo entries"}));
  const std::string dups = bin("\x80\x04N") + std::string(2'000'000, '2') + ".";
  EXPECT_TRUE(throwsWith<IoError>([&] { parse(dups, "d.pkl"); }, {"more than 1048576 objects on its stack"}));
  // One 1000-byte text encoded 100 times: more bytes made than the file holds.
  std::string encodes = bin("\x80\x02"
                            "c_codecs\nencode\n"
                            "q\x00"
                            "X\xe8\x03\x00\x00") +
                        std::string(1000, 'a') +
                        bin("q\x01"
                            "X\x06\x00\x00\x00"
                            "latin1"
                            "q\x02");
  for (int i = 0; i < 100; ++i)
    encodes +=
        bin("h\x00"
            "h\x01"
            "h\x02"
            "\x86"
            "R0");
  encodes += "N.";
  EXPECT_TRUE(
      throwsWith<IoError>([&] { parse(encodes, "e.pkl"); }, {"e.pkl", "one text encoded again and again"}));
  const std::string marks = bin("\x80\x04") + std::string(2'000'000, '(') + ".";
  EXPECT_TRUE(throwsWith<IoError>([&] { parse(marks, "k.pkl"); }, {"more than 1048576 open MARKs"}));
}

// numpy's two forms, checked for agreement of shape, dtype and data size.
TEST(PickleReader, numpy_arrays_whose_parts_disagree_are_named) {
  const std::string py = testing::pythonWith("numpy");
  if (py.empty()) GTEST_SKIP() << "python3 with numpy not installed";
  TempDir dir;
  const std::string script =
      "import pickle, numpy as np\n"
      "a = np.arange(6, dtype='<i4').reshape(2, 3)\n"
      "open('" +
      dir.file("a2") +
      "', 'wb').write(pickle.dumps(a, protocol=2))\n"
      "open('" +
      dir.file("a3") +
      "', 'wb').write(pickle.dumps(a, protocol=3))\n"
      "open('" +
      dir.file("a5") +
      "', 'wb').write(pickle.dumps(np.asfortranarray(a), protocol=5))\n"
      "open('" +
      dir.file("o") + "', 'wb').write(pickle.dumps(np.array([1, 'x'], dtype=object), protocol=2))\n";
  ASSERT_EQ(std::system((py + " -c \"" + script + "\"").c_str()), 0);
  for (const char* name : {"a2", "a5"}) {
    const std::vector<uint8_t> bytes = readFileBytes(dir.file(name));
    const Pickle p = Pickle::parse(bytes.data(), bytes.size(), name);
    const std::optional<NumpyArray> a = numpyArray(p, p.root());
    ASSERT_TRUE(a.has_value()) << name;
    EXPECT_EQ(a->dtype, "<i4");
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a->data.size(), 24u);
    EXPECT_EQ(a->fortran_order, std::string(name) == "a5");
  }
  const std::vector<uint8_t> o = readFileBytes(dir.file("o"));
  const Pickle objects = Pickle::parse(o.data(), o.size(), "o.pkl");
  EXPECT_TRUE(throwsWith<IoError>([&] { numpyArray(objects, objects.root()); }, {"o.pkl", "object array"}));
  std::vector<uint8_t> a2 = readFileBytes(dir.file("a2"));
  const Pickle good = Pickle::parse(a2.data(), a2.size(), "a2");
  EXPECT_FALSE(numpyArray(good, good.node(good.root()).items[0]).has_value()) << "a global is not an array";
  // The data one byte short of the shape's (SHORT_BINBYTES of 23, not 24, bytes).
  std::vector<uint8_t> a3 = readFileBytes(dir.file("a3"));
  const uint8_t at24[] = {'C', 24};
  auto at = std::search(a3.begin(), a3.end(), at24, at24 + 2);
  ASSERT_NE(at, a3.end());
  at[1] = 23;
  a3.erase(at + 2);
  const Pickle cut = Pickle::parse(a3.data(), a3.size(), "a3.pkl");
  EXPECT_TRUE(
      throwsWith<IoError>([&] { numpyArray(cut, cut.root()); },
                          {"a3.pkl", "of shape (2, 3) and dtype <i4 has 23 bytes", "not shape x itemsize"}));
}

}  // namespace
}  // namespace lockstep::data
