// The health rule (health.hpp).
#include "actors/gpu/health.hpp"

#include <cmath>

namespace vidline::gpu {
namespace {

std::string fmt(double v) { return std::to_string(std::llround(v)); }

} // namespace

std::string condition(health_state& h, const msg::gpu_sample& g, const health_params& p,
                      double now) {
  if (g.lost)
    return "lost (fell off the bus or missing)";
  if (g.ecc_uncorrected > 0)
    return std::to_string(g.ecc_uncorrected) + " uncorrectable ECC errors";
  const bool hot = g.temperature_c >= 0 && g.slowdown_c > 0 && g.temperature_c >= g.slowdown_c;
  if (!hot) {
    h.hot_since = -1;
    return "";
  }
  if (h.hot_since < 0)
    h.hot_since = now;
  if (now - h.hot_since >= p.hot_s)
    return "at " + fmt(g.temperature_c) + " C, at or above its slowdown temperature ("
           + fmt(g.slowdown_c) + " C) for " + fmt(now - h.hot_since) + " s";
  return "";
}

bool step(health_state& h, msg::gpu_sample& g, const health_params& p, double now) {
  if (g.source == "unknown" && !g.lost) {
    g.health = "unknown";
    g.health_reason.clear();
    return false;
  }
  h.known = true;
  const bool before = h.sick;
  std::string why = condition(h, g, p, now);
  if (!why.empty()) {
    h.sick = true;
    h.reason = why;
    h.clear_since = -1;
  } else if (h.sick) {
    if (h.clear_since < 0)
      h.clear_since = now;
    if (now - h.clear_since >= p.recover_s) {
      h.sick = false;
      h.clear_since = -1;
    }
  }
  g.health = h.sick ? "sick" : "ok";
  g.health_reason = h.sick ? h.reason : "";
  return h.sick != before;
}

} // namespace vidline::gpu
