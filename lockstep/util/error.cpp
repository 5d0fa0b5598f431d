#include "lockstep/util/error.h"

namespace lockstep::detail {

void checkFailed(const char* cond, const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << "internal check failed: " << cond << " at " << file << ":" << line;
  if (!msg.empty()) os << ": " << msg;
  throw InternalError(os.str());
}

}  // namespace lockstep::detail
