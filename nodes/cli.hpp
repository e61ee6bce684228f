#pragma once
/// The `vidline` command line: node, run, wait, status, demo, ...

#include <string>

#include "config/knobs.hpp"

namespace vidline::nodes {

/// Parses the command line and runs the verb; returns the process exit code
/// (0 ok, 1 a job failed, 2 usage or config error, 3 timeout).
int cli_main(int argc, char** argv);

/// The prompt of `run` and `submit` from a file, or "" with `why` set: a file (not a
/// directory), not empty, and within the config's max_prompt_bytes (a larger one could
/// not cross the bus).
std::string read_prompt(const std::string& path, const config::knobs& k, std::string& why);

} // namespace vidline::nodes
