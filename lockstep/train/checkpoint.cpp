#include "lockstep/train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "lockstep/util/file.h"

namespace lockstep::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "ckpt-";

nlohmann::json fileRecord(const std::string& bytes) {
  return {{"bytes", bytes.size()}, {"crc32", file::crc32(bytes)}};
}

std::string verifiedRead(const std::string& dir, const std::string& name, const nlohmann::json& record) {
  std::string path = dir + "/" + name;
  std::string bytes = file::readAll(path);
  uint64_t want_size = record.at("bytes").get<uint64_t>();
  if (bytes.size() != want_size) {
    throw IoError("checkpoint file '" + path + "' has " + std::to_string(bytes.size()) + " bytes but " +
                  std::to_string(want_size) + " were written (truncated or replaced)");
  }
  uint32_t want_crc = record.at("crc32").get<uint32_t>();
  if (file::crc32(bytes) != want_crc) {
    throw IoError("checkpoint file '" + path + "' fails its CRC-32 check (corrupted or tampered with)");
  }
  return bytes;
}

int64_t stepOf(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return -1;
  std::string rest = name.substr(std::char_traits<char>::length(kPrefix));
  if (rest.empty() || !std::all_of(rest.begin(), rest.end(), ::isdigit)) return -1;
  return std::stoll(rest);
}

}  // namespace

std::string saveCheckpoint(const std::string& dir, const CheckpointData& data,
                           const CheckpointOptions& opts) {
  file::makeDirs(dir);
  std::string name = kPrefix + std::to_string(data.step);
  std::string final_path = dir + "/" + name;
  std::string tmp = dir + "/." + name + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  file::makeDirs(tmp);
  std::string model = encodeSafetensors(data.model, {{"format", "pt"}});
  std::string optim = encodeSafetensors(data.optimizer);
  nlohmann::json state = {
      {"format", "lockstep-checkpoint-v1"},
      {"step", data.step},
      {"files", {{"model.safetensors", fileRecord(model)}, {"optimizer.safetensors", fileRecord(optim)}}},
      {"state", data.state}};
  file::writeAtomic(tmp + "/model.safetensors", model);
  file::writeAtomic(tmp + "/optimizer.safetensors", optim);
  file::writeAtomic(tmp + "/state.json", state.dump(2));
  std::error_code ec;
  fs::remove_all(final_path, ec);  // an older save of the same step
  fs::rename(tmp, final_path, ec);
  if (ec) throw IoError("cannot move checkpoint into place at '" + final_path + "': " + ec.message());
  file::writeAtomic(dir + "/latest", name + "\n");
  if (opts.keep_last > 0) {
    auto all = listCheckpoints(dir);
    for (size_t i = static_cast<size_t>(opts.keep_last); i < all.size(); ++i) fs::remove_all(all[i], ec);
  }
  return final_path;
}

CheckpointData loadCheckpoint(const std::string& path) {
  std::string state_path = path + "/state.json";
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(file::readAll(state_path));
  } catch (const nlohmann::json::exception& e) {
    throw IoError("checkpoint file '" + state_path + "' is not valid JSON (" + e.what() + ")");
  }
  try {
    if (state.at("format") != "lockstep-checkpoint-v1") {
      throw IoError("checkpoint file '" + state_path + "' has unknown format " + state.at("format").dump());
    }
    CheckpointData out;
    out.step = state.at("step").get<int64_t>();
    const auto& files = state.at("files");
    out.model = decodeSafetensors(verifiedRead(path, "model.safetensors", files.at("model.safetensors")),
                                  path + "/model.safetensors")
                    .tensors;
    out.optimizer =
        decodeSafetensors(verifiedRead(path, "optimizer.safetensors", files.at("optimizer.safetensors")),
                          path + "/optimizer.safetensors")
            .tensors;
    out.state = state.at("state");
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw IoError("checkpoint file '" + state_path + "' is missing fields (" + e.what() + ")");
  }
}

std::vector<std::string> listCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_directory()) continue;
    int64_t step = stepOf(entry.path().filename().string());
    if (step >= 0) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::optional<CheckpointData> loadLatestCheckpoint(const std::string& dir, std::string* loaded_path) {
  for (const std::string& path : listCheckpoints(dir)) {
    try {
      CheckpointData d = loadCheckpoint(path);
      if (loaded_path) *loaded_path = path;
      return d;
    } catch (const IoError& e) {
      std::fprintf(stderr, "lockstep: warning: skipping checkpoint %s: %s\n", path.c_str(), e.what());
    }
  }
  return std::nullopt;
}

}  // namespace lockstep::train
