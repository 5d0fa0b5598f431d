#include "lockstep/comm/gloo/gloo_op_check.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/util/error.h"

namespace lockstep::comm::gloo_detail {

using ::lockstep::detail::concat;

namespace {

constexpr uint8_t kDescSlotPrefix = 0xf0;

std::string rankList(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

std::string describe(uint8_t type, uint64_t seq, uint64_t count, uint8_t dtype, int root) {
  std::string s = concat(opTypeName(static_cast<OpType>(type)), " #", seq, " (count ", count, ", ",
                         dtypeName(static_cast<DType>(dtype)));
  if (root >= 0) s += ", root " + std::to_string(root);
  return s + ")";
}

}  // namespace

std::chrono::milliseconds remaining(const OpContext& ctx) {
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - std::chrono::steady_clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

void exchangeOpDescs(::gloo::Context& context, const OpContext& ctx, const GlooOpDesc& mine) {
  const int n = context.size, r = context.rank;
  std::vector<GlooOpDesc> descs(n);
  descs[r] = mine;
  const uint64_t slot = ::gloo::Slot::build(kDescSlotPrefix, static_cast<uint32_t>(ctx.seq));
  auto send = context.createUnboundBuffer(&descs[r], sizeof(GlooOpDesc));
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> recvs(n);
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    recvs[j] = context.createUnboundBuffer(&descs[j], sizeof(GlooOpDesc));
    recvs[j]->recv(j, slot);
    send->send(j, slot);
  }
  std::vector<int> missing, failed;
  std::string failure;
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    try {
      if (!recvs[j]->waitRecv(missing.empty() ? remaining(ctx) : std::chrono::milliseconds(1))) {
        missing.push_back(j);
      }
    } catch (const std::exception& e) {
      std::string m = e.what();
      if (m.find("Timed out") != std::string::npos) {
        missing.push_back(j);
      } else {
        failed.push_back(j);
        if (failure.empty()) failure = m;
      }
    }
  }
  if (!failed.empty()) {
    throw PeerError(concat(ctx.name, " failed on rank ", r, ": connections to ranks ", rankList(failed),
                           " broke (did they die?); ranks ", rankList(failed),
                           " did not arrive (gloo: ", failure, ")"));
  }
  if (!missing.empty()) {
    throw TimeoutError(concat(ctx.name, " timed out after ", ctx.timeout.count(), " ms on rank ", r,
                              ": ranks ", rankList(missing),
                              " did not arrive (stuck, or they issued fewer collectives)"));
  }
  for (int j = 0; j < n; ++j) {
    if (j != r) send->waitSend(remaining(ctx));
  }
  for (int j = 0; j < n; ++j) {
    if (!(descs[j] == mine)) {
      throw PeerError(concat(
          ctx.name, ": ranks issued different collectives in the same slot: rank ", r, " issued ",
          describe(mine.type, mine.seq, mine.count, mine.dtype, mine.root), " but rank ", j, " issued ",
          describe(descs[j].type, descs[j].seq, descs[j].count, descs[j].dtype, descs[j].root),
          "; every rank must issue the same collectives in the same order"));
    }
  }
}

}  // namespace lockstep::comm::gloo_detail
