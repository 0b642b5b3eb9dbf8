#include "common/net/source_limit.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace psrt {
namespace net {

std::string SourceAddress(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, buf, sizeof(buf));
  } else if (addr.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      // The same host whether it came over IPv4 or a dual-stack socket.
      in_addr v4;
      std::memcpy(&v4, a.s6_addr + 12, sizeof(v4));
      ::inet_ntop(AF_INET, &v4, buf, sizeof(buf));
    } else {
      ::inet_ntop(AF_INET6, &a, buf, sizeof(buf));
    }
  }
  return buf;
}

SourceLimit::SourceLimit(int max_per_source, std::string what, absl::Duration log_every)
    : max_(max_per_source), what_(std::move(what)), log_every_(log_every) {}

SourceLimit::Place::Place(Place&& o) noexcept
    : limit_(std::exchange(o.limit_, nullptr)), source_(std::move(o.source_)) {}

SourceLimit::Place& SourceLimit::Place::operator=(Place&& o) noexcept {
  if (this != &o) {
    Release();
    limit_ = std::exchange(o.limit_, nullptr);
    source_ = std::move(o.source_);
  }
  return *this;
}

void SourceLimit::Place::Release() {
  if (limit_ != nullptr) std::exchange(limit_, nullptr)->Give(source_);
}

std::optional<SourceLimit::Place> SourceLimit::Take(const std::string& source) {
  if (max_ <= 0) return Place(nullptr, source);
  absl::MutexLock lock(&mu_);
  int& n = held_[source];
  if (n >= max_) return std::nullopt;
  ++n;
  return Place(this, source);
}

void SourceLimit::Give(const std::string& source) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(source);
  if (it == held_.end()) return;
  if (--it->second <= 0) held_.erase(it);  // a source that leaves leaves nothing behind
}

std::string SourceLimit::Refuse(const std::string& source) {
  absl::MutexLock lock(&mu_);
  ++refused_;
  ++refused_unlogged_;
  const absl::Time now = absl::Now();
  if (now - last_log_ < log_every_) return "";
  last_log_ = now;
  const int64_t n = std::exchange(refused_unlogged_, 0);
  return absl::StrCat(what_, ": refused ", n, " connection", n == 1 ? "" : "s", " (the last from ", source,
                      ") since the last such line: one source may hold ", max_,
                      " connections that have not authenticated yet");
}

int SourceLimit::held(const std::string& source) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(source);
  return it == held_.end() ? 0 : it->second;
}

int64_t SourceLimit::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

}  // namespace net
}  // namespace psrt
