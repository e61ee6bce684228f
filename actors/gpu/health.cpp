// The health rule (health.hpp).
#include "actors/gpu/health.hpp"

#include <cmath>

namespace vidline::actors::gpu {

const char* xid_meaning(int32_t code) {
  switch (code) {
  case 48: return "double-bit ECC error";
  case 61: return "internal micro-controller breakpoint";
  case 62: return "internal micro-controller halt";
  case 64: return "ECC page retirement or row remapping failed";
  case 74: return "NVLink error";
  case 79: return "fallen off the bus";
  case 92: return "high single-bit ECC error rate";
  case 94: return "contained ECC error";
  case 95: return "uncontained ECC error";
  case 119: return "GSP RPC timeout";
  case 120: return "GSP error";
  default: return "";
  }
}

namespace {

std::string fmt(double v) { return std::to_string(std::llround(v)); }

/// The Xids of `g` that make a card sick and came since the last reading, as "Xid 79
/// (fallen off the bus)". By their counts, so a lost report costs nothing; a reading
/// without Xid figures (a card missing from its driver) changes nothing.
std::string new_critical_xids(health_state& h, const msg::gpu_sample& g) {
  if (g.xid_events < 0)
    return "";
  std::string out;
  for (auto& x : g.xids) {
    int64_t& seen = h.xid_seen[x.code];
    if (x.count > 0 && x.count != seen && *xid_meaning(x.code) != '\0')
      out += (out.empty() ? "" : ", ") + std::string("Xid ") + std::to_string(x.code) + " ("
             + xid_meaning(x.code) + ")";
    seen = x.count;
  }
  return out;
}

} // namespace

std::string condition(health_state& h, const msg::gpu_sample& g, const health_params& p,
                      double now) {
  const std::string xid = new_critical_xids(h, g);
  if (g.lost)
    return "lost (fell off the bus or missing)" + (xid.empty() ? "" : "; " + xid);
  if (!xid.empty())
    return xid;
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

} // namespace vidline::actors::gpu
