#include "chief/http_status.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "common/cluster_spec.h"
#include "common/metrics/metrics_http.h"
#include "common/metrics/prometheus_text.h"
#include "common/rpc/security.h"

namespace psrt {
namespace {

void Gauge(std::string* out, const std::string& name, const std::string& help, double value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, " ",
                  absl::StrFormat("%.17g", value), "\n");
}

std::string ReplicaStateName(JobStatusResponse::Replica::State s) {
  return absl::AsciiStrToLower(JobStatusResponse::Replica::State_Name(s));
}

// Replicated shards: each store's primary, backup and state, and failovers.
void AppendReplicaMetrics(const JobStatusResponse& s, std::string* out) {
  if (s.replica_size() == 0) return;
  absl::StrAppend(out,
                  "# HELP psrt_failovers_total PS failures survived by promoting backups (no rollback).\n"
                  "# TYPE psrt_failovers_total counter\npsrt_failovers_total ",
                  s.failovers(), "\n",
                  "# HELP psrt_rebuilds_total PS that came back and were made replicas again.\n"
                  "# TYPE psrt_rebuilds_total counter\npsrt_rebuilds_total ",
                  s.rebuilds(), "\n");
  absl::StrAppend(out,
                  "# HELP psrt_replica_state A store's replication state (1 for the current one), with its "
                  "primary and backup task (\"\": none).\n# TYPE psrt_replica_state gauge\n");
  for (const JobStatusResponse::Replica& r : s.replica()) {
    for (int i = JobStatusResponse::Replica::State_MIN; i <= JobStatusResponse::Replica::State_MAX; ++i) {
      absl::StrAppend(out, "psrt_replica_state{store=\"", r.store(), "\",primary=\"", PrometheusLabelValue(r.primary()),
                      "\",backup=\"", PrometheusLabelValue(r.backup()), "\",state=\"",
                      ReplicaStateName(static_cast<JobStatusResponse::Replica::State>(i)), "\"} ",
                      r.state() == i ? 1 : 0, "\n");
    }
  }
  absl::StrAppend(out,
                  "# HELP psrt_replica_epoch The placement epoch a store is served at.\n"
                  "# TYPE psrt_replica_epoch gauge\n");
  for (const JobStatusResponse::Replica& r : s.replica()) {
    absl::StrAppend(out, "psrt_replica_epoch{store=\"", r.store(), "\"} ", r.epoch(), "\n");
  }
}

std::string ReplicaTable(const JobStatusResponse& s) {
  if (s.replica_size() == 0) return "";
  std::string rows;
  for (const JobStatusResponse::Replica& r : s.replica()) {
    absl::StrAppend(&rows, "<tr><td>", r.store(), "</td><td>", HtmlEscape(r.primary()), "</td><td>",
                    r.backup().empty() ? "none" : HtmlEscape(r.backup()), "</td><td>", r.epoch(), "</td><td>",
                    ReplicaStateName(r.state()), "</td></tr>");
  }
  return absl::StrCat("<p>replicated shards: failovers ", s.failovers(),
                      "</p><table border=1><tr><th>store</th><th>primary</th><th>backup</th><th>epoch</th>"
                      "<th>state</th></tr>",
                      rows, "</table>");
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
  Gauge(&out, "psrt_workers", "Workers training now (elastic jobs: joins and leaves change it).", s.member_size());
  absl::StrAppend(&out,
                  "# HELP psrt_membership_changes_total Workers joining or leaving since the job began.\n"
                  "# TYPE psrt_membership_changes_total counter\npsrt_membership_changes_total ",
                  s.membership_changes(), "\n");
  absl::StrAppend(&out, "# HELP psrt_job_state The job's state (1 for the current one).\n# TYPE psrt_job_state gauge\n");
  for (int i = JobStatusResponse::State_MIN; i <= JobStatusResponse::State_MAX; ++i) {
    absl::StrAppend(&out, "psrt_job_state{state=\"", JobStatusResponse::State_Name(static_cast<JobStatusResponse::State>(i)),
                    "\"} ", s.state() == i ? 1 : 0, "\n");
  }
  absl::StrAppend(&out, "# HELP psrt_task_registered Whether a task of the spec is registered.\n# TYPE psrt_task_registered gauge\n");
  for (const TaskInfo& t : s.task()) {
    absl::StrAppend(&out, "psrt_task_registered{task=\"", PrometheusLabelValue(TaskName(t.task())), "\"} ", t.incarnation() != 0 ? 1 : 0, "\n");
  }
  AppendReplicaMetrics(s, &out);
  Gauge(&out, "psrt_eval_step", "Step of the last evaluation on the test split (-1: none yet).", s.eval_step());
  absl::StrAppend(&out, "# HELP psrt_eval_metric Each test metric of the last evaluation (accuracy, loss, ...).\n"
                        "# TYPE psrt_eval_metric gauge\n");
  for (const auto& [name, value] : std::map<std::string, float>(s.eval_metric().begin(), s.eval_metric().end())) {
    absl::StrAppend(&out, "psrt_eval_metric{name=\"", PrometheusLabelValue(name), "\"} ", absl::StrFormat("%.9g", value),
                    "\n");
  }
  absl::StrAppend(&out, "# HELP psrt_train_metric Each training metric of the workers' last steps, on their batches "
                        "(their mean).\n# TYPE psrt_train_metric gauge\n");
  for (const auto& [name, value] : std::map<std::string, float>(s.train_metric().begin(), s.train_metric().end())) {
    absl::StrAppend(&out, "psrt_train_metric{name=\"", PrometheusLabelValue(name), "\"} ", absl::StrFormat("%.9g", value),
                    "\n");
  }
  Gauge(&out, "psrt_loss_step", "The step psrt_loss and psrt_train_metric are from (the workers' mean; -1: none yet).",
        s.loss_step());
  Gauge(&out, "psrt_learning_rate", "The learning rate the PS apply now (the job's schedule at their update count).",
        s.learning_rate());
  return out;
}

std::string StatusPage(const JobStatusResponse& s, int64_t total_steps) {
  std::string rows;
  for (const TaskInfo& t : s.task()) {
    absl::StrAppend(&rows, "<tr><td>", HtmlEscape(TaskName(t.task())), "</td><td>", HtmlEscape(t.address()),
                    "</td><td>", t.incarnation() != 0 ? "registered" : "missing", "</td></tr>");
  }
  return absl::StrCat(
      "<!doctype html><html><head><title>psrt</title><meta http-equiv=refresh content=2></head>"
      "<body><h1>psrt job: ", JobStatusResponse::State_Name(s.state()), "</h1><p>step ", s.step(),
      total_steps > 0 ? absl::StrCat(" / ", total_steps) : "", ", loss ", s.loss(), ", examples/s ",
      static_cast<int64_t>(s.examples_per_sec()), ", last checkpoint ", s.last_checkpoint_step(),
      ", failures survived ", s.failures_survived(), "<p>workers training (", s.member_size(), "): ",
      HtmlEscape(absl::StrJoin(s.member(), ", ")), "; membership changes ", s.membership_changes(),
      s.error().empty() ? "" : absl::StrCat("<p>error: ", HtmlEscape(s.error())),
      s.checkpoint_failures() == 0
          ? ""
          : absl::StrCat("<p><b>warning: ", s.checkpoint_failures(), " checkpoints failed in a row</b> (progress since step ",
                         s.last_checkpoint_step(), " is at risk): ", HtmlEscape(s.checkpoint_error())),
      s.waiting_for().empty() ? "" : absl::StrCat("<p>waiting for ", HtmlEscape(s.waiting_for())),
      "</p><table border=1><tr><th>task</th><th>address</th><th>state</th></tr>", rows, "</table>",
      ReplicaTable(s), "<p><a href=/metrics>/metrics</a></p></body></html>");
}

HttpStatusServer::HttpStatusServer(std::function<JobStatusResponse()> status, int64_t total_steps)
    : status_(std::move(status)), total_steps_(total_steps) {}

HttpStatusServer::~HttpStatusServer() { Stop(); }

HttpResponse HttpStatusServer::Serve(const HttpRequest& req) const {
  if (std::optional<HttpResponse> refused = RefuseWithoutToken(req, bearer_)) return *refused;
  HttpResponse res;
  if (req.path == "/metrics") {
    res.content_type = "text/plain; version=0.0.4";
    res.body = PrometheusMetrics(status_(), total_steps_);
  } else if (req.path == "/") {
    res.content_type = "text/html; charset=utf-8";
    res.body = StatusPage(status_(), total_steps_);
  } else {
    res.status = 404;
    res.body = "not found: / and /metrics only\n";
  }
  return res;
}

absl::Status HttpStatusServer::Start(const std::string& host, int port, const std::string& token,
                                     HttpServerOptions options) {
  bearer_ = token.empty() ? "" : BearerValue(token);
  absl::StatusOr<std::unique_ptr<HttpServer>> s =
      HttpServer::Start(host, port, [this](const HttpRequest& r) { return Serve(r); }, options);
  if (!s.ok()) return s.status();
  server_ = *std::move(s);
  port_ = server_->port();
  return absl::OkStatus();
}

void HttpStatusServer::Stop() {
  if (server_) server_->Stop();
}

}  // namespace psrt
