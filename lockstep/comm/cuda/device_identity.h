#pragma once
// The identity of a GPU as comm/device_sharing.h compares it: CUDA's UUID of the device, which
// names the physical GPU (or MIG instance) whatever ordinal CUDA_VISIBLE_DEVICES gives it.
#include "lockstep/comm/device_sharing.h"

namespace lockstep::comm::cuda {

/// cuda:device's identity in this process. InternalError naming the device when CUDA cannot
/// describe it; ValueError when it does not exist. Thread-safe.
DeviceIdentity identifyDevice(int device);

}  // namespace lockstep::comm::cuda
