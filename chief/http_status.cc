#include "chief/http_status.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cluster_spec.h"
#include "httplib.h"

namespace psrt {
namespace {

void Gauge(std::string* out, const std::string& name, const std::string& help, double value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, " ",
                  absl::StrFormat("%.17g", value), "\n");
}

}  // namespace

std::string PrometheusMetrics(const JobStatusResponse& s, int64_t total_steps) {
  std::string out;
  Gauge(&out, "psrt_step", "Global step: the next step of the slowest worker.", s.step());
  if (total_steps > 0) Gauge(&out, "psrt_total_steps", "Steps the job runs per worker.", total_steps);
  Gauge(&out, "psrt_loss", "Mean training loss over the workers' latest steps.", s.loss());
  Gauge(&out, "psrt_examples_per_second", "Training throughput over all workers.", s.examples_per_sec());
  Gauge(&out, "psrt_last_checkpoint_step", "Step of the newest committed checkpoint (-1: none).",
        s.last_checkpoint_step());
  Gauge(&out, "psrt_checkpoint_failures",
        "Checkpoints failed in a row since the last committed one (progress since it is at risk).",
        s.checkpoint_failures());
  absl::StrAppend(&out,
                  "# HELP psrt_failures_survived_total Failures recovered from since the job began.\n"
                  "# TYPE psrt_failures_survived_total counter\npsrt_failures_survived_total ",
                  s.failures_survived(), "\n");
  absl::StrAppend(&out, "# HELP psrt_job_state The job's state (1 for the current one).\n# TYPE psrt_job_state gauge\n");
  for (int i = JobStatusResponse::State_MIN; i <= JobStatusResponse::State_MAX; ++i) {
    absl::StrAppend(&out, "psrt_job_state{state=\"", JobStatusResponse::State_Name(static_cast<JobStatusResponse::State>(i)),
                    "\"} ", s.state() == i ? 1 : 0, "\n");
  }
  absl::StrAppend(&out, "# HELP psrt_task_registered Whether a task of the spec is registered.\n# TYPE psrt_task_registered gauge\n");
  for (const TaskInfo& t : s.task()) {
    absl::StrAppend(&out, "psrt_task_registered{task=\"", TaskName(t.task()), "\"} ", t.incarnation() != 0 ? 1 : 0, "\n");
  }
  return out;
}

HttpStatusServer::HttpStatusServer(std::function<JobStatusResponse()> status, int64_t total_steps)
    : status_(std::move(status)), total_steps_(total_steps) {}

HttpStatusServer::~HttpStatusServer() { Stop(); }

absl::Status HttpStatusServer::Start(const std::string& host, int port) {
  server_ = std::make_unique<httplib::Server>();
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(PrometheusMetrics(status_(), total_steps_), "text/plain; version=0.0.4");
  });
  server_->Get("/", [this](const httplib::Request&, httplib::Response& res) {
    JobStatusResponse s = status_();
    std::string rows;
    for (const TaskInfo& t : s.task()) {
      absl::StrAppend(&rows, "<tr><td>", TaskName(t.task()), "</td><td>", t.address(), "</td><td>",
                      t.incarnation() != 0 ? "registered" : "missing", "</td></tr>");
    }
    res.set_content(absl::StrCat(
                        "<!doctype html><html><head><title>psrt</title><meta http-equiv=refresh content=2></head>"
                        "<body><h1>psrt job: ", JobStatusResponse::State_Name(s.state()), "</h1><p>step ", s.step(),
                        total_steps_ > 0 ? absl::StrCat(" / ", total_steps_) : "", ", loss ", s.loss(),
                        ", examples/s ", static_cast<int64_t>(s.examples_per_sec()), ", last checkpoint ",
                        s.last_checkpoint_step(), ", failures survived ", s.failures_survived(),
                        s.error().empty() ? "" : absl::StrCat("<p>error: ", s.error()),
                        "</p><table border=1><tr><th>task</th><th>address</th><th>state</th></tr>", rows,
                        "</table><p><a href=/metrics>/metrics</a></p></body></html>"),
                    "text/html");
  });
  port_ = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (port_ <= 0) return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", host, ":", port));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void HttpStatusServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace psrt
