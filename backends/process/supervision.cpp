#include "backends/process/supervision.hpp"

#include <algorithm>

#include <sys/wait.h>

#include <spdlog/spdlog.h>

#include "backends/exec/stage_util.hpp"
#include "common/files.hpp"

namespace vidline::backends::process {

pid_t spawn_supervised(const supervised_spec& s, std::string& error, std::vector<int> pass_fds) {
  spawn::child_spec cs;
  cs.argv = s.argv;
  cs.env = s.env;
  cs.cwd = s.cwd;
  cs.stdout_path = cs.stderr_path = s.log_path;
  cs.append = true;
  cs.pass_fds = std::move(pass_fds);
  return spawn::spawn_child(cs, error);
}

supervisor_thread::~supervisor_thread() { stop_supervising(); }

void supervisor_thread::start_supervising(std::function<void()> loop) {
  thread_ = std::thread(std::move(loop));
}

void supervisor_thread::stop_supervising() {
  {
    std::lock_guard<std::mutex> l(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

bool supervisor_thread::nap(steady::duration d, const std::function<bool()>& wake) {
  std::unique_lock<std::mutex> l(m_);
  cv_.wait_for(l, d, [&] { return stop_ || (wake && wake()); });
  return !stop_;
}

std::string describe_status(int status) {
  if (WIFEXITED(status))
    return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status));
  return "ended";
}

void log_cap::check() {
  if (steady::now() - last_ < seconds(2))
    return;
  last_ = steady::now();
  if (files::cap_appended_log(path_, max_, keep_))
    spdlog::info("{}: log {} rotated at {} bytes", name_, path_, max_);
}

after_exit on_exit(const std::string& name, const std::string& log_path, bool started,
                   const std::string& how, restart_budget& budget, int& backoff) {
  std::string tail = exec::printable(exec::file_tail(log_path, 600), 300);
  spdlog::warn("{}: {} ({}); log {}: {}", name, started ? "ended" : "cannot start", how,
               log_path, tail);
  const double now = std::chrono::duration<double>(steady::now().time_since_epoch()).count();
  if (!budget.try_restart(now)) {
    spdlog::error("{}: gave up: more than {} restarts within {} s", name, budget.max_restarts(),
                  budget.period_s());
    return {true, 0};
  }
  return {false, std::min(10.0, 0.5 * (1 << std::min(backoff++, 5)))};
}

} // namespace vidline::backends::process
