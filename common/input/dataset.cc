#include "common/input/dataset.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Create(DatasetOptions options) {
  if (options.num_shards < 1 || options.shard_index < 0 ||
      options.shard_index >= options.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", options.shard_index, " of ",
                                                   options.num_shards, " is out of range"));
  }
  if (options.input.batch_size() <= 0) {
    return absl::InvalidArgumentError("input.batch_size must be positive");
  }
  RETURN_IF_ERROR(FillDefaultFeatures(&options.input));
  ASSIGN_OR_RETURN(auto source, OpenSource(options.input, options.split));
  auto d = std::unique_ptr<Dataset>(new Dataset(std::move(options), std::move(source)));
  RETURN_IF_ERROR(d->StartEpoch());
  RETURN_IF_ERROR(d->Skip(d->options_.skip_batches));
  if (d->options_.prefetch_batches > 0) d->thread_ = std::thread([p = d.get()] { p->PrefetchLoop(); });
  return d;
}

Dataset::Dataset(DatasetOptions options, std::unique_ptr<ExampleSource> source)
    : options_(std::move(options)),
      buffer_limit_(!options_.shuffle                    ? 1
                    : options_.input.shuffle_buffer() > 0 ? options_.input.shuffle_buffer()
                                                          : std::numeric_limits<size_t>::max()),
      source_(std::move(source)) {}

Dataset::~Dataset() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status Dataset::Skip(int64_t batches) {
  const int64_t batch = options_.input.batch_size();
  if (batches < 0 || batches > std::numeric_limits<int64_t>::max() / batch) {
    return absl::InvalidArgumentError(absl::StrCat("cannot start after ", batches, " batches of ", batch));
  }
  // Example by example through the first epoch (its size is known only once
  // read), then whole epochs at once: every epoch is shuffled on its own, so
  // starting one is the same as reading all of those before it. A forged
  // start step far in the future costs one epoch, not a hang.
  const int64_t total = batches * batch;
  int64_t done = 0;
  int64_t epoch_size = 0;
  while (done < total) {
    Example ex;
    int epoch;
    ASSIGN_OR_RETURN(bool more, NextExample(&ex, &epoch));
    if (!more) return absl::OkStatus();  // the data ends before: nothing left to read
    ++done;
    if (epoch == 1 && epoch_size == 0) {
      epoch_size = done - 1;  // and `ex` is the first example of epoch 1
      const int64_t whole = (total - done + 1) / epoch_size;
      if (options_.epochs > 0 && whole >= options_.epochs - epoch_) {
        exhausted_ = true;  // starts past the last epoch
        return absl::OkStatus();
      }
      if (whole > 0) {
        if (whole > std::numeric_limits<int>::max() - 1 - epoch_) {
          return absl::InvalidArgumentError(absl::StrCat("cannot start after ", batches, " batches: that is ",
                                                         whole, " epochs of ", epoch_size, " examples on"));
        }
        epoch_ += static_cast<int>(whole);
        buffer_.clear();
        RETURN_IF_ERROR(StartEpoch());
        done += whole * epoch_size - 1;  // back at the start of an epoch
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Dataset::StartEpoch() {
  RETURN_IF_ERROR(source_->Reset());
  rng_.seed(Mix(Mix(options_.seed, options_.input.shuffle_seed()), epoch_));
  index_in_epoch_ = 0;
  shard_examples_in_epoch_ = 0;
  source_done_ = false;
  return absl::OkStatus();
}

absl::StatusOr<bool> Dataset::ReadShardExample(Example* ex) {
  while (true) {
    bool mine = index_in_epoch_ % options_.num_shards == options_.shard_index;
    ++index_in_epoch_;
    if (mine) {
      ASSIGN_OR_RETURN(bool more, source_->Next(ex));
      if (more) ++shard_examples_in_epoch_;
      return more;
    }
    ASSIGN_OR_RETURN(bool more, source_->Skip());
    if (!more) return false;
  }
}

absl::StatusOr<bool> Dataset::NextExample(Example* ex, int* epoch) {
  if (exhausted_) return false;
  while (true) {
    while (!source_done_ && buffer_.size() < buffer_limit_) {
      Example e;
      ASSIGN_OR_RETURN(bool more, ReadShardExample(&e));
      if (!more) {
        source_done_ = true;
        break;
      }
      buffer_.push_back(std::move(e));
    }
    if (!buffer_.empty()) {
      size_t i = buffer_limit_ == 1 ? 0 : rng_() % buffer_.size();
      std::swap(buffer_[i], buffer_.back());
      *ex = std::move(buffer_.back());
      buffer_.pop_back();
      *epoch = epoch_;
      return true;
    }
    if (shard_examples_in_epoch_ == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", options_.shard_index, " of ", options_.num_shards, " is empty"));
    }
    if (options_.epochs > 0 && epoch_ + 1 >= options_.epochs) return false;
    ++epoch_;
    RETURN_IF_ERROR(StartEpoch());
  }
}

absl::StatusOr<bool> Dataset::Produce(Batch* batch) {
  std::vector<Example> examples;
  examples.reserve(options_.input.batch_size());
  int first_epoch = 0;
  while (static_cast<int>(examples.size()) < options_.input.batch_size()) {
    Example ex;
    int epoch;
    ASSIGN_OR_RETURN(bool more, NextExample(&ex, &epoch));
    if (!more) break;
    if (examples.empty()) first_epoch = epoch;
    examples.push_back(std::move(ex));
  }
  if (examples.empty()) return false;
  ASSIGN_OR_RETURN(*batch, MakeBatch(options_.input, examples));
  batch->epoch = first_epoch;
  return true;
}

void Dataset::PrefetchLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || static_cast<int>(queue_.size()) < options_.prefetch_batches;
      };
      mu_.Await(absl::Condition(&room));
      if (stop_) return;
    }
    Batch b;
    absl::StatusOr<bool> more = Produce(&b);
    absl::MutexLock lock(&mu_);
    if (!more.ok() || !*more) {
      producer_status_ = more.status();
      producer_done_ = true;
      return;
    }
    queue_.push_back(std::move(b));
  }
}

absl::StatusOr<bool> Dataset::Next(Batch* batch) {
  if (!thread_.joinable()) return Produce(batch);
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || producer_done_;
  };
  mu_.Await(absl::Condition(&ready));
  if (!queue_.empty()) {
    *batch = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }
  if (!producer_status_.ok()) return producer_status_;
  return false;
}

}  // namespace psrt
