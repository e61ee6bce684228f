#pragma once
/// The coordinator's durable memory. The coordinator writes every changed run and job
/// (and the attempt counter) in one transaction before it sends anything that depends on
/// them; on start it loads everything back. Implemented in nodes/ (SQLite).

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

class journal {
public:
  virtual ~journal() = default;

  /// Durably records these runs (without jobs) and jobs, and the attempt counter, at once.
  /// Throws std::runtime_error when it cannot: the caller must not go on as if it had.
  virtual void write(const std::vector<const run*>& runs,
                     const std::vector<const job*>& jobs, uint64_t next_attempt) = 0;

  /// Everything recorded: runs oldest first, with their jobs; and the attempt counter.
  virtual void load(std::deque<run>& runs, uint64_t& next_attempt) = 0;

  /// One run with its jobs as recorded (a run the coordinator forgot: `vidline status`,
  /// `wait`, `resume`); nullopt when the journal holds no run of that id.
  virtual std::optional<run> load_run(const std::string& id) = 0;

  /// The newest `limit` runs recorded (0 = all) whose ids are not in `skip`, with their
  /// jobs, oldest first (`vidline runs` beside the runs in memory).
  virtual std::deque<run> load_newest(std::size_t limit,
                                             const std::set<std::string>& skip) = 0;

  /// The id of the run recorded with this submit request id (`submit_run.request_id`), if
  /// any: a retried submit of a run the coordinator forgot makes no second run.
  virtual std::optional<std::string> find_request(const std::string& request_id) = 0;

  /// Deletes these runs' records (run and jobs) in one transaction, then gives the freed
  /// pages back to the file system. Throws std::runtime_error when it cannot; runs not
  /// recorded are no error.
  virtual void drop(const std::vector<std::string>& run_ids) = 0;

  /// Durably records the drained pools and decoders (all of them: the set replaces the
  /// one recorded). Throws std::runtime_error when it cannot. A journal that keeps none
  /// (a test's) forgets them.
  virtual void write_drains(const std::map<std::string, drain>& drains) { (void)drains; }
  /// The drains recorded (none when none were).
  virtual std::map<std::string, drain> load_drains() { return {}; }
};

} // namespace vidline::actors::coordinator
