// Protobuf writes one log line for every message it refuses to parse (a
// string field with invalid UTF-8, for one). A peer that sends such
// requests in a loop would fill a daemon's log and disk, a line per call.
// LimitProtobufLogs sends protobuf's lines to glog at most `per_minute` a
// minute and then says how many it dropped, once the minute is over.
#ifndef PSRT_COMMON_PROTOBUF_LOG_LIMIT_H_
#define PSRT_COMMON_PROTOBUF_LOG_LIMIT_H_

#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace psrt {

// Admits at most `per_window` events a window; thread-safe.
class LogRateLimiter {
 public:
  LogRateLimiter(int per_window, absl::Duration window) : per_window_(per_window), window_(window) {}

  // Whether the event at `now` may be logged. `*dropped` is set to the
  // number of events refused in the window that just ended (0 if none), to
  // be reported once by the caller.
  bool Admit(absl::Time now, int64_t* dropped);

 private:
  const int per_window_;
  const absl::Duration window_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int admitted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// Installs the limit for every protobuf log line of this process (call
// once, early in main). FATAL lines always pass.
void LimitProtobufLogs(int per_minute = 20);

}  // namespace psrt

#endif  // PSRT_COMMON_PROTOBUF_LOG_LIMIT_H_
