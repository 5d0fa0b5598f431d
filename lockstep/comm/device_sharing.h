#pragma once
// Which GPU each rank uses, and whether ranks share one. NCCL runs one rank per GPU (two ranks on
// one device are ncclInvalidUsage), so where ranks share a GPU their GPU buffers go through the
// host backend instead (HostStagedProcessGroup, as PyTorch's gloo moves CUDA tensors). Every rank
// must decide alike or the collectives deadlock: each rank says which physical GPU it has (its
// UUID, unique across hosts), the ranks exchange that through the store, and each computes the
// decision from the same list with the pure functions below.
//
//   auto ids = exchangeDeviceIdentities(store, rank, size, identifyDevice(device));  // collective
//   DeviceSharing s = findSharedDevices(ids);
//   if (s.shared()) ...   // describeSharing(s, ids): "ranks 0 and 1 share cuda:0"
#include <chrono>
#include <string>
#include <vector>

#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

/// One rank's GPU as CUDA describes it.
struct DeviceIdentity {
  /// The physical GPU: "GPU-8c3e..." (or "MIG-..."), the same in every process that uses it and
  /// different for every other GPU, whatever CUDA_VISIBLE_DEVICES numbers it as.
  std::string uuid;
  /// cuda:N as this rank sees it (for messages only: ordinals differ between processes whose
  /// CUDA_VISIBLE_DEVICES differ).
  int ordinal = -1;
  bool operator==(const DeviceIdentity&) const = default;
};

/// "3 GPU-8c3e...": for the store. parseDeviceIdentity is its inverse; ValueError naming the
/// text when it is not one. Pure.
std::string formatDeviceIdentity(const DeviceIdentity& id);
DeviceIdentity parseDeviceIdentity(const std::string& text);

/// Every rank's identity in rank order, through store keys "gpu/<rank>". Collective: each of the
/// size ranks calls it once per store prefix; waits up to timeout for the others (the store's
/// TimeoutError names the keys of the ranks that did not come).
std::vector<DeviceIdentity> exchangeDeviceIdentities(Store& store, int rank, int size,
                                                     const DeviceIdentity& mine,
                                                     std::chrono::milliseconds timeout);

/// The ranks that share a GPU.
struct DeviceSharing {
  /// Each entry: the ranks (ascending, two or more) on one physical GPU; entries in the order
  /// of their first rank. Empty when every rank has a GPU of its own.
  std::vector<std::vector<int>> groups;
  bool shared() const { return !groups.empty(); }
};

/// ids[r] is rank r's GPU. Ranks with equal uuids share; an empty uuid (unknown) shares with
/// nobody. Pure.
DeviceSharing findSharedDevices(const std::vector<DeviceIdentity>& ids);

/// "ranks 0 and 1 share cuda:0", "ranks 0, 1 and 2 share cuda:0; ranks 3 and 4 share cuda:1",
/// "ranks 0 and 1 share one GPU (cuda:0 on rank 0, cuda:1 on rank 1)" where their ordinals
/// differ. Empty when nothing is shared. Pure.
std::string describeSharing(const DeviceSharing& sharing, const std::vector<DeviceIdentity>& ids);

/// The line a job logs once when its GPU collectives go through the host backend host_backend
/// because ranks share GPUs: "ranks 0 and 1 share cuda:0: GPU collectives go through the host
/// (shm), not NCCL". Pure.
std::string hostStagedNote(const std::string& sharing_text, const std::string& host_backend);

/// The ValueError text for backend nccl asked for where ranks share GPUs: the cause and the fix.
/// Pure.
std::string ncclSharedGpuError(const std::string& sharing_text);

/// The GPU of `device: cuda` for a local rank: cuda:(local_rank % device_count), so each rank has
/// a GPU of its own (torchrun's cuda:LOCAL_RANK) while there are enough, and ranks share GPUs
/// round robin where there are more local ranks than GPUs. device_count must be positive. Pure.
int localRankDevice(int local_rank, int device_count);

/// The GPUs of local ranks 0 .. local_ranks - 1 of one machine under localRankDevice, identified
/// by ordinal (uuid "cuda:N"): what a launcher can tell before it starts them. Pure.
std::vector<DeviceIdentity> localRankDevices(int local_ranks, int device_count);

}  // namespace lockstep::comm
