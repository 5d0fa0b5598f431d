#include "lockstep/parallel/model_sync.h"

#include <sstream>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/parallel/tensor_comm.h"

namespace lockstep::parallel {

void verifySameModelEverywhere(const nn::Module& module, comm::ProcessGroup& group, const std::string& who) {
  std::ostringstream sig;
  for (auto& [name, p] : module.namedParameters()) {
    sig << name << " " << dtypeName(p.dtype()) << " " << shapeToString(p.shape()) << "\n";
  }
  for (auto& [name, b] : module.namedBuffers()) {
    sig << name << " (buffer) " << dtypeName(b.dtype()) << " " << shapeToString(b.shape()) << "\n";
  }
  std::vector<std::string> all = allgatherBytes(group, sig.str());
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  std::vector<std::string> ref = lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    std::vector<std::string> other = lines(all[r]);
    size_t i = 0;
    while (i < ref.size() && i < other.size() && ref[i] == other[i]) ++i;
    std::string a = i < ref.size() ? ref[i] : "(no more parameters)";
    std::string b = i < other.size() ? other[i] : "(no more parameters)";
    std::ostringstream differing;
    for (size_t k = 1; k < all.size(); ++k) {
      if (all[k] != all[0]) differing << (differing.tellp() > 0 ? ", " : "") << k;
    }
    throw ValueError(who + ": the model differs across ranks. Parameter #" + std::to_string(i) +
                     ": rank 0 has '" + a + "', rank " + std::to_string(r) + " has '" + b +
                     "'. Ranks whose model differs from rank 0's: " + differing.str() +
                     ". Build the same model on every rank.");
  }
}

void broadcastModel(nn::Module& module, comm::ProcessGroup& group, int root) {
  autograd::NoGradGuard ng;
  for (auto& [name, p] : module.namedParameters()) broadcast(group, p.tensor(), root);
  broadcastBuffers(module, group, root);
}

void broadcastBuffers(nn::Module& module, comm::ProcessGroup& group, int root) {
  autograd::NoGradGuard ng;
  for (auto& [name, b] : module.namedBuffers()) broadcast(group, b, root);
}

}  // namespace lockstep::parallel
