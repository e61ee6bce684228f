#pragma once
/// `vidline node`: one host's node in the foreground.

#include <string>

#include "config/config.hpp"

namespace vidline::nodes {

/// Real seconds per run-clock second for a cluster: the sim backends' time_scale when every
/// backend is sim (they must agree), 1 otherwise.
double run_clock_scale(const config::cluster& c);

/// Runs host `host`'s node until SIGTERM/SIGINT (exit 0) or a fatal error (non-zero, see
/// exit_codes.hpp). Logs to stderr and to <data_dir>/logs/node.log (rotating).
int run_node(const config::cluster& c, const std::string& host);

} // namespace vidline::nodes
