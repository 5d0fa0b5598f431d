#include "lockstep/comm/backend_registry.h"

#include <algorithm>

#include "lockstep/comm/device_routed_process_group.h"
#include "lockstep/comm/gloo/gloo_process_group.h"
#include "lockstep/comm/group_arrival.h"
#include "lockstep/comm/hierarchical_process_group.h"
#include "lockstep/comm/shm/shm_process_group.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"
#include "lockstep/util/suggest.h"
#if LOCKSTEP_WITH_MPI
#include "lockstep/comm/mpi/mpi_process_group.h"
#endif
#if LOCKSTEP_WITH_CUDA
#include "lockstep/comm/cuda/device_identity.h"
#include "lockstep/comm/cuda/host_staged_process_group.h"
#include "lockstep/comm/nccl/nccl_process_group.h"
#include "lockstep/comm/nccl/nccl_util.h"
#endif

namespace lockstep::comm {

using ::lockstep::detail::concat;

namespace {

// Names lockstep knows of that this build lacks, and why.
struct Unbuilt {
  const char* name;
  const char* why;
};
const std::vector<Unbuilt>& unbuiltBackends() {
  static const std::vector<Unbuilt> list = {
#if !LOCKSTEP_WITH_MPI
    {"mpi",
     "it was configured with -DLOCKSTEP_WITH_MPI=OFF; reconfigure with -DLOCKSTEP_WITH_MPI=ON where an "
     "MPI such as Open MPI is installed"},
#endif
#if !LOCKSTEP_WITH_CUDA
    {"nccl",
     "it was built without CUDA: configure with -DLOCKSTEP_CUDA=ON (or AUTO) on a machine with the CUDA "
     "toolkit and NCCL 2 (nvcc, libnccl)"},
#endif
  };
  return list;
}

void requireStore(const std::shared_ptr<Store>& store, const char* backend) {
  LOCKSTEP_ENFORCE(store != nullptr, ValueError, "backend ", backend,
                   " needs a store to meet its peers; pass one (or use initProcessGroup, which makes one)");
}

std::shared_ptr<ProcessGroup> createShm(std::shared_ptr<Store> store, int rank, int size,
                                        std::chrono::milliseconds timeout) {
  requireStore(store, "shm");
  ShmOptions o;
  o.timeout = timeout;
  o.block_bytes =
      static_cast<size_t>(env::getInt("LOCKSTEP_SHM_BLOCK_BYTES", static_cast<int64_t>(o.block_bytes)));
  o.num_slots = static_cast<size_t>(env::getInt("LOCKSTEP_SHM_SLOTS", static_cast<int64_t>(o.num_slots)));
  o.spin = std::chrono::microseconds(env::getInt("LOCKSTEP_SHM_SPIN_US", o.spin.count()));
  o.stream_min_bytes = static_cast<size_t>(
      env::getInt("LOCKSTEP_SHM_STREAM_MIN_BYTES", static_cast<int64_t>(o.stream_min_bytes)));
  o.p2p_slots = static_cast<size_t>(env::getInt("LOCKSTEP_SHM_P2P_SLOTS", static_cast<int64_t>(o.p2p_slots)));
  o.p2p_slot_bytes =
      static_cast<size_t>(env::getInt("LOCKSTEP_SHM_P2P_SLOT_BYTES", static_cast<int64_t>(o.p2p_slot_bytes)));
  return std::make_shared<ShmProcessGroup>(std::make_shared<PrefixStore>("shm", store), rank, size, o);
}

std::shared_ptr<ProcessGroup> createGloo(std::shared_ptr<Store> store, int rank, int size,
                                         std::chrono::milliseconds timeout) {
  requireStore(store, "gloo");
  GlooOptions o;
  o.timeout = timeout;
  o.check_ops = env::getBool("LOCKSTEP_GLOO_CHECK_OPS", o.check_ops);
  return std::make_shared<GlooProcessGroup>(std::make_shared<PrefixStore>("gloo", store), rank, size, o);
}

#if LOCKSTEP_WITH_MPI
std::shared_ptr<ProcessGroup> createMpi(std::shared_ptr<Store>, int, int size,
                                        std::chrono::milliseconds timeout) {
  MpiOptions o;
  o.timeout = timeout;
  auto pg = MpiProcessGroup::createWorld(o);
  LOCKSTEP_ENFORCE(size <= 0 || pg->size() == size, ValueError, "mpi backend: MPI_COMM_WORLD has ",
                   pg->size(), " ranks but the world size is ", size, "; start the job with mpirun -np ",
                   size);
  return pg;
}
#endif

#if LOCKSTEP_WITH_CUDA
std::shared_ptr<ProcessGroup> createNccl(std::shared_ptr<Store> store, int rank, int size,
                                         std::chrono::milliseconds timeout) {
  requireStore(store, "nccl");
  NcclOptions o;
  o.timeout = timeout;
  return std::make_shared<NcclProcessGroup>(std::make_shared<PrefixStore>("nccl", store), rank, size, o);
}
#endif

// One host: shm. One rank per host: gloo. Otherwise shm inside hosts and gloo across them.
std::shared_ptr<ProcessGroup> createHostAuto(std::shared_ptr<Store> store, int rank, int size,
                                             std::chrono::milliseconds timeout) {
  requireStore(store, "auto");
  auto auto_store = std::make_shared<PrefixStore>("auto", store);
  awaitGroupArrival(*auto_store, "arrived", "auto", rank, size, timeout);
  auto ids = exchangeHostIds(*auto_store, rank, size);
  std::vector<std::string> hosts = ids;
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  if (hosts.size() == 1) return createShm(store, rank, size, timeout);
  if (hosts.size() == ids.size()) return createGloo(store, rank, size, timeout);
  HierarchicalOptions h;
  h.timeout = timeout;
  return std::make_shared<HierarchicalProcessGroup>(auto_store, rank, size, ids, h);
}

// GPU buffers through the host: a host group of their own (made by make_host under the store
// prefix "staged", at the first op on GPU buffers), whose ops the staging group issues in its own
// order. Null without CUDA.
std::function<std::shared_ptr<ProcessGroup>()> hostStaged(BackendFactory make_host,
                                                          std::shared_ptr<Store> store, int rank, int size,
                                                          std::chrono::milliseconds timeout) {
#if LOCKSTEP_WITH_CUDA
  return [=] {
    return std::make_shared<cuda::HostStagedProcessGroup>(
        make_host(std::make_shared<PrefixStore>("staged", store), rank, size, timeout));
  };
#else
  (void)make_host, (void)store, (void)rank, (void)size, (void)timeout;
  return nullptr;
#endif
}

// A subgroup's GPU buffers through the host, on a host subgroup of their own. Null without CUDA.
std::function<std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup>)> stagedSubgroups() {
#if LOCKSTEP_WITH_CUDA
  return [](std::shared_ptr<ProcessGroup> host) {
    return std::make_shared<cuda::HostStagedProcessGroup>(std::move(host));
  };
#else
  return nullptr;
#endif
}

bool seesGpu() {
#if LOCKSTEP_WITH_CUDA
  return nccl::visibleDeviceCount() > 0;
#else
  return false;
#endif
}

// shm or gloo asked for by name: where this process sees a GPU, GPU buffers go through the host
// (as PyTorch's gloo takes CUDA tensors) instead of being refused.
std::shared_ptr<ProcessGroup> createHostBackend(BackendFactory make_host, std::shared_ptr<Store> store,
                                                int rank, int size, std::chrono::milliseconds timeout) {
  auto host = make_host(store, rank, size, timeout);
  if (!seesGpu()) return host;
  DevicePathOptions paths;
  paths.name = host->backendName();
  paths.shared_gpus = hostStaged(make_host, store, rank, size, timeout);
  paths.subgroup_gpus = stagedSubgroups();
  return std::make_shared<DeviceRoutedProcessGroup>(std::move(host), std::move(paths));
}

std::shared_ptr<ProcessGroup> createShmBackend(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout) {
  return createHostBackend(&createShm, std::move(store), rank, size, timeout);
}

std::shared_ptr<ProcessGroup> createGlooBackend(std::shared_ptr<Store> store, int rank, int size,
                                                std::chrono::milliseconds timeout) {
  return createHostBackend(&createGloo, std::move(store), rank, size, timeout);
}

// The host choice above for host buffers; where this process sees a GPU, a group for GPU buffers
// chosen at their first op (c10d's "cpu:gloo,cuda:nccl", device_routed_process_group.h): nccl where
// every rank has a GPU of its own, the host choice through pinned memory where ranks share one.
// The registry decides, not the caller, so a config's `backend: auto` trains on either device.
std::shared_ptr<ProcessGroup> createAuto(std::shared_ptr<Store> store, int rank, int size,
                                         std::chrono::milliseconds timeout) {
  auto host = createHostAuto(store, rank, size, timeout);
  if (!seesGpu()) return host;
#if LOCKSTEP_WITH_CUDA
  DevicePathOptions paths;
  paths.store = std::make_shared<PrefixStore>("auto_gpu", store);
  paths.identify = &cuda::identifyDevice;
  paths.own_gpus = [=] { return createNccl(store, rank, size, timeout); };
  paths.shared_gpus = hostStaged(&createHostAuto, store, rank, size, timeout);
  paths.subgroup_gpus = stagedSubgroups();
  return std::make_shared<DeviceRoutedProcessGroup>(std::move(host), std::move(paths));
#else
  return host;
#endif
}

}  // namespace

const std::vector<Backend>& builtBackends() {
  static const std::vector<Backend> list = {
    {"shm", "POSIX shared memory; ranks on one host (GPU buffers through the host)", true, &createShmBackend},
    {"gloo", "Gloo over TCP; ranks on any hosts (GPU buffers through the host)", true, &createGlooBackend},
#if LOCKSTEP_WITH_CUDA
    {"nccl", "NCCL; GPU buffers, one rank per GPU", true, &createNccl, &nccl::requireVisibleDevice},
#endif
#if LOCKSTEP_WITH_MPI
    {"mpi", "MPI; jobs started by mpirun or srun", false, &createMpi},
#endif
    {"auto",
     "shm on one host, gloo with one rank per host, shm inside hosts + gloo across them otherwise; nccl "
     "for GPU buffers where each rank has a GPU of its own, else the host backend through pinned memory",
     true, &createAuto},
  };
  return list;
}

std::vector<std::string> backendNames() {
  std::vector<std::string> names;
  for (const auto& b : builtBackends()) names.push_back(b.name);
  return names;
}

std::string backendNamesText() {
  std::string text;
  for (const auto& b : builtBackends()) text += (text.empty() ? "" : ", ") + b.name;
  return text;
}

const Backend& findBackend(const std::string& name) {
  for (const auto& b : builtBackends()) {
    if (b.name == name) return b;
  }
  for (const auto& u : unbuiltBackends()) {
    if (name == u.name) {
      throw ValueError(concat("backend ", name, " is not built into this lockstep (", u.why,
                              "); built: ", backendNamesText()));
    }
  }
  std::vector<std::string> known = backendNames();
  for (const auto& u : unbuiltBackends()) known.push_back(u.name);
  const std::string near = nearestKey(name, known);
  throw ValueError(concat("unknown backend '", name, "'", near.empty() ? "" : " (did you mean " + near + "?)",
                          "; built: ", backendNamesText()));
}

void checkBackendName(const std::string& name) { findBackend(name); }

void checkBackendRunsHere(const std::string& name) {
  const Backend& b = findBackend(name);
  if (b.check_host != nullptr) b.check_host();
}

}  // namespace lockstep::comm
