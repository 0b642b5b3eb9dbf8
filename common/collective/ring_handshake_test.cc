#include "common/collective/ring_handshake.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace collective_internal {
namespace {

HandshakeParams Params(int rank) {
  HandshakeParams p;
  p.rank = rank;
  p.size = 2;
  p.group_id = 7;
  p.token = "a-token-of-sixteen-chars";
  return p;
}

// The listen queue of `listen_fd`: connections waiting to be accepted, and
// the most it holds (TCP_INFO reports them for a listening socket).
struct Queue {
  uint32_t waiting = 0, max = 0;
};
Queue ListenQueue(int listen_fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(listen_fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return {};
  return {info.tcpi_unacked, info.tcpi_sacked};
}

// The local ports of this host's IPv4 sockets in SYN_SENT towards `port`
// (from /proc/net/tcp): each is one connect attempt whose SYN is unanswered.
std::set<int> SynSentTo(int port) {
  std::set<int> out;
  std::ifstream f("/proc/net/tcp");
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string slot, local, remote, state;
    in >> slot >> local >> remote >> state;
    if (state != "02") continue;  // TCP_SYN_SENT
    const size_t lc = local.find(':'), rc = remote.find(':');
    if (lc == std::string::npos || rc == std::string::npos) continue;
    if (std::stoi(remote.substr(rc + 1), nullptr, 16) != port) continue;
    out.insert(std::stoi(local.substr(lc + 1), nullptr, 16));
  }
  return out;
}

// Issue #28: a stranger that fills the acceptor's listen queue has the
// kernel drop the neighbour's SYN, which Linux sends again only after 1 s
// (then 3 s, 7 s ...). ConnectToNext gives each connect attempt a short
// bound and tries again on a fresh socket: while the queue is full we see
// more than one attempt (distinct source ports in SYN_SENT), and once it
// drains the neighbour connects within the overall deadline.
TEST(RingHandshakeTest, ADroppedSynIsTriedAgainOnAFreshSocket) {
  net::Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_TRUE(listener.valid());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener.get(), 0), 0);  // the shortest queue the kernel allows
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  // Fill the queue with strangers nobody accepts (yet).
  std::vector<net::Fd> strangers;
  const absl::Time fill_deadline = absl::Now() + absl::Seconds(20);
  while (ListenQueue(listener.get()).waiting <= ListenQueue(listener.get()).max) {
    ASSERT_LT(strangers.size(), 64u) << "the listen queue never filled";
    net::Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    const int rc = ::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ASSERT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
    strangers.push_back(std::move(s));
    while (ListenQueue(listener.get()).waiting < strangers.size()) {
      ASSERT_LT(absl::Now(), fill_deadline) << "stranger " << strangers.size() << " never queued";
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::atomic<bool> cancel{false};
  absl::StatusOr<net::Fd> connected = absl::UnknownError("not run");
  std::thread connector(
      [&] { connected = ConnectToNext(Params(0), "127.0.0.1:" + std::to_string(port), deadline, &cancel); });
  // While the queue stays full, ConnectToNext makes several attempts.
  std::set<int> attempts;
  const absl::Time watch_deadline = absl::Now() + absl::Seconds(30);
  while (attempts.size() < 2 && absl::Now() < watch_deadline) {
    for (int p : SynSentTo(port)) attempts.insert(p);
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_GE(attempts.size(), 2u) << "one connect attempt waited on the kernel's SYN retransmits";
  // Drain the queue: the strangers go, the acceptor takes the neighbour.
  strangers.clear();
  absl::StatusOr<net::Fd> accepted = AcceptFromPrev(listener.get(), Params(1), deadline, nullptr);
  if (!accepted.ok()) cancel = true;
  connector.join();
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  ASSERT_TRUE(connected.ok()) << connected.status();
}

}  // namespace
}  // namespace collective_internal
}  // namespace psrt
