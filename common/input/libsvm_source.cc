// libsvm: "label id:value id:value ... [# comment]" per line. Ids and
// values go into the first (SPARSE) feature; "qid:" tokens are skipped.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/input/source.h"
#include "common/input/text_source.h"

namespace psrt {
namespace {

class LibsvmSource : public ExampleSource {
 public:
  LibsvmSource(const InputDef& input, const DataSource& split) : lines_(InputLines(input, split)) {}

  absl::Status Reset() override { return lines_.Reset(); }

  absl::StatusOr<bool> Next(Example* ex) override {
    std::string line;
    while (true) {
      ASSIGN_OR_RETURN(bool more, lines_.Next(&line));
      if (!more) return false;
      size_t hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      if (line.find_first_not_of(" \t") != std::string::npos) break;
    }
    std::vector<absl::string_view> tokens =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (!absl::SimpleAtof(tokens[0], &ex->label)) {
      return lines_.Error(absl::StrCat("label (", tokens[0].size(), " characters) is not a number"));
    }
    ex->features.assign(1, FeatureValues());
    FeatureValues& f = ex->features[0];
    for (size_t i = 1; i < tokens.size(); ++i) {
      absl::string_view t = tokens[i];
      if (absl::StartsWith(t, "qid:")) continue;
      size_t colon = t.find(':');
      int64_t id;
      float v;
      if (colon == absl::string_view::npos || !absl::SimpleAtoi(t.substr(0, colon), &id) ||
          id < 0 || !absl::SimpleAtof(t.substr(colon + 1), &v)) {
        return lines_.Error(absl::StrCat("token ", i, " (", t.size(), " characters) is not id:value"));
      }
      f.ids.push_back(id);
      f.floats.push_back(v);
    }
    return true;
  }

 private:
  LineReader lines_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenLibsvmSource(const InputDef& input,
                                                                const DataSource& split) {
  if (input.feature_size() != 1 || input.feature(0).kind() != FeatureDef::SPARSE) {
    return absl::InvalidArgumentError("libsvm input gives exactly one SPARSE feature");
  }
  auto source = std::make_unique<LibsvmSource>(input, split);
  RETURN_IF_ERROR(source->Reset());
  return std::unique_ptr<ExampleSource>(std::move(source));
}

}  // namespace psrt
