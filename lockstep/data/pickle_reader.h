#pragma once
// Python's pickle format (protocols 1-5: the binary opcodes, and protocol 1's decimal INT and LONG),
// read as data only: nothing is ever
// imported or called. A global (GLOBAL, STACK_GLOBAL) stays a module and a name, a call of it
// (REDUCE, NEWOBJ, OBJ) the callable and its arguments, BUILD's state is kept beside the object it
// builds; the caller finds in that tree the structure it expects (numpy arrays: numpyArray below).
// One call is evaluated because it is how Python 3 writes bytes at protocol 2 or lower:
// `_codecs.encode(text, 'latin1')` becomes the bytes it returns.
// For data sets that Python tools distribute as pickles: CIFAR-10's python batches
// (data/datasets/cifar.h). Opcode meanings: CPython's Lib/pickletools.py.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::data {

struct PickleNode {
  enum class Kind : uint8_t {
    none,
    boolean,
    integer,
    real,
    bytes,
    text,
    tuple,
    list,
    dict,
    set,
    global,
    call
  };
  Kind kind = Kind::none;
  int64_t integer = 0;         // boolean (0/1) and integer
  double real = 0;             // real
  std::string_view data;       // bytes; text (UTF-8); global: the module
  std::string_view name;       // global: the name
  std::vector<int32_t> items;  // tuple/list/set: the elements; dict: key, value, key, value, ...;
                               // call: the callable, then the arguments (a tuple node)
  int32_t state = -1;          // BUILD's state, -1 when none was given
};

/// The most objects a pickle may hold, and the most memo entries, stack entries and open MARKs it
/// may make (Pickle::parse refuses more): some 160 MB at most, whatever the file's size, beside
/// the bytes _codecs.encode makes (no more than the file's size). A CIFAR-10 batch makes some
/// 40,000.
constexpr size_t kMaxPickleObjects = size_t{1} << 20;

class Pickle {
 public:
  /// Parses the pickle in bytes[0, size), which must outlive the Pickle; `what` names it in
  /// messages. IoError naming it, the opcode and its byte offset when it is truncated, malformed,
  /// uses an opcode this reader does not take (protocol 0's other text opcodes, persistent ids as in
  /// torch.save files, extension codes, out-of-band buffers), has no STOP, or goes past
  /// kMaxPickleObjects.
  static Pickle parse(const uint8_t* bytes, size_t size, std::string what);
  // Its views point into its own strings: moved, never copied.
  Pickle(Pickle&&) = default;
  Pickle& operator=(Pickle&&) = default;
  Pickle(const Pickle&) = delete;
  Pickle& operator=(const Pickle&) = delete;

  int32_t root() const { return root_; }
  /// How many objects it holds: node ids are 0 .. size() - 1.
  size_t size() const { return nodes_.size(); }
  const PickleNode& node(int32_t id) const { return nodes_.at(static_cast<size_t>(id)); }
  const std::string& what() const { return what_; }

  /// The value under `key` in the dict node `dict` (str and bytes keys compared by content), or -1
  /// when `dict` is not a dict or has no such key.
  int32_t dictGet(int32_t dict, std::string_view key) const;
  /// Whether node `id` is the global module.name for one of `modules`.
  bool isGlobal(int32_t id, std::initializer_list<std::string_view> modules, std::string_view name) const;
  /// Whether node `id` is a call of the global module.name for one of `modules`.
  bool isCallOf(int32_t id, std::initializer_list<std::string_view> modules, std::string_view name) const;
  /// The arguments of call node `id` (a tuple's items), empty when it has none.
  const std::vector<int32_t>& callArgs(int32_t id) const;
  /// The bytes or text of node `id`, nullopt for other kinds.
  std::optional<std::string_view> stringOf(int32_t id) const;
  /// A short description of node `id` for messages ("list of 3", "int 7", "numpy.dtype(...)").
  std::string describe(int32_t id) const;

 private:
  Pickle() = default;

  std::string what_;
  std::vector<PickleNode> nodes_;
  std::deque<std::string> owned_;  // bytes made by _codecs.encode; stable addresses for the views
  int32_t root_ = -1;

  friend class PickleParser;
};

/// A numpy.ndarray as numpy pickles it: `numpy.core.multiarray._reconstruct` then BUILD with
/// (version, shape, dtype, is_fortran, raw bytes), or at protocol 5 `numpy.core.numeric._frombuffer`
/// (buffer, dtype, shape, order); numpy 2's `numpy._core` module names too.
struct NumpyArray {
  std::string dtype;  // numpy's dtype.str: byte order ('<', '>' or '|') then kind and size: "|u1", "<i8"
  std::vector<int64_t> shape;
  bool fortran_order = false;
  std::string_view data;  // the elements' bytes, product(shape) * itemsize of them
};
/// Node `id` as a numpy array; nullopt when it is not one. IoError naming the pickle when it is a
/// numpy array whose dtype, shape or data size do not agree, or an object array.
std::optional<NumpyArray> numpyArray(const Pickle& p, int32_t id);

}  // namespace lockstep::data
