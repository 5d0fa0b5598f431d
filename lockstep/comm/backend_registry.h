#pragma once
// The process-group backends by name: the one list that createProcessGroup, the CLI, the
// trainer's config and every error message read (CONVENTIONS.md, one registry per kind of name).
//
//   comm::checkBackendName(config.backend);            // ValueError naming the built list
//   auto pg = comm::findBackend("gloo").create(store, rank, size, timeout);
//
// The registry is one table in backend_registry.cpp, compiled with the backends this build has:
// shm, gloo, nccl (in a build with CUDA), mpi (unless configured with -DLOCKSTEP_WITH_MPI=OFF) and
// auto, the chooser (for host buffers shm on one host, gloo with one rank per host,
// HierarchicalProcessGroup otherwise; where the process sees a GPU, a DeviceRoutedProcessGroup
// that sends ops on GPU buffers to nccl). Names lockstep knows of but did not build (nccl without
// CUDA, mpi without MPI) get an error that says so and how to build them.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

/// Builds rank `rank` of a `size`-rank group. Collective over all ranks. store is null for a
/// backend that does not need one; size <= 0 there means "whatever the backend's world is".
using BackendFactory = std::function<std::shared_ptr<ProcessGroup>(
    std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout)>;

struct Backend {
  std::string name;
  std::string summary;      // one line, for help texts
  bool needs_store = true;  // false: the backend meets its peers itself (mpi, through mpirun)
  BackendFactory create;
  /// Throws ValueError when this host cannot run the backend (nccl without a visible GPU); null
  /// when it always can. Cheap enough for a launcher to call before it starts any rank.
  void (*check_host)() = nullptr;
};

/// The built backends, in the order help texts list them. Thread-safe.
const std::vector<Backend>& builtBackends();
/// Their names: {"shm", "gloo", "mpi", "auto"} in a build with MPI. Thread-safe.
std::vector<std::string> backendNames();
/// The names joined for messages and help texts: "shm, gloo, mpi, auto". Thread-safe.
std::string backendNamesText();
/// The built backend called name. ValueError otherwise, naming name and the built list: for a
/// known backend this build lacks, why and how to get it ("backend nccl is not built into this
/// lockstep (it was built without CUDA: configure with -DLOCKSTEP_CUDA=ON ...); built: ..."); for an unknown
/// name, the nearest known one. Thread-safe.
const Backend& findBackend(const std::string& name);
/// Throws what findBackend throws; returns nothing.
void checkBackendName(const std::string& name);
/// findBackend, then the backend's check_host: what a launcher calls before it starts ranks here.
void checkBackendRunsHere(const std::string& name);

}  // namespace lockstep::comm
