// libFuzzer target: the hostfile parser (launch/hostfile.h) on arbitrary text; an accepted file
// gives hosts with at least one slot, and the per-host commands can be built from it.
#include <cstdint>
#include <string>

#include "lockstep/launch/hostfile.h"
#include "lockstep/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  try {
    const auto hosts =
        launch::parseHostfile(std::string(reinterpret_cast<const char*>(data), size), "fuzz-hostfile");
    for (const auto& h : hosts) LOCKSTEP_CHECK(!h.host.empty() && h.slots >= 1, h.host, " ", h.slots);
    launch::LaunchOptions o;
    o.run_id = "fuzz";
    o.program = "prog";
    LOCKSTEP_CHECK(launch::hostCommands(hosts, o).size() == hosts.size());
  } catch (const Error&) {
  }
  return 0;
}
