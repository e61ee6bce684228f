#pragma once
/// A card's health rule: a pure machine, time given by the caller (seconds on any one
/// clock), no I/O. The node's sampler (nodes/gpu/sampler.hpp) feeds it readings. (The
/// energy of the stages on a card: power_log.hpp.)
///
/// The rule (docs/reliability.md, "Drains"): a card is sick while
///   - it reports an uncorrectable ECC error (the driver's volatile count, since it loaded:
///     it clears only with a reset of the card, or `vidline undrain`),
///   - it is lost (fell off the bus: NVML answers "GPU is lost", the amdgpu device is gone,
///     or a card the config names is missing),
///   - it raised an Xid that means the card is lost or its state corrupt (`xid_meaning`):
///     an event, so it holds at the reading that brings it; the card stays sick until
///     recover_s passed without another (a lasting fault shows as another condition too:
///     a card off the bus reads lost, a double-bit error raises the ECC count), or
///   - it has been above its slowdown temperature for longer than hot_s.
/// A sick card is well again when none of these held for recover_s. Without telemetry
/// (source "unknown") there is no verdict: "unknown", never sick. Other Xids (most are an
/// application's fault: 13, 31, 43, 45) are counted and shown, never a verdict.

#include <cstdint>
#include <map>
#include <string>

#include "messages/gpu.hpp"

namespace vidline::actors::gpu {

struct health_params {
  double hot_s = 30;      ///< knob gpu_hot_s
  double recover_s = 60;  ///< knob gpu_recover_s
};

struct health_state {
  bool sick = false;
  std::string reason;         ///< why it is (or was last) sick
  double hot_since = -1;      ///< when it went above its slowdown temperature (-1: it is not)
  double clear_since = -1;    ///< sick: since when no condition holds (-1: one holds)
  bool known = false;         ///< a reading with telemetry came
  std::map<int32_t, int64_t> xid_seen;  ///< each Xid code's count at the last reading
};

/// What an Xid code that makes a card sick means ("" for the others): the list in
/// docs/reliability.md, "Drains", from NVIDIA's Xid catalogue.
const char* xid_meaning(int32_t code);

/// What is wrong with the card now by this reading, "" = nothing (updates hot_since).
std::string condition(health_state& h, const msg::gpu_sample& g, const health_params& p,
                      double now);

/// Applies one reading at `now`; true when the verdict (sick or not) changed. Writes the
/// verdict into `g.health` / `g.health_reason`.
bool step(health_state& h, msg::gpu_sample& g, const health_params& p, double now);

} // namespace vidline::actors::gpu
