#pragma once
/// A host's latent store: which latents lie here, which the coordinator released, when
/// each is removed, and whether the host is within its latent budget. A pure state
/// machine; the shell (latents_actor) scans the directory and removes files.
///
///   on disk --scan--> held (reported) --release--> released --retention_s--> removed
///
/// Every latent file counts against the budget until it is removed: sampled ones waiting
/// to move, received ones waiting to decode, released ones kept for latent_retention_s.
/// The host accepts jobs while the count is below the budget. Releases live in memory:
/// after a restart the next report brings them again. A sampler's checkpoint (its note
/// names the step) lies here as a latent does and is reported as one, but goes at once
/// when released: nothing decodes it, so there is nothing to retain.

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "messages/messages.hpp"

namespace vidline::actors::latents {

/// One latent file found by a scan.
struct file {
  uint64_t bytes = 0;
  std::string run_id;  ///< the job it was sampled for ("" when received)
  uint32_t index = 0;
  uint32_t checkpoint_step = 0;  ///< a checkpoint of that job saved after this step (0: a latent)
  uint64_t attempt = 0;          ///< the checkpoint's sampling attempt
};

struct held {
  file f;
  double released_at = -1;  ///< when the coordinator released it (-1: not yet)
};

struct state {
  std::string host;
  uint64_t epoch = 0;
  uint64_t seq = 0;
  uint64_t budget_bytes = 0;  ///< 0 = none
  double retention_s = 0;
  std::map<std::string, held> latents;  ///< by sha256

  uint64_t bytes() const;
  bool accepting() const { return budget_bytes == 0 || bytes() < budget_bytes; }
};

/// The directory as it is now (sha256 -> file), at time `now` (seconds, any monotonic clock).
struct ev_scan { std::map<std::string, file> files; };
/// The coordinator released these.
struct ev_release { std::vector<std::string> sha256s; };
using event = std::variant<ev_scan, ev_release>;

struct fx_report { msg::latent_holdings h; };  ///< to the coordinator
struct fx_remove { std::string sha256; };        ///< delete <sha256>.latent (and its note)
struct fx_accepting { bool accepting = true; };  ///< tell the host's pools (on change)
struct fx_log { int level = 2; std::string text; };
using effect = std::variant<fx_report, fx_remove, fx_accepting, fx_log>;

std::vector<effect> step(state& s, const event& e, double now);

} // namespace vidline::actors::latents
