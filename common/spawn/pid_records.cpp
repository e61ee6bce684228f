#include "common/spawn/pid_records.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace vidline::spawn {
namespace {

constexpr std::string_view record_magic = "vidline-pid/1";

std::mutex dir_m;
std::string record_dir;  // guarded by dir_m

std::string record_path(const std::string& dir, pid_t pid) {
  return dir + "/" + std::to_string(pid) + ".pid";
}

/// Every live process (not a zombie) of group `pgrp` started at or after `since`.
std::vector<pid_t> members_since(pid_t pgrp, uint64_t since) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr)
    return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0')
      continue;
    auto st = read_proc_stat(static_cast<pid_t>(pid));
    if (st && st->pgrp == pgrp && st->start >= since && st->state != 'Z' && st->state != 'X')
      out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

} // namespace

std::string format_pid_record(const pid_record& r) {
  std::ostringstream o;
  o << record_magic << ' ' << r.pid << ' ' << r.start << ' ' << r.node_pid << ' ' << r.node_start
    << '\n';
  return o.str();
}

std::optional<pid_record> parse_pid_record(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string magic, rest;
  long long pid = 0, node_pid = 0;
  unsigned long long start = 0, node_start = 0;
  if (!(in >> magic >> pid >> start >> node_pid >> node_start) || magic != record_magic)
    return std::nullopt;
  if (in >> rest)  // trailing garbage
    return std::nullopt;
  if (pid <= 1 || node_pid <= 0 || pid > 0x3fffffff || node_pid > 0x3fffffff)
    return std::nullopt;
  return pid_record{static_cast<pid_t>(pid), start, static_cast<pid_t>(node_pid), node_start};
}

std::optional<proc_stat> parse_proc_stat(std::string_view text) {
  // "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
  //  stime cutime cstime priority nice threads itrealvalue starttime ..."
  auto close = text.rfind(')');
  if (close == std::string_view::npos)
    return std::nullopt;
  std::istringstream in{std::string(text.substr(close + 1))};
  proc_stat s;
  long long ppid = 0, pgrp = 0;
  if (!(in >> s.state >> ppid >> pgrp))
    return std::nullopt;
  std::string skip;
  for (int field = 6; field < 22; ++field)  // session .. itrealvalue
    if (!(in >> skip))
      return std::nullopt;
  if (!(in >> s.start))
    return std::nullopt;
  s.ppid = static_cast<pid_t>(ppid);
  s.pgrp = static_cast<pid_t>(pgrp);
  return s;
}

std::optional<proc_stat> read_proc_stat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;
  char buf[1024];
  ssize_t len = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (len <= 0)
    return std::nullopt;
  return parse_proc_stat(std::string_view(buf, static_cast<std::size_t>(len)));
}

void set_pid_record_dir(const std::string& dir) {
  if (!dir.empty())
    std::filesystem::create_directories(dir);
  std::lock_guard<std::mutex> l(dir_m);
  record_dir = dir;
}

void record_child(pid_t pid) {
  std::string dir;
  {
    std::lock_guard<std::mutex> l(dir_m);
    dir = record_dir;
  }
  if (dir.empty())
    return;
  static const auto self = read_proc_stat(::getpid());
  pid_record r;
  r.pid = pid;
  // A child that already exited has no stat; its group is gone with it.
  auto st = read_proc_stat(pid);
  r.start = st ? st->start : 0;
  r.node_pid = ::getpid();
  r.node_start = self ? self->start : 0;
  // Written in place: a torn record parses as garbage and is only removed, never acted on.
  std::ofstream(record_path(dir, pid), std::ios::trunc) << format_pid_record(r);
}

void forget_child(pid_t pid) {
  std::string dir;
  {
    std::lock_guard<std::mutex> l(dir_m);
    dir = record_dir;
  }
  if (!dir.empty())
    ::unlink(record_path(dir, pid).c_str());
}

reap_report reap_previous_life(const std::string& dir, pid_t self, double wait_s) {
  reap_report rep;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return rep;
  std::vector<std::pair<std::filesystem::path, pid_record>> stale;
  for (auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".pid")
      continue;
    ++rep.records;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    auto r = parse_pid_record(text.str());
    if (!r) {
      rep.notes.push_back("unreadable pid record " + e.path().string() + " removed");
      std::filesystem::remove(e.path(), ec);
      continue;
    }
    if (r->node_pid != self) {
      auto node = read_proc_stat(r->node_pid);
      if (node && node->start == r->node_start) {
        ++rep.left_to_live_node;
        continue;
      }
    }
    stale.emplace_back(e.path(), *r);
  }
  std::vector<std::pair<const pid_record*, std::vector<pid_t>>> groups;
  for (auto& [path, r] : stale) {
    // The group is still the recorded one only if its leader is gone or is the recorded
    // process itself: a leader with another start time is a stranger that reused the pid.
    auto leader = read_proc_stat(r.pid);
    if (leader && leader->start != r.start) {
      std::filesystem::remove(path, ec);
      continue;
    }
    auto members = members_since(r.pid, r.start);
    for (pid_t p : members)
      if (::kill(p, SIGKILL) == 0)
        ++rep.killed;
    if (!members.empty())
      rep.notes.push_back("ended " + std::to_string(members.size()) +
                          " process(es) of group " + std::to_string(r.pid) +
                          " left by a previous life of this node");
    groups.emplace_back(&r, std::move(members));
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (auto& [r, members] : groups) {
    while (!members_since(r->pid, r->start).empty() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!members_since(r->pid, r->start).empty())
      rep.notes.push_back("group " + std::to_string(r->pid) + " did not end within " +
                          std::to_string(wait_s) + " s of SIGKILL");
  }
  for (auto& [path, r] : stale)
    std::filesystem::remove(path, ec);
  return rep;
}

} // namespace vidline::spawn
