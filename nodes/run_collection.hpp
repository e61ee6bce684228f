#pragma once
/// A host that collects every run's videos by itself (`hosts[].collect_dir`, docs/shots.md,
/// "A host that collects"): no client has to follow a run for its videos to land there.
///
/// The node of such a host runs one thread that, every `knobs.collect_interval_ms`, asks the
/// coordinator for its runs and, for each run with videos it has not yet collected, reads the
/// run's status and hands it to the same collector `vidline run --collect` uses
/// (nodes/verbs/collect.hpp): each video pulled by SHA-256 from its decoder's host, verified,
/// renamed into `<collect_dir>/<run id>/`, then indexed in that folder's index.jsonl, and
/// each reviewer's verdict given since indexed there too (a run's list entry counts its
/// verdicts, so a run with a new one is read again). Nothing
/// is kept but the files: a restarted node looks at every run the coordinator still holds
/// again, finds what it collected before (same bytes: "already there", its index line added
/// if a kill came between the rename and the line), and fetches only the rest. A file with
/// other bytes at a video's name is never overwritten: it is named in the log, counted, and
/// left for the operator.
///
/// Failures handled: the coordinator not answering (tried again next turn), a decoder's host
/// down or a video gone from it (named in the log once, tried again every turn), a folder that
/// cannot be made (logged, tried again), a node stopped mid-fetch (the part file is started
/// over next time).

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "config/config.hpp"

namespace vidline::nodes::verbs {
class collector;
}

namespace vidline::nodes {

class run_collection {
public:
  /// Starts collecting into `c.find_host(host)->collect_dir`.
  run_collection(std::shared_ptr<const config::cluster> c, std::string host);
  /// Stops the thread (a fetch in progress ends first: at most one chunk's timeout).
  ~run_collection();
  run_collection(const run_collection&) = delete;
  run_collection& operator=(const run_collection&) = delete;

private:
  /// What this node knows of one run.
  struct run_seen {
    std::unique_ptr<verbs::collector> k;
    uint32_t succeeded = 0;     ///< the run's succeeded count at the last pass
    uint64_t verdicts = 0;      ///< its verdicts given at the last pass (a new one is indexed)
    bool complete = false;      ///< finished, and every video of it collected or refused
    std::chrono::steady_clock::time_point retry_at;  ///< a finished run's failures: not before
    std::set<std::string> told; ///< problems already logged
  };

  void loop();
  /// One turn: the runs' list, then a pass over each run with something to collect.
  void turn();

  std::shared_ptr<const config::cluster> c_;
  std::string host_;
  std::string dir_;
  std::map<std::string, run_seen> runs_;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace vidline::nodes
