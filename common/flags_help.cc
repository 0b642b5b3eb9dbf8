#include "common/flags_help.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace psrt {

std::string HelpText(absl::string_view usage, const HelpFlags& help) {
  std::map<std::string, const absl::CommandLineFlag*> chosen;  // by name: sorted
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired()) continue;
    const bool by_file = std::find(help.files.begin(), help.files.end(), flag->Filename()) != help.files.end();
    const bool by_name = std::find(help.flags.begin(), help.flags.end(), std::string(name)) != help.flags.end();
    if (by_file || by_name) chosen.emplace(std::string(name), flag);
  }
  std::string out = absl::StrCat(usage, "\n\nFlags:\n");
  for (const auto& [name, flag] : chosen) {
    const std::string value = flag->IsOfType<std::string>() ? absl::StrCat("\"", flag->DefaultValue(), "\"")
                                                            : flag->DefaultValue();
    const std::string text = absl::StrReplaceAll(flag->Help(), {{"\n", " "}});
    absl::StrAppend(&out, "  --", name, "=", value, "  ", text, "\n");
  }
  absl::StrAppend(&out, "\n--helpfull lists every flag linked in, those of the libraries included.\n");
  return out;
}

void HandleHelp(int argc, char** argv, absl::string_view usage, const HelpFlags& help) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return;  // what follows is not ours
    if (arg == "--help" || arg == "-help") {
      std::cout << HelpText(usage, help) << std::flush;
      std::exit(0);
    }
  }
}

}  // namespace psrt
