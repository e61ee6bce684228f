#pragma once
/// How the `vidline` command line is put together: each area adds its verbs to the app and
/// says what runs when one was chosen. cli.cpp calls every `add_*_verbs` in turn.

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

#include "nodes/verbs/cli.hpp"

namespace vidline::nodes::verbs {

/// One verb: its CLI11 sub-command and what it runs (returns the exit code).
struct verb {
  CLI::App* cmd = nullptr;
  std::function<int()> run;
};

using verb_list = std::vector<verb>;

/// node (running `run_node`), run, wait, status, demo (nodes/verbs/cli.cpp).
void add_line_verbs(CLI::App& app, verb_list& out, node_runner run_node);
void add_queue_verbs(CLI::App& app, verb_list& out);  ///< runs, cancel, submit (nodes/verbs/queue_verbs.cpp)
void add_backend_verbs(CLI::App& app, verb_list& out);  ///< preflight, config-adapt, start, stop (nodes/verbs/service_verbs.cpp)
void add_plan_verbs(CLI::App& app, verb_list& out);  ///< plan (nodes/verbs/plan_cmd.cpp)
void add_profile_verbs(CLI::App& app, verb_list& out);  ///< profile build (nodes/verbs/profile_cmd.cpp)
void add_security_verbs(CLI::App& app, verb_list& out);  ///< keygen (nodes/verbs/keygen.cpp)
void add_gpu_verbs(CLI::App& app, verb_list& out);  ///< gpus, drain, undrain (nodes/verbs/gpu_verbs.cpp)

} // namespace vidline::nodes::verbs
