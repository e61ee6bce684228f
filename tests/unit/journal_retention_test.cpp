// The SQLite journal's retention (docs/reliability.md, "Retention"): reads of one
// run and of the newest runs, the request id of a forgotten run, deletion that gives the
// file's pages back (auto_vacuum=INCREMENTAL), and a journal created before that mode
// switched by one VACUUM with its records kept.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>

#include "actors/coordinator/records.hpp"
#include "common/sha256.hpp"
#include "nodes/state/journal_sqlite.hpp"
#include "tests/support/journal_query.hpp"
#include "tests/support/processes.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;

namespace {

actors::coordinator::run finished_run(const std::string& id, uint32_t jobs, std::size_t prompt_bytes = 100) {
  auto r = sched_fixtures::run_of(id, jobs);
  r.request_id = "req-" + id;
  r.done = true;
  r.submitted_at = 10;
  r.finished_at = 20;
  for (auto& j : r.jobs) {
    j.spec.prompt = std::string(prompt_bytes, 'p');
    j.state = actors::coordinator::job_state::succeeded;
    j.attempt = 1 + j.spec.index;
  }
  return r;
}

void write(nodes::state::sqlite_journal& jnl, const actors::coordinator::run& r) {
  std::vector<const actors::coordinator::job*> jobs;
  for (auto& j : r.jobs)
    jobs.push_back(&j);
  jnl.write({&r}, jobs, 100);
}

uint64_t file_bytes(const std::string& path) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto* suffix : {"", "-wal"})
    if (std::filesystem::exists(path + suffix, ec))
      n += std::filesystem::file_size(path + suffix, ec);
  return n;
}

int64_t value(const std::string& path, const char* sql) { return journal_query::integer(path, sql); }

void raw(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  INFO(sql);
  REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK);
}

} // namespace

TEST_CASE("journal: one run, the newest runs and a request id read back, a drop shrinks the file") {
  testing_support::temp_dir dir;
  const std::string path = dir.path() + "/journal.db";
  {
    nodes::state::sqlite_journal jnl(path);
    for (int k = 0; k < 5; ++k)
      write(jnl, finished_run("r" + std::to_string(k), 20, 8000));
  }
  CHECK(value(path, "PRAGMA auto_vacuum") == 2);
  nodes::state::sqlite_journal jnl(path);
  auto one = jnl.load_run("r2");
  REQUIRE(one);
  CHECK(one->id == "r2");
  CHECK(one->done);
  REQUIRE(one->jobs.size() == 20);
  CHECK(one->jobs[19].spec.index == 19);
  CHECK(one->jobs[19].state == actors::coordinator::job_state::succeeded);
  CHECK_FALSE(jnl.load_run("nope"));
  auto newest = jnl.load_newest(2, {"r4"});
  REQUIRE(newest.size() == 2);
  CHECK(newest[0].id == "r2");  // oldest first
  CHECK(newest[1].id == "r3");
  CHECK(newest[1].jobs.size() == 20);
  CHECK(jnl.load_newest(0, {}).size() == 5);
  CHECK(jnl.find_request("req-r1") == std::optional<std::string>("r1"));
  CHECK_FALSE(jnl.find_request("req-none"));

  const uint64_t before = file_bytes(path);
  jnl.drop({"r0", "r1", "r2", "not-recorded"});
  CHECK_FALSE(jnl.load_run("r1"));
  CHECK_FALSE(jnl.find_request("req-r1"));
  std::deque<actors::coordinator::run> left;
  uint64_t next = 0;
  jnl.load(left, next);
  REQUIRE(left.size() == 2);
  CHECK(left[0].id == "r3");
  CHECK(left[1].jobs.size() == 20);
  CHECK(next >= 21);
  CHECK(value(path, "SELECT COUNT(*) FROM jobs") == 40);
  CHECK(value(path, "PRAGMA freelist_count") == 0);
  const uint64_t after = file_bytes(path);
  INFO("before " << before << " B, after " << after << " B");
  // Three of five runs' pages given back (and the WAL emptied).
  CHECK(after < before / 2);
  CHECK(jnl.damaged_records() == 0);
}

TEST_CASE("journal: its WAL stays near 1 MiB however much is written between drops") {
  testing_support::temp_dir dir;
  const std::string path = dir.path() + "/journal.db";
  nodes::state::sqlite_journal jnl(path);
  // A run of 40 jobs written again and again, as a coordinator does while its jobs move
  // on: about 25 MB through the journal, no run dropped (no reclaim to empty the WAL).
  auto r = finished_run("busy", 40, 1500);
  r.done = false;
  uint64_t wal_max = 0;
  for (int k = 0; k < 400; ++k) {
    for (auto& j : r.jobs)
      j.attempt = 1 + k;
    write(jnl, r);
    std::error_code ec;
    const auto wal = std::filesystem::file_size(path + "-wal", ec);
    if (!ec)
      wal_max = std::max<uint64_t>(wal_max, wal);
  }
  INFO("largest WAL " << wal_max << " B; database " << std::filesystem::file_size(path) << " B");
  // 256 pages between checkpoints, cut back to 1 MiB after each: at most that and one
  // write's pages (SQLite's defaults left it at 4 MB and more).
  CHECK(wal_max > 0);
  CHECK(wal_max <= (1u << 20) + (256u << 10));
  auto back = jnl.load_run("busy");
  REQUIRE(back);
  CHECK(back->jobs[39].attempt == 400);
}

TEST_CASE("journal: one created without auto_vacuum is switched to INCREMENTAL, records kept") {
  testing_support::temp_dir dir;
  const std::string path = dir.path() + "/journal.db";
  const auto r = finished_run("old", 3);
  {
    // As an older vidline made it: the same tables, auto_vacuum NONE, a run recorded.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    raw(db, "PRAGMA auto_vacuum=NONE");
    raw(db, "PRAGMA journal_mode=WAL");
    raw(db, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)");
    raw(db, "CREATE TABLE runs(seq INTEGER PRIMARY KEY AUTOINCREMENT,"
            " id TEXT UNIQUE NOT NULL, record TEXT NOT NULL, checksum TEXT NOT NULL)");
    raw(db, "CREATE TABLE jobs(run_id TEXT NOT NULL, idx INTEGER NOT NULL,"
            " record TEXT NOT NULL, checksum TEXT NOT NULL, PRIMARY KEY(run_id, idx))");
    auto quote = [](const std::string& s) {
      std::string out = "'";
      for (char c : s)
        out += c == '\'' ? std::string("''") : std::string(1, c);
      return out + "'";
    };
    auto rec = actors::coordinator::run_record(r).dump();
    raw(db, "INSERT INTO runs(id, record, checksum) VALUES('old', " + quote(rec) + ", '"
              + to_hex(sha256_of(rec)) + "')");
    for (auto& j : r.jobs) {
      auto jr = actors::coordinator::job_record(j).dump();
      raw(db, "INSERT INTO jobs VALUES('old', " + std::to_string(j.spec.index) + ", " + quote(jr)
                + ", '" + to_hex(sha256_of(jr)) + "')");
    }
    raw(db, "INSERT INTO meta VALUES('next_attempt', '7')");
    sqlite3_close(db);
  }
  REQUIRE(value(path, "PRAGMA auto_vacuum") == 0);
  nodes::state::sqlite_journal jnl(path);
  CHECK(value(path, "PRAGMA auto_vacuum") == 2);
  std::deque<actors::coordinator::run> runs;
  uint64_t next = 0;
  jnl.load(runs, next);
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].id == "old");
  CHECK(runs[0].jobs.size() == 3);
  CHECK(next == 7);
  CHECK(jnl.damaged_records() == 0);
  // Dropping it now gives its pages back.
  write(jnl, finished_run("big", 20, 8000));
  const uint64_t before = file_bytes(path);
  jnl.drop({"big"});
  CHECK(value(path, "PRAGMA freelist_count") == 0);
  CHECK(file_bytes(path) < before);
}
