#include "lockstep/comm/device_routed_process_group.h"

#include <cstdio>

#include "lockstep/util/error.h"

namespace lockstep::comm {

DeviceRoutedProcessGroup::DeviceRoutedProcessGroup(std::shared_ptr<ProcessGroup> host,
                                                   std::shared_ptr<ProcessGroup> device)
    : ProcessGroup(host->rank(), host->size()), host_(std::move(host)), device_(std::move(device)) {
  LOCKSTEP_CHECK(device_->rank() == rank() && device_->size() == size(), "host group rank ", rank(), "/",
                 size(), ", device group ", device_->rank(), "/", device_->size());
  setTimeout(host_->timeout());
}

DeviceRoutedProcessGroup::DeviceRoutedProcessGroup(std::shared_ptr<ProcessGroup> host,
                                                   DevicePathOptions paths)
    : ProcessGroup(host->rank(), host->size()), host_(std::move(host)), paths_(std::move(paths)) {
  LOCKSTEP_CHECK(paths_.shared_gpus != nullptr, "DevicePathOptions::shared_gpus is not set");
  LOCKSTEP_CHECK(!paths_.identify || (paths_.store && paths_.own_gpus),
                 "DevicePathOptions::identify needs store and own_gpus");
  setTimeout(host_->timeout());
}

DeviceRoutedProcessGroup::~DeviceRoutedProcessGroup() { stopWorker(); }

ProcessGroup* DeviceRoutedProcessGroup::deviceGroup() {
  std::lock_guard lock(device_mutex_);
  return device_.get();
}

ProcessGroup& DeviceRoutedProcessGroup::deviceGroupFor(int device) {
  std::lock_guard lock(device_mutex_);
  if (device_) return *device_;
  LOCKSTEP_ENFORCE(device_error_.empty(), PeerError,
                   "not run: choosing the group for GPU buffers failed earlier: ", device_error_);
  try {
    std::shared_ptr<ProcessGroup> chosen;
    if (!paths_.identify) {
      chosen = paths_.shared_gpus();
    } else {
      // Every rank gets the same list, so every rank chooses alike (else the ops would deadlock).
      const std::vector<DeviceIdentity> ids =
          exchangeDeviceIdentities(*paths_.store, rank(), size(), paths_.identify(device), timeout());
      const DeviceSharing sharing = findSharedDevices(ids);
      if (sharing.shared()) {
        chosen = paths_.shared_gpus();
        if (rank() == 0) {
          const std::string note = hostStagedNote(describeSharing(sharing, ids), chosen->backendName());
          if (paths_.log) {
            paths_.log(note);
          } else {
            std::fprintf(stderr, "lockstep: %s\n", note.c_str());
            std::fflush(stderr);
          }
        }
      } else {
        chosen = paths_.own_gpus();
      }
    }
    LOCKSTEP_CHECK(chosen && chosen->rank() == rank() && chosen->size() == size(), "device group for rank ",
                   rank(), "/", size());
    device_ = std::move(chosen);
  } catch (const std::exception& e) {
    device_error_ = e.what();
    throw;
  }
  return *device_;
}

template <typename Options>
ProcessGroup& DeviceRoutedProcessGroup::route(Options& opts) {
  if (opts.timeout == kGroupTimeout) opts.timeout = timeout();
  return opts.place.onDevice() ? deviceGroupFor(opts.place.device) : *host_;
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::allreduce(void* data, size_t count, DType dtype,
                                                          const AllreduceOptions& opts) {
  AllreduceOptions o = opts;
  return route(o).allreduce(data, count, dtype, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::broadcast(void* data, size_t count, DType dtype,
                                                          const BroadcastOptions& opts) {
  BroadcastOptions o = opts;
  return route(o).broadcast(data, count, dtype, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::reduce(void* data, size_t count, DType dtype,
                                                       const ReduceOptions& opts) {
  ReduceOptions o = opts;
  return route(o).reduce(data, count, dtype, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::allgather(const void* in, void* out, size_t count,
                                                          DType dtype, const AllgatherOptions& opts) {
  AllgatherOptions o = opts;
  return route(o).allgather(in, out, count, dtype, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::allgatherv(const void* in, void* out,
                                                           const std::vector<size_t>& counts, DType dtype,
                                                           const AllgatherOptions& opts) {
  AllgatherOptions o = opts;
  return route(o).allgatherv(in, out, counts, dtype, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::reduceScatter(const void* in, void* out, size_t count,
                                                              DType dtype, const ReduceScatterOptions& opts) {
  ReduceScatterOptions o = opts;
  return route(o).reduceScatter(in, out, count, dtype, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::gather(const void* in, void* out, size_t count, DType dtype,
                                                       const GatherOptions& opts) {
  GatherOptions o = opts;
  return route(o).gather(in, out, count, dtype, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::scatter(const void* in, void* out, size_t count, DType dtype,
                                                        const ScatterOptions& opts) {
  ScatterOptions o = opts;
  return route(o).scatter(in, out, count, dtype, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::alltoall(const void* in, void* out, size_t count, DType dtype,
                                                         const AlltoallOptions& opts) {
  AlltoallOptions o = opts;
  return route(o).alltoall(in, out, count, dtype, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::barrier(const BarrierOptions& opts) {
  BarrierOptions o = opts;
  return route(o).barrier(o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::send(const void* data, size_t count, DType dtype, int dst,
                                                     const SendRecvOptions& opts) {
  SendRecvOptions o = opts;
  return route(o).send(data, count, dtype, dst, o);
}

std::shared_ptr<Work> DeviceRoutedProcessGroup::recv(void* data, size_t count, DType dtype, int src,
                                                     const SendRecvOptions& opts) {
  SendRecvOptions o = opts;
  return route(o).recv(data, count, dtype, src, o);
}

std::shared_ptr<ProcessGroup> DeviceRoutedProcessGroup::newGroup(const std::vector<int>& ranks) {
  std::shared_ptr<ProcessGroup> host = host_->newGroup(ranks);
  if (!paths_.subgroup_gpus) return host;
  // The staging group's host subgroup is made now, by every rank of this group (newGroup is
  // collective over it), not at the subgroup's first op on GPU buffers, which only its members make.
  std::shared_ptr<ProcessGroup> staging_host = host_->newGroup(ranks);
  if (!host) return nullptr;
  DevicePathOptions paths;
  paths.name = paths_.name;
  paths.log = paths_.log;
  paths.subgroup_gpus = paths_.subgroup_gpus;
  std::shared_ptr<ProcessGroup> staged = paths_.subgroup_gpus(std::move(staging_host));
  paths.shared_gpus = [staged] { return staged; };  // no identify: always this one
  return std::make_shared<DeviceRoutedProcessGroup>(std::move(host), std::move(paths));
}

}  // namespace lockstep::comm
