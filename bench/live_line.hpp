#pragma once
/// The live half of the benchmarks that run a shot list on real node processes
/// (plan_live, production, chains, rerender): the reference cluster's two nodes started on
/// loopback, and one list run through `vidline run --jobs` to its end.

#include <cctype>
#include <cstdio>
#include <memory>
#include <string>

#include "actors/coordinator/dispatch_setup.hpp"
#include "nodes/verbs/client.hpp"
#include "tests/support/cluster.hpp"

namespace vidline::bench {

/// host_a and host_b of `config` started, their coordinator answering and the line reported;
/// stopped (SIGTERM) when it goes. `up` false (the reason printed) when the line did not
/// come up within 30 s.
struct live_line {
  std::unique_ptr<testing_support::process> a, b;
  nodes::verbs::coordinator_client cl;
  bool up = false;

  live_line(const std::string& dir, const std::string& config, const config::cluster& c)
      : a(testing_support::start_node(dir, config, "host_a")),
        b(testing_support::start_node(dir, config, "host_b")),
        cl(c) {
    up = testing_support::coordinator_answers(cl, 30) && testing_support::line_reported(cl, 30);
    if (!up)
      std::fprintf(stderr, "the line did not come up (node logs in %s)\n", dir.c_str());
  }
  ~live_line() {
    a->signal(SIGTERM);
    b->signal(SIGTERM);
    a->wait(30);
    b->wait(30);
  }

  /// Runs the shot list at `list` in mode auto and waits up to `wall_limit` real seconds
  /// for its end: its final status, or null (the reason printed) when it could not be
  /// submitted or did not succeed.
  nlohmann::json run(const std::string& dir, const std::string& config, const std::string& list,
                     double wall_limit) {
    testing_support::process submit({VIDLINE_BINARY, "run", "--config", config, "--mode",
                                     actors::coordinator::auto_mode, "--jobs", list, "--background"},
                                    dir + "/submit.out");
    if (submit.wait(60) != 0) {
      std::fprintf(stderr, "vidline run failed: %s\n", submit.err().c_str());
      return nullptr;
    }
    std::string run_id = submit.out();
    while (!run_id.empty() && std::isspace(static_cast<unsigned char>(run_id.back())))
      run_id.pop_back();
    auto st = testing_support::wait_status(
      cl, run_id, wall_limit, [](const nlohmann::json& s) { return s["state"] != "running"; });
    if (st.is_null() || st["state"] != "succeeded") {
      std::fprintf(stderr, "run %s did not succeed: %s (node logs in %s)\n", run_id.c_str(),
                   st.is_null() ? "no status" : st["state"].dump().c_str(), dir.c_str());
      return nullptr;
    }
    return st;
  }
};

} // namespace vidline::bench
