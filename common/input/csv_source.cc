// CSV: one example per line, comma-separated numbers. The label is the
// column named by InputDef.label_key (a header name, which makes the first
// line a header, or a column number; default column 0); every other column
// goes, in order, into the first (DENSE) feature.
#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/input/source.h"
#include "common/input/text_source.h"

namespace psrt {
namespace {

class CsvSource : public ExampleSource {
 public:
  CsvSource(const InputDef& input, const DataSource& split) : input_(input), lines_(InputLines(input, split)) {}

  absl::Status Reset() override {
    RETURN_IF_ERROR(lines_.Reset());
    columns_ = -1;
    int col;
    if (input_.label_key().empty()) {
      label_column_ = 0;
    } else if (absl::SimpleAtoi(input_.label_key(), &col) && col >= 0) {
      label_column_ = col;
    } else {
      // A named label: the first line is a header.
      std::string header;
      ASSIGN_OR_RETURN(bool any, lines_.Next(&header));
      if (!any) return absl::InvalidArgumentError("CSV input is empty, expected a header");
      std::vector<std::string> names = absl::StrSplit(header, ',');
      label_column_ = -1;
      for (size_t i = 0; i < names.size(); ++i) {
        if (absl::StripAsciiWhitespace(names[i]) == input_.label_key()) label_column_ = i;
      }
      if (label_column_ < 0) {
        return lines_.Error(absl::StrCat("header has no column \"", input_.label_key(), "\""));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Next(Example* ex) override {
    std::string line;
    ASSIGN_OR_RETURN(bool more, lines_.Next(&line));
    if (!more) return false;
    std::vector<absl::string_view> cells = absl::StrSplit(line, ',');
    if (columns_ < 0) columns_ = cells.size();
    if (static_cast<int>(cells.size()) != columns_) {
      return lines_.Error(absl::StrCat("has ", cells.size(), " columns, expected ", columns_));
    }
    if (label_column_ >= columns_) {
      return lines_.Error(absl::StrCat("no label column ", label_column_));
    }
    ex->features.assign(1, FeatureValues());
    auto& values = ex->features[0].floats;
    values.reserve(cells.size() - 1);
    for (int c = 0; c < columns_; ++c) {
      float v;
      if (!absl::SimpleAtof(absl::StripAsciiWhitespace(cells[c]), &v)) {
        // Position and size only: a job may point at any file, and its
        // errors travel to whoever sent the Start (issue #17).
        return lines_.Error(absl::StrCat("column ", c, " (", cells[c].size(), " characters) is not a number"));
      }
      if (c == label_column_) {
        ex->label = v;
      } else {
        values.push_back(v);
      }
    }
    return true;
  }

 private:
  const InputDef input_;
  LineReader lines_;
  int label_column_ = 0;
  int columns_ = -1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenCsvSource(const InputDef& input,
                                                             const DataSource& split) {
  if (input.feature_size() != 1 || input.feature(0).kind() != FeatureDef::DENSE) {
    return absl::InvalidArgumentError("CSV input gives exactly one DENSE feature");
  }
  auto source = std::make_unique<CsvSource>(input, split);
  RETURN_IF_ERROR(source->Reset());
  return std::unique_ptr<ExampleSource>(std::move(source));
}

}  // namespace psrt
