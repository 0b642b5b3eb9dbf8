// The TCP ring's connection handshake (private to this package).
//
// Acceptor (rank r+1)                     Connector (rank r)
//   ServerHello: magic, version,        ->
//     nonce_s
//                                       <-  ClientHello: magic, version, size, rank,
//                                             group_id, nonce_c, mac_c
//   Verdict: code, mac_s                ->
//
// mac_c = HMAC-SHA256(token, "psrt-ring-c" nonce_s nonce_c group_id r r+1),
// mac_s = HMAC-SHA256(token, "psrt-ring-s" nonce_c nonce_s group_id r+1 r),
// compared in constant time. Every message has a fixed size; all integers
// are little-endian (version 2).
//
// Anyone may connect to the acceptor's port, so it says nothing of the
// group before the token is proven: a connector without the token learns
// a nonce and that this is a psrt ring (magic, version), never the group
// id, size or rank, and any refusal it hears is kBadToken. The connector
// only talks to the address the chief gave it and proves the token first;
// mac_s then proves the acceptor holds it too. The acceptor checks mac_c
// over what the connector claims, then compares group_id, size and rank
// with its own.
//
// Connections that fail for reasons a stale or slow peer explains (other
// group_id, EOF, garbage) are closed and skipped until the deadline; a
// wrong token from a peer of our group is final (UNAUTHENTICATED naming
// the peer: at once for the connector, at the deadline for the acceptor,
// which keeps waiting for the right one).
#ifndef PSRT_COMMON_COLLECTIVE_RING_HANDSHAKE_H_
#define PSRT_COMMON_COLLECTIVE_RING_HANDSHAKE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/net/socket.h"

namespace psrt {
namespace collective_internal {

using net::Fd;

struct HandshakeParams {
  int rank = 0;
  int size = 1;
  uint64_t group_id = 0;
  std::string token;
  int socket_buffer_bytes = 0;
};

// Connects to rank+1 at `hostport`, retrying with backoff until `deadline`
// or `cancel`; each TCP connect attempt is bounded on its own (250 ms), so
// a SYN dropped by a full listen queue costs one short attempt. Returns
// the authenticated, configured socket.
absl::StatusOr<Fd> ConnectToNext(const HandshakeParams& params, const std::string& hostport,
                                 absl::Time deadline, const std::atomic<bool>* cancel);

// Accepts rank-1 on the listening socket `listen_fd`, skipping stale or
// broken connections, until `deadline` or `cancel`.
absl::StatusOr<Fd> AcceptFromPrev(int listen_fd, const HandshakeParams& params,
                                  absl::Time deadline, const std::atomic<bool>* cancel);

}  // namespace collective_internal
}  // namespace psrt

#endif  // PSRT_COMMON_COLLECTIVE_RING_HANDSHAKE_H_
