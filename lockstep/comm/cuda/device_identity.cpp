#include "lockstep/comm/cuda/device_identity.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>

#include "lockstep/comm/nccl/nccl_util.h"
#include "lockstep/util/error.h"

namespace lockstep::comm::cuda {

using ::lockstep::detail::concat;

DeviceIdentity identifyDevice(int device) {
  const int devices = nccl::visibleDeviceCount();
  LOCKSTEP_ENFORCE(device >= 0 && device < devices, ValueError, "cuda:", device,
                   " does not exist; this process sees ", devices, " CUDA device(s)");
  cudaDeviceProp prop{};
  nccl::checkCuda(cudaGetDeviceProperties(&prop, device),
                  concat("cudaGetDeviceProperties(cuda:", device, ")"));
  bool known = false;
  for (int i = 0; i < 16; ++i) known = known || prop.uuid.bytes[i] != 0;
  if (!known) {
    // No UUID reported: the PCI location is unique on this host (the host name tells hosts apart).
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    return {concat("PCI-", host, "-", prop.pciDomainID, ":", prop.pciBusID, ":", prop.pciDeviceID), device};
  }
  // nvidia-smi's spelling: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
  std::string uuid = "GPU-";
  for (int i = 0; i < 16; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
    uuid += hex;
    if (i == 3 || i == 5 || i == 7 || i == 9) uuid += '-';
  }
  return {uuid, device};
}

}  // namespace lockstep::comm::cuda
