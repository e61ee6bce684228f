#pragma once
/// Pid records: one file per live child of this node under <data>/pids, so a node that was
/// killed (SIGKILL, power cut) can end, when it starts again, whatever its previous life
/// left running (a stage's grandchildren, a worker that ignored its parent-death signal)
/// before it starts new stage processes beside them.
///
/// Failures it handles (and how):
/// - the previous node died with children still running: their process groups are
///   SIGKILLed at the next start (`reap_previous_life`);
/// - a recorded pid was reused by an unrelated process: every process is checked against
///   the start time recorded with the pid (/proc/PID/stat field 22) and a stranger is
///   never signalled;
/// - the record's node is still alive (two nodes sharing a data directory by mistake):
///   its records are left alone;
/// - a record that cannot be parsed: removed, with a warning.
/// Not handled: a descendant that left the recorded process group (setsid) is not found.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace vidline::spawn {

/// What one record says: the child (its pid is its process group's id) and the node
/// that started it, each with its start time in clock ticks since boot.
struct pid_record {
  pid_t pid = 0;
  uint64_t start = 0;
  pid_t node_pid = 0;
  uint64_t node_start = 0;
};

/// The text of a record ("vidline-pid/1 <pid> <start> <node_pid> <node_start>\n").
std::string format_pid_record(const pid_record& r);
/// A record's text parsed; nullopt when it is not one.
std::optional<pid_record> parse_pid_record(std::string_view text);

/// The fields of /proc/PID/stat a reaper needs.
struct proc_stat {
  char state = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  uint64_t start = 0;                 ///< field 22, clock ticks since boot
};
/// The text of /proc/PID/stat parsed (the command name may hold spaces and parentheses).
std::optional<proc_stat> parse_proc_stat(std::string_view text);
/// /proc/PID/stat of a live process; nullopt when there is none.
std::optional<proc_stat> read_proc_stat(pid_t pid);

/// Records children under `dir` from now on (created when missing); "" stops recording.
void set_pid_record_dir(const std::string& dir);
/// Records a child just started (no-op without a record directory).
void record_child(pid_t pid);
/// Removes a reaped child's record.
void forget_child(pid_t pid);

/// What reap_previous_life did.
struct reap_report {
  int records = 0;                    ///< records found
  int killed = 0;                     ///< processes SIGKILLed
  int left_to_live_node = 0;          ///< records of a node that is still alive
  std::vector<std::string> notes;     ///< one line per group ended, for the log
};

/// Ends every process of the groups recorded under `dir` by a node that is no longer
/// alive (`self` is this node: its own records are stale by definition), waits up to
/// `wait_s` for them to go, and removes the records.
reap_report reap_previous_life(const std::string& dir, pid_t self, double wait_s = 5);

} // namespace vidline::spawn
