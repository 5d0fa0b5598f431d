#include "lockstep/train/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "lockstep/train/checkpoint/safetensors_reader.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/json.h"

namespace lockstep::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kFormat = "lockstep-checkpoint-v2";
constexpr const char* kManifest = "manifest.json";
// Every file a checkpoint must have, besides the manifest; a partitioned one (zero_checkpoint.h)
// has kZeroFiles and the rank files its manifest names instead.
const char* const kFiles[] = {"model.safetensors", "optimizer.safetensors", "state.json", "config.json"};
const char* const kZeroFiles[] = {"model_buffers.safetensors", "state.json", "config.json"};

int64_t stepOf(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return -1;
  std::string rest = name.substr(std::char_traits<char>::length(kPrefix));
  if (rest.empty() || rest.size() > 18 || !std::all_of(rest.begin(), rest.end(), ::isdigit)) return -1;
  return std::stoll(rest);
}

// IoError when a checkpoint's file is not a regular file: a FIFO put in its place would block the
// read forever.
void checkRegularFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw IoError("checkpoint file '" + path + "' is not a regular file");
}

// A checkpoint's file, whole (checkRegularFile first).
std::string readCheckpointFile(const std::string& path) {
  checkRegularFile(path);
  return file::readAll(path);
}

// The manifest of a checkpoint dir, its CRC-32 verified: {"format", "step", "identity", "files"}.
nlohmann::json readManifest(const std::string& path) {
  const std::string mpath = path + "/" + kManifest;
  if (!file::exists(mpath)) {
    throw IoError("checkpoint '" + path + "' has no " + kManifest +
                  " (an incomplete save, or written by a lockstep older than checkpoint format v2)");
  }
  nlohmann::json j;
  try {
    j = json::parse(readCheckpointFile(mpath));
  } catch (const nlohmann::json::exception& e) {
    throw IoError("checkpoint file '" + mpath + "' is not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("manifest") || !j.contains("crc32") || !j["crc32"].is_number_unsigned())
    throw IoError("checkpoint file '" + mpath + "' is not a checkpoint manifest");
  const nlohmann::json& m = j["manifest"];
  if (file::crc32(m.dump()) != j["crc32"].get<uint64_t>())
    throw IoError("checkpoint file '" + mpath + "' fails its CRC-32 check (corrupted or tampered with)");
  if (!m.is_object() || m.value("format", "") != kFormat) {
    throw IoError("checkpoint file '" + mpath + "' has format " +
                  (m.is_object() ? m.value("format", "?") : "?") + ", this lockstep reads " + kFormat);
  }
  return m;
}

// Checks the file's size and CRC-32 against the manifest's record; returns its bytes when `keep`,
// else streams it (a rank file of a partitioned checkpoint: nothing of it is held).
std::string verifiedRead(const std::string& dir, const std::string& name, const nlohmann::json& files,
                         bool keep = true) {
  const std::string path = dir + "/" + name;
  if (!files.contains(name)) {
    throw IoError("checkpoint '" + dir + "': its manifest does not list " + name);
  }
  const nlohmann::json& record = files.at(name);
  if (!file::exists(path)) throw IoError("checkpoint file '" + path + "' is missing");
  checkRegularFile(path);
  std::string bytes;
  uint64_t size = 0;
  uint32_t crc = 0;
  if (keep) {
    bytes = file::readAll(path);
    size = bytes.size();
    crc = file::crc32(bytes);
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError("cannot read checkpoint file '" + path + "'");
    std::string chunk(size_t{4} << 20, '\0');
    while (in) {
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      const auto got = static_cast<size_t>(in.gcount());
      crc = file::crc32(std::string_view(chunk.data(), got), crc);
      size += got;
    }
    if (in.bad()) throw IoError("cannot read checkpoint file '" + path + "'");
  }
  const uint64_t want_size = record.at("bytes").get<uint64_t>();
  if (size != want_size) {
    throw IoError("checkpoint file '" + path + "' has " + std::to_string(size) + " bytes but " +
                  std::to_string(want_size) + " were written (truncated or replaced)");
  }
  if (crc != record.at("crc32").get<uint32_t>()) {
    throw IoError("checkpoint file '" + path + "' fails its CRC-32 check (corrupted or tampered with)");
  }
  return bytes;
}

// The rank files a partitioned checkpoint's manifest names (its "zero" record), checked for shape.
std::vector<std::string> rankFiles(const nlohmann::json& m, const std::string& mpath) {
  const nlohmann::json& z = m.at("zero");
  const auto names = z.at("rank_files").get<std::vector<std::string>>();
  if (names.empty() || static_cast<int64_t>(names.size()) != z.at("world_size").get<int64_t>()) {
    throw IoError("checkpoint file '" + mpath + "' names " + std::to_string(names.size()) +
                  " rank files for a world size of " + z.at("world_size").dump());
  }
  for (const std::string& n : names) {  // the checkpoint's own files, never one elsewhere
    const fs::path p(n);
    bool inside = p.is_relative() && !n.empty();
    for (const fs::path& part : p) inside = inside && part != "..";
    if (!inside)
      throw IoError("checkpoint file '" + mpath + "' names rank file '" + n +
                    "', which is not inside the checkpoint (corrupt or tampered with)");
  }
  return names;
}

// Reads, verifies and (when want_bytes) returns every file the manifest lists; the files `streamed`
// names are verified without being held (their bytes are left empty).
// A partitioned checkpoint's bytes are kZeroFiles' and *zero is set to its manifest's "zero".
CheckpointInfo verify(const std::string& path, std::vector<std::string>* bytes, nlohmann::json* zero_record,
                      const std::function<bool(const std::string&)>& streamed = {}) {
  const nlohmann::json m = readManifest(path);
  const std::string mpath = path + "/" + kManifest;
  try {
    CheckpointInfo info;
    info.path = path;
    info.step = m.at("step").get<int64_t>();
    info.identity = runIdentityFromJson(m.at("identity"), mpath);
    const bool zero = m.contains("zero");
    for (const char* name : zero ? std::vector<const char*>(std::begin(kZeroFiles), std::end(kZeroFiles))
                                 : std::vector<const char*>(std::begin(kFiles), std::end(kFiles))) {
      std::string b = verifiedRead(path, name, m.at("files"), !(streamed && streamed(name)));
      if (bytes) bytes->push_back(std::move(b));
    }
    if (zero) {
      for (const std::string& name : rankFiles(m, mpath)) verifiedRead(path, name, m.at("files"), false);
      if (zero_record) *zero_record = m.at("zero");
    }
    return info;
  } catch (const nlohmann::json::exception& e) {
    throw IoError("checkpoint file '" + mpath + "' is missing fields (" + e.what() + ")");
  }
}

nlohmann::json parseJsonFile(const std::string& bytes, const std::string& path) {
  try {
    return json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    throw IoError("checkpoint file '" + path + "' is not valid JSON (" + e.what() + ")");
  }
}

constexpr const char* kDeletingPrefix = ".deleting-";

// Removes a checkpoint as atomically as it was written: it is renamed out of sight first
// (.deleting-ckpt-<step>, which no listing reads), so that a signal or crash in the middle of the
// removal leaves a hidden leftover (removeUnfinishedCheckpoints) rather than a ckpt-<step> missing
// some of its files.
void removeCheckpoint(const std::string& dir, const std::string& path) {
  const std::string hidden = dir + "/" + kDeletingPrefix + fs::path(path).filename().string();
  std::error_code ec;
  fs::remove_all(hidden, ec);  // a leftover of an earlier removal that was cut short
  fs::rename(path, hidden, ec);
  if (ec) return;            // gone already (another process pruned it), or not ours to move
  file::syncDirectory(dir);  // the rename lasts before the files go
  fs::remove_all(hidden, ec);
}

// Removes this run's checkpoints beyond the newest keep_last (never `keep`, the one just written).
void prune(const std::string& dir, const std::string& run_id, int keep_last, const std::string& keep) {
  int kept = 0;
  for (const std::string& path : listCheckpoints(dir)) {
    std::string owner;
    try {
      owner = readCheckpointManifest(path).identity.run_id;
    } catch (const IoError&) {
      continue;  // unreadable: not provably ours, so not ours to delete
    }
    if (owner != run_id) continue;
    ++kept;
    if (path == keep || kept <= keep_last) continue;
    removeCheckpoint(dir, path);
  }
}

}  // namespace

nlohmann::json checkpointFileRecord(std::string_view bytes) {
  return {{"bytes", bytes.size()}, {"crc32", file::crc32(bytes)}};
}

std::string makeCheckpointTempDir(const std::string& dir, int64_t step, const std::string& tag) {
  file::makeDirs(dir);
  const std::string stem = "." + std::string(kPrefix) + std::to_string(step) + ".tmp-";
  // An earlier attempt at this step's checkpoint that never committed (its process died mid-save)
  // left its temp directory: nothing can read it, so it goes.
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(stem, 0) == 0) stale.push_back(entry.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
  const std::string tmp = dir + "/" + stem + tag;
  fs::remove_all(tmp, ec);
  file::makeDirs(tmp);
  return tmp;
}

std::string commitCheckpoint(const std::string& dir, const std::string& tmp, int64_t step,
                             const RunIdentity& identity, const nlohmann::json& files,
                             const nlohmann::json& layout, const CheckpointOptions& opts) {
  const std::string name = kPrefix + std::to_string(step);
  const std::string final_path = dir + "/" + name;
  nlohmann::json manifest = {
      {"format", kFormat}, {"step", step}, {"identity", toJson(identity)}, {"files", files}};
  for (const auto& [k, v] : layout.items()) manifest[k] = v;
  file::writeAtomic(tmp + "/" + kManifest,
                    nlohmann::json{{"manifest", manifest}, {"crc32", file::crc32(manifest.dump())}}.dump(2));
  // An older save of the same step is moved aside first, so that a crash leaves one whole copy.
  std::error_code ec;
  const std::string old = dir + "/." + name + ".old-" + std::to_string(::getpid());
  if (fs::exists(final_path, ec)) fs::rename(final_path, old, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) throw IoError("cannot move checkpoint into place at '" + final_path + "': " + ec.message());
  fs::remove_all(old, ec);
  file::writeAtomic(dir + "/latest", name + "\n");
  if (opts.keep_last > 0) prune(dir, identity.run_id, opts.keep_last, final_path);
  return final_path;
}

std::string saveCheckpoint(const std::string& dir, const CheckpointData& data,
                           const CheckpointOptions& opts) {
  const std::string tmp = makeCheckpointTempDir(dir, data.step, std::to_string(::getpid()));
  try {
    // The tensors stream from their storage into the files (no file-sized copy in memory).
    auto record = [](const WrittenFile& w) { return nlohmann::json{{"bytes", w.bytes}, {"crc32", w.crc32}}; };
    nlohmann::json files = nlohmann::json::object();
    files[kFiles[0]] = record(saveSafetensors(tmp + "/" + kFiles[0], data.model, {{"format", "pt"}}));
    files[kFiles[1]] = record(saveSafetensors(tmp + "/" + kFiles[1], data.optimizer));
    const std::string texts[] = {nlohmann::json{{"step", data.step}, {"state", data.state}}.dump(2),
                                 data.config.dump(2)};
    for (size_t i = 0; i < std::size(texts); ++i) {
      file::writeAtomic(tmp + "/" + kFiles[2 + i], texts[i]);
      files[kFiles[2 + i]] = checkpointFileRecord(texts[i]);
    }
    return commitCheckpoint(dir, tmp, data.step, data.identity, files, nlohmann::json::object(), opts);
  } catch (...) {
    // A save that failed (a full disk) gives its space back now, not at the next start's cleanup.
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

CheckpointInfo verifyCheckpoint(const std::string& path) { return verify(path, nullptr, nullptr); }

CheckpointInfo readCheckpointManifest(const std::string& path) {
  const nlohmann::json m = readManifest(path);
  try {
    return {path, m.at("step").get<int64_t>(), runIdentityFromJson(m.at("identity"), path + "/" + kManifest)};
  } catch (const nlohmann::json::exception& e) {
    throw IoError("checkpoint file '" + path + "/" + kManifest + "' is missing fields (" + e.what() + ")");
  }
}

namespace {

// The tensors of a verified safetensors file that `keep` names, read one at a time.
NamedTensors readSelected(const std::string& path, const std::function<bool(const std::string&)>& keep) {
  const SafetensorsReader in(path);
  NamedTensors out;
  for (const SafetensorsEntry& e : in.entries())
    if (keep(e.name)) out.emplace_back(e.name, in.read(e.name));
  return out;
}

}  // namespace

CheckpointData loadCheckpoint(const std::string& path, const CheckpointSelection& keep) {
  std::vector<std::string> bytes;
  nlohmann::json zero;
  // A selection reads the whole-tensor files twice (a streamed check, then its tensors) and never
  // holds more than it keeps.
  const auto streamed = [&](const std::string& name) {
    return (name == kFiles[0] && keep.model) || (name == kFiles[1] && keep.optimizer);
  };
  const CheckpointInfo info = verify(path, &bytes, &zero, streamed);
  CheckpointData out;
  out.step = info.step;
  out.identity = info.identity;
  out.path = path;
  if (!zero.is_null()) {  // partitioned: buffers, state, config
    out.zero = zero;
    out.model = decodeSafetensors(bytes[0], path + "/" + kZeroFiles[0]).tensors;
    bytes.insert(bytes.begin() + 1, std::string());  // no optimizer.safetensors
  } else {
    const std::string model = path + "/" + kFiles[0], optimizer = path + "/" + kFiles[1];
    out.model = keep.model ? readSelected(model, keep.model) : decodeSafetensors(bytes[0], model).tensors;
    out.optimizer = keep.optimizer ? readSelected(optimizer, keep.optimizer)
                                   : decodeSafetensors(bytes[1], optimizer).tensors;
  }
  const nlohmann::json state = parseJsonFile(bytes[2], path + "/state.json");
  if (!state.is_object() || !state.contains("state") || state.value("step", int64_t{-1}) != info.step) {
    throw IoError("checkpoint file '" + path + "/state.json' does not hold the state of step " +
                  std::to_string(info.step));
  }
  out.state = state["state"];
  out.config = parseJsonFile(bytes[3], path + "/config.json");
  return out;
}

std::vector<std::string> listCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code kind;  // an entry that cannot be looked at (a symlink loop) is no checkpoint
    if (!entry.is_directory(kind)) continue;
    int64_t step = stepOf(entry.path().filename().string());
    if (step >= 0) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::vector<std::string> removeUnfinishedCheckpoints(const std::string& dir) {
  std::vector<fs::path> leftovers;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool deleting = name.rfind(kDeletingPrefix, 0) == 0;
    // .ckpt-<step>.tmp-<tag>: a save that never committed. .ckpt-<step>.old-<pid>: an older save
    // of a step moved aside for a new one; only garbage once the new one is in place.
    const std::string hidden_prefix = "." + std::string(kPrefix);
    const bool unfinished = name.rfind(hidden_prefix, 0) == 0 && name.find(".tmp-") != std::string::npos;
    const auto old_at = name.find(".old-");
    std::error_code kind;  // (an entry that cannot be looked at, a symlink loop, is left alone)
    const bool replaced = name.rfind(hidden_prefix, 0) == 0 && old_at != std::string::npos &&
                          fs::is_directory(dir + "/" + name.substr(1, old_at - 1), kind);
    const bool directory = entry.is_directory(kind);
    // .latest.tmp.<random>: file::writeAtomic's temp file of a `latest` never renamed into place.
    const bool latest_tmp = name.rfind(".latest.tmp.", 0) == 0 && entry.is_regular_file(kind);
    if ((directory && (deleting || unfinished || replaced)) || latest_tmp) leftovers.push_back(entry.path());
  }
  std::vector<std::string> removed;
  for (const fs::path& p : leftovers) {
    fs::remove_all(p, ec);
    if (!ec) removed.push_back(p.string());
  }
  return removed;
}

std::optional<std::string> latestCheckpoint(const std::string& dir) {
  std::string name;
  try {
    name = readCheckpointFile(dir + "/latest");
  } catch (const IoError&) {
    return std::nullopt;
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  std::error_code ec;
  if (stepOf(name) < 0 || !fs::is_directory(dir + "/" + name, ec)) return std::nullopt;
  return dir + "/" + name;
}

}  // namespace lockstep::train
