#include "nodes/state/journal_sqlite.hpp"

#include <map>
#include <stdexcept>

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include "actors/coordinator/records.hpp"
#include "common/crash_points.hpp"
#include "common/sha256.hpp"

namespace vidline::nodes::state {
namespace {

/// A prepared statement that finalizes itself.
class statement {
public:
  statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string("journal: cannot prepare: ") + sqlite3_errmsg(db));
  }
  ~statement() { sqlite3_finalize(st_); }
  statement(const statement&) = delete;
  statement& operator=(const statement&) = delete;

  void bind(int i, const std::string& s) {
    sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void bind(int i, int64_t v) { sqlite3_bind_int64(st_, i, v); }
  /// Steps once; true while rows come.
  bool step() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW)
      return true;
    if (rc != SQLITE_DONE)
      throw std::runtime_error(std::string("journal: ") + sqlite3_errmsg(db_));
    return false;
  }
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  std::string text(int col) const {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, col));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(st_, col))) : "";
  }
  int64_t integer(int col) const { return sqlite3_column_int64(st_, col); }

private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

std::string checksum(const std::string& record) { return to_hex(sha256_of(record)); }

} // namespace

sqlite_journal::sqlite_journal(const std::string& path) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr)
      != SQLITE_OK) {
    std::string err = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error("journal " + path + ": " + err);
  }
  sqlite3_busy_timeout(db_, 5000);
  // Deleted runs' pages go back to the file system (drop, reclaim). The mode takes effect
  // on a new database before its first table; one created before (mode NONE) is switched
  // by a VACUUM, once, below.
  exec("PRAGMA auto_vacuum=INCREMENTAL");
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=FULL");
  // The WAL stays small: checkpointed into the database every 256 pages (1 MiB at the
  // default page size, not SQLite's 1000), and cut back to 1 MiB after each checkpoint
  // (SQLite keeps a WAL file at its largest size otherwise, so a burst of work would leave
  // the journal several MB larger for good).
  exec("PRAGMA wal_autocheckpoint=256");
  exec("PRAGMA journal_size_limit=1048576");
  exec("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)");
  exec("CREATE TABLE IF NOT EXISTS runs(seq INTEGER PRIMARY KEY AUTOINCREMENT,"
       " id TEXT UNIQUE NOT NULL, record TEXT NOT NULL, checksum TEXT NOT NULL)");
  exec("CREATE TABLE IF NOT EXISTS jobs(run_id TEXT NOT NULL, idx INTEGER NOT NULL,"
       " record TEXT NOT NULL, checksum TEXT NOT NULL, PRIMARY KEY(run_id, idx))");
  if (pragma("PRAGMA auto_vacuum") != 2) {
    spdlog::info("journal {}: created without auto_vacuum; switching it to INCREMENTAL"
                 " (a VACUUM, once)", path_);
    exec("VACUUM");
    if (pragma("PRAGMA auto_vacuum") != 2)
      throw std::runtime_error("journal " + path_ + ": cannot switch to auto_vacuum=INCREMENTAL");
  }
  reclaim();  // a drop cut short between its delete and its vacuum
}

sqlite_journal::~sqlite_journal() {
  if (db_ != nullptr)
    sqlite3_close(db_);
}

void sqlite_journal::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw std::runtime_error("journal " + path_ + ": " + msg + " (" + sql + ")");
  }
}

int64_t sqlite_journal::pragma(const char* sql) {
  statement st(db_, sql);
  return st.step() ? st.integer(0) : 0;
}

void sqlite_journal::reclaim() {
  if (pragma("PRAGMA freelist_count") == 0)
    return;
  exec("PRAGMA incremental_vacuum");
  // In WAL mode the file is truncated when the pages reach it: checkpoint now, and empty
  // the WAL file as well.
  exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

void sqlite_journal::drop(const std::vector<std::string>& run_ids) {
  if (run_ids.empty())
    return;
  exec("BEGIN IMMEDIATE");
  try {
    statement del_jobs(db_, "DELETE FROM jobs WHERE run_id=?1");
    statement del_run(db_, "DELETE FROM runs WHERE id=?1");
    for (auto& id : run_ids) {
      del_jobs.bind(1, id);
      del_jobs.step();
      del_jobs.reset();
      del_run.bind(1, id);
      del_run.step();
      del_run.reset();
    }
    exec("COMMIT");
  } catch (...) {
    char* err = nullptr;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, &err);
    sqlite3_free(err);
    throw;
  }
  crash::point("journal.before_vacuum");
  reclaim();
}

std::optional<std::string> sqlite_journal::find_request(const std::string& request_id) {
  statement get(db_, "SELECT id FROM runs WHERE json_extract(record, '$.request_id') = ?1"
                     " ORDER BY seq DESC LIMIT 1");
  get.bind(1, request_id);
  if (!get.step())
    return std::nullopt;
  return get.text(0);
}

void sqlite_journal::load_jobs(actors::coordinator::run& r) {
  statement get(db_, "SELECT idx, record, checksum FROM jobs WHERE run_id=?1 ORDER BY idx");
  get.bind(1, r.id);
  while (get.step()) {
    auto rec = get.text(1);
    if (checksum(rec) != get.text(2)) {
      ++damaged_;
      spdlog::error("journal: job record {}/{} is damaged; skipped", r.id, get.integer(0));
      continue;
    }
    auto j = actors::coordinator::job_from_record(nlohmann::json::parse(rec));
    if (j.spec.index != r.jobs.size()) {
      ++damaged_;
      spdlog::error("journal: run {} misses job {}; later jobs skipped", r.id, r.jobs.size());
      break;
    }
    r.jobs.push_back(std::move(j));
  }
}

std::optional<actors::coordinator::run> sqlite_journal::load_run(const std::string& id) {
  statement get(db_, "SELECT record, checksum FROM runs WHERE id=?1");
  get.bind(1, id);
  if (!get.step())
    return std::nullopt;
  auto rec = get.text(0);
  if (checksum(rec) != get.text(1))
    throw std::runtime_error("journal: the record of run " + id + " is damaged");
  auto r = actors::coordinator::run_from_record(nlohmann::json::parse(rec));
  load_jobs(r);
  return r;
}

std::deque<actors::coordinator::run> sqlite_journal::load_newest(std::size_t limit,
                                                   const std::set<std::string>& skip) {
  std::deque<actors::coordinator::run> out;
  statement get(db_, "SELECT id, record, checksum FROM runs ORDER BY seq DESC");
  while ((limit == 0 || out.size() < limit) && get.step()) {
    auto id = get.text(0);
    if (skip.count(id) != 0)
      continue;
    auto rec = get.text(1);
    if (checksum(rec) != get.text(2)) {
      spdlog::error("journal: run record {} is damaged; skipped", id);
      continue;
    }
    out.push_front(actors::coordinator::run_from_record(nlohmann::json::parse(rec)));
  }
  for (auto& r : out)
    load_jobs(r);
  return out;
}

void sqlite_journal::write(const std::vector<const actors::coordinator::run*>& runs,
                           const std::vector<const actors::coordinator::job*>& jobs, uint64_t next_attempt) {
  crash::point("journal.before_append");
  exec("BEGIN IMMEDIATE");
  try {
    statement put_run(db_,
                      "INSERT INTO runs(id, record, checksum) VALUES(?1, ?2, ?3) ON CONFLICT(id)"
                      " DO UPDATE SET record=excluded.record, checksum=excluded.checksum");
    for (auto* r : runs) {
      auto rec = actors::coordinator::run_record(*r).dump();
      put_run.bind(1, r->id);
      put_run.bind(2, rec);
      put_run.bind(3, checksum(rec));
      put_run.step();
      put_run.reset();
    }
    statement put_job(db_,
                      "INSERT INTO jobs(run_id, idx, record, checksum) VALUES(?1, ?2, ?3, ?4)"
                      " ON CONFLICT(run_id, idx) DO UPDATE SET record=excluded.record,"
                      " checksum=excluded.checksum");
    for (auto* j : jobs) {
      auto rec = actors::coordinator::job_record(*j).dump();
      put_job.bind(1, j->spec.run_id);
      put_job.bind(2, static_cast<int64_t>(j->spec.index));
      put_job.bind(3, rec);
      put_job.bind(4, checksum(rec));
      put_job.step();
      put_job.reset();
    }
    statement put_meta(db_, "INSERT INTO meta(key, value) VALUES('next_attempt', ?1)"
                            " ON CONFLICT(key) DO UPDATE SET value=excluded.value");
    put_meta.bind(1, std::to_string(next_attempt));
    put_meta.step();
    exec("COMMIT");
    crash::point("journal.after_append");
  } catch (...) {
    char* err = nullptr;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, &err);
    sqlite3_free(err);
    throw;
  }
}

void sqlite_journal::load(std::deque<actors::coordinator::run>& runs, uint64_t& next_attempt) {
  damaged_ = 0;
  runs.clear();
  std::map<std::string, std::size_t> index_of;
  statement get_runs(db_, "SELECT id, record, checksum FROM runs ORDER BY seq");
  while (get_runs.step()) {
    auto rec = get_runs.text(1);
    if (checksum(rec) != get_runs.text(2)) {
      ++damaged_;
      spdlog::error("journal: run record {} is damaged; skipped", get_runs.text(0));
      continue;
    }
    index_of[get_runs.text(0)] = runs.size();
    runs.push_back(actors::coordinator::run_from_record(nlohmann::json::parse(rec)));
  }
  statement get_jobs(db_, "SELECT run_id, idx, record, checksum FROM jobs ORDER BY run_id, idx");
  while (get_jobs.step()) {
    auto rec = get_jobs.text(2);
    auto it = index_of.find(get_jobs.text(0));
    if (it == index_of.end())
      continue;
    if (checksum(rec) != get_jobs.text(3)) {
      ++damaged_;
      spdlog::error("journal: job record {}/{} is damaged; skipped", get_jobs.text(0),
                    get_jobs.integer(1));
      continue;
    }
    auto& r = runs[it->second];
    auto j = actors::coordinator::job_from_record(nlohmann::json::parse(rec));
    if (j.spec.index != r.jobs.size()) {
      ++damaged_;
      spdlog::error("journal: run {} misses job {}; later jobs skipped", r.id, r.jobs.size());
      continue;
    }
    r.jobs.push_back(std::move(j));
  }
  next_attempt = 1;
  statement get_meta(db_, "SELECT value FROM meta WHERE key='next_attempt'");
  if (get_meta.step())
    next_attempt = std::stoull(get_meta.text(0));
  // Never hand out an attempt id twice, whatever the meta row says.
  for (auto& r : runs)
    for (auto& j : r.jobs)
      next_attempt = std::max(next_attempt, j.attempt + 1);
}

} // namespace vidline::nodes::state

namespace vidline::nodes::state {

// Drains are one JSON document in the meta table (a few entries at most), with its
// checksum beside it; a damaged one is dropped with a warning (the pools take orders).
void sqlite_journal::write_drains(const std::map<std::string, actors::coordinator::drain>& drains) {
  nlohmann::json doc = nlohmann::json::object();
  for (auto& [target, d] : drains) {
    nlohmann::json gpus = nlohmann::json::array();
    for (auto& g : d.sick_gpus)
      gpus.push_back(g);
    doc[target] = {{"by_hand", d.by_hand}, {"reason", d.reason}, {"sick_gpus", gpus},
                   {"since", d.since}};
  }
  const std::string text = doc.dump();
  statement put(db_, "INSERT INTO meta(key, value) VALUES(?1, ?2)"
                     " ON CONFLICT(key) DO UPDATE SET value=excluded.value");
  exec("BEGIN IMMEDIATE");
  try {
    put.bind(1, std::string("drains"));
    put.bind(2, text);
    put.step();
    put.reset();
    put.bind(1, std::string("drains_checksum"));
    put.bind(2, checksum(text));
    put.step();
    exec("COMMIT");
  } catch (...) {
    char* err = nullptr;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, &err);
    sqlite3_free(err);
    throw;
  }
}

std::map<std::string, actors::coordinator::drain> sqlite_journal::load_drains() {
  std::map<std::string, actors::coordinator::drain> out;
  statement get(db_, "SELECT value FROM meta WHERE key=?1");
  get.bind(1, std::string("drains"));
  if (!get.step())
    return out;
  const std::string text = get.text(0);
  get.reset();
  get.bind(1, std::string("drains_checksum"));
  if (!get.step() || get.text(0) != checksum(text)) {
    spdlog::warn("journal {}: the drains record does not match its checksum; no pool or "
                 "decoder starts drained", path_);
    return out;
  }
  try {
    auto doc = nlohmann::json::parse(text);
    for (auto& [target, v] : doc.items()) {
      actors::coordinator::drain d;
      d.by_hand = v.value("by_hand", false);
      d.reason = v.value("reason", std::string());
      d.since = v.value("since", -1.0);
      for (auto& g : v.value("sick_gpus", nlohmann::json::array()))
        d.sick_gpus.insert(g.get<std::string>());
      out.emplace(target, std::move(d));
    }
  } catch (const std::exception& e) {
    spdlog::warn("journal {}: the drains record does not read ({}); none restored", path_,
                 e.what());
    out.clear();
  }
  return out;
}

} // namespace vidline::nodes::state
