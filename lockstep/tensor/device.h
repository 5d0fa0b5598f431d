#pragma once
// Where a tensor's bytes live: the host ("cpu") or one GPU ("cuda:N"), as torch.device spells them.
#include <cstdint>
#include <string>
#include <string_view>

namespace lockstep {

enum class DeviceType : int8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  /// The GPU's ordinal for cuda (0 when "cuda" names none); always 0 for cpu.
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool isCpu() const { return type == DeviceType::cpu; }
  bool isCuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
};

/// "cpu", "cuda:0".
std::string deviceName(const Device& d);

/// Parses "cpu", "cuda" (= cuda:0) and "cuda:N". ValueError naming the text and the accepted forms
/// otherwise. Says nothing about whether the device exists (see checkDeviceAvailable).
Device parseDevice(std::string_view text);

/// Whether this build has CUDA support (CMake LOCKSTEP_CUDA found the toolkit).
bool builtWithCuda();
/// GPUs the CUDA driver reports here; 0 without CUDA support, a driver or a GPU.
int cudaDeviceCount();
/// Throws NotSupportedError when d cannot hold tensors here, naming d and why (built without CUDA,
/// no GPU or driver, an ordinal past the count) and what to do.
void checkDeviceAvailable(const Device& d);

}  // namespace lockstep
