// The checkpoint exporter: a committed psrt checkpoint to the formats other
// runtimes read.
//
//   bazel run //chief:export -- --checkpoint_dir=DIR [--step=S] [--job=JOB.pbtxt]
//           --format=weights_h5|keras|tf|onnx --out=PATH [--include_optimizer] [--evaluate]
//
// A checkpoint records the job that wrote it (CheckpointManifest.job), so
// --job is needed only for checkpoints from before it did; a --job whose
// model is not the recorded one is refused saying so.
//
// --format=weights_h5 writes the .weights.h5 file Keras 3's
// model.load_weights takes, and --format=keras the .keras file
// keras.models.load_model opens (chief/export_formats/keras_saving.h); with
// --include_optimizer also the compiled optimizer in the checkpoint's state
// (chief/export_formats/keras_optimizer.h says which optimizers and how).
// --format=tf writes a TensorFlow checkpoint, PATH.index and
// PATH.data-00000-of-00001 (tf.train.load_checkpoint reads every variable
// bit for bit), laid out for a Keras 3 model built from the job's layer
// list (chief/export_formats/keras_checkpoint.h says how to load it), and
// PATH.keras.json describing that model. --format=onnx writes the
// inference graph with the trained weights as one ONNX model file, PATH.
// --evaluate also prints psrt's own metrics of those weights on the job's
// test split, to compare with another runtime's.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chief/export_formats/keras_checkpoint.h"
#include "chief/export_formats/keras_saving.h"
#include "chief/export_formats/onnx_export.h"
#include "common/checkpoint/checkpoint_slots.h"
#include "common/checkpoint/checkpoint_variables.h"
#include "common/flags_help.h"
#include "common/plan/job_flags.h"
#include "common/plan/job_planner.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"

ABSL_FLAG(std::string, job, "",
          "The job file (.pbtxt) the checkpoint was trained with. Optional: a checkpoint records its job, and a --job "
          "whose model differs from it is refused.");
ABSL_FLAG(std::string, checkpoint_dir, "", "The job's checkpoint directory (checkpoint.dir). Required.");
ABSL_FLAG(int64_t, step, -1, "The committed step to export (default: the newest that verifies).");
ABSL_FLAG(std::string, format, "",
          "weights_h5 (Keras 3's model.load_weights), keras (keras.models.load_model), "
          "tf (a TensorFlow checkpoint) or onnx. Required.");
ABSL_FLAG(std::string, out, "",
          "weights_h5, keras, onnx: the file (Keras wants the names to end .weights.h5 and .keras); "
          "tf: the checkpoint prefix (writes PATH.index, PATH.data-00000-of-00001, PATH.keras.json). Required.");
ABSL_FLAG(bool, include_optimizer, false,
          "keras: also carry the optimizer (compile_config and its variables: iterations, learning rate, slots), "
          "as model.save(include_optimizer=True) does, so training resumes in Keras where psrt left off. Only "
          "sgd, momentum, adam, adamw and rmsprop without a learning-rate schedule; others are refused saying why.");
ABSL_FLAG(bool, evaluate, false, "Also print psrt's metrics of the exported weights on the job's test split.");

namespace psrt {
namespace {

constexpr char kUsage[] =
    "Exports a committed psrt checkpoint for Keras 3, TensorFlow or ONNX Runtime.\n"
    "Usage: export --checkpoint_dir=DIR [--step=S] [--job=JOB.pbtxt] --format=weights_h5|keras|tf|onnx\n"
    "              --out=PATH [--include_optimizer] [--evaluate]\n"
    "(the checkpoint records its job; --job only for checkpoints older than that, and refused when its\n"
    "model differs from the recorded one)\n"
    "\n"
    "weights_h5: PATH (name it *.weights.h5), the file Keras 3's model.save_weights writes, for a model\n"
    "      built from the job's layer list, Sequential or Functional, any layer names:\n"
    "        model = keras.Sequential([keras.Input(INPUT_SHAPE), keras.layers.Dense(256, \"relu\"), ...])\n"
    "        model.load_weights(\"PATH\")   # raises naming the layer if anything does not fit\n"
    "keras: PATH (name it *.keras), the file model.save writes: config.json (a keras.Sequential of the\n"
    "      job's layers), metadata.json and model.weights.h5 (as weights_h5). No code of yours needed:\n"
    "        model = keras.models.load_model(\"PATH\")\n"
    "      --include_optimizer (keras only; off by default): the file also holds the compiled optimizer, as\n"
    "      model.save writes it: config.json's compile_config (the optimizer with the job's hyperparameters,\n"
    "      the loss, the metrics) and model.weights.h5's optimizer/vars (iterations = the variables' update\n"
    "      count, the learning rate, the slots), so model.fit/train_on_batch carries on the same run.\n"
    "      sgd, momentum (Keras' SGD slot is -learning_rate times psrt's accumulator), adam, adamw and\n"
    "      rmsprop; adagrad (epsilon placed otherwise), ftrl and any learning-rate schedule are refused,\n"
    "      saying why (nothing is written).\n"
    "      Layers exported (both formats): dense, conv2d, max_pool2d, flatten, dropout, activation; an\n"
    "      embedding (a sum or mean over variable-length ids) or a layer with named inputs is refused,\n"
    "      naming it. A checkpoint variable no layer has, or one a layer lacks, is an error naming it.\n"
    "tf:   PATH.index + PATH.data-00000-of-00001, TensorFlow's checkpoint format, and PATH.keras.json.\n"
    "      tf.train.load_checkpoint(PATH) reads every variable as trained, under the keys a Keras 3 model\n"
    "      (TensorFlow 2.21) built from the same layer list saves:\n"
    "        model = keras.Sequential([keras.Input(INPUT_SHAPE)] + [the job's layers, in order])\n"
    "        tf.train.Checkpoint(model=model).read(PATH).assert_consumed()\n"
    "      (a Functional model of the same layers restores too; restore before compile()).\n"
    "      (Keras 3's model.load_weights refuses this format: use weights_h5 or keras for it.)\n"
    "      PATH.keras.json holds the input shape and each layer's Keras class and config.\n"
    "onnx: PATH, an ONNX model (opset 13) of the inference graph (dropout removed) with the trained\n"
    "      weights; input: the job's dense feature (e.g. \"image\", [batch, 28, 28, 1]); output: \"output\",\n"
    "      the last layer's result. Layers exported: dense, conv2d, max_pool2d, flatten, dropout, activation.";

// Paths given to `bazel run` are the user's, not the runfiles tree's.
std::string UserPath(std::string path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (!path.empty() && path[0] != '/' && cwd != nullptr) path = absl::StrCat(cwd, "/", path);
  return path;
}

// Writes `bytes` to PATH.tmp, then renames it to `path`: a reader sees the
// old file or the whole new one.
absl::Status WriteFileAtomically(const std::string& bytes, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::Status Export() {
  const std::string job_path = UserPath(absl::GetFlag(FLAGS_job)), dir = UserPath(absl::GetFlag(FLAGS_checkpoint_dir)),
                    format = absl::GetFlag(FLAGS_format), out = UserPath(absl::GetFlag(FLAGS_out));
  if (dir.empty()) return absl::InvalidArgumentError("--checkpoint_dir=DIR is required");
  if (format != "tf" && format != "onnx" && format != "weights_h5" && format != "keras") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format must be weights_h5, keras, tf or onnx, not \"", format, "\""));
  }
  if (out.empty()) return absl::InvalidArgumentError("--out=PATH is required");
  const bool include_optimizer = absl::GetFlag(FLAGS_include_optimizer);
  if (include_optimizer && format != "keras") {
    return absl::InvalidArgumentError("--include_optimizer is for --format=keras only");
  }
  ASSIGN_OR_RETURN(JobLimits limits, JobLimitsFromFlags());
  // The checkpoint's own job (manifests record it), or --job; a --job
  // whose model is not the recorded one is refused saying so.
  const int64_t step = absl::GetFlag(FLAGS_step);
  absl::StatusOr<TrainingJob> recorded = RecordedJob(dir, step);
  if (!recorded.ok() && recorded.status().code() != absl::StatusCode::kNotFound) return recorded.status();
  TrainingJob job;
  if (job_path.empty()) {
    if (!recorded.ok()) return recorded.status();  // no checkpoint, or one from before manifests held the job
    job = *recorded;
  } else {
    ASSIGN_OR_RETURN(job, LoadJob(job_path, limits));
  }
  // Refused before any store is read: an optimizer Keras cannot carry on.
  if (include_optimizer) RETURN_IF_ERROR(CheckKerasOptimizer(job));
  const bool mismatch = !job_path.empty() && recorded.ok() &&
                        !google::protobuf::util::MessageDifferencer::Equals(recorded->model(), job.model());
  const std::string mismatch_said =
      mismatch ? absl::StrCat("--job=", job_path, " does not match this checkpoint: its model is not the one job \"",
                              recorded->name(),
                              "\" trained, which the checkpoint records (leave --job out to export "
                              "that one)")
               : "";
  absl::StatusOr<CheckpointVariables> read = ReadCheckpointVariables(dir, step, job);
  if (!read.ok()) {
    if (!mismatch) return read.status();
    return absl::Status(read.status().code(), absl::StrCat(mismatch_said, ": ", read.status().message()));
  }
  if (mismatch) return absl::FailedPreconditionError(mismatch_said);
  CheckpointVariables ckpt = *std::move(read);
  if (!ckpt.job_name.empty() && ckpt.job_name != job.name()) {
    std::fprintf(stderr, "warning: the checkpoint was written by job \"%s\", --job is \"%s\"\n", ckpt.job_name.c_str(),
                 job.name().c_str());
  }
  if (format == "tf") {
    RETURN_IF_ERROR(WriteKerasCheckpoint(job, ckpt.values, out));
    std::printf("step %lld: %zu variables -> %s (+ .data-00000-of-00001, .keras.json)\n",
                static_cast<long long>(ckpt.step), ckpt.values.size(), (out + ".index").c_str());
  } else if (format == "weights_h5" || format == "keras") {
    std::optional<KerasOptimizerState> optimizer;
    if (include_optimizer) {
      ASSIGN_OR_RETURN(CheckpointSlots slots, ReadCheckpointSlots(dir, ckpt.step, job));
      ASSIGN_OR_RETURN(optimizer, KerasOptimizer(job, slots));
    }
    ASSIGN_OR_RETURN(std::string bytes, format == "keras"
                                            ? KerasArchive(job, ckpt.values, optimizer ? &*optimizer : nullptr)
                                            : KerasWeightsH5(job, ckpt.values));
    RETURN_IF_ERROR(WriteFileAtomically(bytes, out));
    std::printf("step %lld: %zu variables -> %s (%zu bytes)\n", static_cast<long long>(ckpt.step), ckpt.values.size(),
                out.c_str(), bytes.size());
    if (optimizer) {
      std::printf("optimizer %s: %zu variables (iterations %lld)\n", optimizer->name.c_str(),
                  optimizer->variables.size(), static_cast<long long>(*optimizer->variables[0].data<int64_t>()));
    }
  } else {
    ASSIGN_OR_RETURN(onnx::ModelProto model, ExportOnnx(job, ckpt.model, ckpt.values));
    RETURN_IF_ERROR(WriteFileAtomically(model.SerializeAsString(), out));
    std::printf("step %lld: %d nodes, %d initializers -> %s\n", static_cast<long long>(ckpt.step),
                model.graph().node_size(), model.graph().initializer_size(), out.c_str());
  }
  if (absl::GetFlag(FLAGS_evaluate)) {
    ASSIGN_OR_RETURN(JobPlan plan, PlanJob(job, 1));
    ASSIGN_OR_RETURN(auto metrics, MakeEvaluator(job, plan)(ckpt.values, /*rows=*/nullptr));  // no tables exported
    std::string line = "psrt evaluation:";
    for (const auto& [k, v] : metrics) absl::StrAppend(&line, " ", k, "=", absl::StrFormat("%.6f", v));
    std::printf("%s\n", line.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  psrt::HandleHelp(argc, argv, psrt::kUsage, {{__FILE__, psrt::JobFlagsFile()}, {}});
  absl::SetProgramUsageMessage(psrt::kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 1) {
    std::fprintf(stderr, "error: unexpected argument %s (see --help)\n", args[1]);
    return 2;
  }
  absl::Status s = psrt::Export();
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
