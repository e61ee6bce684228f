#include "backends/process/backend_process.hpp"

#include <algorithm>
#include <deque>
#include <map>

#include <sys/wait.h>

#include <spdlog/spdlog.h>

#include "common/spawn/child.hpp"
#include "backends/exec/exec_options.hpp"
#include "backends/exec/stage_util.hpp"
#include "backends/process/socket_paths.hpp"
#include "common/files.hpp"
#include "backends/process/supervision.hpp"
#include "common/restart_budget.hpp"

namespace vidline::backends::process {
backend_process::backend_process(process_spec spec) : spec_(std::move(spec)) {
  start_supervising([this] { supervise(); });
}

backend_process::~backend_process() { stop_supervising(); }

void backend_process::supervise() {
  restart_budget budget(spec_.max_restarts, spec_.restart_period_s);
  int backoff = 0;
  for (;;) {
    {
      std::lock_guard<std::mutex> l(m_);
      if (stop_)
        break;
      state_ = state::starting;
    }
    cv_.notify_all();
    std::string error;
    try {
      for (auto& d : spec_.dirs)
        files::make_dirs(d);
      files::make_dirs(files::parent_of(spec_.log_path));
    } catch (const std::exception& e) {
      error = e.what();
    }
    pid_t pid = error.empty() ? spawn_supervised(spec_, error) : -1;
    std::string ended;
    if (pid < 0) {
      ended = error;
    } else {
      {
        std::lock_guard<std::mutex> l(m_);
        pid_ = pid;
      }
      spdlog::info("{}: started (pid {}): {}", spec_.name, pid, spec_.argv[0]);
      auto start = steady::now();
      bool ready = false, stopping = false;
      int status = 0;
      log_cap cap(spec_.name, spec_.log_path, spec_.log_max_bytes, spec_.log_files);
      for (;;) {
        if (spawn::reap_child(pid, status)) {
          ended = describe_status(status);
          break;
        }
        cap.check();
        if (!ready && spec_.answers && spec_.answers()) {
          ready = true;
          backoff = 0;
          {
            std::lock_guard<std::mutex> l(m_);
            state_ = state::ready;
          }
          cv_.notify_all();
          spdlog::info("{}: answering", spec_.name);
        }
        if (!ready && steady::now() - start > seconds(spec_.start_timeout_s)) {
          spawn::stop_child(pid, seconds(spec_.stop_grace_s));
          ended = "did not answer within " + std::to_string(int(spec_.start_timeout_s)) + " s";
          break;
        }
        if (!nap(std::chrono::milliseconds(ready ? 200 : 100))) {
          stopping = true;
          break;
        }
      }
      if (stopping) {
        int st = spawn::stop_child(pid, seconds(spec_.stop_grace_s));
        spdlog::info("{}: stopped ({})", spec_.name, describe_status(st));
        std::lock_guard<std::mutex> l(m_);
        pid_ = 0;
        break;
      }
      std::lock_guard<std::mutex> l(m_);
      pid_ = 0;
    }
    const auto next = on_exit(spec_.name, spec_.log_path, pid >= 0, ended, budget, backoff);
    if (!settle_exit(m_, cv_, stop_, state_, last_exit_, restarts_, next, ended))
      break;
  }
  std::lock_guard<std::mutex> l(m_);
  if (state_ != state::gave_up)
    state_ = state::stopped;
  cv_.notify_all();
}

bool backend_process::wait_ready(double timeout_s, std::string* why) {
  std::unique_lock<std::mutex> l(m_);
  bool done = cv_.wait_for(l, seconds(timeout_s), [&] {
    return state_ == state::ready || state_ == state::gave_up || state_ == state::stopped || stop_;
  });
  if (done && state_ == state::ready)
    return true;
  if (why != nullptr) {
    if (state_ == state::gave_up)
      *why = spec_.name + " gave up after more than " + std::to_string(spec_.max_restarts) +
             " restarts within " + std::to_string(int(spec_.restart_period_s)) + " s (last: " +
             last_exit_ + "); log " + spec_.log_path;
    else if (state_ == state::stopped || stop_)
      *why = spec_.name + " is stopped";
    else
      *why = spec_.name + " did not answer within " + std::to_string(int(timeout_s)) + " s" +
             (last_exit_.empty() ? "" : " (last: " + last_exit_ + ")") + "; log " + spec_.log_path;
  }
  return false;
}

backend_process::state backend_process::current() const {
  std::lock_guard<std::mutex> l(m_);
  return state_;
}

int backend_process::restarts() const {
  std::lock_guard<std::mutex> l(m_);
  return restarts_;
}

pid_t backend_process::pid() const {
  std::lock_guard<std::mutex> l(m_);
  return pid_;
}

comfyui_layout layout_of(const comfyui::process_options& p) {
  comfyui_layout l;
  l.base_dir = p.base_dir;
  l.input_dir = p.base_dir + "/input";
  l.output_dir = p.base_dir + "/output";
  l.temp_dir = p.base_dir + "/tmp";   // ComfyUI wipes <temp>/temp at start: its own only
  l.user_dir = p.base_dir + "/user";
  l.database = p.base_dir + "/comfyui.db";
  l.runtime_dir = p.runtime_dir.empty() ? default_runtime_dir(p.base_dir) : p.runtime_dir;
  return l;
}

process_spec comfyui_process_spec(const comfyui::process_options& p, const comfyui::endpoint& e,
                                  const std::string& owner, const std::string& vendor,
                                  const std::vector<std::string>& devices) {
  comfyui_layout l = layout_of(p);
  if (auto why = runtime_dir_problem(l.runtime_dir); !why.empty())
    throw std::invalid_argument("comfyui process of " + owner + ": " + why);
  std::string device_list;
  for (std::size_t i = 0; i < devices.size(); ++i)
    device_list += (i ? "," : "") + devices[i];
  std::map<std::string, std::string> values{
    {"port", std::to_string(e.port)}, {"host", e.host},          {"base_dir", l.base_dir},
    {"input_dir", l.input_dir},       {"output_dir", l.output_dir}, {"temp_dir", l.temp_dir},
    {"user_dir", l.user_dir},         {"database", l.database},    {"runtime_dir", l.runtime_dir},
    {"devices", device_list}};
  process_spec s;
  s.name = "comfyui of " + owner;
  for (auto& a : p.argv)
    s.argv.push_back(exec::expand(a, values));
  int master_port = e.port + 10000 <= 65535 - 16 ? e.port + 10000 : e.port - 10000;
  std::vector<std::pair<std::string, std::string>> set{
    {"RAY_TMPDIR", l.runtime_dir},
    {"RAYLIGHT_RAY_TMPDIR", l.runtime_dir},
    {"MASTER_PORT", std::to_string(master_port)},
    {"PYTHONUNBUFFERED", "1"}};
  for (auto& kv : exec::device_variables(vendor, devices))
    set.push_back(kv);
  for (auto& [k, v] : p.env)
    set.emplace_back(k, exec::expand(v, values));
  std::vector<std::string> drop = exec::device_variable_names();
  std::map<std::string, std::string> chosen;
  for (auto& [k, v] : set) {
    chosen[k] = v;
    drop.push_back(k);
  }
  s.env = spawn::current_environment(drop);
  for (auto& [k, v] : chosen)
    s.env.push_back(k + "=" + v);
  s.cwd = l.base_dir;
  s.log_path = l.base_dir + "/comfyui.log";
  s.dirs = {l.base_dir, l.input_dir, l.output_dir, l.temp_dir, l.user_dir, l.runtime_dir};
  comfyui::endpoint probe = e;
  probe.connect_timeout_s = 1;
  probe.read_timeout_s = 2;
  s.answers = [probe] {
    try {
      comfyui::client(probe).system_stats();
      return true;
    } catch (const std::exception&) {
      return false;
    }
  };
  s.start_timeout_s = p.start_timeout_s;
  s.max_restarts = p.max_restarts;
  s.restart_period_s = p.restart_period_s;
  s.stop_grace_s = p.stop_grace_s;
  return s;
}

} // namespace vidline::backends::process
