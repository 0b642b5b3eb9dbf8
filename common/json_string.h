// JSON string literals for the few JSON files we write by hand (the cluster
// spec's TF_CONFIG, the exporter's Keras model description). What goes in
// comes from users (hosts, layer names) and may hold a quote or a control
// character; what comes out is parsed again by other programs.
#ifndef PSRT_COMMON_JSON_STRING_H_
#define PSRT_COMMON_JSON_STRING_H_

#include <string>

#include "absl/strings/string_view.h"

namespace psrt {

// `s` quoted, with '"', '\\' and control characters escaped as JSON
// requires. Other bytes pass through (UTF-8 stays UTF-8).
std::string JsonString(absl::string_view s);

}  // namespace psrt

#endif  // PSRT_COMMON_JSON_STRING_H_
