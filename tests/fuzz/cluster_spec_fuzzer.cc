// Fuzzes the cluster spec / TF_CONFIG loader (common/cluster_spec.h) with
// arbitrary text: as a spec file's JSON, as TF_CONFIG, and as a --task flag.
// Beyond "no crash", an accepted spec must survive its own ToJson (the
// chief hands that JSON to every task it launches) and name an address for
// each of its tasks.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/cluster_spec.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "cluster_spec_fuzzer: invariant failed: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<psrt::ClusterSpec> spec = psrt::ClusterSpec::FromJson(text, "fuzz");
  if (spec.ok()) {
    for (const psrt::TaskId& t : spec->AllTasks()) {
      absl::StatusOr<std::string> address = spec->AddressOf(t);
      Check(address.ok(), "AddressOf fails for a task of AllTasks");
      Check(psrt::ValidateAddress(*address).ok(), "an accepted spec holds a bad address");
    }
    const std::string json = spec->ToJson();
    absl::StatusOr<psrt::ClusterSpec> again = psrt::ClusterSpec::FromJson(json, "round trip");
    Check(again.ok(), "ToJson of an accepted spec is refused");
    Check(again->def().SerializeAsString() == spec->def().SerializeAsString(),
          "ToJson round trip changes the spec");
  }

  // TF_CONFIG is a C string: stop at the first NUL as getenv would.
  absl::StatusOr<psrt::TaskConfig> config = psrt::LoadTaskConfig("", "", text.c_str());
  if (config.ok()) {
    Check(psrt::ValidateAddress(config->address).ok(), "TF_CONFIG task has a bad address");
  }

  absl::StatusOr<psrt::TaskId> task = psrt::ParseTaskId(text);
  if (task.ok()) {
    absl::StatusOr<psrt::TaskId> again = psrt::ParseTaskId(psrt::TaskName(*task));
    Check(again.ok() && again->SerializeAsString() == task->SerializeAsString(),
          "TaskName/ParseTaskId round trip");
  }
  (void)psrt::ValidateAddress(text);
  return 0;
}
