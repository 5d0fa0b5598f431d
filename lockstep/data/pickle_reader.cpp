#include "lockstep/data/pickle_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "lockstep/util/error.h"

namespace lockstep::data {

using Kind = PickleNode::Kind;

class PickleParser {
 public:
  PickleParser(const uint8_t* bytes, size_t size, Pickle& out) : p_(bytes), n_(size), out_(out) {}

  void run() {
    while (true) {
      LOCKSTEP_ENFORCE(at_ < n_, IoError, out_.what_, ": truncated pickle: it ends at byte ", n_,
                       " without its STOP opcode (a partly written or cut file?)");
      op_at_ = at_;
      op_ = p_[at_++];
      if (step()) return;
    }
  }

 private:
  const uint8_t* p_;
  size_t n_;
  Pickle& out_;
  size_t at_ = 0;
  size_t op_at_ = 0;
  uint8_t op_ = 0;
  std::vector<int32_t> stack_;
  std::vector<size_t> marks_;  // stack_ sizes at each MARK
  std::unordered_map<uint64_t, int32_t> memo_;
  size_t owned_bytes_ = 0;  // what latin1() made

  [[noreturn]] void fail(const std::string& why) const {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", op_);
    throw IoError(out_.what_ + ": not a pickle this reader can read: opcode " + hex + " at byte " +
                  std::to_string(op_at_) + ": " + why);
  }

  const uint8_t* take(uint64_t count) {
    if (count > n_ - at_) {
      fail("truncated: " + std::to_string(count) + " bytes needed, " + std::to_string(n_ - at_) + " left");
    }
    const uint8_t* r = p_ + at_;
    at_ += static_cast<size_t>(count);
    return r;
  }
  uint64_t unsignedLe(int width) {
    const uint8_t* b = take(static_cast<uint64_t>(width));
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | b[i];
    return v;
  }
  std::string_view view(uint64_t count) {
    const uint8_t* b = take(count);
    return {reinterpret_cast<const char*>(b), static_cast<size_t>(count)};
  }
  std::string_view line() {
    const void* nl = std::memchr(p_ + at_, '\n', n_ - at_);
    if (nl == nullptr) fail("truncated: a line without its newline");
    const size_t len = static_cast<size_t>(static_cast<const uint8_t*>(nl) - (p_ + at_));
    std::string_view r = view(len);
    ++at_;
    return r;
  }

  // Each object costs about 100 bytes here, a memo entry 50, for one byte of opcode: a file of
  // nothing but them is refused before it takes gigabytes.
  void limit(size_t count, const char* what) const {
    if (count >= kMaxPickleObjects) {
      fail("more than " + std::to_string(kMaxPickleObjects) + " " + what +
           ", more than a data file this reader is for makes");
    }
  }
  int32_t add(PickleNode node) {
    limit(out_.nodes_.size(), "objects");
    out_.nodes_.push_back(std::move(node));
    return static_cast<int32_t>(out_.nodes_.size() - 1);
  }
  void push(int32_t id) {
    limit(stack_.size(), "objects on its stack");
    stack_.push_back(id);
  }
  int32_t pushNew(PickleNode node) {
    const int32_t id = add(std::move(node));
    push(id);
    return id;
  }
  size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  int32_t pop() {
    if (stack_.size() <= base()) fail("pops an empty stack");
    const int32_t id = stack_.back();
    stack_.pop_back();
    return id;
  }
  int32_t top() {
    if (stack_.size() <= base()) fail("needs an object on the stack");
    return stack_.back();
  }
  /// The objects pushed since the last MARK, which is removed.
  std::vector<int32_t> popToMark() {
    if (marks_.empty()) fail("needs a MARK before it");
    const size_t b = marks_.back();
    marks_.pop_back();
    std::vector<int32_t> r(stack_.begin() + static_cast<std::ptrdiff_t>(b), stack_.end());
    stack_.resize(b);
    return r;
  }
  PickleNode& at(int32_t id) { return out_.nodes_[static_cast<size_t>(id)]; }
  PickleNode& containerOn(int32_t id, Kind kind, const char* need) {
    PickleNode& c = at(id);
    if (c.kind != kind) fail(std::string("needs ") + need + " below its items, found " + out_.describe(id));
    return c;
  }

  static PickleNode scalar(Kind kind, int64_t v = 0) {
    PickleNode node;
    node.kind = kind;
    node.integer = v;
    return node;
  }
  static PickleNode string(Kind kind, std::string_view s) {
    PickleNode node;
    node.kind = kind;
    node.data = s;
    return node;
  }
  static PickleNode sequence(Kind kind, std::vector<int32_t> items) {
    PickleNode node;
    node.kind = kind;
    node.items = std::move(items);
    return node;
  }
  void global(std::string_view module, std::string_view name) {
    PickleNode node;
    node.kind = Kind::global;
    node.data = module;
    node.name = name;
    pushNew(std::move(node));
  }
  void call(int32_t callable, int32_t args) {
    if (at(args).kind != Kind::tuple)
      fail("a call's arguments must be a tuple, found " + out_.describe(args));
    // Python 3 writes bytes at protocol 2 or lower as _codecs.encode(text, 'latin1').
    if (out_.isGlobal(callable, {"_codecs"}, "encode")) {
      const std::vector<int32_t>& a = at(args).items;
      if (a.size() == 2 && at(a[0]).kind == Kind::text && at(a[1]).kind == Kind::text &&
          (at(a[1]).data == "latin1" || at(a[1]).data == "latin-1")) {
        const std::string_view text = at(a[0]).data;  // taken first: pushNew may move the nodes `a` is in
        pushNew(string(Kind::bytes, latin1(text)));
        return;
      }
    }
    PickleNode node;
    node.kind = Kind::call;
    node.items = {callable, args};
    pushNew(std::move(node));
  }
  std::string_view latin1(std::string_view utf8) {
    std::string r;
    r.reserve(utf8.size());
    for (size_t i = 0; i < utf8.size(); ++i) {
      const auto c = static_cast<uint8_t>(utf8[i]);
      if (c < 0x80) {
        r.push_back(static_cast<char>(c));
      } else if ((c == 0xc2 || c == 0xc3) && i + 1 < utf8.size() &&
                 (static_cast<uint8_t>(utf8[i + 1]) & 0xc0) == 0x80) {
        r.push_back(static_cast<char>(((c & 0x03) << 6) | (static_cast<uint8_t>(utf8[i + 1]) & 0x3f)));
        ++i;
      } else {
        fail("_codecs.encode(..., 'latin1') of text with a character above U+00FF");
      }
    }
    // Python memoises the bytes an encode makes, so each has its own text in the file, never
    // shorter: more bytes made than the file holds is one text encoded again and again.
    owned_bytes_ += r.size();
    if (owned_bytes_ > n_)
      fail("_codecs.encode makes more bytes than the file holds (one text encoded again and again)");
    out_.owned_.push_back(std::move(r));
    return out_.owned_.back();
  }
  void memoPut(uint64_t key) {
    limit(memo_.size(), "memo entries");
    memo_[key] = top();
  }
  void memoGet(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo key " + std::to_string(key) + " was never stored");
    push(it->second);
  }
  void setItems(int32_t dict, const std::vector<int32_t>& kv) {
    if (kv.size() % 2 != 0) fail("an odd number of keys and values");
    PickleNode& d = containerOn(dict, Kind::dict, "a dict");
    d.items.insert(d.items.end(), kv.begin(), kv.end());
  }

  /// Runs the opcode op_ (its argument bytes follow at at_); true at STOP.
  bool step() {
    switch (op_) {
      case 0x80: {  // PROTO
        const uint64_t v = unsignedLe(1);
        if (v > 5) fail("protocol " + std::to_string(v) + ": newer than 5, the newest Python writes");
        return false;
      }
      case 0x95:  // FRAME: framing only
        unsignedLe(8);
        return false;
      case '.':  // STOP: the object on top is the pickle's
        out_.root_ = pop();
        return true;
      case '(':  // MARK
        limit(marks_.size(), "open MARKs");
        marks_.push_back(stack_.size());
        return false;
      case '0':  // POP
        if (stack_.size() == base() && !marks_.empty()) {
          marks_.pop_back();
        } else {
          pop();
        }
        return false;
      case '1':  // POP_MARK
        popToMark();
        return false;
      case '2':  // DUP
        push(top());
        return false;
      case 'N':
        pushNew(scalar(Kind::none));
        return false;
      case 0x88:
        pushNew(scalar(Kind::boolean, 1));
        return false;
      case 0x89:
        pushNew(scalar(Kind::boolean, 0));
        return false;
      case 'K':  // BININT1
        pushNew(scalar(Kind::integer, static_cast<int64_t>(unsignedLe(1))));
        return false;
      case 'M':  // BININT2
        pushNew(scalar(Kind::integer, static_cast<int64_t>(unsignedLe(2))));
        return false;
      case 'J':  // BININT: signed 4 bytes
        pushNew(scalar(Kind::integer, static_cast<int32_t>(static_cast<uint32_t>(unsignedLe(4)))));
        return false;
      case 0x8a:    // LONG1: n bytes, little-endian two's complement
      case 0x8b: {  // LONG4: the same with a 4-byte n
        const uint64_t len = unsignedLe(op_ == 0x8a ? 1 : 4);
        if (len > 8) fail("an integer of " + std::to_string(len) + " bytes, wider than 64 bits");
        uint64_t v = len == 0 ? 0 : unsignedLe(static_cast<int>(len));
        if (len > 0 && len < 8 && (v >> (8 * len - 1)) != 0) v |= ~uint64_t{0} << (8 * len);  // sign-extend
        pushNew(scalar(Kind::integer, static_cast<int64_t>(v)));
        return false;
      }
      case 'I':    // INT: decimal text ("I01" / "I00": True / False at protocol 0)
      case 'L': {  // LONG: decimal text with an optional L suffix (protocol 1 writes ints past 32 bits so)
        std::string_view text = line();
        if (op_ == 'L' && !text.empty() && text.back() == 'L') text.remove_suffix(1);
        if (op_ == 'I' && (text == "01" || text == "00")) {
          pushNew(scalar(Kind::boolean, text == "01"));
          return false;
        }
        const std::string digits(text);
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(digits.c_str(), &end, 10);
        if (digits.empty() || end != digits.c_str() + digits.size() || errno == ERANGE) {
          fail("an integer that is not a decimal number within 64 bits");
        }
        pushNew(scalar(Kind::integer, v));
        return false;
      }
      case 'G': {  // BINFLOAT: big-endian double
        const uint8_t* b = take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | b[i];
        PickleNode node = scalar(Kind::real);
        std::memcpy(&node.real, &bits, sizeof bits);
        pushNew(std::move(node));
        return false;
      }
      case 'U':  // SHORT_BINSTRING: Python 2's str, read as bytes
        pushNew(string(Kind::bytes, view(unsignedLe(1))));
        return false;
      case 'T': {  // BINSTRING: signed 4-byte length
        const auto len = static_cast<int32_t>(static_cast<uint32_t>(unsignedLe(4)));
        if (len < 0) fail("a negative string length");
        pushNew(string(Kind::bytes, view(static_cast<uint64_t>(len))));
        return false;
      }
      case 'C':  // SHORT_BINBYTES
        pushNew(string(Kind::bytes, view(unsignedLe(1))));
        return false;
      case 'B':  // BINBYTES
        pushNew(string(Kind::bytes, view(unsignedLe(4))));
        return false;
      case 0x8e:  // BINBYTES8
      case 0x96:  // BYTEARRAY8
        pushNew(string(Kind::bytes, view(unsignedLe(8))));
        return false;
      case 0x8c:  // SHORT_BINUNICODE
        pushNew(string(Kind::text, view(unsignedLe(1))));
        return false;
      case 'X':  // BINUNICODE
        pushNew(string(Kind::text, view(unsignedLe(4))));
        return false;
      case 0x8d:  // BINUNICODE8
        pushNew(string(Kind::text, view(unsignedLe(8))));
        return false;
      case ')':
        pushNew(sequence(Kind::tuple, {}));
        return false;
      case 't':
        pushNew(sequence(Kind::tuple, popToMark()));
        return false;
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        std::vector<int32_t> items(static_cast<size_t>(op_ - 0x84));
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        pushNew(sequence(Kind::tuple, std::move(items)));
        return false;
      }
      case ']':
        pushNew(sequence(Kind::list, {}));
        return false;
      case 'l':
        pushNew(sequence(Kind::list, popToMark()));
        return false;
      case 'a': {  // APPEND
        const int32_t v = pop();
        containerOn(top(), Kind::list, "a list").items.push_back(v);
        return false;
      }
      case 'e': {  // APPENDS
        const std::vector<int32_t> vs = popToMark();
        PickleNode& l = containerOn(top(), Kind::list, "a list");
        l.items.insert(l.items.end(), vs.begin(), vs.end());
        return false;
      }
      case '}':
        pushNew(sequence(Kind::dict, {}));
        return false;
      case 'd': {  // DICT
        const std::vector<int32_t> kv = popToMark();
        const int32_t d = pushNew(sequence(Kind::dict, {}));
        setItems(d, kv);
        return false;
      }
      case 's': {  // SETITEM
        const int32_t v = pop();
        const int32_t k = pop();
        setItems(top(), {k, v});
        return false;
      }
      case 'u': {  // SETITEMS
        const std::vector<int32_t> kv = popToMark();
        setItems(top(), kv);
        return false;
      }
      case 0x8f:  // EMPTY_SET
        pushNew(sequence(Kind::set, {}));
        return false;
      case 0x90: {  // ADDITEMS
        const std::vector<int32_t> vs = popToMark();
        PickleNode& s = containerOn(top(), Kind::set, "a set");
        s.items.insert(s.items.end(), vs.begin(), vs.end());
        return false;
      }
      case 0x91:  // FROZENSET
        pushNew(sequence(Kind::set, popToMark()));
        return false;
      case 'c': {  // GLOBAL: "module\nname\n"
        const std::string_view module = line();
        global(module, line());
        return false;
      }
      case 0x93: {  // STACK_GLOBAL
        const int32_t name = pop();
        const int32_t module = pop();
        if (at(module).kind != Kind::text || at(name).kind != Kind::text) fail("STACK_GLOBAL needs two str");
        global(at(module).data, at(name).data);
        return false;
      }
      case 'R': {  // REDUCE
        const int32_t args = pop();
        call(pop(), args);
        return false;
      }
      case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
        const int32_t args = pop();
        call(pop(), args);
        return false;
      }
      case 0x92: {  // NEWOBJ_EX: keyword arguments are dropped from the tree
        pop();
        const int32_t args = pop();
        call(pop(), args);
        return false;
      }
      case 'o': {  // OBJ: MARK cls args... OBJ
        std::vector<int32_t> items = popToMark();
        if (items.empty()) fail("OBJ without its class");
        const int32_t cls = items.front();
        items.erase(items.begin());
        call(cls, add(sequence(Kind::tuple, std::move(items))));
        return false;
      }
      case 'b': {  // BUILD
        const int32_t state = pop();
        PickleNode& obj = at(top());
        if (obj.kind != Kind::call && obj.kind != Kind::global) fail("BUILD on " + out_.describe(top()));
        obj.state = state;
        return false;
      }
      case 'q':  // BINPUT
        memoPut(unsignedLe(1));
        return false;
      case 'r':  // LONG_BINPUT
        memoPut(unsignedLe(4));
        return false;
      case 0x94:  // MEMOIZE
        memoPut(memo_.size());
        return false;
      case 'h':  // BINGET
        memoGet(unsignedLe(1));
        return false;
      case 'j':  // LONG_BINGET
        memoGet(unsignedLe(4));
        return false;
      case 'P':
      case 'Q':
        fail("a persistent id: the file refers to objects kept outside it (a torch.save file?)");
      case 0x82:
      case 0x83:
      case 0x84:
        fail("an extension code (copyreg's registry), which only the Python that wrote it can resolve");
      case 0x97:
      case 0x98:
        fail("an out-of-band buffer, which is not in the file");
      case 'F':
      case 'S':
      case 'V':
      case 'p':
      case 'g':
      case 'i':
        fail(
            "protocol 0's text opcodes (but for INT and LONG) are not read: write the file with protocol 2 "
            "or newer");
      default:
        fail("not a pickle opcode (is this a pickle file?)");
    }
  }
};

Pickle Pickle::parse(const uint8_t* bytes, size_t size, std::string what) {
  Pickle out;
  out.what_ = std::move(what);
  PickleParser(bytes, size, out).run();
  return out;
}

std::optional<std::string_view> Pickle::stringOf(int32_t id) const {
  const PickleNode& n = node(id);
  if (n.kind == Kind::bytes || n.kind == Kind::text) return n.data;
  return std::nullopt;
}

int32_t Pickle::dictGet(int32_t dict, std::string_view key) const {
  const PickleNode& d = node(dict);
  if (d.kind != Kind::dict) return -1;
  int32_t found = -1;  // the last value of a key wins, as in Python
  for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
    if (stringOf(d.items[i]) == key) found = d.items[i + 1];
  }
  return found;
}

bool Pickle::isGlobal(int32_t id, std::initializer_list<std::string_view> modules,
                      std::string_view name) const {
  const PickleNode& n = node(id);
  if (n.kind != Kind::global || n.name != name) return false;
  for (std::string_view m : modules) {
    if (n.data == m) return true;
  }
  return false;
}

bool Pickle::isCallOf(int32_t id, std::initializer_list<std::string_view> modules,
                      std::string_view name) const {
  const PickleNode& n = node(id);
  return n.kind == Kind::call && isGlobal(n.items[0], modules, name);
}

const std::vector<int32_t>& Pickle::callArgs(int32_t id) const { return node(node(id).items.at(1)).items; }

std::string Pickle::describe(int32_t id) const {
  const PickleNode& n = node(id);
  switch (n.kind) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return n.integer ? "True" : "False";
    case Kind::integer:
      return "int " + std::to_string(n.integer);
    case Kind::real:
      return "float " + std::to_string(n.real);
    case Kind::bytes:
      return "bytes of " + std::to_string(n.data.size());
    case Kind::text:
      return "str of " + std::to_string(n.data.size()) + " bytes";
    case Kind::tuple:
      return "tuple of " + std::to_string(n.items.size());
    case Kind::list:
      return "list of " + std::to_string(n.items.size());
    case Kind::dict:
      return "dict of " + std::to_string(n.items.size() / 2);
    case Kind::set:
      return "set of " + std::to_string(n.items.size());
    case Kind::global:
      return std::string(n.data) + "." + std::string(n.name);
    case Kind::call: {
      const PickleNode& f = node(n.items[0]);
      return f.kind == Kind::global ? std::string(f.data) + "." + std::string(f.name) + "(...)" : "a call";
    }
  }
  return "?";
}

namespace {

[[noreturn]] void badArray(const Pickle& p, const std::string& why) {
  throw IoError(p.what() + ": a numpy array in it " + why);
}

/// numpy.dtype(kind_and_size, align, copy) BUILD (version, byteorder, ...) as dtype.str.
std::string dtypeString(const Pickle& p, int32_t id) {
  if (!p.isCallOf(id, {"numpy"}, "dtype"))
    badArray(p, "has a dtype that is not numpy.dtype(...): " + p.describe(id));
  const std::vector<int32_t>& args = p.callArgs(id);
  const auto type = args.empty() ? std::nullopt : p.stringOf(args[0]);
  if (!type || type->empty()) badArray(p, "has a dtype without its type string");
  std::string code(*type);
  if (code[0] == '<' || code[0] == '>' || code[0] == '|' || code[0] == '=') code.erase(0, 1);
  char order = '|';
  const int32_t state = p.node(id).state;
  if (state >= 0 && p.node(state).kind == PickleNode::Kind::tuple && p.node(state).items.size() >= 2) {
    if (auto o = p.stringOf(p.node(state).items[1]); o && o->size() == 1) order = (*o)[0];
  }
  if (order == '=') order = '<';  // native: every machine lockstep runs on is little-endian
  if (code[0] == 'O')
    badArray(p, "is an object array (dtype object), which holds Python objects, not numbers");
  return std::string(1, order) + code;
}

std::vector<int64_t> shapeOf(const Pickle& p, int32_t id) {
  const PickleNode& s = p.node(id);
  if (s.kind != PickleNode::Kind::tuple) badArray(p, "has a shape that is not a tuple: " + p.describe(id));
  std::vector<int64_t> shape;
  for (int32_t d : s.items) {
    const PickleNode& n = p.node(d);
    if (n.kind != PickleNode::Kind::integer || n.integer < 0)
      badArray(p, "has a bad dimension: " + p.describe(d));
    shape.push_back(n.integer);
  }
  return shape;
}

int64_t itemSize(const Pickle& p, const std::string& dtype) {
  // dtype.str: order, kind letter, then the size in bytes ("<f4", "|u1", "<U3" is not a number).
  const std::string kinds = "biufc";
  if (dtype.size() < 3 || kinds.find(dtype[1]) == std::string::npos) {
    badArray(p, "has dtype " + dtype + ", not a number type");
  }
  int64_t size = 0;
  for (size_t i = 2; i < dtype.size(); ++i) {
    if (dtype[i] < '0' || dtype[i] > '9' || size > 1024) badArray(p, "has a malformed dtype " + dtype);
    size = size * 10 + (dtype[i] - '0');
  }
  if (size <= 0) badArray(p, "has a malformed dtype " + dtype);
  return size;
}

void checkSize(const Pickle& p, NumpyArray& a) {
  const int64_t item = itemSize(p, a.dtype);
  uint64_t count = 1;
  for (int64_t d : a.shape) {
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      badArray(p, "is too large");
    count *= static_cast<uint64_t>(d);
  }
  if (count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(item) ||
      count * static_cast<uint64_t>(item) != a.data.size()) {
    std::string shape;
    for (int64_t d : a.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    badArray(p, "of shape (" + shape + ") and dtype " + a.dtype + " has " + std::to_string(a.data.size()) +
                    " bytes of data, not shape x itemsize (a damaged file?)");
  }
}

}  // namespace

std::optional<NumpyArray> numpyArray(const Pickle& p, int32_t id) {
  NumpyArray a;
  if (p.isCallOf(id, {"numpy.core.multiarray", "numpy._core.multiarray"}, "_reconstruct")) {
    // BUILD's state: (version, shape, dtype, is_fortran, raw) or, before numpy's version 1,
    // (shape, dtype, is_fortran, raw).
    const int32_t state = p.node(id).state;
    if (state < 0 || p.node(state).kind != PickleNode::Kind::tuple)
      badArray(p, "has no state (shape, dtype, data)");
    std::vector<int32_t> s = p.node(state).items;
    if (s.size() == 5) s.erase(s.begin());
    if (s.size() != 4)
      badArray(p, "has a state of " + std::to_string(s.size()) + " items, not (shape, dtype, order, data)");
    a.shape = shapeOf(p, s[0]);
    a.dtype = dtypeString(p, s[1]);
    const PickleNode& fortran = p.node(s[2]);
    a.fortran_order =
        (fortran.kind == PickleNode::Kind::boolean || fortran.kind == PickleNode::Kind::integer) &&
        fortran.integer != 0;
    const auto raw = p.stringOf(s[3]);
    if (!raw) badArray(p, "has data that is " + p.describe(s[3]) + ", not bytes");
    a.data = *raw;
  } else if (p.isCallOf(id, {"numpy.core.numeric", "numpy._core.numeric"}, "_frombuffer")) {
    const std::vector<int32_t>& args = p.callArgs(id);  // (buffer, dtype, shape, order)
    if (args.size() != 4)
      badArray(p, "is a _frombuffer call of " + std::to_string(args.size()) + " arguments, not 4");
    const auto raw = p.stringOf(args[0]);
    if (!raw) badArray(p, "has a buffer that is " + p.describe(args[0]) + ", not bytes");
    a.data = *raw;
    a.dtype = dtypeString(p, args[1]);
    a.shape = shapeOf(p, args[2]);
    const auto order = p.stringOf(args[3]);
    a.fortran_order = order && *order == "F";
  } else {
    return std::nullopt;
  }
  checkSize(p, a);
  return a;
}

}  // namespace lockstep::data
