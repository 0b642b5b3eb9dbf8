// Dataset: batches of one worker's shard of a split, shuffled per epoch with
// a seed, read ahead by a prefetch thread.
//
// Example i of the split (in file order) belongs to shard i mod num_shards.
// Each epoch's order depends only on (seed, epoch), so runs repeat. With a
// shuffle buffer of S examples, output is drawn at random from the next S
// (S = 0: the whole shard, a full permutation). Every epoch yields each
// example of the shard exactly once; batches run on across epoch ends
// (batch.epoch is the epoch of the first example) and only the last batch
// of the last epoch may be short.
//
//   DatasetOptions o;
//   o.input = job.input();  o.split = job.input().train();
//   o.shard_index = 1;  o.num_shards = 2;  o.seed = job.seed();
//   ASSIGN_OR_RETURN(auto data, Dataset::Create(o));
//   Batch b;
//   while (true) { ASSIGN_OR_RETURN(bool more, data->Next(&b)); if (!more) break; ... }
//
// Next is called from one thread at a time. Errors (a corrupt file, a bad
// line) are sticky: every later Next returns the same one.
#ifndef PSRT_COMMON_INPUT_DATASET_H_
#define PSRT_COMMON_INPUT_DATASET_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/job.pb.h"
#include "common/input/example.h"
#include "common/input/source.h"

namespace psrt {

struct DatasetOptions {
  InputDef input;  // features default per format (FillDefaultFeatures)
  DataSource split;
  int shard_index = 0;
  int num_shards = 1;
  int epochs = 0;  // 0 = repeat forever
  bool shuffle = true;
  uint64_t seed = 0;  // mixed with input.shuffle_seed
  int prefetch_batches = 2;  // 0 = produce on the caller's thread
  // Start after this many batches, as if they had been read: a worker
  // resuming at step S sees the batches it would have seen from step S.
  int64_t skip_batches = 0;
};

class Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<Dataset>> Create(DatasetOptions options);
  ~Dataset();  // stops and joins the prefetch thread

  // The next batch; false after the last epoch.
  absl::StatusOr<bool> Next(Batch* batch);
  const InputDef& input() const { return options_.input; }

 private:
  explicit Dataset(DatasetOptions options, std::unique_ptr<ExampleSource> source);

  // Producer side: runs on the prefetch thread (or the caller's).
  absl::StatusOr<bool> Produce(Batch* batch);
  absl::StatusOr<bool> NextExample(Example* ex, int* epoch);
  absl::StatusOr<bool> ReadShardExample(Example* ex);
  absl::Status StartEpoch();
  // Passes `batches` batches as if read (options.skip_batches).
  absl::Status Skip(int64_t batches);
  void PrefetchLoop();

  const DatasetOptions options_;
  const size_t buffer_limit_;
  std::unique_ptr<ExampleSource> source_;
  // Producer state, touched only by the producing thread.
  std::vector<Example> buffer_;
  std::mt19937_64 rng_;
  int epoch_ = 0;
  bool exhausted_ = false;
  int64_t index_in_epoch_ = 0;  // examples of the split passed this epoch
  int64_t shard_examples_in_epoch_ = 0;
  bool source_done_ = false;

  // Prefetch queue.
  absl::Mutex mu_;
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  bool producer_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status producer_status_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_INPUT_DATASET_H_
