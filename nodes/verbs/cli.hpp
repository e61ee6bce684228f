#pragma once
/// The `vidline` command line: node, run, wait, status, demo, ...

#include <string>

namespace vidline::config {
struct cluster;
}

namespace vidline::nodes::verbs {

/// What `vidline node` runs: host `host`'s node in the foreground, until it is stopped
/// (its exit code). The executable hands in the node's run_node (nodes/node.hpp), so the
/// command line's library does not link the node's.
using node_runner = int (*)(const config::cluster& c, const std::string& host);

/// Parses the command line and runs the verb; returns the process exit code
/// (0 ok, 1 a job failed, 2 usage or config error, 3 timeout).
int cli_main(int argc, char** argv, node_runner run_node);

} // namespace vidline::nodes::verbs
