#pragma once
/// The coordinator's journal in SQLite: WAL mode, synchronous=FULL, one transaction per
/// write, every record carrying its own SHA-256 so a record damaged at rest is detected;
/// auto_vacuum=INCREMENTAL, so deleting old runs (drop) shrinks the file.

#include <memory>
#include <string>

#include "actors/coordinator/journal.hpp"

struct sqlite3;

namespace vidline::nodes::state {

class sqlite_journal : public actors::coordinator::journal {
public:
  /// Opens (creating if needed) the journal at `path`. Throws std::runtime_error.
  explicit sqlite_journal(const std::string& path);
  ~sqlite_journal() override;
  sqlite_journal(const sqlite_journal&) = delete;
  sqlite_journal& operator=(const sqlite_journal&) = delete;

  void write(const std::vector<const actors::coordinator::run*>& runs,
             const std::vector<const actors::coordinator::job*>& jobs, uint64_t next_attempt) override;
  void load(std::deque<actors::coordinator::run>& runs, uint64_t& next_attempt) override;
  std::optional<actors::coordinator::run> load_run(const std::string& id) override;
  std::deque<actors::coordinator::run> load_newest(std::size_t limit,
                                     const std::set<std::string>& skip) override;
  void drop(const std::vector<std::string>& run_ids) override;
  std::optional<std::string> find_request(const std::string& request_id) override;
  void write_drains(const std::map<std::string, actors::coordinator::drain>& drains) override;
  std::map<std::string, actors::coordinator::drain> load_drains() override;

  /// Free pages given back to the file system: at open (a drop cut short by a crash) and
  /// after each drop.
  void reclaim();

  /// Records skipped on the last load because their checksum did not match.
  int damaged_records() const { return damaged_; }

private:
  void exec(const char* sql);
  int64_t pragma(const char* sql);
  /// The jobs of run `r` as recorded, appended to r.jobs (checked like load's).
  void load_jobs(actors::coordinator::run& r);
  sqlite3* db_ = nullptr;
  std::string path_;
  int damaged_ = 0;
};

} // namespace vidline::nodes::state
