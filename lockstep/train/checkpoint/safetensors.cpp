#include "lockstep/train/checkpoint/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "lockstep/util/file.h"
#include "lockstep/util/json.h"

namespace lockstep::train {

namespace {

// safetensors names the dtypes as lockstep does, in capitals: F32, F64, BF16, F16, I32, I64, U8.
std::string stName(DType t) {
  std::string n = dtypeName(t);
  for (char& c : n) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return n;
}

bool stDType(const std::string& s, DType* out) {
  std::string n = s;
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  try {
    const DType t = dtypeFromName(n);
    if (stName(t) != s) return false;  // the format's names are capitals only
    *out = t;
    return true;
  } catch (const ValueError&) {
    return false;
  }
}

}  // namespace

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  throw IoError("safetensors file '" + path + "' has no tensor named '" + name + "'");
}

namespace {

// The 8-byte length and the JSON header of tensors (data section aligned to 8 bytes).
std::string encodeHeader(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    LOCKSTEP_ENFORCE(seen.insert(name).second, ValueError, "safetensors: tensor name '", name,
                     "' appears twice");
    LOCKSTEP_ENFORCE(name != "__metadata__", ValueError, "safetensors: '__metadata__' is reserved");
    uint64_t n = t.nbytes();
    header[name] = {
        {"dtype", stName(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');  // align the data section to 8 bytes
  std::string out(8, '\0');
  uint64_t hn = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((hn >> (8 * i)) & 0xff);
  return out + h;
}

std::string_view bytesOf(const Tensor& c) {
  return {static_cast<const char*>(c.numel() ? c.dataPtr() : nullptr), c.nbytes()};
}

}  // namespace

std::string encodeSafetensors(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::string out = encodeHeader(tensors, metadata);
  size_t data = 0;
  for (const auto& [name, t] : tensors) data += t.nbytes();
  out.reserve(out.size() + data);
  for (const auto& [name, t] : tensors) out.append(bytesOf(t.to(Device::cpu()).contiguous()));
  return out;
}

WrittenFile saveSafetensors(const std::string& path, const NamedTensors& tensors,
                            const std::map<std::string, std::string>& metadata) {
  const std::string header = encodeHeader(tensors, metadata);
  // Contiguous host tensors (copies only of non-contiguous ones and of those on a GPU), alive until
  // written.
  std::vector<Tensor> data;
  std::vector<std::string_view> pieces = {header};
  WrittenFile w{header.size(), file::crc32(header)};
  for (const auto& [name, t] : tensors) {
    data.push_back(t.to(Device::cpu()).contiguous());
    pieces.push_back(bytesOf(data.back()));
    w.bytes += pieces.back().size();
    w.crc32 = file::crc32(pieces.back(), w.crc32);
  }
  file::writeAtomic(path, pieces);
  return w;
}

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path, const NamedTensors& layout,
                                                 const std::map<std::string, std::string>& metadata)
    : file_(path) {
  const std::string header = encodeHeader(layout, metadata);  // offsets in layout order
  uint64_t offset = header.size();
  for (const auto& [name, t] : layout) {
    entries_[name] = {t.shape(), t.dtype(), offset};
    offset += t.nbytes();
  }
  file_.append(header);
}

void SafetensorsStreamWriter::write(const std::string& name, const Tensor& values) {
  auto it = entries_.find(name);
  LOCKSTEP_ENFORCE(it != entries_.end(), ValueError, "safetensors stream: '", name, "' is not in the header");
  Entry& e = it->second;
  LOCKSTEP_ENFORCE(!e.written, ValueError, "safetensors stream: '", name, "' written twice");
  LOCKSTEP_ENFORCE(values.shape() == e.shape && values.dtype() == e.dtype, ValueError,
                   "safetensors stream: '", name, "' is ", dtypeName(values.dtype()), " ",
                   shapeToString(values.shape()), ", its header says ", dtypeName(e.dtype), " ",
                   shapeToString(e.shape));
  const Tensor c = values.to(Device::cpu()).contiguous();
  file_.writeAt(e.offset, bytesOf(c));
  e.written = true;
  ++written_;
}

void SafetensorsStreamWriter::commit() {
  for (const auto& [name, e] : entries_) {
    LOCKSTEP_ENFORCE(e.written, ValueError, "safetensors stream: ", entries_.size() - written_, " of ",
                     entries_.size(), " tensors were never written (one: '", name, "')");
  }
  file_.commit();
}

uint64_t safetensorsHeaderLength(std::string_view first8, uint64_t file_size, const std::string& path) {
  if (first8.size() < 8 || file_size < 8) {
    throw IoError("corrupt safetensors file '" + path + "': only " + std::to_string(file_size) +
                  " bytes, shorter than the 8-byte header length");
  }
  uint64_t hn = 0;
  for (int i = 0; i < 8; ++i) hn |= static_cast<uint64_t>(static_cast<uint8_t>(first8[i])) << (8 * i);
  if (hn > file_size - 8) {
    throw IoError("corrupt safetensors file '" + path + "': header length " + std::to_string(hn) +
                  " exceeds the file size " + std::to_string(file_size) + " (truncated?)");
  }
  return hn;
}

SafetensorsHeader parseSafetensorsHeader(std::string_view header_json, uint64_t data_size,
                                         const std::string& path) {
  auto bad = [&](const std::string& what) {
    return IoError("corrupt safetensors file '" + path + "': " + what);
  };
  nlohmann::ordered_json header;
  try {
    header = json::parse<nlohmann::ordered_json>(header_json.begin(), header_json.end());
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw bad("header is not a JSON object");
  SafetensorsHeader out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw bad("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw bad("__metadata__ value of '" + k + "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    try {
      DType dt;
      std::string dts = entry.at("dtype").get<std::string>();
      if (!stDType(dts, &dt)) throw bad("tensor '" + name + "' has unsupported dtype " + dts);
      // Every number from the header is checked before any arithmetic on it: an integer in range
      // (not a float or a negative one), and a shape whose product fits (a crafted header must
      // not overflow into a small byte count and a tensor that crashes on use).
      const auto& jshape = entry.at("shape");
      if (!jshape.is_array()) throw bad("tensor '" + name + "' has a shape that is not a list");
      Shape shape;
      uint64_t numel = 1, strides = 1;
      for (const auto& d : jshape) {
        if (!d.is_number_unsigned())  // nlohmann keeps non-negative integers as unsigned
          throw bad("tensor '" + name +
                    "' has a dimension that is not a non-negative integer: " + json::excerpt(d));
        const uint64_t v = d.get<uint64_t>();
        // strides: the product of all dims counting a 0 as 1 (what the tensor's strides hold).
        if (__builtin_mul_overflow(strides, std::max<uint64_t>(v, 1), &strides) ||
            strides > static_cast<uint64_t>(INT64_MAX)) {
          throw bad("tensor '" + name + "' has a shape " + json::excerpt(jshape) +
                    " whose size overflows 64 bits");
        }
        numel *= v;  // <= strides
        shape.push_back(static_cast<int64_t>(v));
      }
      const auto& joffs = entry.at("data_offsets");
      if (!joffs.is_array() || joffs.size() != 2 || !joffs[0].is_number_unsigned() ||
          !joffs[1].is_number_unsigned())
        throw bad("tensor '" + name + "' has malformed data_offsets " + json::excerpt(joffs));
      const uint64_t offs[2] = {joffs[0].get<uint64_t>(), joffs[1].get<uint64_t>()};
      if (offs[0] > offs[1])
        throw bad("tensor '" + name + "' has malformed data_offsets " + json::excerpt(joffs));
      uint64_t want = 0;
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtypeSize(dt)), &want))
        throw bad("tensor '" + name + "' has a shape " + json::excerpt(jshape) +
                  " whose byte size overflows 64 bits");
      if (offs[1] - offs[0] != want) {
        throw bad("tensor '" + name + "' of shape " + shapeToString(shape) + " needs " +
                  std::to_string(want) + " bytes but its data_offsets span " +
                  std::to_string(offs[1] - offs[0]));
      }
      if (offs[1] > data_size) {
        throw bad("tensor '" + name + "' ends at byte " + std::to_string(offs[1]) +
                  " past the data section's " + std::to_string(data_size) + " bytes (truncated?)");
      }
      out.entries.push_back({name, dt, std::move(shape), offs[0], offs[1]});
      ranges.emplace_back(offs[0], offs[1]);
    } catch (const nlohmann::json::exception& e) {
      throw bad("tensor '" + name + "' has a malformed entry: " + e.what());
    }
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t pos = 0;
  for (const auto& [b, e] : ranges) {
    if (b != pos) throw bad("tensor data ranges overlap or leave a gap at byte " + std::to_string(pos));
    pos = e;
  }
  if (pos != data_size) {
    throw bad("the data section has " + std::to_string(data_size) + " bytes but tensors cover " +
              std::to_string(pos));
  }
  return out;
}

SafetensorsFile decodeSafetensors(const std::string& bytes, const std::string& path) {
  const uint64_t hn = safetensorsHeaderLength(bytes, bytes.size(), path);
  SafetensorsHeader header =
      parseSafetensorsHeader(std::string_view(bytes).substr(8, hn), bytes.size() - 8 - hn, path);
  SafetensorsFile out;
  out.path = path;
  out.metadata = std::move(header.metadata);
  const char* data = bytes.data() + 8 + hn;
  for (SafetensorsEntry& e : header.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.dataPtr(), data + e.begin, e.end - e.begin);
    out.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

SafetensorsFile loadSafetensors(const std::string& path) {
  return decodeSafetensors(file::readAll(path), path);
}

}  // namespace lockstep::train
