#include "lockstep/launch/hostfile.h"

#include <fstream>
#include <set>
#include <sstream>

#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

int parseSlots(const std::string& v, const std::string& where) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  LOCKSTEP_ENFORCE(used == v.size() && !v.empty() && n >= 1, ValueError, where,
                   ": slots must be a positive integer, got '", v, "'");
  return n;
}

std::string formatSeconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace

std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& name) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string host;
    if (!(words >> host)) continue;
    std::string where = name + ":" + std::to_string(lineno);
    HostSlots h;
    if (auto colon = host.find(':'); colon != std::string::npos) {
      h.slots = parseSlots(host.substr(colon + 1), where);
      host.resize(colon);
    }
    h.host = host;
    for (std::string w; words >> w;) {
      if (w.rfind("slots=", 0) == 0) {
        h.slots = parseSlots(w.substr(6), where);
      } else if (w.rfind("max_slots=", 0) == 0 || w.rfind("max-slots=", 0) == 0) {
        continue;  // Open MPI's cap; lockstep starts exactly `slots`
      } else {
        throw ValueError(where + ": unexpected '" + w + "'; expected 'HOST slots=N'");
      }
    }
    LOCKSTEP_ENFORCE(!h.host.empty(), ValueError, where, ": missing host name");
    LOCKSTEP_ENFORCE(seen.insert(h.host).second, ValueError, where, ": host '", h.host,
                     "' is listed twice; give it one line with the total slots");
    hosts.push_back(h);
  }
  LOCKSTEP_ENFORCE(!hosts.empty(), ValueError, "hostfile ", name,
                   " lists no hosts; expected 'HOST slots=N' lines");
  return hosts;
}

std::vector<HostSlots> readHostfile(const std::string& path) {
  std::ifstream in(path);
  LOCKSTEP_ENFORCE(in.good(), IoError, "cannot read hostfile '", path, "'; check --hostfile");
  std::stringstream ss;
  ss << in.rdbuf();
  return parseHostfile(ss.str(), path);
}

std::string shellQuote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./:,@%") ==
          std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> hostCommands(const std::vector<HostSlots>& hosts, const LaunchOptions& options) {
  LOCKSTEP_CHECK(!hosts.empty());
  std::vector<std::string> out;
  const int n = static_cast<int>(hosts.size());
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> a = {"lockstep",         "run",
                                  "--nnodes",         std::to_string(n),
                                  "--node-rank",      std::to_string(i),
                                  "--nproc-per-node", std::to_string(hosts[static_cast<size_t>(i)].slots),
                                  "--master-addr",    hosts[0].host,
                                  "--master-port",    std::to_string(options.master_port),
                                  "--rdzv-id",        options.run_id};
    if (options.max_restarts != 0)
      a.insert(a.end(), {"--max-restarts", std::to_string(options.max_restarts)});
    if (options.oversubscribe) a.push_back("--oversubscribe");
    if (options.rdzv_timeout_s != LaunchOptions{}.rdzv_timeout_s)
      a.insert(a.end(), {"--rdzv-timeout", formatSeconds(options.rdzv_timeout_s)});
    if (options.monitor_interval_s != LaunchOptions{}.monitor_interval_s)
      a.insert(a.end(), {"--monitor-interval", formatSeconds(options.monitor_interval_s)});
    if (options.grace_period_s != LaunchOptions{}.grace_period_s)
      a.insert(a.end(), {"--grace-period", formatSeconds(options.grace_period_s)});
    if (!options.log_dir.empty()) a.insert(a.end(), {"--log-dir", options.log_dir});
    if (options.redirects.any()) a.insert(a.end(), {"--redirects", formatStreamSelection(options.redirects)});
    if (options.tee.any()) a.insert(a.end(), {"--tee", formatStreamSelection(options.tee)});
    if (options.timeout_s) a.insert(a.end(), {"--timeout", formatSeconds(*options.timeout_s)});
    if (options.heartbeat_timeout_s)
      a.insert(a.end(), {"--heartbeat-timeout", formatSeconds(*options.heartbeat_timeout_s)});
    if (!options.join_token.empty()) a.insert(a.end(), {"--join-token", options.join_token});
    if (options.module) a.push_back("--module");
    if (options.no_python) a.push_back("--no-python");
    a.push_back("--");
    a.push_back(options.program);
    a.insert(a.end(), options.program_args.begin(), options.program_args.end());
    std::string cmd;
    for (const auto& s : a) cmd += (cmd.empty() ? "" : " ") + shellQuote(s);
    out.push_back(cmd);
  }
  return out;
}

}  // namespace lockstep::launch
