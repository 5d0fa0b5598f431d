#include "lockstep/launch/launch_options.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::launch;

namespace {

LaunchOptions parse(std::vector<std::string> args, int cores = 8) { return parseLaunchArgs(args, cores); }

std::string errorOf(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const ValueError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(LaunchOptions, defaults_follow_torchrun) {
  auto o = parse({"train"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_FALSE(o.node_rank);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_EQ(o.run_id, "none");
  EXPECT_EQ(o.program, "train");
  EXPECT_TRUE(o.program_args.empty());
}

TEST(LaunchOptions, dash_underscore_and_equals_spellings) {
  auto o = parse({"--nproc_per_node=4", "--nnodes", "2", "--node_rank=1", "--master_addr", "10.0.0.1",
                  "--master-port=1234", "--max_restarts", "3", "--rdzv_id", "job7", "--monitor_interval",
                  "0.5", "--rdzv-timeout", "12", "prog"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank.value(), 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.run_id, "job7");
  EXPECT_DOUBLE_EQ(o.monitor_interval_s, 0.5);
  EXPECT_DOUBLE_EQ(o.rdzv_timeout_s, 12);
}

TEST(LaunchOptions, program_arguments_pass_untouched) {
  auto o = parse({"--nproc-per-node", "2", "prog", "--nproc-per-node", "9", "--", "-x"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.program, "prog");
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"--nproc-per-node", "9", "--", "-x"}));
  auto d = parse({"--max-restarts", "1", "--", "--weird-program-name", "a"});
  EXPECT_EQ(d.program, "--weird-program-name");
  EXPECT_EQ(d.program_args, (std::vector<std::string>{"a"}));
}

TEST(LaunchOptions, nproc_auto_is_the_core_count) {
  EXPECT_EQ(parse({"--nproc-per-node", "auto", "p"}, 6).nproc_per_node, 6);
  EXPECT_NE(errorOf({"--nproc-per-node", "gpu", "p"}).find("GPU"), std::string::npos);
  EXPECT_NE(errorOf({"--nproc-per-node", "0", "p"}).find("--nproc-per-node"), std::string::npos);
}

TEST(LaunchOptions, standalone_picks_a_free_port_and_random_id) {
  auto o = parse({"--standalone", "p"});
  EXPECT_EQ(o.master_port, 0);
  EXPECT_EQ(o.run_id, "");  // the agent draws one
  EXPECT_TRUE(o.standalone);
}

TEST(LaunchOptions, rdzv_endpoint_sets_master) {
  auto o = parse({"--rdzv-endpoint", "host7:4000", "--rdzv-backend", "c10d", "--nnodes", "3", "p"});
  EXPECT_EQ(o.master_addr, "host7");
  EXPECT_EQ(o.master_port, 4000);
  EXPECT_EQ(parseEndpoint("--rdzv-endpoint", "[::1]:99").first, "::1");
  EXPECT_EQ(parseEndpoint("--rdzv-endpoint", "h").second, 29400);  // torchrun's c10d default
  // A bare IPv6 address and an empty port are refused, not misread as host ':' port 1 / 29400.
  EXPECT_THROW(parseEndpoint("--rdzv-endpoint", "::1"), ValueError);
  EXPECT_THROW(parseEndpoint("--rdzv-endpoint", "127.0.0.1:"), ValueError);
  EXPECT_THROW(parseEndpoint("--rdzv-endpoint", "[::1]:"), ValueError);
  EXPECT_EQ(parseEndpoint("--rdzv-endpoint", "[::1]").second, 29400);
}

TEST(LaunchOptions, unknown_and_malformed_flags_name_the_flag) {
  EXPECT_NE(errorOf({"--nprocs", "2", "p"}).find("unknown option '--nprocs'"), std::string::npos);
  EXPECT_NE(errorOf({"--max-restarts", "x", "p"}).find("--max-restarts"), std::string::npos);
  EXPECT_NE(errorOf({"--master-port", "70000", "p"}).find("--master-port"), std::string::npos);
  EXPECT_NE(errorOf({"--nnodes"}).find("needs a value"), std::string::npos);
  EXPECT_NE(errorOf({"--standalone=1", "p"}).find("takes no value"), std::string::npos);
  EXPECT_NE(errorOf({"--nnodes", "4:1", "p"}).find("larger than the maximum"), std::string::npos);
  EXPECT_NE(errorOf({}).find("missing PROGRAM"), std::string::npos);
}

TEST(LaunchOptions, conflicting_flags_are_errors) {
  EXPECT_NE(errorOf({"--standalone", "--rdzv-endpoint", "h:1", "p"}).find("conflict"), std::string::npos);
  EXPECT_NE(errorOf({"--rdzv-endpoint", "h:1", "--master-addr", "x", "p"}).find("conflict"),
            std::string::npos);
  EXPECT_NE(errorOf({"--standalone", "--nnodes", "2", "p"}).find("--standalone"), std::string::npos);
  EXPECT_NE(errorOf({"--nnodes", "2", "--node-rank", "2", "p"}).find("--node-rank"), std::string::npos);
  EXPECT_NE(errorOf({"--hostfile", "h", "--nnodes", "2", "p"}).find("conflict"), std::string::npos);
}

TEST(LaunchOptions, redirects_and_tee_masks) {
  auto o = parse({"--redirects", "3", "-t", "0:1,2:2", "p"});
  EXPECT_EQ(o.redirects.forLocalRank(5), 3);
  EXPECT_EQ(o.tee.forLocalRank(0), kStdout);
  EXPECT_EQ(o.tee.forLocalRank(1), 0);
  EXPECT_EQ(o.tee.forLocalRank(2), kStderr);
  EXPECT_NE(errorOf({"--redirects", "4", "p"}).find("--redirects"), std::string::npos);
  EXPECT_NE(errorOf({"--tee", "0:1,x", "p"}).find("--tee"), std::string::npos);
}

TEST(LaunchOptions, usage_lists_every_flag) {
  std::string u = launchUsage();
  for (const char* f :
       {"--nproc-per-node",   "--nnodes",           "--node-rank",  "--master-addr", "--master-port",
        "--standalone",       "--rdzv-endpoint",    "--rdzv-id",    "--run-id",      "--rdzv-timeout",
        "--max-restarts",     "--monitor-interval", "--log-dir",    "--redirects",   "--tee",
        "--hostfile",         "--timeout",          "--join-token", "--module",      "--no-python",
        "--heartbeat-timeout"}) {
    EXPECT_NE(u.find(f), std::string::npos) << f;
  }
}

TEST(LaunchOptions, timeout_and_join_token) {
  auto o = parse({"--timeout", "20", "--join-token=0123456789abcdef", "train"});
  EXPECT_EQ(o.timeout_s, 20.0);
  EXPECT_EQ(o.join_token, "0123456789abcdef");
  EXPECT_FALSE(parse({"train"}).timeout_s.has_value());
  EXPECT_NE(errorOf({"--timeout", "0", "train"}).find("option --timeout='0' is not a timeout in seconds"),
            std::string::npos);
  EXPECT_NE(errorOf({"--timeout", "inf", "train"}).find("--timeout"), std::string::npos);
  EXPECT_EQ(parse({"--heartbeat-timeout", "12", "train"}).heartbeat_timeout_s, 12.0);
  EXPECT_FALSE(parse({"train"}).heartbeat_timeout_s.has_value());
  EXPECT_NE(errorOf({"--heartbeat-timeout", "0", "train"}).find("option --heartbeat-timeout='0'"),
            std::string::npos);
  EXPECT_NE(errorOf({"--join-token", "short", "train"}).find("at least 16 characters"), std::string::npos);
}

TEST(LaunchOptions, equals_forms_read_as_torchrun_reads_them) {
  // `--flag=` (an unset variable after the '=') is an empty value, not the next argument.
  EXPECT_NE(errorOf({"--log-dir=", "p", "q"}).find("option --log-dir needs a directory"), std::string::npos);
  EXPECT_NE(errorOf({"--master_addr=", "p"}).find("option --master-addr needs a host"), std::string::npos);
  // A switch takes no value in any spelling.
  EXPECT_NE(errorOf({"--standalone=true", "p"}).find("option --standalone takes no value"),
            std::string::npos);
  EXPECT_NE(errorOf({"--no_python=1", "p"}).find("option --no-python takes no value"), std::string::npos);
  // After PROGRAM such arguments are the program's.
  EXPECT_EQ(parse({"p", "--log-dir=", "--standalone=1"}).program_args,
            (std::vector<std::string>{"--log-dir=", "--standalone=1"}));
}

TEST(LaunchOptions, help_and_repeated_flags) {
  EXPECT_TRUE(parse({"-h"}).help);
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_EQ(parse({"--nnodes", "2", "--nnodes", "3", "p"}).nnodes, 3);    // the last one counts
  EXPECT_EQ(launchUsage().find("--nproc_per_node "), std::string::npos);  // twins are not listed
}

// torchrun's forms: a .py script runs under the interpreter (-u: unbuffered, as torchrun), -m runs a
// module, --no-python runs the script itself; any other program is executed as it is.
TEST(LaunchOptions, python_scripts_and_modules_run_under_the_interpreter_as_torchrun) {
  ::unsetenv("LOCKSTEP_PYTHON");
  using Cmd = std::vector<std::string>;
  EXPECT_EQ(workerCommand(parse({"train.py", "--lr", "0.1"})),
            (Cmd{"python3", "-u", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(workerCommand(parse({"-m", "pkg.train", "--lr", "0.1"})),
            (Cmd{"python3", "-u", "-m", "pkg.train", "--lr", "0.1"}));
  EXPECT_EQ(workerCommand(parse({"--module", "pkg.train"})), (Cmd{"python3", "-u", "-m", "pkg.train"}));
  EXPECT_EQ(workerCommand(parse({"--no-python", "./train.py", "x"})), (Cmd{"./train.py", "x"}));
  EXPECT_EQ(workerCommand(parse({"build/examples/train", "x.py"})), (Cmd{"build/examples/train", "x.py"}));
  // after PROGRAM, -m belongs to the program
  EXPECT_EQ(workerCommand(parse({"bin", "-m", "x"})), (Cmd{"bin", "-m", "x"}));
  ::setenv("LOCKSTEP_PYTHON", "/opt/py/bin/python3.12", 1);
  EXPECT_EQ(workerCommand(parse({"t.py"})), (Cmd{"/opt/py/bin/python3.12", "-u", "t.py"}));
  ::unsetenv("LOCKSTEP_PYTHON");
  EXPECT_NE(errorOf({"-m", "--no-python", "pkg"}).find("options --module and --no-python conflict"),
            std::string::npos);
}

namespace {

// parseLaunchArgs with `vars` as the whole environment.
LaunchOptions parseWithEnv(std::vector<std::string> args, std::map<std::string, std::string> vars) {
  return parseLaunchArgs(args, 8, [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

std::string envErrorOf(std::vector<std::string> args, std::map<std::string, std::string> vars) {
  try {
    parseWithEnv(std::move(args), std::move(vars));
  } catch (const ValueError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

// What Kubeflow's training operator gives a PyTorchJob pod without an elastic policy.
TEST(LaunchOptions, torchrun_flags_default_to_their_pet_variables) {
  auto o = parseWithEnv({"prog"}, {{"PET_NPROC_PER_NODE", "3"},
                                   {"PET_NNODES", "2"},
                                   {"PET_NODE_RANK", "1"},
                                   {"PET_MASTER_ADDR", "job-master-0"},
                                   {"PET_MASTER_PORT", "23456"},
                                   {"PET_MAX_RESTARTS", "3"},
                                   {"PET_RDZV_ID", "job7"},
                                   {"PET_MONITOR_INTERVAL", "0.5"},
                                   {"PET_RDZV_BACKEND", "c10d"},
                                   {"PET_LOG_DIR", "/logs"},
                                   {"PET_TEE", "3"},
                                   {"PET_NO_PYTHON", "1"},
                                   {"MASTER_ADDR", "ignored"},
                                   {"WORLD_SIZE", "6"},
                                   {"RANK", "1"}});
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank.value(), 1);
  EXPECT_EQ(o.master_addr, "job-master-0");
  EXPECT_EQ(o.master_port, 23456);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.run_id, "job7");
  EXPECT_DOUBLE_EQ(o.monitor_interval_s, 0.5);
  EXPECT_EQ(o.log_dir, "/logs");
  EXPECT_EQ(o.tee.all, 3);
  EXPECT_TRUE(o.no_python);
  EXPECT_FALSE(o.module);
}

TEST(LaunchOptions, a_flag_wins_over_its_variable_and_those_it_conflicts_with) {
  auto o = parseWithEnv({"--nnodes=1", "--rdzv-endpoint", "h:7", "prog"},
                        {{"PET_NNODES", "2"}, {"PET_MASTER_ADDR", "m"}, {"PET_MASTER_PORT", "9"}});
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_addr, "h");
  EXPECT_EQ(o.master_port, 7);
  // A flag that is off by default is not turned off by its variable being 0.
  EXPECT_TRUE(parseWithEnv({"--no-python", "prog"}, {{"PET_NO_PYTHON", "0"}}).no_python);
}

// The elastic policy's variables: the endpoint wins over the master's, as in torchrun's c10d rendezvous.
TEST(LaunchOptions, rdzv_endpoint_variable_wins_over_master_variables) {
  auto o = parseWithEnv({"prog"}, {{"PET_RDZV_ENDPOINT", "job-worker-0:29400"},
                                   {"PET_MASTER_ADDR", "job-master-0"},
                                   {"PET_MASTER_PORT", "23456"}});
  EXPECT_EQ(o.master_addr, "job-worker-0");
  EXPECT_EQ(o.master_port, 29400);
}

// Kubeflow sets PET_STANDALONE to an empty string for on; torchrun reads an integer.
TEST(LaunchOptions, standalone_variable_empty_or_integer) {
  auto on = parseWithEnv({"prog"}, {{"PET_STANDALONE", ""}, {"PET_MASTER_ADDR", "m"}});
  EXPECT_TRUE(on.standalone);
  EXPECT_EQ(on.master_port, 0);
  EXPECT_EQ(on.master_addr, "127.0.0.1");
  EXPECT_FALSE(parseWithEnv({"prog"}, {{"PET_STANDALONE", "0"}}).standalone);
  EXPECT_TRUE(parseWithEnv({"prog"}, {{"PET_STANDALONE", "1"}}).standalone);
  EXPECT_NE(envErrorOf({"prog"}, {{"PET_STANDALONE", "yes"}}).find("PET_STANDALONE='yes'"),
            std::string::npos);
}

TEST(LaunchOptions, bad_variable_is_named) {
  auto e = envErrorOf({"prog"}, {{"PET_NNODES", "two"}});
  EXPECT_NE(e.find("environment variable PET_NNODES='two'"), std::string::npos) << e;
  EXPECT_NE(e.find("--nnodes"), std::string::npos) << e;
  e = envErrorOf({"prog"}, {{"PET_MASTER_PORT", "99999"}});
  EXPECT_NE(e.find("PET_MASTER_PORT"), std::string::npos) << e;
  // A flag given on the command line is what is read: its variable is not looked at.
  EXPECT_EQ(parseWithEnv({"--nnodes", "2", "prog"}, {{"PET_NNODES", "two"}}).nnodes, 2);
  // An empty value is unset (an empty manifest entry), for flags that take a value.
  EXPECT_EQ(parseWithEnv({"prog"}, {{"PET_NNODES", ""}, {"PET_LOG_DIR", ""}}).nnodes, 1);
}

// torchrun's elastic node counts: MIN:MAX, the rendezvous settings torchrun takes in --rdzv-conf, and
// a node rank, which an elastic job assigns itself each round: refused as a flag, set aside (with a
// warning) when it comes from a Kubeflow pod's PET_NODE_RANK.
TEST(LaunchOptions, elastic_node_range_and_rendezvous_settings) {
  auto o = parse({"--nnodes", "2:4", "p"});
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_EQ(o.last_call_timeout_s, 30);
  auto fixed = parse({"--nnodes", "3:3", "p"});
  EXPECT_FALSE(fixed.elastic());
  EXPECT_EQ(fixed.nnodes, 3);
  EXPECT_EQ(parse({"--nnodes", "3", "p"}).min_nodes, 3);
  auto conf = parse({"--nnodes=1:3", "--rdzv-conf", "join_timeout=60,last_call_timeout=2.5", "p"});
  EXPECT_EQ(conf.rdzv_timeout_s, 60);
  EXPECT_EQ(conf.last_call_timeout_s, 2.5);
  EXPECT_NE(errorOf({"--rdzv-conf", "close_timeout=5", "p"}).find("unknown key 'close_timeout'"),
            std::string::npos);
  EXPECT_NE(errorOf({"--rdzv-conf", "last_call_timeout", "p"}).find("not KEY=VALUE"), std::string::npos);
  EXPECT_NE(errorOf({"--rdzv-conf", "last_call_timeout=-1", "p"}).find("last_call_timeout"),
            std::string::npos);
  const std::string twice = errorOf({"--rdzv-conf", "join_timeout=5", "--rdzv-timeout", "5", "p"});
  EXPECT_NE(twice.find("both set the rendezvous timeout; give only one"), std::string::npos) << twice;
  EXPECT_NE(twice.find("--rdzv-conf join_timeout"), std::string::npos) << twice;
  // torchrun's flags without a counterpart say so (not just "unknown option").
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--role", "trainer", "p"}, {"--local_addr=10.0.0.1", "p"}}) {
    EXPECT_NE(errorOf(args).find("has no counterpart in lockstep run"), std::string::npos) << errorOf(args);
  }
  // --start-method takes torchrun's choices (which torchrun itself uses only for Python functions,
  // never for a script's workers), also from PET_START_METHOD; others are refused.
  EXPECT_EQ(parse({"--start-method", "spawn", "p"}).program, "p");
  EXPECT_EQ(parse({"--start_method=fork", "p"}).program, "p");
  EXPECT_EQ(parseWithEnv({"p"}, {{"PET_START_METHOD", "forkserver"}}).program, "p");
  EXPECT_NE(errorOf({"--start-method", "thread", "p"}).find("expected spawn, fork or forkserver"),
            std::string::npos);
  EXPECT_NE(errorOf({"--local-ranks-filter", "0", "p"}).find("drop it"), std::string::npos);
  EXPECT_NE(errorOf({"--frobnicate", "p"}).find("unknown option '--frobnicate'"), std::string::npos);
  // --rdzv-timeout beside the other keys of --rdzv-conf is no conflict, from the command line or
  // from PET_RDZV_CONF (Kubeflow's last_call_timeout).
  auto both = parse({"--nnodes=1:3", "--rdzv-timeout", "60", "--rdzv-conf", "last_call_timeout=2", "p"});
  EXPECT_EQ(both.rdzv_timeout_s, 60);
  EXPECT_EQ(both.last_call_timeout_s, 2);
  auto kubeflow =
      parseWithEnv({"--nnodes=1:3", "--rdzv-timeout", "60", "p"}, {{"PET_RDZV_CONF", "last_call_timeout=5"}});
  EXPECT_EQ(kubeflow.rdzv_timeout_s, 60);
  EXPECT_EQ(kubeflow.last_call_timeout_s, 5);
  // The flag wins over the variable's join_timeout (the same setting), said in a note; the variable's
  // other keys still apply.
  auto flag_wins = parseWithEnv({"--nnodes=1:3", "--rdzv-timeout", "60", "p"},
                                {{"PET_RDZV_CONF", "join_timeout=600,last_call_timeout=5"}});
  EXPECT_EQ(flag_wins.rdzv_timeout_s, 60);
  EXPECT_EQ(flag_wins.last_call_timeout_s, 5);
  ASSERT_FALSE(flag_wins.notes.empty());
  EXPECT_NE(flag_wins.notes.back().find("join_timeout=600 is not used"), std::string::npos)
      << flag_wins.notes.back();
  EXPECT_EQ(parseWithEnv({"--nnodes=1:3", "p"}, {{"PET_RDZV_CONF", "join_timeout=600"}}).rdzv_timeout_s, 600);
  EXPECT_NE(errorOf({"--nnodes", "1:3", "--node-rank", "1", "p"}).find("drop --node-rank"),
            std::string::npos);
  // What Kubeflow's operator gives a pod of a PyTorchJob with an elastic policy.
  auto pod = parseWithEnv({"prog"}, {{"PET_NNODES", "2:3"},
                                     {"PET_NODE_RANK", "1"},
                                     {"PET_RDZV_BACKEND", "c10d"},
                                     {"PET_RDZV_ENDPOINT", "job-worker-0:29400"},
                                     {"PET_RDZV_ID", "job"},
                                     {"PET_RDZV_CONF", "last_call_timeout=5"}});
  EXPECT_TRUE(pod.elastic());
  EXPECT_FALSE(pod.node_rank);
  ASSERT_EQ(pod.notes.size(), 1u);
  EXPECT_NE(pod.notes[0].find("PET_NODE_RANK=1 is not used"), std::string::npos);
  EXPECT_EQ(pod.last_call_timeout_s, 5);
  EXPECT_EQ(pod.run_id, "job");
}
