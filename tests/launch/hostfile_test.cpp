#include "lockstep/launch/hostfile.h"

#include <gtest/gtest.h>

#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::launch;

TEST(LaunchHostfile, parses_deepspeed_and_horovod_formats) {
  auto hosts = parseHostfile(
      "# cluster\nnode1 slots=4\n\nnode2:2   # comment\nnode3\nnode4 slots=8 max_slots=8\n", "hf");
  ASSERT_EQ(hosts.size(), 4u);
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[2].slots, 1);
  EXPECT_EQ(hosts[3].slots, 8);
}

TEST(LaunchHostfile, malformed_lines_name_file_and_line) {
  auto err = [](const std::string& text) {
    try {
      parseHostfile(text, "hosts.txt");
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(err("a slots=2\nb slots=x\n").find("hosts.txt:2"), std::string::npos);
  EXPECT_NE(err("a slots=0\n").find("hosts.txt:1"), std::string::npos);
  EXPECT_NE(err("a gpus=2\n").find("unexpected 'gpus=2'"), std::string::npos);
  EXPECT_NE(err("a\na\n").find("twice"), std::string::npos);
  EXPECT_NE(err("# nothing\n").find("no hosts"), std::string::npos);
}

TEST(LaunchHostfile, prints_one_command_per_host) {
  LaunchOptions o;
  o.run_id = "j1";
  o.master_port = 29600;
  o.max_restarts = 2;
  o.program = "./train";
  o.program_args = {"--lr", "0.1", "a b"};
  auto cmds = hostCommands({{"n1", 4}, {"n2", 2}}, o);
  ASSERT_EQ(cmds.size(), 2u);
  EXPECT_EQ(cmds[0],
            "lockstep run --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr n1 --master-port 29600 "
            "--rdzv-id j1 --max-restarts 2 -- ./train --lr 0.1 'a b'");
  EXPECT_NE(cmds[1].find("--node-rank 1 --nproc-per-node 2 --master-addr n1"), std::string::npos);
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
  o.timeout_s = 20;
  o.join_token = "0123456789abcdef";
  EXPECT_NE(hostCommands({{"n1", 1}}, o)[0].find("--timeout 20 --join-token 0123456789abcdef --"),
            std::string::npos);
  o.oversubscribe = true;  // each host's agent checks its own cores
  EXPECT_NE(hostCommands({{"n1", 64}}, o)[0].find("--max-restarts 2 --oversubscribe "), std::string::npos);
  o.module = true;  // -m reaches every host's command
  EXPECT_NE(hostCommands({{"n1", 1}}, o)[0].find(" --module -- "), std::string::npos);
  // As do the log streams and the grace period (each as its flag reads it back).
  o.grace_period_s = 2;
  o.redirects = parseStreamSelection("--redirects", "1");
  o.tee = parseStreamSelection("--tee", "0:3,1:2");
  o.log_dir = "/x";
  EXPECT_NE(
      hostCommands({{"n1", 1}}, o)[0].find("--grace-period 2 --log-dir /x --redirects 1 --tee 0:3,1:2 "),
      std::string::npos)
      << hostCommands({{"n1", 1}}, o)[0];
}
