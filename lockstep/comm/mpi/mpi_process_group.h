#pragma once
// Process group over MPI (Open MPI) for jobs started by mpirun or srun. The group is
// MPI_COMM_WORLD (or a communicator split from it by newGroup); MPI does its own rendezvous, so
// no Store is needed.
//
// MPI_Init_thread(MPI_THREAD_SERIALIZED) runs once per process, on first use; MPI_Finalize at
// exit. Ops run as non-blocking MPI calls polled until the op's deadline, so a stuck peer gives
// a TimeoutError; a dead peer normally makes mpirun end the whole job (MPI's own policy).
// Before each collective ranks allgather a small op descriptor, so different collectives in
// the same slot give an error naming both.
#include <mpi.h>

#include <memory>

#include "lockstep/comm/process_group.h"

namespace lockstep::comm {

struct MpiOptions {
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
};

/// Thread-safety: see ProcessGroup.
class MpiProcessGroup : public ProcessGroup {
 public:
  /// The world group. Collective over MPI_COMM_WORLD. NotSupportedError-free: errors from MPI
  /// become PeerError naming the call.
  static std::shared_ptr<MpiProcessGroup> createWorld(const MpiOptions& options = {});

  MpiProcessGroup(MPI_Comm comm, const MpiOptions& options);  // takes ownership unless WORLD
  ~MpiProcessGroup() override;

  std::string backendName() const override { return "mpi"; }
  LOCKSTEP_PROCESS_GROUP_OPS_OVERRIDE
  std::shared_ptr<ProcessGroup> newGroup(const std::vector<int>& ranks) override;

 private:
  // Checks descriptors, then runs start() (which posts one non-blocking MPI call) and polls the
  // request until ctx.deadline.
  template <typename Start>
  void run(const OpContext& ctx, DType dtype, size_t count, int root, ReduceOp op, Start start);
  void waitRequest(const OpContext& ctx, MPI_Request* req, const char* call);

  MPI_Comm comm_;
  MpiOptions options_;
};

}  // namespace lockstep::comm
