#include "lockstep/parallel/memory_report.h"

namespace lockstep::parallel {

int64_t optimizerStateBytes(const optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const optim::ParamGroup& g : optimizer.paramGroups()) {
    const int64_t per_element = optimizer.stateElementsPerParameterElement(g);
    for (const auto& p : g.params)
      bytes += per_element * p.numel() *
               static_cast<int64_t>(dtypeSize(optimizer.stateDType(g.options, p.dtype())));
  }
  return bytes;
}

ModelStateBytes replicatedModelStateBytes(const optim::Optimizer& optimizer) {
  ModelStateBytes m;
  for (const optim::ParamGroup& g : optimizer.paramGroups()) {
    for (const auto& p : g.params) m.parameters += static_cast<int64_t>(p.tensor().nbytes());
  }
  m.gradients = m.parameters;
  m.optimizer_states = optimizerStateBytes(optimizer);
  return m;
}

std::vector<ModelStateBytes> gatherModelStateBytes(comm::ProcessGroup* group, const ModelStateBytes& mine) {
  if (!group) return {mine};
  const int n = group->size();
  int64_t in[4] = {mine.parameters, mine.gradients, mine.optimizer_states, mine.host_offload};
  std::vector<int64_t> out(static_cast<size_t>(n) * 4);
  group->allgather(in, out.data(), 4, DType::i64)->wait();
  std::vector<ModelStateBytes> all(n);
  for (int r = 0; r < n; ++r) all[r] = {out[r * 4], out[r * 4 + 1], out[r * 4 + 2], out[r * 4 + 3]};
  return all;
}

}  // namespace lockstep::parallel
