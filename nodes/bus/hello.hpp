#pragma once
/// The hello check: every heartbeat carries the sender's vidline version and the digest of
/// the cluster config it was started from, and a node refuses a peer whose either differs
/// from its own. A cluster runs one version from one config; what this catches:
///   - a host left on an older (or newer) build after an upgrade of the others;
///   - a host started from a stale or edited copy of the config (another port, knob,
///     mode or key), whose view of the line silently disagrees with the rest;
///   - a build older than the check, which announces neither (refused as "no version").
/// Pure: no sockets, no clocks; the bus logs, counts and drops (nodes/bus/bus_inbound.cpp).

#include <optional>
#include <string>

#include "messages/messages.hpp"

namespace vidline::nodes::bus {

/// What a node announces of itself in its hello.
struct hello_identity {
  std::string version;        ///< vidline::version_string
  std::string config_digest;  ///< config::digest of the cluster it runs
};

/// Why `theirs` must be refused by a node that is `ours` (one sentence naming both
/// values and what to do), or nothing when it matches.
std::optional<std::string> hello_mismatch(const hello_identity& ours,
                                          const msg::heartbeat& theirs);

} // namespace vidline::nodes::bus
