// Exit statuses of the daemons that a supervisor (deploy/local_cluster,
// systemd, Kubernetes) acts on differently.
#ifndef PSRT_COMMON_EXIT_CODES_H_
#define PSRT_COMMON_EXIT_CODES_H_

namespace psrt {

// An error: bad flags, spec or job, a port in use, a failure the daemon
// cannot recover from (ExitWithError). Restarting may help once it is fixed.
inline constexpr int kExitError = 2;
// The chief: training finished and its final checkpoint is committed, but
// the final evaluation failed, so the run has no final metric. The job is
// over: restarting the chief trains nothing more.
inline constexpr int kExitNoFinalMetric = 3;
// The chief: the job cannot run as written, by a worker's own word (it
// refused its assignment: a field its limits refuse, such as more local
// devices than its cores). A restarted chief would be refused the same way:
// the job or the worker's flags must change first.
inline constexpr int kExitJobRefused = 4;

}  // namespace psrt

#endif  // PSRT_COMMON_EXIT_CODES_H_
