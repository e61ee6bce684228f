#pragma once
/// The `vidline` command line: node, run, wait, status, demo, ...

namespace vidline::nodes {

/// Parses the command line and runs the verb; returns the process exit code
/// (0 ok, 1 a job failed, 2 usage or config error, 3 timeout).
int cli_main(int argc, char** argv);

} // namespace vidline::nodes
