#pragma once
// Process group over Gloo's TCP transport (Debian's libgloo): the multi-host backend. Ranks meet
// through a lockstep Store (gloo's connectFullMesh via GlooStoreAdapter), then exchange data on
// one TCP connection per pair of ranks.
//
// Op checks (gloo_op_check.h): before each collective, ranks exchange a small descriptor so that
// errors name the ranks that did not arrive and mismatched collectives are reported instead of
// hanging. GlooOptions::check_ops = false skips it.
#include <memory>
#include <string>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/store/store.h"

namespace gloo {
class Context;
}

namespace lockstep::comm {

struct GlooOptions {
  /// Address peers use to reach this rank; empty: $LOCKSTEP_GLOO_HOSTNAME, else gethostname().
  std::string hostname;
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;  // default op timeout
  bool check_ops = true;  // exchange op descriptors before each op (see above)
};

/// Thread-safety: see ProcessGroup.
class GlooProcessGroup : public ProcessGroup {
 public:
  /// Collective over all size ranks: meets the others through store (group_arrival.h), then
  /// connects the full mesh, each within options.timeout. TimeoutError naming the ranks that did not
  /// arrive; PeerError when peers cannot be reached.
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, const GlooOptions& options = {});
  ~GlooProcessGroup() override;

  std::string backendName() const override { return "gloo"; }
  LOCKSTEP_PROCESS_GROUP_OPS_OVERRIDE
  std::shared_ptr<ProcessGroup> newGroup(const std::vector<int>& ranks) override;

 private:
  // Runs body with gloo errors turned into lockstep errors naming the op; checks descriptors
  // first when enabled.
  template <typename Body>
  void run(const OpContext& ctx, DType dtype, size_t count, int root, ReduceOp op, Body body);
  void runAllreduce(const OpContext& ctx, void* data, size_t count, DType dtype, ReduceOp op);
  // A send or recv: posted by the queue, waited for in gloo by wait() (GlooP2PWork).
  std::shared_ptr<Work> postP2P(OpType type, void* data, size_t count, DType dtype, int peer,
                                const SendRecvOptions& o);

  std::shared_ptr<Store> store_;
  GlooOptions options_;
  std::shared_ptr<::gloo::Context> context_;
  int groups_created_ = 0;
  std::vector<uint8_t> workspace_;  // reduceScatter's ring (gloo_reduce_scatter.h), reused
};

}  // namespace lockstep::comm
