// Issue #28's soak: a real training job (chief, one PS, workers, per-role
// tokens, the TCP data plane: as the launcher deploys it with
// --role_tokens) beside hostile clients, measured against the same job
// unattacked.
//
// The attack, from the moment the job passes a fifth of its steps until it
// passes seven tenths (so the PS is measured after it too):
//  - strangers (no credentials) hold up to `connections` sockets from
//    `sources` loopback addresses (127.0.1.2 on), nine in ten to the PS's
//    data port, one in ten to the chief's gRPC port, each trickling one
//    byte of a hello (or of HTTP/2's preface) every 2 s and opened again
//    whenever the daemon closes it;
//  - one holder of the worker token takes every OpenDataPlane ticket the PS
//    gives it and never uses them, keeps `stalled_frames` connections each
//    with a frame announcing 512 MiB stalled after 1 KiB, and on
//    `pull_flooders` connections sends pulls of every variable it never
//    reads;
//  - `exchange_flooders` streams of the worker token over the gRPC Exchange
//    method send pull frames of every variable, never reading an answer.
// A probe, in both runs, connects as a worker every 500 ms (ticket,
// connect, hello, one pull) and times how long it waited for its slot.
//
// Used by tests/bench:hostile_soak (the long run, printing figures) and
// tests:hostile_soak_test (a short one, asserting behaviour).
#ifndef PSRT_TESTS_BENCH_HOSTILE_SOAK_LIB_H_
#define PSRT_TESTS_BENCH_HOSTILE_SOAK_LIB_H_

#include <cstdint>
#include <string>
#include <vector>

namespace psrt {
namespace soak {

struct SoakOptions {
  std::string dir;  // scratch directory, made if absent
  int64_t steps = 1500;
  int workers = 1;
  int connections = 10000;  // stranger sockets held at once, at most (the fd limit may cap it)
  int sources = 200;        // 127.0.1.2 ... 127.0.1.(1 + sources)
  int stalled_frames = 8;
  int pull_flooders = 2;
  // Streams of the worker token over the PS's gRPC Exchange (the fallback
  // data plane, ps_exchange.h), each sending pull frames of every variable
  // as fast as gRPC takes them and never reading an answer.
  int exchange_flooders = 2;
  // Extra PS flags: by default the unread-answer bounds sized to this
  // model (a pull answer is 0.9 MB; the defaults, 1 and 2 GiB, are sized
  // for large models and would let a flood hold that much).
  std::vector<std::string> ps_flags = {"--max_unread_answer_mb=8", "--max_unread_answers_total_mb=32"};
};

struct Rss {
  int64_t before_kb = -1;  // most while training, before the attack
  int64_t during_kb = -1;  // most during the attack
  int64_t after_kb = -1;   // most from 3 s after the attack to the job's end
};

struct SoakRun {
  bool attacked = false;
  bool finished = false;  // the chief exited 0 with a summary
  double accuracy = -1;
  double wall_seconds = -1;
  std::string summary;
  Rss ps, chief;
  int64_t ps_fds_peak = 0;  // the PS's open descriptors, most seen
  // Strangers.
  int64_t stranger_opened = 0;          // connections made (accepted by the kernel)
  int64_t stranger_open_peak = 0;       // open at once, most
  int64_t stranger_closed_by_peer = 0;  // refused, evicted or timed out by a daemon
  int64_t stranger_connect_failed = 0;
  // The worker-token holder.
  int64_t tickets_taken = 0, tickets_refused = 0;
  int64_t stalled_opened = 0, stalled_closed_by_peer = 0;
  int64_t pulls_sent = 0, flood_reconnects = 0;
  int64_t exchange_frames_sent = 0, exchange_streams = 0;  // the Exchange flood
  // The probe.
  int64_t probes = 0, probe_failures = 0, probe_ticket_refusals = 0;
  double probe_slot_wait_max_ms = 0;  // connect to an admitted hello, most
  double probe_pull_max_ms = 0;       // one pull answered, most
  std::string probe_last_error;
};

// The ring attack (issue #28): the mirrored MLP job
// (examples/fashion_mnist_mlp_mirrored.pbtxt; a chief and two workers, no
// PS, per-role tokens, each worker's collective port fixed so a restarted
// worker listens where it did). From a fifth of the steps on, strangers
// (no token) hold up to `connections` sockets to the two collective ports
// from `sources` loopback addresses (127.0.2.2 on): half send nothing,
// half trickle one byte of a ring ClientHello every 2 s; each is opened
// again when the worker closes it (or the connect fails). Once they have
// opened `connections` (or after `kill_after_seconds`), worker:1 is
// SIGKILLed and started again, so the group re-forms beside them; the attack stops when training has gone
// 20 steps past the re-formation (or at seven tenths of the steps, if
// later). The unattacked run kills and restarts worker:1 at the same step.
struct RingOptions {
  std::string dir;  // scratch directory, made if absent
  int64_t steps = 3000;
  int connections = 2000;  // stranger sockets held at once over both ports, at most
  int sources = 100;       // 127.0.2.2 ... 127.0.2.(1 + sources)
  double kill_after_seconds = 10;
};

struct RingRun {
  bool attacked = false;
  bool finished = false;  // the chief exited 0 with a summary
  double accuracy = -1;
  double wall_seconds = -1;
  int64_t failures_survived = -1;
  std::string summary;
  std::string error;  // what went wrong, if anything
  int64_t killed_at_step = -1;
  // From SIGKILL of worker:1: the chief's "recovered to the checkpoint"
  // line, and training 20 steps on from there (the group re-formed: every
  // step is an all-reduce).
  double recovered_seconds = -1;
  double resumed_seconds = -1;
  // The group's re-formation itself: how long TcpRingCollective::Create
  // took on each worker after the kill (their "collective group ...
  // formed" lines). worker:1's starts once it is running again, beside
  // worker:0 already waiting in its own.
  double formed_seconds[2] = {-1, -1};
  // Strangers.
  int64_t stranger_opened = 0;
  int64_t stranger_open_peak = 0;
  int64_t stranger_closed_by_peer = 0;  // ended by a worker (handshake limit, eviction, exit)
  int64_t stranger_connect_failed = 0;
  int64_t stranger_hello_bytes_read = 0;  // ServerHello bytes the workers sent them
};

RingRun RunMirroredJob(const RingOptions& options, bool attack, const std::string& name);
std::string Describe(const RingRun& run);

// Runs the job once, attacked or not. Never aborts: a failure is in the
// result (finished false, summary empty).
SoakRun RunJob(const SoakOptions& options, bool attack, const std::string& name);

// FIGURE: lines for a log, one per measure.
std::string Describe(const SoakRun& run);

}  // namespace soak
}  // namespace psrt

#endif  // PSRT_TESTS_BENCH_HOSTILE_SOAK_LIB_H_
