#include "backends/sim/faults.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>

namespace vidline::backends::sim {
namespace {

struct fault_source {
  bool on = false;
  double hang = 0;
  double crash = 0;
  std::mt19937_64 rng;
  std::mutex mtx;

  fault_source() {
    const char* v = std::getenv("VIDLINE_SIM_FAULTS");
    unsigned long long seed = 0;
    if (v != nullptr && std::sscanf(v, "%llu:%lf:%lf", &seed, &hang, &crash) == 3) {
      rng.seed(seed);
      on = hang > 0 || crash > 0;
    }
  }
};

fault_source& source() {
  static fault_source s;
  return s;
}

} // namespace

injected next_fault() {
  auto& s = source();
  if (!s.on)
    return injected::none;
  std::lock_guard<std::mutex> lock(s.mtx);
  double x = std::uniform_real_distribution<double>(0, 1)(s.rng);
  if (x < s.hang)
    return injected::hang;
  if (x < s.hang + s.crash)
    return injected::crash;
  return injected::none;
}

} // namespace vidline::backends::sim
