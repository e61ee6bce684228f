// bench_handoff's shared helpers: medians and the like, the children it started, die().

#include "bench/handoff/common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <signal.h>

namespace vidline::bench::handoff {


double ms_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty())
    return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double min_of(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::min_element(v.begin(), v.end());
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::max_element(v.begin(), v.end());
}

/// Processes this program started and has not reaped: ended by die().
std::vector<pid_t>& children() {
  static std::vector<pid_t> pids;
  return pids;
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "bench_handoff: %s\n", why.c_str());
  for (pid_t pid : children())
    ::kill(pid, SIGKILL);
  std::exit(2);
}

} // namespace vidline::bench::handoff
