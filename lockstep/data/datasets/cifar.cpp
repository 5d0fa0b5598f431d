#include "lockstep/data/datasets/cifar.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "lockstep/data/archive_reader.h"
#include "lockstep/data/file_bytes.h"
#include "lockstep/data/pickle_reader.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::data {

CifarRaw readCifarBinary(const std::string& path) {
  std::error_code ec;
  LOCKSTEP_ENFORCE(
      std::filesystem::is_regular_file(path, ec), IoError, path,
      ": CIFAR-10 batch file not found (the binary version's folder needs data_batch_1..5.bin and "
      "test_batch.bin)");
  const std::vector<uint8_t> bytes = readFileBytes(path);
  return decodeCifarBinary(bytes.data(), bytes.size(), path);
}

CifarRaw decodeCifarBinary(const uint8_t* bytes, size_t size, const std::string& path) {
  LOCKSTEP_ENFORCE(size != 0, IoError, path, ": empty CIFAR-10 batch file");
  LOCKSTEP_ENFORCE(size % kCifarRecordBytes == 0, IoError, path,
                   ": truncated or corrupt CIFAR-10 file: ", size, " bytes is not a multiple of the ",
                   kCifarRecordBytes, "-byte record (", size / kCifarRecordBytes, " whole records and ",
                   size % kCifarRecordBytes, " stray bytes)");
  // n * kCifarRecordBytes == size: every offset below stays inside the buffer.
  const int64_t n = static_cast<int64_t>(size / kCifarRecordBytes);
  CifarRaw raw{Tensor::empty({n, 3, 32, 32}, DType::u8), Tensor::empty({n}, DType::i64)};
  uint8_t* img = raw.images.data<uint8_t>();
  int64_t* lab = raw.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* rec = bytes + i * kCifarRecordBytes;
    LOCKSTEP_ENFORCE(rec[0] <= 9, IoError, path, ": record ", i, " has label ", static_cast<int>(rec[0]),
                     ", outside 0..9 (corrupt file, or not CIFAR-10?)");
    lab[i] = rec[0];
    std::memcpy(img + i * kCifarImageBytes, rec + 1, kCifarImageBytes);
  }
  return raw;
}

CifarRaw decodeCifarPython(const uint8_t* bytes, size_t size, const std::string& path) {
  LOCKSTEP_ENFORCE(size != 0, IoError, path, ": empty CIFAR-10 batch file");
  const Pickle p = Pickle::parse(bytes, size, path);
  const int32_t root = p.root();
  const std::string expected =
      "a CIFAR-10 python batch is a pickled dict with 'data' (uint8 [N, 3072]) and "
      "'labels' (N ints 0..9)";
  LOCKSTEP_ENFORCE(p.node(root).kind == PickleNode::Kind::dict, IoError, path, ": ", expected,
                   "; this pickle holds ", p.describe(root));
  const int32_t data = p.dictGet(root, "data");
  const int32_t labels = p.dictGet(root, "labels");
  if (labels < 0 && p.dictGet(root, "fine_labels") >= 0) {
    throw IoError(path +
                  ": has 'fine_labels', so it is a CIFAR-100 batch; data.dataset: cifar10 reads CIFAR-10");
  }
  LOCKSTEP_ENFORCE(data >= 0 && labels >= 0, IoError, path, ": ", expected, "; this dict has no '",
                   data < 0 ? "data" : "labels", "'");
  const std::optional<NumpyArray> images = numpyArray(p, data);
  LOCKSTEP_ENFORCE(images.has_value(), IoError, path, ": 'data' is ", p.describe(data),
                   ", not a numpy array");
  const std::vector<int64_t>& shape = images->shape;
  const bool flat = shape.size() == 2 && shape[1] == kCifarImageBytes;
  const bool chw = shape.size() == 4 && shape[1] == 3 && shape[2] == 32 && shape[3] == 32;
  LOCKSTEP_ENFORCE(images->dtype.substr(1) == "u1" && (flat || chw) && !images->fortran_order, IoError, path,
                   ": 'data' is a numpy array of dtype ", images->dtype, ", shape of ", shape.size(),
                   " dimensions", images->fortran_order ? ", Fortran order" : "",
                   "; CIFAR-10's is uint8 [N, 3072] (or [N, 3, 32, 32]) in C order");
  const int64_t n = shape[0];
  std::vector<int64_t> label_values;
  if (p.node(labels).kind == PickleNode::Kind::list) {
    for (int32_t id : p.node(labels).items) {
      const PickleNode& v = p.node(id);
      LOCKSTEP_ENFORCE(v.kind == PickleNode::Kind::integer, IoError, path, ": 'labels' holds ",
                       p.describe(id), ", not an int");
      label_values.push_back(v.integer);
    }
  } else if (const std::optional<NumpyArray> a = numpyArray(p, labels)) {
    const std::string& t = a->dtype;
    const bool little = t[0] == '<' || t[0] == '|';
    const int64_t width = t.size() == 3 && (t[1] == 'i' || t[1] == 'u') ? t[2] - '0' : 0;
    LOCKSTEP_ENFORCE(little && a->shape.size() == 1 && (width == 1 || width == 2 || width == 4 || width == 8),
                     IoError, path, ": 'labels' is a numpy array of dtype ", t, " and ", a->shape.size(),
                     " dimensions; expected one dimension of little-endian integers");
    for (int64_t i = 0; i < a->shape[0]; ++i) {
      const char* at = a->data.data() + i * width;
      uint64_t bits = 0;
      std::memcpy(&bits, at, static_cast<size_t>(width));
      int64_t v = static_cast<int64_t>(bits);
      if (t[1] == 'i' && width < 8 && (bits >> (8 * width - 1)) != 0)
        v = static_cast<int64_t>(bits | (~uint64_t{0} << (8 * width)));
      label_values.push_back(v);
    }
  } else {
    throw IoError(path + ": 'labels' is " + p.describe(labels) + ", not a list of ints or a numpy array");
  }
  LOCKSTEP_ENFORCE(static_cast<int64_t>(label_values.size()) == n, IoError, path, ": ", n, " images but ",
                   label_values.size(), " labels");
  CifarRaw raw{Tensor::empty({n, 3, 32, 32}, DType::u8), Tensor::empty({n}, DType::i64)};
  int64_t* lab = raw.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    LOCKSTEP_ENFORCE(label_values[i] >= 0 && label_values[i] <= 9, IoError, path, ": sample ", i,
                     " has label ", label_values[i], ", outside 0..9 (corrupt file, or not CIFAR-10?)");
    lab[i] = label_values[i];
  }
  std::memcpy(raw.images.data<uint8_t>(), images->data.data(), images->data.size());
  return raw;
}

namespace {

namespace fs = std::filesystem;

constexpr const char* kLookedFor =
    "data_batch_1..5 and test_batch (the python version: torchvision's cifar-10-batches-py/, Paddle's "
    "cifar-10-python.tar.gz) or data_batch_1..5.bin and test_batch.bin (the binary version), in it, in a "
    "cifar-10-batches-py/ or cifar-10-batches-bin/ folder under it, or as the downloaded .tar.gz";

bool isFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::vector<std::string> splitFiles(Split split) {
  std::vector<std::string> files;
  if (split == Split::train) {
    for (int i = 1; i <= 5; ++i) files.push_back("data_batch_" + std::to_string(i));
  } else {
    files.push_back("test_batch");
  }
  return files;
}

/// A batch's base name without a ".bin": the file it is in splitFiles' terms.
std::string batchName(std::string_view member_path) {
  std::string_view base = member_path.substr(member_path.find_last_of('/') + 1);
  if (base.size() > 4 && base.substr(base.size() - 4) == ".bin") base.remove_suffix(4);
  return std::string(base);
}

}  // namespace

CifarSource findCifar10(const std::string& root) {
  const fs::path r(root);
  std::error_code ec;
  if (isFile(r)) {
    LOCKSTEP_ENFORCE(
        looksLikeTarArchive(root), IoError, "data.root: ", root,
        " is a file but not a .tar.gz (or .tar, .tgz, .tar.bz2, .tar.xz) archive; give CIFAR-10's "
        "downloaded archive or the folder of its batches");
    return {CifarSource::Kind::archive, root};
  }
  LOCKSTEP_ENFORCE(fs::is_directory(r, ec), IoError, "data.root: CIFAR-10 folder or archive ", root,
                   " does not exist");
  if (isFile(r / "data_batch_1.bin") || isFile(r / "test_batch.bin"))
    return {CifarSource::Kind::binary_dir, root};
  if (isFile(r / "data_batch_1") || isFile(r / "test_batch")) return {CifarSource::Kind::python_dir, root};
  for (const char* sub : {"cifar-10-batches-py", "cifar-10-batches-bin"}) {
    if (fs::is_directory(r / sub, ec)) return findCifar10((r / sub).string());
  }
  for (const char* archive : {"cifar-10-python.tar.gz", "cifar-10-binary.tar.gz"}) {
    if (isFile(r / archive)) return {CifarSource::Kind::archive, (r / archive).string()};
  }
  throw IoError("data.root: " + root + " holds no CIFAR-10: looked for " + kLookedFor);
}

std::vector<CifarRaw> readCifar10Split(const CifarSource& source, Split split) {
  const std::vector<std::string> names = splitFiles(split);
  std::vector<CifarRaw> parts;
  if (source.kind != CifarSource::Kind::archive) {
    const bool binary = source.kind == CifarSource::Kind::binary_dir;
    for (const std::string& name : names) {
      const std::string path = (fs::path(source.path) / (binary ? name + ".bin" : name)).string();
      if (binary) {
        parts.push_back(readCifarBinary(path));
        continue;
      }
      LOCKSTEP_ENFORCE(isFile(path), IoError, path, ": CIFAR-10 batch file not found (the python version's ",
                       source.path, " needs data_batch_1..5 and test_batch)");
      const std::vector<uint8_t> bytes = readFileBytes(path);
      parts.push_back(decodeCifarPython(bytes.data(), bytes.size(), path));
    }
    return parts;
  }
  // Each batch once (the first in the archive's order), none above 256 MiB (a python batch is 31
  // MB, 47 MB as Python 3 pickles it at protocol 2): what an archive can make this hold is bounded,
  // whatever else it carries.
  std::vector<std::string> taken;
  std::vector<ArchiveMember> members = readArchiveMembers(
      source.path,
      [&](std::string_view path) {
        const std::string name = batchName(path);
        if (std::find(names.begin(), names.end(), name) == names.end() ||
            std::find(taken.begin(), taken.end(), name) != taken.end())
          return false;
        taken.push_back(name);
        return true;
      },
      uint64_t{256} << 20);
  for (const std::string& name : names) {
    auto it = std::find_if(members.begin(), members.end(),
                           [&](const ArchiveMember& m) { return batchName(m.path) == name; });
    LOCKSTEP_ENFORCE(it != members.end(), IoError, source.path, ": the archive has no ", name, " or ", name,
                     ".bin: is it CIFAR-10's cifar-10-python.tar.gz or cifar-10-binary.tar.gz?");
    const std::string what = source.path + ": " + it->path;
    const bool binary = it->path.size() > 4 && it->path.substr(it->path.size() - 4) == ".bin";
    parts.push_back(binary ? decodeCifarBinary(it->bytes.data(), it->bytes.size(), what)
                           : decodeCifarPython(it->bytes.data(), it->bytes.size(), what));
    std::vector<uint8_t>().swap(it->bytes);  // the decoded copy is all that is kept
  }
  return parts;
}

TensorDataset loadCifar10(const std::string& root, Split split, const CifarOptions& options) {
  for (double s : options.std) LOCKSTEP_ENFORCE(s > 0, ValueError, "loadCifar10: std must be > 0, got ", s);
  const std::vector<CifarRaw> parts = readCifar10Split(findCifar10(root), split);
  int64_t n = 0;
  for (const CifarRaw& part : parts) n += part.labels.size(0);
  Tensor x = Tensor::empty({n, 3, 32, 32}, DType::f32);
  Tensor y = Tensor::empty({n}, DType::i64);
  std::array<std::array<float, 256>, 3> lut;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v)
      lut[c][v] = static_cast<float>((v / 255.0 - options.mean[c]) / options.std[c]);
  }
  float* px = x.data<float>();
  int64_t* py = y.data<int64_t>();
  for (const auto& part : parts) {
    const int64_t m = part.labels.size(0);
    const uint8_t* src = part.images.data<uint8_t>();
    for (int64_t i = 0; i < m * kCifarImageBytes; ++i) px[i] = lut[(i / 1024) % 3][src[i]];
    std::memcpy(py, part.labels.data<int64_t>(), static_cast<size_t>(m) * sizeof(int64_t));
    px += m * kCifarImageBytes;
    py += m;
  }
  return TensorDataset(std::move(x), std::move(y));
}

void writeCifarBinary(const std::string& path, const Tensor& images, const Tensor& labels) {
  LOCKSTEP_ENFORCE(images.dtype() == DType::u8 && images.shape() == Shape({images.size(0), 3, 32, 32}),
                   ValueError, "writeCifarBinary(", path, "): images must be u8 [N, 3, 32, 32], got ",
                   images.describe());
  LOCKSTEP_ENFORCE(labels.dim() == 1 && labels.size(0) == images.size(0), ValueError, "writeCifarBinary(",
                   path, "): labels must be [", images.size(0), "], got ", labels.describe());
  const int64_t n = images.size(0);
  Tensor img = images.contiguous();
  std::vector<int64_t> lab = labels.toVector<int64_t>();
  std::vector<uint8_t> out(static_cast<size_t>(n * kCifarRecordBytes));
  for (int64_t i = 0; i < n; ++i) {
    LOCKSTEP_ENFORCE(lab[i] >= 0 && lab[i] <= 9, ValueError, "writeCifarBinary(", path, "): label ", lab[i],
                     " of sample ", i, " is outside 0..9");
    out[i * kCifarRecordBytes] = static_cast<uint8_t>(lab[i]);
    std::memcpy(out.data() + i * kCifarRecordBytes + 1, img.data<uint8_t>() + i * kCifarImageBytes,
                kCifarImageBytes);
  }
  writeFileBytes(path, out, false);
}

namespace {
void writeSyntheticFile(const std::string& path, int64_t n, const std::vector<double>& class_means,
                        Generator& gen) {
  Tensor noise = Tensor::empty({n, 3, 32, 32}, DType::f32);
  gen.normal(noise, 0.0, 0.15);
  Tensor images = Tensor::empty({n, 3, 32, 32}, DType::u8);
  Tensor labels = Tensor::empty({n}, DType::i64);
  const float* pn = noise.data<float>();
  uint8_t* pi = images.data<uint8_t>();
  int64_t* pl = labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = static_cast<int64_t>(gen.nextBelow(10));
    pl[i] = c;
    for (int64_t j = 0; j < kCifarImageBytes; ++j) {
      const int64_t ch = j / 1024, half = (j % 1024) / 512;  // top / bottom half of the image
      const double v = class_means[static_cast<size_t>(c * 6 + ch * 2 + half)] + pn[i * kCifarImageBytes + j];
      pi[i * kCifarImageBytes + j] = static_cast<uint8_t>(std::clamp(v, 0.0, 1.0) * 255.0 + 0.5);
    }
  }
  writeCifarBinary(path, images, labels);
}
}  // namespace

void writeSyntheticCifar10(const std::string& dir, const SyntheticCifarOptions& options) {
  LOCKSTEP_ENFORCE(options.train_per_file > 0 && options.test_samples > 0, ValueError,
                   "writeSyntheticCifar10: sample counts must be positive");
  Generator gen(options.seed);
  std::vector<double> class_means(10 * 6);
  for (double& m : class_means) m = 0.2 + 0.6 * gen.nextDouble();
  const std::filesystem::path d(dir);
  for (int i = 1; i <= 5; ++i) {
    writeSyntheticFile((d / ("data_batch_" + std::to_string(i) + ".bin")).string(), options.train_per_file,
                       class_means, gen);
  }
  writeSyntheticFile((d / "test_batch.bin").string(), options.test_samples, class_means, gen);
}

}  // namespace lockstep::data
