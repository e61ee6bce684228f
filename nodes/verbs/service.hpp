#pragma once
/// `vidline start` and `vidline stop`: this machine's nodes in the background.
///
/// A host's node is identified by its data directory's lock (nodes/state/node_lock.hpp:
/// `<data_dir>/run/node.lock`, held by the node for its life; the kernel names the
/// holder), never by the config path it was given: a copy of the config at another path
/// finds the same nodes. The pid file `<data_dir>/run/node.pid` records what start
/// started; it is removed only when no process holds the lock.
///
/// start: for each host of the config on this machine (or --host): when a node holds the
/// data directory's lock, nothing is started (the same host and config: "already running",
/// or left alone when start did not start it; any other node: refused, exit 4, naming its
/// pid). Otherwise a stale pid file is removed (said so), the host's keys are checked as
/// its bus loads them (bus_security_for), and `vidline node --config FILE --host H` starts
/// in a session of its own, output appended to <data_dir>/logs/node.out (not its log: the
/// node logs to node.log and puts only critical lines on a stderr that is a file,
/// nodes/node_log.hpp); start waits until it holds the lock and its bus answers. A lock
/// file (start.lock) serialises concurrent starts (and a stop waits for a start). The
/// node owns its backends: exec commands run per stage, and a comfyui backend with
/// `options.process` starts its ComfyUI instance itself.
/// stop: SIGTERM to the holder of each host's lock (it cancels running stages and stops
/// its backend processes), up to --grace seconds for it to exit, then SIGKILL; then the
/// pid file goes. With --json both print one JSON object on stdout (docs/backends.md)
/// and their lines for people on stderr.

#include <string>
#include <vector>

#include "config/config.hpp"

namespace vidline::nodes::verbs {

struct service_options {
  std::string config;
  std::string mode;                 ///< start: checked to exist (actors::coordinator::resolve_mode); "" = any
  std::vector<std::string> hosts;   ///< empty = the config's hosts on this machine
  double ready_timeout_s = 30;      ///< start: until the node answers
  double grace_s = 60;              ///< stop: SIGTERM -> SIGKILL
  std::string self_exe;             ///< the vidline binary to run
  bool json = false;                ///< print the result as JSON on stdout
};

int start_nodes(const service_options& o);
int stop_nodes(const service_options& o);

/// Whether a vidline node of this protocol version answers at the host's bus (it is asked
/// for a latent that cannot exist, which every node's bus answers).
bool node_answers(const config::cluster& c, const config::host& h, double timeout_s);

/// The hosts of `c` on this machine: `named` when given (unknown names throw
/// std::invalid_argument), else those whose address is one of this machine's.
std::vector<const config::host*> hosts_here(const config::cluster& c,
                                            const std::vector<std::string>& named);

} // namespace vidline::nodes::verbs
