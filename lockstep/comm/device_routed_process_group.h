#pragma once
// The `auto` backend on a host with GPUs (c10d's "cpu:gloo,cuda:nccl"): one group whose ops go to
// a host backend or to a group for GPU buffers by where their buffers live (the options'
// BufferPlace). The inner groups number their ops apart; every rank must route the same ops the
// same way, which holds when ranks keep the same tensors on the same kind of device (as DDP does).
//
// The group for GPU buffers is chosen at the first op on GPU buffers (collective then, as every
// op is; NCCL makes its communicator there too, where the device first shows): the ranks exchange
// their GPUs' identities through the store (comm/device_sharing.h), and every rank computes the
// same choice from the same list: nccl where each rank has a GPU of its own, the host backend
// through pinned host memory (HostStagedProcessGroup) where any two ranks share one, said once
// by rank 0 ("ranks 0 and 1 share cuda:0: GPU collectives go through the host (shm), ...").
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "lockstep/comm/device_sharing.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

/// How a DeviceRoutedProcessGroup picks its group for GPU buffers at the first op on them.
struct DevicePathOptions {
  /// Where the ranks exchange their GPUs' identities (keys "gpu/<rank>"); a prefix of its own.
  std::shared_ptr<Store> store;
  /// This process's identity of cuda:N (comm/cuda/device_identity.h). Null: no exchange, always
  /// shared_gpus (shm or gloo asked for by name move GPU buffers through the host).
  std::function<DeviceIdentity(int device)> identify;
  /// The group for GPU buffers where every rank has a GPU of its own (nccl). Collective.
  std::function<std::shared_ptr<ProcessGroup>()> own_gpus;
  /// The group for GPU buffers where ranks share GPUs (through the host). Collective.
  std::function<std::shared_ptr<ProcessGroup>()> shared_gpus;
  /// Where rank 0 says that ranks share GPUs (once per group); null: stderr, "lockstep: " first.
  std::function<void(const std::string&)> log;
  /// What backendName() says: "auto", or "shm" / "gloo" where this wraps a backend asked for by name.
  std::string name = "auto";
  /// The group for a subgroup's GPU buffers, made of a host subgroup that newGroup makes for it
  /// alone (HostStagedProcessGroup: through pinned host memory). Null: a subgroup takes host buffers
  /// only.
  std::function<std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup> host)> subgroup_gpus;
};

/// Thread-safety: see ProcessGroup.
class DeviceRoutedProcessGroup : public ProcessGroup {
 public:
  /// host and device are groups over the same ranks (device: nccl), device fixed from the start.
  DeviceRoutedProcessGroup(std::shared_ptr<ProcessGroup> host, std::shared_ptr<ProcessGroup> device);
  /// The group for GPU buffers chosen at the first op on them, as paths says. Not collective.
  DeviceRoutedProcessGroup(std::shared_ptr<ProcessGroup> host, DevicePathOptions paths);
  ~DeviceRoutedProcessGroup() override;

  /// "auto" (DevicePathOptions::name): the registered name; the inner groups' names appear in
  /// each Work's description.
  std::string backendName() const override { return paths_.name; }
  /// The ops, on the host group unless opts.place names a device.
  LOCKSTEP_PROCESS_GROUP_OPS_OVERRIDE
  /// A subgroup: host buffers on a subgroup of the host group, GPU buffers through the host on a
  /// second one (DevicePathOptions::subgroup_gpus; nccl has no subgroups yet, so even ranks with a
  /// GPU each stage them). Without subgroup_gpus the host subgroup alone, whose ops refuse GPU
  /// buffers with the host backend's ValueError. Collective, as ProcessGroup::newGroup.
  std::shared_ptr<ProcessGroup> newGroup(const std::vector<int>& ranks) override;

  ProcessGroup& hostGroup() { return *host_; }
  /// The group GPU buffers go to; nullptr until the first op on GPU buffers chose it.
  ProcessGroup* deviceGroup();

 private:
  // The group for place, with opts' group timeout resolved against this group's.
  template <typename Options>
  ProcessGroup& route(Options& opts);
  // The group for GPU buffers, chosen at the first call (collective then) on cuda:device.
  ProcessGroup& deviceGroupFor(int device);

  std::shared_ptr<ProcessGroup> host_;
  DevicePathOptions paths_;
  std::mutex device_mutex_;
  std::shared_ptr<ProcessGroup> device_;
  std::string device_error_;  // why choosing the device group failed; later device ops fail with it
};

}  // namespace lockstep::comm
