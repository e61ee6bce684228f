#pragma once
/// What every part of bench_handoff shares: its options, die() and the children it ends,
/// medians and the like. Declared here, defined in common.cpp.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <sys/types.h>

namespace vidline::bench::handoff {

namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

inline constexpr uint64_t mib = 1ull << 20;

double ms_between(steady::time_point a, steady::time_point b);
double median(std::vector<double> v);
double min_of(const std::vector<double>& v);
double max_of(const std::vector<double>& v);

/// Processes this program started and has not reaped: ended by die().
std::vector<pid_t>& children();

[[noreturn]] void die(const std::string& why);

/// Command-line options as --name value pairs after the subcommand.
struct args {
  std::map<std::string, std::vector<std::string>> values;

  args() = default;
  args(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0 || i + 1 >= argc)
        die("expected --name value, got '" + a + "'");
      values[a.substr(2)].push_back(argv[++i]);
    }
  }
  bool has(const std::string& k) const { return values.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = values.find(k);
    return it == values.end() ? def : it->second.back();
  }
  std::string need(const std::string& k) const {
    if (!has(k))
      die("--" + k + " is required");
    return get(k);
  }
  long long num(const std::string& k, long long def) const {
    if (!has(k))
      return def;
    try {
      return std::stoll(get(k));
    } catch (const std::exception&) {
      die("--" + k + " must be a number, got '" + get(k) + "'");
    }
  }
};

} // namespace vidline::bench::handoff
