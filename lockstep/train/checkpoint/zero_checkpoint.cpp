#include "lockstep/train/checkpoint/zero_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <unordered_map>

#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/tensor/deferred_init.h"
#include "lockstep/train/checkpoint/safetensors.h"
#include "lockstep/train/checkpoint/training_state.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/json.h"

namespace lockstep::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPartitionFormat = "lockstep-zero-partition-v1";
constexpr const char* kBuffersFile = "model_buffers.safetensors";

std::string rankFileName(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "zero/rank-%05d-of-%05d.safetensors", rank, world);
  return buf;
}

// A partition file: per segment, "<name>@<offset>" (the parameter's elements) and
// "<name>@<offset>/<key>" (each optimizer state buffer's, "step" a scalar), and the map.
WrittenFile writePartition(const std::string& path, const CheckpointPartition& part) {
  NamedTensors tensors;
  nlohmann::json segments = nlohmann::json::array();
  for (const PartitionSegment& s : part.segments) {
    const std::string base = s.name + "@" + std::to_string(s.offset);
    tensors.emplace_back(base, s.values);
    nlohmann::json keys = nlohmann::json::array();
    for (const auto& [k, t] : s.state) {
      LOCKSTEP_CHECK(k == "step" || t.numel() == s.numel, "optimizer state '", k, "' of ", base, " has ",
                     t.numel(), " elements, its segment ", s.numel);
      tensors.emplace_back(base + "/" + k, t);
      keys.push_back(k);
    }
    segments.push_back({{"param", s.param},
                        {"name", s.name},
                        {"shape", s.shape},
                        {"offset", s.offset},
                        {"numel", s.numel},
                        {"state", keys}});
  }
  std::map<std::string, std::string> meta = part.metadata;
  meta["format"] = kPartitionFormat;
  meta["parameters"] = std::to_string(part.parameters);
  meta["segments"] = segments.dump();
  return saveSafetensors(path, tensors, meta);
}

// Rank `rank`'s ZeRO partition: its owned segments of the parameters and of the optimizer state.
CheckpointPartition zeroPartition(const parallel::ZeroOptimizer& zero, int rank, int world) {
  const optim::OptimizerStateDict osd = zero.partitionOptimizerState();  // the swap file's, with nvme
  CheckpointPartition part;
  part.file = rankFileName(rank, world);
  part.parameters = static_cast<int64_t>(zero.parameterNames().size());
  part.metadata = {{"rank", std::to_string(rank)},
                   {"world_size", std::to_string(world)},
                   {"stage", std::to_string(zero.stage())}};
  for (const auto& s : zero.ownedSegments()) {
    PartitionSegment seg{s.param,
                         zero.parameterNames()[s.param],
                         zero.parameterShapes()[s.param],
                         s.param_offset,
                         s.numel,
                         s.values,
                         {}};
    const std::string prefix = std::to_string(s.opt_index) + ".";
    for (const auto& [key, t] : osd.state)
      if (key.rfind(prefix, 0) == 0) seg.state.emplace_back(key.substr(prefix.size()), t);
    part.segments.push_back(std::move(seg));
  }
  return part;
}

// Rank 0's string (a path, or an error) on every rank; an error becomes an IoError everywhere.
std::string agree(comm::ProcessGroup* group, const nlohmann::json& mine) {
  const nlohmann::json j =
      group && group->size() > 1 ? json::parse(parallel::broadcastBytes(*group, mine.dump())) : mine;
  if (j.contains("error")) throw IoError(j["error"].get<std::string>());
  return j.value("value", "");
}

}  // namespace

std::string saveZeroCheckpoint(const std::string& dir, const CheckpointData& replicated,
                               const parallel::ZeroOptimizer& zero, comm::ProcessGroup* group,
                               const CheckpointOptions& opts) {
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  return savePartitionedCheckpoint(dir, replicated, zeroPartition(zero, rank, world), zero.stage(),
                                   nlohmann::json::object(), group, opts);
}

std::string savePartitionedCheckpoint(const std::string& dir, const CheckpointData& replicated,
                                      const std::optional<CheckpointPartition>& mine_part, int zero_stage,
                                      const nlohmann::json& layout_extra, comm::ProcessGroup* group,
                                      const CheckpointOptions& opts) {
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  // Rank 0 makes the temp directory; its name (rank 0's pid) reaches the others, who wait for it.
  nlohmann::json made;
  if (rank == 0) {
    try {
      made["value"] = makeCheckpointTempDir(dir, replicated.step, std::to_string(::getpid()));
    } catch (const Error& e) {
      made["error"] = e.what();
    }
  }
  const std::string tmp = agree(group, made);
  // Every rank with a partition writes it (temp file, fsync, rename) and reports its size and CRC-32.
  nlohmann::json mine = nlohmann::json::object();
  if (mine_part) {
    mine["name"] = mine_part->file;
    try {
      const std::string path = tmp + "/" + mine_part->file;
      file::makeDirs(fs::path(path).parent_path().string());  // zero/, pipeline/: whoever comes first
      const WrittenFile w = writePartition(path, *mine_part);
      mine["record"] = {{"bytes", w.bytes}, {"crc32", w.crc32}};
    } catch (const Error& e) {
      mine["error"] =
          "rank " + std::to_string(rank) + " could not write its checkpoint partition: " + e.what();
    }
  }
  // Fault injection for tests: the last rank dies right after writing its partition, before any
  // manifest exists, as a rank killed in the middle of a save.
  if (opts.die_in_save_at_step > 0 && replicated.step == opts.die_in_save_at_step && rank == world - 1) {
    std::fprintf(stderr, "rank %d: dying in the middle of the checkpoint of step %lld (fault injection)\n",
                 rank, static_cast<long long>(replicated.step));
    std::_Exit(3);
  }
  std::vector<std::string> all = {mine.dump()};
  if (group && world > 1) all = parallel::allgatherBytes(*group, mine.dump());
  nlohmann::json done;
  if (rank == 0) {
    try {
      nlohmann::json files = nlohmann::json::object(), rank_files = nlohmann::json::array();
      for (int r = 0; r < world; ++r) {
        const nlohmann::json j = json::parse(all[r]);
        if (j.contains("error")) throw IoError(j["error"].get<std::string>());
        if (!j.contains("name")) continue;  // a rank without a partition
        const std::string f = j["name"].get<std::string>(), path = tmp + "/" + f;
        std::error_code ec;
        const uintmax_t size = fs::file_size(path, ec);
        if (ec || size != j["record"]["bytes"].get<uintmax_t>()) {
          throw IoError("rank " + std::to_string(r) + " wrote its checkpoint partition '" + path +
                        "' but rank 0 does not see it whole: checkpoint.dir must be on a filesystem every "
                        "rank shares");
        }
        files[f] = j["record"];
        rank_files.push_back(f);
      }
      const std::string contents[] = {
          encodeSafetensors(replicated.model, {{"format", "pt"}}),
          nlohmann::json{{"step", replicated.step}, {"state", replicated.state}}.dump(2),
          replicated.config.dump(2)};
      const char* names[] = {kBuffersFile, "state.json", "config.json"};
      for (size_t i = 0; i < std::size(names); ++i) {
        file::writeAtomic(tmp + "/" + names[i], contents[i]);
        files[names[i]] = checkpointFileRecord(contents[i]);
      }
      nlohmann::json layout = layout_extra;
      layout["zero"] = {{"world_size", rank_files.size()}, {"stage", zero_stage}, {"rank_files", rank_files}};
      done["value"] = commitCheckpoint(dir, tmp, replicated.step, replicated.identity, files, layout, opts);
    } catch (const Error& e) {
      done["error"] = e.what();
      // Every rank has written (or failed to write) its file by now: none of them can be read
      // without a manifest, so they go at once (a full disk is left as it was before the save).
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  }
  return agree(group, done);
}

NamedTensors checkpointModelState(const CheckpointData& d) {
  if (d.zero.is_null()) return d.model;
  NamedTensors model = ZeroCheckpointReader(d).parameters();
  model.insert(model.end(), d.model.begin(), d.model.end());  // the buffers
  return model;
}

void saveCheckpointModel(const CheckpointData& d, const std::string& path,
                         const std::map<std::string, std::string>& metadata,
                         std::optional<DType> floating_as) {
  auto cast = [&](const Tensor& t) {
    return floating_as && isFloating(t.dtype()) && t.dtype() != *floating_as ? t.to(*floating_as) : t;
  };
  if (d.zero.is_null()) {  // whole tensors, in memory already
    NamedTensors tensors;
    for (const auto& [name, t] : d.model) tensors.emplace_back(name, cast(t));
    saveSafetensors(path, tensors, metadata);
    return;
  }
  const ZeroCheckpointReader reader(d);
  const std::vector<SafetensorsEntry> params = reader.parameterLayout();
  NamedTensors layout;  // shapes and dtypes: the parameters' without memory
  {
    DeferredInit no_memory;
    for (const SafetensorsEntry& e : params) {
      const DType dtype = floating_as && isFloating(e.dtype) ? *floating_as : e.dtype;
      layout.emplace_back(e.name, Tensor::empty(e.shape, dtype));
    }
  }
  for (const auto& [name, t] : d.model) layout.emplace_back(name, cast(t));  // the buffers
  SafetensorsStreamWriter out(path, layout, metadata);
  for (const SafetensorsEntry& e : params) {
    const NamedTensors one = reader.parameters([&](const std::string& n) { return n == e.name; });
    LOCKSTEP_CHECK(one.size() == 1, "checkpoint parameter ", e.name, " read ", one.size(), " times");
    out.write(e.name, cast(one.front().second));
  }
  for (const auto& [name, t] : d.model) out.write(name, cast(t));
  out.commit();
}

std::vector<SafetensorsEntry> ZeroCheckpointReader::parameterLayout() const {
  std::vector<SafetensorsEntry> out;
  for (const Param& p : params_) out.push_back({p.name, p.dtype, p.shape, 0, 0});
  return out;
}

ZeroCheckpointReader::ZeroCheckpointReader(const CheckpointData& d) : path_(d.path) {
  LOCKSTEP_ENFORCE(!d.zero.is_null(), ValueError, "checkpoint '", d.path, "' is not partitioned");
  std::vector<std::string> names;
  try {
    names = d.zero.at("rank_files").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw IoError("checkpoint '" + path_ + "': malformed zero record in its manifest (" + e.what() + ")");
  }
  for (const std::string& n : names) files_.emplace_back(path_ + "/" + n);
  size_t tensors = 0;
  for (const SafetensorsReader& f : files_) tensors += f.entries().size();
  int64_t count = -1;
  for (size_t f = 0; f < files_.size(); ++f) {
    const SafetensorsReader& file = files_[f];
    auto bad = [&](const std::string& what) {
      return IoError("checkpoint partition '" + file.path() + "': " + what);
    };
    const auto& meta = file.metadata();
    auto it = meta.find("format");
    if (it == meta.end() || it->second != kPartitionFormat)
      throw bad(std::string("is not a ZeRO partition file (__metadata__.format is not ") + kPartitionFormat +
                ")");
    try {
      const int64_t n = std::stoll(meta.at("parameters"));
      if (count >= 0 && n != count) throw bad("holds a model of another parameter count than rank 0's");
      count = n;
      // Every parameter has a segment, and every segment a tensor in some file: no more parameters
      // than the files hold tensors (a forged count must not size the table).
      if (n < 0 || n > static_cast<int64_t>(tensors)) throw bad("bad parameter count " + std::to_string(n));
      params_.resize(static_cast<size_t>(n));
      for (const auto& s : json::parse(meta.at("segments"))) {
        const auto p = s.at("param").get<size_t>();
        if (p >= params_.size())
          throw bad("names parameter " + std::to_string(p) + " of " + std::to_string(n));
        Param& param = params_[p];
        const auto name = s.at("name").get<std::string>();
        const auto shape = s.at("shape").get<Shape>();
        int64_t numel = 1;
        for (int64_t d : shape)
          if (d < 0 || __builtin_mul_overflow(numel, d, &numel))
            throw bad("parameter " + std::to_string(p) + " ('" + name + "') has shape " +
                      shapeToString(shape) + ", which no tensor has");
        if (!param.name.empty() && (param.name != name || param.shape != shape))
          throw bad("parameter " + std::to_string(p) + " is '" + name + "', another rank's file says '" +
                    param.name + "'");
        Segment seg{f, s.at("offset").get<int64_t>(), s.at("numel").get<int64_t>(),
                    name + "@" + s.at("offset").dump()};
        const SafetensorsEntry& e = file.entry(seg.tensor);
        if (static_cast<int64_t>((e.end - e.begin) / dtypeSize(e.dtype)) != seg.numel)
          throw bad("tensor '" + seg.tensor + "' does not hold the " + std::to_string(seg.numel) +
                    " elements of its segment");
        param.name = name;
        param.shape = shape;
        param.dtype = e.dtype;
        for (const auto& k : s.at("state")) {
          const auto key = k.get<std::string>();
          file.entry(seg.tensor + "/" + key);  // present, or an IoError naming it
          if (std::find(param.keys.begin(), param.keys.end(), key) == param.keys.end())
            param.keys.push_back(key);
        }
        param.segments.push_back(std::move(seg));
      }
    } catch (const nlohmann::json::exception& e) {
      throw bad(std::string("malformed segment map (") + e.what() + ")");
    } catch (const std::logic_error& e) {  // std::stoll, map::at
      throw bad(std::string("malformed __metadata__ (") + e.what() + ")");
    }
  }
  for (size_t p = 0; p < params_.size(); ++p) {
    Param& param = params_[p];
    std::sort(param.segments.begin(), param.segments.end(),
              [](const Segment& a, const Segment& b) { return a.offset < b.offset; });
    int64_t pos = 0;
    bool tiled = true;  // each segment starts where the one before ended, and the last ends at the end
    for (const Segment& s : param.segments) {
      if (s.offset != pos || s.numel < 0) {
        tiled = false;
        break;
      }
      pos += s.numel;
    }
    if (param.name.empty() || !tiled || pos != shapeNumel(param.shape)) {
      throw IoError("checkpoint '" + path_ + "': the rank files do not hold every element of parameter " +
                    std::to_string(p) + (param.name.empty() ? "" : " ('" + param.name + "')") +
                    " exactly once (elements from " + std::to_string(pos) + " are missing or repeated)");
    }
  }
}

DType ZeroCheckpointReader::dtypeOf(const Param& p, const std::string& key) const {
  for (const Segment& s : p.segments) {
    const std::string tensor = key.empty() ? s.tensor : s.tensor + "/" + key;
    if (files_[s.file].contains(tensor)) return files_[s.file].entry(tensor).dtype;
  }
  return p.dtype;
}

void ZeroCheckpointReader::readRange(const Param& p, const std::string& key, int64_t begin, int64_t count,
                                     char* dst) const {
  const DType dtype = dtypeOf(p, key);
  const size_t elem = dtypeSize(dtype);
  for (const Segment& s : p.segments) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(begin + count, s.offset + s.numel);
    if (lo >= hi) continue;
    char* out = dst + (lo - begin) * elem;
    const std::string tensor = key.empty() ? s.tensor : s.tensor + "/" + key;
    const SafetensorsReader& file = files_[s.file];
    if (!file.contains(tensor)) {
      std::memset(out, 0, (hi - lo) * elem);
      continue;
    }
    LOCKSTEP_ENFORCE(file.entry(tensor).dtype == dtype, IoError, "checkpoint partition '", file.path(),
                     "': tensor '", tensor, "' is ", dtypeName(file.entry(tensor).dtype),
                     ", the other ranks' ", key.empty() ? "values" : key, " of its parameter ",
                     dtypeName(dtype));
    file.readElements(tensor, lo - s.offset, hi - lo, out);
  }
}

Tensor ZeroCheckpointReader::readStep(const Param& p) const {
  Tensor best;
  for (const Segment& s : p.segments) {  // every rank steps alike: the largest is the step
    const std::string tensor = s.tensor + "/step";
    if (!files_[s.file].contains(tensor)) continue;
    Tensor t = files_[s.file].read(tensor);
    if (!best.defined() || t.toVector<double>().at(0) > best.toVector<double>().at(0)) best = t;
  }
  return best;
}

NamedTensors ZeroCheckpointReader::parameters(const std::function<bool(const std::string&)>& wanted) const {
  NamedTensors out;
  for (const Param& p : params_) {
    if (wanted && !wanted(p.name)) continue;
    Tensor t = Tensor::empty(p.shape, p.dtype);
    readRange(p, "", 0, t.numel(), static_cast<char*>(t.dataPtr()));
    out.emplace_back(p.name, std::move(t));
  }
  return out;
}

nn::StateDict ZeroCheckpointReader::optimizerState(const std::function<bool(int64_t)>& wanted) const {
  nn::StateDict out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (wanted && !wanted(static_cast<int64_t>(i))) continue;
    const Param& p = params_[i];
    for (const std::string& key : p.keys) {
      const std::string name = std::to_string(i) + "." + key;
      if (key == "step") {
        if (Tensor t = readStep(p); t.defined()) out.insert(name, t);
        continue;
      }
      Tensor t = Tensor::empty(p.shape, dtypeOf(p, key));
      readRange(p, key, 0, t.numel(), static_cast<char*>(t.dataPtr()));
      out.insert(name, std::move(t));
    }
  }
  return out;
}

nn::StateDict ZeroCheckpointReader::partitionState(const parallel::ZeroOptimizer& zero,
                                                   const nn::Module& model) const {
  const auto& names = zero.parameterNames();
  LOCKSTEP_ENFORCE(names.size() == params_.size(), ValueError, "checkpoint '", path_, "' holds ",
                   params_.size(), " parameters, this model has ", names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    LOCKSTEP_ENFORCE(
        names[i] == model.currentKey(params_[i].name) && zero.parameterShapes()[i] == params_[i].shape,
        ValueError, "checkpoint '", path_, "': parameter ", i, " is '", params_[i].name, "' of shape ",
        shapeToString(params_[i].shape), ", this model's is '", names[i], "' of shape ",
        shapeToString(zero.parameterShapes()[i]));
  }
  nn::StateDict out;
  for (const auto& s : zero.ownedSegments()) {
    const Param& p = params_[s.param];
    for (const std::string& key : p.keys) {
      const std::string name = std::to_string(s.param) + "." + key;
      if (key == "step") {
        if (Tensor t = readStep(p); t.defined()) out.insert(name, t);
        continue;
      }
      Tensor t = Tensor::empty({s.numel}, dtypeOf(p, key));
      readRange(p, key, s.param_offset, s.numel, static_cast<char*>(t.dataPtr()));
      out.insert(name, std::move(t));
    }
  }
  return out;
}

std::string restoreTrainingStateByBucket(const CheckpointData& d, TrainingParts& parts) {
  LOCKSTEP_ENFORCE(parts.zero && parts.model && !parts.model_keys, ValueError,
                   "restoreTrainingStateByBucket: ZeRO stage 3's model and optimizer, every key");
  parallel::ZeroOptimizer& zero = *parts.zero;
  const nn::Module& model = *parts.model;
  // The partitioned parameters by their names (the model's current ones); the rest of the state
  // (buffers, other parameters, optimizer partition, scheduler, data position) as usual.
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < zero.parameterNames().size(); ++i) index.emplace(zero.parameterNames()[i], i);
  TrainingParts rest = parts;
  rest.model_keys = [&](const std::string& key) { return !index.count(key); };
  const std::string note = restoreTrainingState(d, rest);
  std::optional<ZeroCheckpointReader> partitioned;
  std::unordered_map<std::string, std::string> saved_name;  // current name -> the checkpoint's
  std::unordered_map<std::string, const Tensor*> whole;     // a DDP checkpoint's, by current name
  if (!d.zero.is_null()) {
    partitioned.emplace(d);
    for (const SafetensorsEntry& e : partitioned->parameterLayout())
      saved_name[model.currentKey(e.name)] = e.name;
  } else {
    for (const auto& [name, t] : d.model) whole[model.currentKey(name)] = &t;
  }
  zero.forEachParameterBucketWhole([&](const std::vector<size_t>& bucket) {
    std::unordered_map<std::string, Tensor> values;
    if (partitioned) {
      std::set<std::string> wanted;
      for (size_t i : bucket) {
        auto it = saved_name.find(zero.parameterNames()[i]);
        LOCKSTEP_ENFORCE(it != saved_name.end(), ValueError, "checkpoint '", d.path, "' lacks parameter '",
                         zero.parameterNames()[i], "'");
        wanted.insert(it->second);
      }
      for (auto& [name, t] :
           partitioned->parameters([&](const std::string& n) { return wanted.count(n) > 0; }))
        values.emplace(model.currentKey(name), std::move(t));
    }
    autograd::NoGradGuard ng;
    std::unordered_map<size_t, const Tensor*> sources;
    for (size_t i : bucket) {
      const std::string& name = zero.parameterNames()[i];
      const Tensor* src = nullptr;
      if (partitioned) {
        src = &values.at(name);
      } else {
        auto it = whole.find(name);
        LOCKSTEP_ENFORCE(it != whole.end(), ValueError, "checkpoint '", d.path, "' lacks parameter '", name,
                         "'");
        src = it->second;
      }
      Tensor dst = zero.parameters()[i].tensor();
      LOCKSTEP_ENFORCE(src->shape() == dst.shape(), ValueError, "checkpoint '", d.path, "': parameter '",
                       name, "' is ", shapeToString(src->shape()), ", the model's is ",
                       shapeToString(dst.shape()));
      dst.copyFrom(*src);
      sources[i] = src;
    }
    // The partition from the checkpoint's values themselves (f32 master weights stay exact).
    zero.adoptParameters(bucket, [&](size_t i) { return *sources.at(i); });
  });
  return note;
}

}  // namespace lockstep::train
