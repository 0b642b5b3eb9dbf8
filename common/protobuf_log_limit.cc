#include "common/protobuf_log_limit.h"

#include <string>

#include "glog/logging.h"
#include "google/protobuf/stubs/logging.h"

namespace psrt {

bool LogRateLimiter::Admit(absl::Time now, int64_t* dropped) {
  absl::MutexLock lock(&mu_);
  *dropped = 0;
  if (now - window_start_ >= window_) {
    *dropped = dropped_;
    window_start_ = now;
    admitted_ = 0;
    dropped_ = 0;
  }
  if (admitted_ < per_window_) {
    ++admitted_;
    return true;
  }
  ++dropped_;
  return false;
}

namespace {

LogRateLimiter* limiter = nullptr;

void Handler(google::protobuf::LogLevel level, const char* filename, int line, const std::string& message) {
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    LOG(ERROR) << "protobuf " << filename << ":" << line << ": " << message;
    return;  // protobuf aborts after the handler returns
  }
  int64_t dropped = 0;
  const bool admit = limiter->Admit(absl::Now(), &dropped);
  if (dropped > 0) LOG(WARNING) << "protobuf: " << dropped << " more log lines in the last minute were dropped";
  if (!admit) return;
  const std::string text = std::string("protobuf ") + filename + ":" + std::to_string(line) + ": " + message;
  if (level == google::protobuf::LOGLEVEL_INFO) {
    LOG(INFO) << text;
  } else {
    LOG(WARNING) << text;
  }
}

}  // namespace

void LimitProtobufLogs(int per_minute) {
  if (limiter == nullptr) limiter = new LogRateLimiter(per_minute, absl::Minutes(1));
  google::protobuf::SetLogHandler(&Handler);
}

}  // namespace psrt
