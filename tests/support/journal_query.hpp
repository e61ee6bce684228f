#pragma once
// What a test asks of a node's journal (nodes/state/journal_sqlite.cpp) from outside it: one
// value of a query or pragma, on the database opened read-only.

#include <cstdint>
#include <string>

#include <catch2/catch.hpp>
#include <sqlite3.h>

namespace journal_query {

/// The first column of the first row `sql` answers on the SQLite file at `path`, given to
/// `read` (a column reader of sqlite3_column_*'s shape); `fallback` when it has no row.
template <class T, class Read>
T first_value(const std::string& path, const char* sql, T fallback, Read read) {
  sqlite3* db = nullptr;
  INFO(path << ": " << sql);
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK);
  T v = fallback;
  if (sqlite3_step(st) == SQLITE_ROW)
    v = read(st);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

/// An integer the journal answers (-1 when no row).
inline int64_t integer(const std::string& path, const char* sql) {
  return first_value<int64_t>(path, sql, -1, [](sqlite3_stmt* st) { return sqlite3_column_int64(st, 0); });
}

/// A text the journal answers ("" when no row or NULL).
inline std::string text(const std::string& path, const char* sql) {
  return first_value<std::string>(path, sql, "", [](sqlite3_stmt* st) {
    const auto* t = sqlite3_column_text(st, 0);
    return t != nullptr ? std::string(reinterpret_cast<const char*>(t)) : std::string();
  });
}

} // namespace journal_query
