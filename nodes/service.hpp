#pragma once
/// `vidline start` and `vidline stop`: this machine's nodes in the background.
///
/// start: for each host of the config on this machine (or --host), unless its node already
/// runs (its pid file <data_dir>/run/node.pid names a live `vidline node` of that config
/// and host), starts `vidline node --config FILE --host H` in a session of its own, output
/// appended to <data_dir>/logs/node.out (not its log: the node logs to node.log and puts
/// only critical lines on a stderr that is a file, nodes/node_log.hpp), and waits until
/// its bus answers. A lock file
/// serialises concurrent starts. The node owns its backends: exec commands run per stage,
/// and a comfyui backend with `options.process` starts its ComfyUI instance itself.
/// stop: SIGTERM to each such node (it cancels running stages and stops its backend
/// processes), up to --grace seconds for it to exit, then SIGKILL; the pid file goes.

#include <string>
#include <vector>

#include "config/config.hpp"

namespace vidline::nodes {

struct service_options {
  std::string config;
  std::string mode;                 ///< start: checked to exist; "" = any
  std::vector<std::string> hosts;   ///< empty = the config's hosts on this machine
  double ready_timeout_s = 30;      ///< start: until the node answers
  double grace_s = 60;              ///< stop: SIGTERM -> SIGKILL
  std::string self_exe;             ///< the vidline binary to run
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

} // namespace vidline::nodes
