#pragma once
// The "auto" backend across hosts: shm inside each host, gloo among one leader per host.
// allreduce/reduce = reduce inside each host (shm), allreduce among host leaders (gloo),
// broadcast inside each host (shm). The other collectives run on a flat gloo group over all
// ranks. createProcessGroup("auto") builds this only when there are several hosts with several
// ranks each; a single host gets ShmProcessGroup, one rank per host gets GlooProcessGroup.
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/gloo/gloo_process_group.h"
#include "lockstep/comm/shm/shm_process_group.h"
#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

struct HierarchicalOptions {
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  ShmOptions shm;
  GlooOptions gloo;
};

/// Which ranks share a host: every rank publishes host_id (empty: $LOCKSTEP_HOST_ID, else
/// gethostname()) and reads all. Returns each rank's host id. Collective.
std::vector<std::string> exchangeHostIds(Store& store, int rank, int size, std::string host_id = "");

/// Thread-safety: see ProcessGroup. send/recv go through the flat gloo group.
class HierarchicalProcessGroup : public ProcessGroup {
 public:
  /// host_ids[r] is rank r's host (from exchangeHostIds). Collective.
  HierarchicalProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                           const std::vector<std::string>& host_ids, const HierarchicalOptions& options = {});
  ~HierarchicalProcessGroup() override;

  std::string backendName() const override { return "auto"; }
  int numHosts() const { return num_hosts_; }
  LOCKSTEP_PROCESS_GROUP_OPS_OVERRIDE

 private:
  // Runs a flat-group op from this group's worker, keeping issue order with allreduce.
  std::shared_ptr<Work> viaFlat(
      OpType type, std::chrono::milliseconds timeout,
      std::function<std::shared_ptr<Work>(ProcessGroup&, std::chrono::milliseconds)> op);
  void hierarchicalReduce(const OpContext& ctx, void* data, size_t count, DType dtype, ReduceOp op, bool all);

  int num_hosts_ = 1;
  std::unique_ptr<ShmProcessGroup> local_;     // ranks of this host
  std::unique_ptr<GlooProcessGroup> leaders_;  // local rank 0 of every host; null elsewhere
  std::unique_ptr<GlooProcessGroup> flat_;     // all ranks
};

}  // namespace lockstep::comm
