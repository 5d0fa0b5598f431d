#pragma once
// The `auto` backend on a host with GPUs (c10d's "cpu:gloo,cuda:nccl"): one group whose ops go to
// a host backend or to nccl by where their buffers live (the options' BufferPlace). The two
// inner groups number their ops apart; every rank must route the same ops the same way, which
// holds when ranks keep the same tensors on the same kind of device (as DDP does).
#include <memory>
#include <string>

#include "lockstep/comm/process_group.h"

namespace lockstep::comm {

/// Thread-safety: see ProcessGroup.
class DeviceRoutedProcessGroup : public ProcessGroup {
 public:
  /// host and device are groups over the same ranks (device: nccl).
  DeviceRoutedProcessGroup(std::shared_ptr<ProcessGroup> host, std::shared_ptr<ProcessGroup> device);
  ~DeviceRoutedProcessGroup() override;

  /// "auto": the registered name; the inner groups' names appear in each Work's description.
  std::string backendName() const override { return "auto"; }
  std::shared_ptr<Work> allreduce(void* data, size_t count, DType dtype,
                                  const AllreduceOptions& opts = {}) override;
  std::shared_ptr<Work> broadcast(void* data, size_t count, DType dtype,
                                  const BroadcastOptions& opts = {}) override;
  std::shared_ptr<Work> reduce(void* data, size_t count, DType dtype,
                               const ReduceOptions& opts = {}) override;
  std::shared_ptr<Work> allgather(const void* in, void* out, size_t count, DType dtype,
                                  const AllgatherOptions& opts = {}) override;
  std::shared_ptr<Work> allgatherv(const void* in, void* out, const std::vector<size_t>& counts, DType dtype,
                                   const AllgatherOptions& opts = {}) override;
  std::shared_ptr<Work> reduceScatter(const void* in, void* out, size_t count, DType dtype,
                                      const ReduceScatterOptions& opts = {}) override;
  std::shared_ptr<Work> gather(const void* in, void* out, size_t count, DType dtype,
                               const GatherOptions& opts = {}) override;
  std::shared_ptr<Work> scatter(const void* in, void* out, size_t count, DType dtype,
                                const ScatterOptions& opts = {}) override;
  std::shared_ptr<Work> alltoall(const void* in, void* out, size_t count, DType dtype,
                                 const AlltoallOptions& opts = {}) override;
  /// On the host group unless opts.place names a device.
  std::shared_ptr<Work> barrier(const BarrierOptions& opts = {}) override;
  std::shared_ptr<Work> send(const void* data, size_t count, DType dtype, int dst,
                             const SendRecvOptions& opts = {}) override;
  std::shared_ptr<Work> recv(void* data, size_t count, DType dtype, int src,
                             const SendRecvOptions& opts = {}) override;
  /// A subgroup of the host group (nccl has no subgroups yet): its ops take host buffers only, and
  /// device buffers get the host backend's ValueError. Collective, as ProcessGroup::newGroup.
  std::shared_ptr<ProcessGroup> newGroup(const std::vector<int>& ranks) override;

  ProcessGroup& hostGroup() { return *host_; }
  ProcessGroup& deviceGroup() { return *device_; }

 private:
  // The group for place, with opts' group timeout resolved against this group's.
  template <typename Options>
  ProcessGroup& route(Options& opts);

  std::shared_ptr<ProcessGroup> host_;
  std::shared_ptr<ProcessGroup> device_;
};

}  // namespace lockstep::comm
