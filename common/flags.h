// Command lines of Tessera's programs (tessera-run and the examples), read
// with Abseil's flags library: `--help` lists every flag with its meaning
// and default, `--flag value` and `--flag=value` both work, and an unknown
// flag is named with the nearest known one ("did you mean --epochs?") —
// which Abseil 20220623 does not do itself.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace tessera {

enum class Positionals {
  kNone,           // every argument is a flag: a stray word is an error
  kStopAtProgram,  // flags end at the first non-flag (tessera-run's program)
};

struct ParsedFlags {
  std::set<std::string> given;          // names of the flags on the command line
  std::vector<std::string> positional;  // from the first non-flag on (kStopAtProgram)
};

// Parses argv into the program's ABSL_FLAGs. Prints the problem and exits
// with status 2 on a bad command line; --help (and --helpfull, --version)
// prints `usage` and the flags to standard output and exits with status 0.
ParsedFlags ParseFlags(int argc, char** argv, const std::string& usage,
                       Positionals positionals = Positionals::kNone);

// The registered flag name nearest to `name` (edit distance), "" if none is
// close; for error messages.
std::string NearestFlag(const std::string& name);

}  // namespace tessera
