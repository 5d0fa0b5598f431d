#include "lockstep/launch/tcp_sockets.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace lockstep::launch;

TEST(TcpSockets, parses_the_kernel_tables_of_both_families) {
  const std::string tcp =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0100007F:8FD3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 "
      "0000000000000000 100 0 0 10 0\n"
      "   1: 0100007F:C350 0100007F:8FD3 01 00000000:00000000 00:00000000 00000000     0        0 4243 1 "
      "0000000000000000 20 4 30 10 -1\n"
      "   2: garbage\n";
  auto rows = parseProcNetTcp(tcp);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].inode, 4242u);
  EXPECT_EQ(rows[0].local_port, 36819);
  EXPECT_EQ(rows[0].state, kTcpListen);
  EXPECT_EQ(rows[1].local_port, 50000);
  EXPECT_EQ(rows[1].remote_port, 36819);
  EXPECT_EQ(rows[1].state, kTcpEstablished);
  const std::string tcp6 =
      "  sl  local_address                         remote_address                        st tx_queue "
      "rx_queue tr "
      "tm->when retrnsmt   uid  timeout inode\n"
      "   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A "
      "00000000:00000000 "
      "00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0\n";
  rows = parseProcNetTcp(tcp6);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].local_port, 8080);
  EXPECT_EQ(rows[0].inode, 777u);
}

TEST(TcpSockets, finds_this_process_listening_and_connected) {
  int server = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(server, 1), 0);
  ::getsockname(server, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  int client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  bool listening = false, connected = false;
  for (const TcpSocket& s : processTcpSockets(::getpid())) {
    listening = listening || (s.state == kTcpListen && s.local_port == port);
    connected = connected || (s.state == kTcpEstablished && s.remote_port == port);
  }
  EXPECT_TRUE(listening);
  EXPECT_TRUE(connected);
  // A child that inherited the client is seen under this process too (a worker behind a wrapper).
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ::close(client);
  connected = false;
  for (const TcpSocket& s : processTcpSockets(::getpid()))
    connected = connected || (s.state == kTcpEstablished && s.remote_port == port);
  EXPECT_TRUE(connected);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(server);
  EXPECT_TRUE(processTcpSockets(-1).empty());
}
