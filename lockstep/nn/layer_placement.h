#pragma once
// One-process model parallelism: a model's layers (its layer sequence) cut into consecutive runs,
// each run's parameters placed on its own device, and the activations moved from device to device
// as the forward goes (the seed's `self.seq1.to('cuda:0')`, `x.to('cuda:1')`, PyTorch's model
// parallel tutorial). No pipelining: one device computes at a time. A parameter two layers share
// (GPT's tied embedding) must have both on one device. On a machine without GPUs every device is
// the CPU, which the tests use to check the placement and that training is the model's own.
#include <cstdint>
#include <memory>
#include <vector>

#include "lockstep/nn/layer_sequence.h"
#include "lockstep/nn/module.h"
#include "lockstep/tensor/device.h"

namespace lockstep::nn {

class PlacedLayers : public Module {
 public:
  /// Moves layers [boundaries[i], boundaries[i + 1]) of `model`'s layer sequence to devices[i]
  /// (boundaries: devices.size() + 1 increasing values from 0 to the layer count; the pipeline's
  /// partitionLayers gives such cuts). The model is registered as this module's child "model", so
  /// parameters() and the state dict are the model's. ValueError for boundaries that do not fit,
  /// or a tied parameter whose layers would be on two devices; a device that is not there is
  /// checkDeviceAvailable's error.
  PlacedLayers(std::shared_ptr<Module> model, std::vector<int64_t> boundaries, std::vector<Device> devices);

  /// The input moved to the first device, each run of layers on its device, the output on the
  /// last device (where the loss and its target go).
  Variable forward(const Variable& x) override;
  /// Where layer i's parameters are.
  const Device& deviceOf(size_t layer) const { return layer_devices_.at(layer); }
  size_t numLayers() const { return sequence_.size(); }

 private:
  std::shared_ptr<Module> model_;
  LayerSequence sequence_;
  std::vector<Device> layer_devices_;
};

}  // namespace lockstep::nn
