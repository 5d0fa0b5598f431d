#include "lockstep/autograd/engine.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "lockstep/kernels/accumulate.h"

namespace lockstep::autograd {

namespace {
struct Later {
  bool operator()(Node* a, Node* b) const { return a->sequenceNr() < b->sequenceNr(); }
};

// For each of n's inputs, the gradient a reader that ran before n left for it, where n may add into
// it in place: the buffer is the only reference to its storage (not a view, not a tensor a node or
// a hook keeps) and n has one edge to that input's node (two edges would add twice into one buffer
// while n computes).
std::vector<Tensor*> heldGradients(const Node& n, std::unordered_map<Node*, Tensor>& buffers) {
  const auto& edges = n.edges();
  std::vector<Tensor*> into(edges.size(), nullptr);
  for (size_t i = 0; i < edges.size(); ++i) {
    Node* next = edges[i].get();
    if (!next || std::count(edges.begin(), edges.end(), edges[i]) != 1) continue;
    auto it = buffers.find(next);
    if (it != buffers.end() && it->second.defined() && it->second.storage().use_count() == 1) {
      into[i] = &it->second;
    }
  }
  return into;
}
}  // namespace

void runBackward(const std::shared_ptr<Node>& root, const Tensor& grad, bool retain_graph) {
  LOCKSTEP_CHECK(root != nullptr);
  // Count, for every reachable node, how many gradients will flow into it.
  std::unordered_map<Node*, int> pending;
  {
    std::vector<Node*> stack{root.get()};
    pending[root.get()] = 0;
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      LOCKSTEP_ENFORCE(!n->released(), ValueError, "backward through ", n->name(),
                       " a second time: its graph was freed by the previous backward(); call backward(grad, "
                       "/*retain_graph=*/true) the first time if you need to differentiate twice");
      for (const auto& e : n->edges()) {
        if (!e) continue;
        auto [it, inserted] = pending.try_emplace(e.get(), 0);
        it->second++;
        if (inserted) stack.push_back(e.get());
      }
    }
  }
  std::unordered_map<Node*, Tensor> buffers;
  buffers[root.get()] = grad;
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  ready.push(root.get());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Tensor g = std::move(buffers[n]);
    buffers.erase(n);
    std::vector<Tensor> grads = n->accumulates() ? n->applyInto(g, heldGradients(*n, buffers)) : n->apply(g);
    g = Tensor();
    auto* acc = dynamic_cast<AccumulateGrad*>(n);
    if (acc) {
      acc->fireHooks();
    } else {
      LOCKSTEP_CHECK(grads.size() == n->edges().size(), n->name(), " returned ", grads.size(),
                     " gradients for ", n->edges().size(), " inputs");
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      Node* next = n->edges()[i].get();
      if (!next) continue;
      if (grads[i].defined()) {
        auto it = buffers.find(next);
        if (it == buffers.end() || !it->second.defined()) {
          buffers[next] = std::move(grads[i]);
        } else if (it->second.storage().use_count() == 1) {
          kernels::addInto(it->second, grads[i]);
        } else {
          Tensor sum = it->second.clone();
          kernels::addInto(sum, grads[i]);
          it->second = std::move(sum);
        }
      }
      if (--pending[next] == 0) {
        if (buffers.count(next) && buffers[next].defined()) {
          ready.push(next);
        } else {
          // No gradient reached it (all contributions were undefined): it runs nothing, but the
          // nodes behind it must still learn they will get nothing from it.
          std::vector<Node*> stack{next};
          while (!stack.empty()) {
            Node* m = stack.back();
            stack.pop_back();
            for (const auto& e : m->edges()) {
              if (e && --pending[e.get()] == 0) {
                if (buffers.count(e.get()) && buffers[e.get()].defined()) {
                  ready.push(e.get());
                } else {
                  stack.push_back(e.get());
                }
              }
            }
          }
        }
      }
    }
    // A leaf's accumulator outlives graphs: it is reused by every backward that reaches the leaf.
    if (!retain_graph && !acc) n->markReleased();
  }
}

}  // namespace lockstep::autograd
