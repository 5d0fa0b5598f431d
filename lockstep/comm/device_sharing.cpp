#include "lockstep/comm/device_sharing.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "lockstep/util/error.h"

namespace lockstep::comm {

using ::lockstep::detail::concat;

std::string formatDeviceIdentity(const DeviceIdentity& id) { return concat(id.ordinal, " ", id.uuid); }

DeviceIdentity parseDeviceIdentity(const std::string& text) {
  DeviceIdentity id;
  const auto space = text.find(' ');
  const char* end = text.data() + (space == std::string::npos ? text.size() : space);
  auto [p, ec] = std::from_chars(text.data(), end, id.ordinal);
  LOCKSTEP_ENFORCE(space != std::string::npos && ec == std::errc() && p == end && id.ordinal >= 0, ValueError,
                   "a rank's GPU identity in the store reads '", text,
                   "', not '<ordinal> <uuid>'; is another kind of group using the same store prefix?");
  id.uuid = text.substr(space + 1);
  return id;
}

std::vector<DeviceIdentity> exchangeDeviceIdentities(Store& store, int rank, int size,
                                                     const DeviceIdentity& mine,
                                                     std::chrono::milliseconds timeout) {
  store.setString("gpu/" + std::to_string(rank), formatDeviceIdentity(mine));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("gpu/" + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<DeviceIdentity> ids;
  for (const auto& key : keys) ids.push_back(parseDeviceIdentity(store.getString(key)));
  return ids;
}

DeviceSharing findSharedDevices(const std::vector<DeviceIdentity>& ids) {
  std::map<std::string, std::vector<int>> by_gpu;
  for (size_t r = 0; r < ids.size(); ++r) {
    if (!ids[r].uuid.empty()) by_gpu[ids[r].uuid].push_back(static_cast<int>(r));
  }
  DeviceSharing s;
  for (auto& [uuid, ranks] : by_gpu) {
    if (ranks.size() > 1) s.groups.push_back(std::move(ranks));  // ranks ascend: pushed in rank order
  }
  std::sort(s.groups.begin(), s.groups.end(),
            [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return s;
}

namespace {

// "0 and 1", "0, 1 and 2".
std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

}  // namespace

std::string describeSharing(const DeviceSharing& sharing, const std::vector<DeviceIdentity>& ids) {
  std::string text;
  for (const auto& ranks : sharing.groups) {
    const int ordinal = ids.at(static_cast<size_t>(ranks.front())).ordinal;
    const bool same_ordinal = std::all_of(
        ranks.begin(), ranks.end(), [&](int r) { return ids.at(static_cast<size_t>(r)).ordinal == ordinal; });
    if (!text.empty()) text += "; ";
    text += concat("ranks ", rankList(ranks), " share ");
    if (same_ordinal) {
      text += concat("cuda:", ordinal);
    } else {
      text += "one GPU (";
      for (size_t i = 0; i < ranks.size(); ++i) {
        text += concat(i > 0 ? ", " : "", "cuda:", ids.at(static_cast<size_t>(ranks[i])).ordinal, " on rank ",
                       ranks[i]);
      }
      text += ")";
    }
  }
  return text;
}

std::string hostStagedNote(const std::string& sharing_text, const std::string& host_backend) {
  return concat(sharing_text, ": GPU collectives go through the host (", host_backend,
                "), not NCCL, which runs one rank per GPU");
}

std::string ncclSharedGpuError(const std::string& sharing_text) {
  return concat("backend nccl: ", sharing_text,
                ", but NCCL runs one rank per GPU (two ranks on one device are ncclInvalidUsage); use "
                "backend auto (or gloo, shm), which moves GPU buffers through the host where ranks share a "
                "GPU, or start no more ranks per machine than it has GPUs");
}

int localRankDevice(int local_rank, int device_count) {
  LOCKSTEP_CHECK(device_count > 0, "device_count ", device_count);
  return local_rank < 0 ? 0 : local_rank % device_count;
}

std::vector<DeviceIdentity> localRankDevices(int local_ranks, int device_count) {
  std::vector<DeviceIdentity> ids;
  for (int r = 0; r < local_ranks; ++r) {
    const int device = localRankDevice(r, device_count);
    ids.push_back({concat("cuda:", device), device});
  }
  return ids;
}

}  // namespace lockstep::comm
