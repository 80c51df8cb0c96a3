#include "common/flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// Flags Abseil itself understands on every program.
const std::set<std::string>& BuiltinFlags() {
  static const auto* builtin = new std::set<std::string>{
      "help",     "helpfull", "helpshort",  "helppackage", "version", "only_check_args",
      "flagfile", "fromenv",  "tryfromenv", "undefok"};
  return *builtin;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

[[noreturn]] void Fail(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: %s (--help lists the flags)\n", program, message.c_str());
  std::exit(2);
}

}  // namespace

std::string NearestFlag(const std::string& name) {
  std::string best;
  size_t best_distance = std::max<size_t>(3, name.size() / 3) + 1;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
    if (flag->Filename().find("/absl/") != std::string::npos) continue;  // Abseil's own
    const size_t distance = EditDistance(name, std::string(flag_name));
    if (distance < best_distance) {
      best_distance = distance;
      best = std::string(flag_name);
    }
  }
  return best;
}

ParsedFlags ParseFlags(int argc, char** argv, const std::string& usage, Positionals positionals) {
  ParsedFlags parsed;
  absl::SetProgramUsageMessage(usage);
  // --help lists every flag of Tessera's (Abseil's default: only those
  // defined in a file named like the program).
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  const std::string path = argc > 0 ? argv[0] : "program";
  const std::string name_of_program = path.substr(path.rfind('/') + 1);
  const char* program = name_of_program.c_str();
  // Where the flags end, checking each name first: Abseil would only say
  // "Unknown command line flag" (and parse a program's own flags as ours).
  int end = 1;
  for (; end < argc; ++end) {
    const std::string arg = argv[end];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') {
      if (positionals == Positionals::kStopAtProgram) break;
      Fail(program, absl::StrCat("unexpected argument '", arg, "': every argument is a --flag"));
    }
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1);
    const bool has_value = name.find('=') != std::string::npos;
    name = name.substr(0, name.find('='));
    if (BuiltinFlags().count(name) > 0) continue;
    parsed.given.insert(name);
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>()) {
        parsed.given.insert(name.substr(2));
        continue;
      }
      flag = nullptr;
    }
    if (flag == nullptr) {
      const std::string nearest = NearestFlag(name);
      Fail(program,
           absl::StrCat("unknown flag --", name,
                        nearest.empty() ? "" : absl::StrCat("; did you mean --", nearest, "?")));
    }
    if (!has_value && !flag->IsOfType<bool>()) {
      if (end + 1 >= argc) Fail(program, absl::StrCat("--", name, " needs a value"));
      ++end;  // --flag value
    }
  }
  std::vector<char*> ours(argv, argv + end);
  // Abseil exits with status 1 after printing --help; GNU's convention, and
  // a script that runs `program --help`, expect 0 for help asked for.
  namespace internal = absl::flags_internal;
  internal::ParseCommandLineImpl(static_cast<int>(ours.size()), ours.data(),
                                 internal::ArgvListAction::kRemoveParsedArgs,
                                 internal::UsageFlagsAction::kIgnoreUsage,
                                 internal::OnUndefinedFlag::kAbortIfUndefined);
  if (internal::HandleUsageFlags(std::cout, absl::ProgramUsageMessage()) != -1) {
    std::cout.flush();
    std::exit(0);
  }
  if (end < argc && std::string(argv[end]) == "--") ++end;
  parsed.positional.assign(argv + end, argv + argc);
  return parsed;
}

}  // namespace tessera
