#include "common/collective/ring_handshake.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/net/source_limit.h"

namespace psrt {
namespace collective_internal {

using net::ConfigureSocket;
using net::ConnectOnce;
using net::ErrnoText;
using net::IoExact;
using net::SleepUnlessCancelled;
using net::SplitHostPort;
namespace {

constexpr uint64_t kMagic = 0x474e495254525350ull;  // "PSRTRING" little-endian
// Version 1 sent the group id, size and rank before any token check.
constexpr uint32_t kVersion = 2;
constexpr size_t kNonce = 32, kMac = 32;
constexpr size_t kServerHello = 8 + 4 + kNonce;
constexpr size_t kClientHello = 8 + 4 + 4 + 4 + 8 + kNonce + kMac;
constexpr size_t kVerdict = 4 + kMac;
// A connection's whole handshake has this long at most (it holds one of
// the acceptor's kMaxHandshakes, not the acceptor), and one address holds
// at most kMaxHandshakesPerSource of them (AcceptFromPrev).
constexpr absl::Duration kPerConnection = absl::Seconds(5);
constexpr int kMaxHandshakes = 128;
constexpr int kMaxHandshakesPerSource = 16;
// One TCP connect attempt has this long: a SYN the acceptor's kernel
// dropped (its listen queue full) costs this, not Linux's 1 s retransmit.
constexpr absl::Duration kConnectAttempt = absl::Milliseconds(250);
constexpr absl::Duration kMaxBackoff = absl::Milliseconds(250);

enum Verdict : uint32_t { kOk = 0, kOtherGroup = 1, kBadRank = 2, kBadToken = 3 };

void Put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void Put64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t Get32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t Get64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// The acceptor's hello: nothing about the group, only a nonce.
struct ServerHello {
  uint64_t magic = kMagic;
  uint32_t version = kVersion;
  unsigned char nonce[kNonce] = {};
};

// The connector's hello: who it says it is, and a MAC over both nonces.
struct ClientHello {
  uint64_t magic = kMagic;
  uint32_t version = kVersion, size = 0, rank = 0;
  uint64_t group_id = 0;
  unsigned char nonce[kNonce] = {};
  unsigned char mac[kMac] = {};
};

void PutServerHello(const ServerHello& h, unsigned char* p) {
  Put64(p, h.magic);
  Put32(p + 8, h.version);
  std::memcpy(p + 12, h.nonce, kNonce);
}
ServerHello GetServerHello(const unsigned char* p) {
  ServerHello h;
  h.magic = Get64(p);
  h.version = Get32(p + 8);
  std::memcpy(h.nonce, p + 12, kNonce);
  return h;
}

void PutClientHello(const ClientHello& h, unsigned char* p) {
  Put64(p, h.magic);
  Put32(p + 8, h.version);
  Put32(p + 12, h.size);
  Put32(p + 16, h.rank);
  Put64(p + 20, h.group_id);
  std::memcpy(p + 28, h.nonce, kNonce);
  std::memcpy(p + 28 + kNonce, h.mac, kMac);
}
ClientHello GetClientHello(const unsigned char* p) {
  ClientHello h;
  h.magic = Get64(p);
  h.version = Get32(p + 8);
  h.size = Get32(p + 12);
  h.rank = Get32(p + 16);
  h.group_id = Get64(p + 20);
  std::memcpy(h.nonce, p + 28, kNonce);
  std::memcpy(h.mac, p + 28 + kNonce, kMac);
  return h;
}

absl::Status Mac(const std::string& token, const char* label, const unsigned char* their_nonce,
                 const unsigned char* our_nonce, uint64_t group_id, uint32_t from, uint32_t to,
                 unsigned char out[kMac]) {
  unsigned char msg[16 + 2 * kNonce + 16] = {};
  std::memcpy(msg, label, std::min<size_t>(16, std::strlen(label)));
  std::memcpy(msg + 16, their_nonce, kNonce);
  std::memcpy(msg + 16 + kNonce, our_nonce, kNonce);
  Put64(msg + 16 + 2 * kNonce, group_id);
  Put32(msg + 24 + 2 * kNonce, from);
  Put32(msg + 28 + 2 * kNonce, to);
  unsigned int len = 0;
  static const unsigned char kEmpty = 0;
  const void* key = token.empty() ? &kEmpty : static_cast<const void*>(token.data());
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()), msg, sizeof(msg), out, &len) == nullptr ||
      len != kMac) {
    return absl::InternalError("HMAC-SHA256 failed");
  }
  return absl::OkStatus();
}

absl::Status Nonce(unsigned char out[kNonce]) {
  if (RAND_bytes(out, kNonce) != 1) return absl::InternalError("RAND_bytes failed");
  return absl::OkStatus();
}

bool IsFinal(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnauthenticated || s.code() == absl::StatusCode::kCancelled ||
         s.code() == absl::StatusCode::kInternal;
}

// One attempt on a connected socket; non-final errors mean "try again".
absl::Status ClientHandshake(int fd, const HandshakeParams& p, const std::string& who,
                             absl::Time deadline, const std::atomic<bool>* cancel) {
  unsigned char in[kServerHello];
  absl::Status st = IoExact(fd, in, sizeof(in), false, deadline, cancel, who);
  if (!st.ok()) return st;
  const ServerHello server = GetServerHello(in);
  const uint32_t next = static_cast<uint32_t>((p.rank + 1) % p.size);
  if (server.magic != kMagic || server.version != kVersion) {
    return absl::UnavailableError(absl::StrCat(who, " is not a psrt collective listener (version ",
                                               kVersion, ")"));
  }
  ClientHello ours;
  ours.size = p.size;
  ours.rank = p.rank;
  ours.group_id = p.group_id;
  if (!(st = Nonce(ours.nonce)).ok()) return st;
  st = Mac(p.token, "psrt-ring-c", server.nonce, ours.nonce, p.group_id, p.rank, next, ours.mac);
  if (!st.ok()) return st;
  unsigned char out[kClientHello];
  PutClientHello(ours, out);
  if (!(st = IoExact(fd, out, sizeof(out), true, deadline, cancel, who)).ok()) return st;
  unsigned char verdict[kVerdict];
  if (!(st = IoExact(fd, verdict, sizeof(verdict), false, deadline, cancel, who)).ok()) return st;
  switch (Get32(verdict)) {
    case kOk:
      break;
    case kBadToken:
      return absl::UnauthenticatedError(absl::StrCat(who, " refused our token"));
    case kOtherGroup:
      return absl::AbortedError(absl::StrCat(who, " is in another group than ours (", p.group_id, ")"));
    default:
      return absl::FailedPreconditionError(absl::StrCat(who, " refused our rank ", p.rank, " of ", p.size));
  }
  unsigned char expect[kMac];
  st = Mac(p.token, "psrt-ring-s", ours.nonce, server.nonce, p.group_id, next, p.rank, expect);
  if (!st.ok()) return st;
  if (CRYPTO_memcmp(expect, verdict + 4, kMac) != 0) {
    return absl::UnauthenticatedError(absl::StrCat(who, " does not hold our token"));
  }
  return absl::OkStatus();
}

std::string PeerName(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  }
  return absl::StrCat(buf, ":", port);
}

absl::Status ServerHandshake(int fd, const HandshakeParams& p, const std::string& addr,
                             absl::Time deadline, const std::atomic<bool>* cancel) {
  const uint32_t prev = static_cast<uint32_t>((p.rank + p.size - 1) % p.size);
  const std::string who = absl::StrCat("rank ", prev, " connecting from ", addr);
  ServerHello ours;
  absl::Status st = Nonce(ours.nonce);
  if (!st.ok()) return st;
  unsigned char out[kServerHello];
  PutServerHello(ours, out);
  if (!(st = IoExact(fd, out, sizeof(out), true, deadline, cancel, who)).ok()) return st;
  unsigned char in[kClientHello];
  if (!(st = IoExact(fd, in, sizeof(in), false, deadline, cancel, who)).ok()) return st;
  const ClientHello client = GetClientHello(in);
  unsigned char verdict[kVerdict] = {};
  auto refuse = [&](Verdict v, absl::Status why) {
    Put32(verdict, v);
    // Best effort: the peer learns why; we go on either way.
    (void)IoExact(fd, verdict, sizeof(verdict), true, std::min(deadline, absl::Now() + absl::Seconds(1)),
                  cancel, who);
    return why;
  };
  if (client.magic != kMagic || client.version != kVersion) {
    return absl::UnavailableError(absl::StrCat(addr, " is not a psrt collective peer (version ", kVersion, ")"));
  }
  // The token first, over what the peer claims: whatever group it names, a
  // connector without the token hears only kBadToken (no oracle for the
  // group id), and one holding it is told what is wrong.
  unsigned char expect[kMac];
  const uint32_t claimed_next = client.size == 0 ? 0 : (client.rank + 1) % client.size;
  st = Mac(p.token, "psrt-ring-c", ours.nonce, client.nonce, client.group_id, client.rank, claimed_next, expect);
  if (!st.ok()) return st;
  const bool token_ok = CRYPTO_memcmp(expect, client.mac, kMac) == 0;
  if (client.group_id != p.group_id) {
    // A stale peer (or a stranger guessing): skipped, never final here.
    absl::Status stale =
        absl::AbortedError(absl::StrCat(addr, " is in group ", client.group_id, ", we are in ", p.group_id));
    return refuse(token_ok ? kOtherGroup : kBadToken, stale);
  }
  if (!token_ok) {
    return refuse(kBadToken, absl::UnauthenticatedError(absl::StrCat(who, " presented a wrong token")));
  }
  if (client.size != static_cast<uint32_t>(p.size) || client.rank != prev) {
    return refuse(kBadRank, absl::FailedPreconditionError(
                                absl::StrCat(addr, " says it is rank ", client.rank, " of ",
                                             client.size, "; expected rank ", prev, " of ", p.size)));
  }
  Put32(verdict, kOk);
  st = Mac(p.token, "psrt-ring-s", client.nonce, ours.nonce, p.group_id, p.rank, prev, verdict + 4);
  if (!st.ok()) return st;
  return IoExact(fd, verdict, sizeof(verdict), true, deadline, cancel, who);
}

}  // namespace

absl::StatusOr<Fd> ConnectToNext(const HandshakeParams& params, const std::string& hostport,
                                 absl::Time deadline, const std::atomic<bool>* cancel) {
  auto hp = SplitHostPort(hostport);
  if (!hp.ok()) return hp.status();
  const std::string who = absl::StrCat("rank ", (params.rank + 1) % params.size, " (", hostport, ")");
  absl::Status last = absl::UnavailableError("no attempt made");
  absl::Duration backoff = absl::Milliseconds(10);
  while (absl::Now() < deadline) {
    // Each attempt has its own short bound: the connect kConnectAttempt (a
    // SYN dropped by a full listen queue is sent again on a fresh socket,
    // not after the kernel's 1 s), the handshake kPerConnection (as long
    // as the acceptor gives it).
    const absl::Time attempt_start = absl::Now();
    absl::StatusOr<Fd> fd = ConnectOnce(hp->first, hp->second, params.socket_buffer_bytes,
                                        std::min(deadline, attempt_start + kConnectAttempt), cancel);
    absl::Status st = fd.status();
    if (fd.ok()) {
      st = ClientHandshake(fd->get(), params, who, std::min(deadline, absl::Now() + kPerConnection), cancel);
    }
    if (st.ok()) return fd;
    if (IsFinal(st)) return st;
    last = st;
    // Attempts start at most `backoff` apart; one that timed out waited enough.
    SleepUnlessCancelled(std::min(attempt_start + backoff, deadline) - absl::Now(), cancel);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  return absl::DeadlineExceededError(absl::StrCat("rank ", params.rank, " could not connect to ", who,
                                                  " in time; last error: ", last.message()));
}

absl::StatusOr<Fd> AcceptFromPrev(int listen_fd, const HandshakeParams& params, absl::Time deadline,
                                  const std::atomic<bool>* cancel) {
  // Each accepted connection's handshake runs on a thread of its own, each
  // within kPerConnection: connections that send nothing (or trickle) do
  // not delay the real neighbour, which is admitted as soon as its own
  // handshake is done. The first to pass wins; the others are cancelled and
  // joined before returning.
  //
  // At most kMaxHandshakes run at once, and kMaxHandshakesPerSource from
  // one address; a newcomer past either ends the oldest handshake (of its
  // address, else of all) instead of being turned away. The neighbour
  // dials last and needs one round trip, so strangers (even on its own
  // host, as every rank of a local cluster is) cannot keep it out by
  // holding connections open; they only end their own older ones.
  struct Running {
    int fd;  // shut down to end it; valid while the entry is in `running`
    std::string source;
    uint64_t order;
  };
  struct Shared {
    absl::Mutex mu;
    std::optional<Fd> winner ABSL_GUARDED_BY(mu);
    absl::Status last ABSL_GUARDED_BY(mu) = absl::UnavailableError("nobody connected");
    absl::Status fatal ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<uint64_t, Running> running ABSL_GUARDED_BY(mu);
    std::vector<uint64_t> finished ABSL_GUARDED_BY(mu);  // threads to join
    std::atomic<bool> stop{false};
  };
  Shared shared;
  absl::flat_hash_map<uint64_t, std::thread> handshakes;
  uint64_t next = 0;
  // Joins the threads whose handshakes are over (a flood must not leave
  // thousands of unjoined threads behind).
  auto reap = [&] {
    std::vector<uint64_t> done;
    {
      absl::MutexLock lock(&shared.mu);
      done.swap(shared.finished);
    }
    for (uint64_t id : done) {
      handshakes[id].join();
      handshakes.erase(id);
    }
  };
  auto finish = [&] {
    shared.stop = true;
    for (auto& [id, t] : handshakes) t.join();
  };
  while (absl::Now() < deadline) {
    if (cancel != nullptr && cancel->load()) shared.stop = true;
    {
      absl::MutexLock lock(&shared.mu);
      if (shared.winner.has_value() || !shared.fatal.ok() || shared.stop.load()) break;
    }
    reap();
    pollfd pf{listen_fd, POLLIN, 0};
    int ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()), 0, 20));
    if (::poll(&pf, 1, ms) <= 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    Fd fd(::accept(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len));
    if (!fd.valid()) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
          errno == ENFILE) {
        continue;
      }
      absl::MutexLock lock(&shared.mu);
      shared.fatal = absl::InternalError(absl::StrCat("accept: ", ErrnoText(errno)));
      break;
    }
    const uint64_t id = next++;
    const std::string source = net::SourceAddress(addr);
    {
      absl::MutexLock lock(&shared.mu);
      int same = 0;
      const Running* oldest_same = nullptr;
      const Running* oldest = nullptr;
      for (const auto& [other, r] : shared.running) {
        if (r.source == source) {
          ++same;
          if (oldest_same == nullptr || r.order < oldest_same->order) oldest_same = &r;
        }
        if (oldest == nullptr || r.order < oldest->order) oldest = &r;
      }
      const Running* end = nullptr;
      if (same >= kMaxHandshakesPerSource) {
        end = oldest_same;
      } else if (static_cast<int>(shared.running.size()) >= kMaxHandshakes) {
        end = oldest;
      }
      if (end != nullptr) {
        // Its thread reads the end of stream and finds itself gone.
        ::shutdown(end->fd, SHUT_RDWR);
        const uint64_t victim = end->order;
        shared.running.erase(victim);
      }
      shared.running[id] = Running{fd.get(), source, id};
    }
    handshakes[id] = std::thread([&shared, &params, deadline, id, fd = std::move(fd), addr]() mutable {
      absl::Status st = ConfigureSocket(fd.get(), params.socket_buffer_bytes);
      if (st.ok()) {
        st = ServerHandshake(fd.get(), params, PeerName(addr), std::min(deadline, absl::Now() + kPerConnection),
                             &shared.stop);
      }
      absl::MutexLock lock(&shared.mu);
      // Out of `running` before `fd` closes (when this thread returns), so
      // the acceptor never shuts down a descriptor number reused since.
      const bool ended = shared.running.erase(id) == 0;
      shared.finished.push_back(id);
      if (st.ok() && !ended) {
        if (!shared.winner.has_value()) shared.winner = std::move(fd);
        return;
      }
      // A stale or broken connection, or a stranger without the token: skip
      // it and keep waiting for the real neighbour (a connection with a
      // wrong token must not be able to stop a group from forming). The
      // connecting side of a wrong token hears UNAUTHENTICATED and stops.
      if (st.code() == absl::StatusCode::kInternal) shared.fatal = st;
      if (st.code() != absl::StatusCode::kCancelled && !ended) shared.last = st;
    });
  }
  finish();
  if (cancel != nullptr && cancel->load()) return absl::CancelledError("cancelled");
  absl::MutexLock lock(&shared.mu);
  if (shared.winner.has_value()) return std::move(*shared.winner);
  if (!shared.fatal.ok()) return shared.fatal;
  const absl::Status last = shared.last;
  std::string why = absl::StrCat("rank ", params.rank, ": rank ", (params.rank + params.size - 1) % params.size,
                                 " did not connect in time; last error: ", last.message());
  // A neighbour that only ever presented a wrong token is a misconfigured
  // token, not a slow peer: say so with the code that names it.
  if (absl::IsUnauthenticated(last)) return absl::UnauthenticatedError(why);
  return absl::DeadlineExceededError(why);
}

}  // namespace collective_internal
}  // namespace psrt
