#include "lockstep/nn/layer_placement.h"

#include "lockstep/autograd/ops/device.h"
#include "lockstep/util/error.h"

namespace lockstep::nn {

PlacedLayers::PlacedLayers(std::shared_ptr<Module> model, std::vector<int64_t> boundaries,
                           std::vector<Device> devices)
    : Module("PlacedLayers"),
      model_(registerModule("model", std::move(model))),
      sequence_(layerSequence(*model_)) {
  const auto n = static_cast<int64_t>(sequence_.size());
  LOCKSTEP_ENFORCE(!devices.empty() && boundaries.size() == devices.size() + 1, ValueError,
                   "PlacedLayers: ", devices.size(), " devices need ", devices.size() + 1,
                   " boundaries, got ", boundaries.size());
  LOCKSTEP_ENFORCE(boundaries.front() == 0 && boundaries.back() == n, ValueError,
                   "PlacedLayers: the boundaries must start at 0 and end at the layer count ", n);
  for (size_t i = 0; i + 1 < boundaries.size(); ++i)
    LOCKSTEP_ENFORCE(boundaries[i] < boundaries[i + 1], ValueError,
                     "PlacedLayers: the boundaries must be strictly increasing (every device some layers)");
  for (const Device& d : devices) checkDeviceAvailable(d);
  for (size_t i = 0; i < devices.size(); ++i)
    for (int64_t l = boundaries[i]; l < boundaries[i + 1]; ++l) layer_devices_.push_back(devices[i]);
  for (const TiedParameter& t : sequence_.tied) {
    for (size_t l : t.layers) {
      LOCKSTEP_ENFORCE(layer_devices_[l] == layer_devices_[t.layers.front()], ValueError,
                       "PlacedLayers: ", t.name, " is shared by layers ", t.layers.front(), " (",
                       deviceName(layer_devices_[t.layers.front()]), ") and ", l, " (",
                       deviceName(layer_devices_[l]),
                       "); one tensor cannot be on two devices: put them on one");
    }
  }
  for (size_t l = 0; l < sequence_.size(); ++l) sequence_.layers[l]->to(layer_devices_[l]);
}

Variable PlacedLayers::forward(const Variable& x) {
  Variable h = x;
  for (size_t l = 0; l < sequence_.size(); ++l) {
    // A layer made for the sequence (an embedding, a head) is no child of the model: it takes the
    // mode this module is in here.
    Module& layer = *sequence_.layers[l];
    if (layer.isTraining() != isTraining()) layer.train(isTraining());
    h = autograd::toDevice(h, layer_devices_[l]);
    h = layer(h);
  }
  return h;
}

}  // namespace lockstep::nn
