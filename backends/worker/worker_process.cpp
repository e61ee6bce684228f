#include "backends/worker/worker_process.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "common/spawn/child.hpp"
#include "backends/exec/stage_util.hpp"
#include "common/files.hpp"
#include "backends/process/supervision.hpp"
#include "common/restart_budget.hpp"
#include "messages/messages.hpp"

namespace vidline::backends::worker {
namespace {

using process::steady;
using process::seconds;
using process::describe_status;

/// How long one wait on the socket may block before stop, kill and cancel are looked at.
constexpr auto slice = std::chrono::milliseconds(50);
/// How long a message to the worker may wait for room in its socket.
constexpr auto send_timeout = std::chrono::seconds(5);


double since(steady::time_point t) { return std::chrono::duration<double>(steady::now() - t).count(); }


} // namespace

/// One life of the worker: its process and the node's end of its socket.
struct worker_process::instance {
  pid_t pid = 0;
  int fd = -1;
  line_reader reader;
  std::vector<std::string> stages;
  bool takes_load = false;
  std::string model, model_identity;  ///< what it said it has loaded (under m_)

  instance(pid_t p, int f) : pid(p), fd(f) {}
  ~instance() {
    if (fd >= 0)
      ::close(fd);
  }

  bool send(const std::string& line) {
    std::size_t at = 0;
    auto deadline = steady::now() + send_timeout;
    while (at < line.size()) {
      ssize_t n = ::send(fd, line.data() + at, line.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        at += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && steady::now() < deadline) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 50);
        continue;
      }
      return false;
    }
    return true;
  }

  enum class got { message, eof, timeout, bad };

  /// The next message, waiting until `until`; `bad` with `error` on a broken line.
  got next(steady::time_point until, worker_message& m, std::string& error) {
    for (;;) {
      if (auto line = reader.next()) {
        if (line->find_first_not_of(" \t") == std::string::npos)
          continue;
        auto d = decode_worker_line(*line, error);
        if (!d) {
          error += ": " + exec::printable(*line, 200);
          return got::bad;
        }
        m = std::move(*d);
        return got::message;
      }
      auto left = until - steady::now();
      if (left <= steady::duration::zero())
        return got::timeout;
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count();
      pollfd p{fd, POLLIN, 0};
      int rc = ::poll(&p, 1, static_cast<int>(std::clamp<long long>(ms, 1, 1000)));
      if (rc <= 0)
        continue;
      char buf[65536];
      ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0)
        return got::eof;
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
          continue;
        return got::eof;
      }
      if (!reader.feed(std::string_view(buf, static_cast<std::size_t>(n)))) {
        error = "a line longer than " + std::to_string(max_line_bytes) + " bytes";
        return got::bad;
      }
    }
  }
};

worker_process::worker_process(worker_spec spec) : spec_(std::move(spec)) {
  last_used_ = steady::now();
  start_supervising([this] { supervise(); });
}

worker_process::~worker_process() { stop_supervising(); }

void worker_process::supervise() {
  restart_budget budget(spec_.max_restarts, spec_.restart_period_s);
  int backoff = 0;
  uint64_t ping_seq = 0;
  for (;;) {
    {
      std::lock_guard<std::mutex> l(m_);
      if (stop_)
        break;
      state_ = state::starting;
      kill_ = false;
    }
    cv_.notify_all();
    std::string error;
    int sv[2] = {-1, -1};
    try {
      files::make_dirs(files::parent_of(spec_.log_path));
      if (!spec_.cwd.empty())
        files::make_dirs(spec_.cwd);
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        throw std::runtime_error(std::string("socketpair: ") + std::strerror(errno));
    } catch (const std::exception& e) {
      error = e.what();
    }
    pid_t pid = -1;
    if (error.empty()) {
      pid = process::spawn_supervised(spec_, error, {sv[1]});
      ::close(sv[1]);
      if (pid < 0)
        ::close(sv[0]);
    }
    std::string ended;
    bool stopping = false;
    if (pid < 0) {
      ended = error;
    } else {
      auto inst = std::make_shared<instance>(pid, sv[0]);
      spdlog::info("{}: started (pid {}): {}", spec_.name, pid, spec_.argv[0]);
      auto start = steady::now();
      auto start_deadline = start + seconds(spec_.start_timeout_s);
      bool ready = false, exited = false;
      int status = 0;
      auto end_it = [&](const std::string& why) {
        status = spawn::stop_child(pid, seconds(spec_.stop_grace_s));
        ended = why + " (" + describe_status(status) + ")";
        exited = true;
      };
      process::log_cap cap(spec_.name, spec_.log_path, spec_.log_max_bytes, spec_.log_files);
      auto cap_log = [&] { cap.check(); };
      // starting: its hello.
      while (!ready) {
        cap_log();
        if (spawn::reap_child(pid, status)) {
          ended = describe_status(status) + " before its hello";
          exited = true;
          break;
        }
        {
          std::lock_guard<std::mutex> l(m_);
          if (stop_) {
            stopping = true;
            break;
          }
        }
        if (steady::now() >= start_deadline) {
          end_it("no hello within " + std::to_string(spec_.start_timeout_s) + " s");
          break;
        }
        worker_message m;
        std::string why;
        auto g = inst->next(std::min(steady::now() + slice, start_deadline), m, why);
        if (g == instance::got::message && m.type == worker_message::kind::hello) {
          ready = true;
          inst->stages = m.stages;
          inst->takes_load = m.takes_load;
        } else if (g == instance::got::message) {
          end_it("a message before its hello");
          break;
        } else if (g == instance::got::bad) {
          end_it("not the worker protocol: " + why);
          break;
        } else if (g == instance::got::eof) {
          // It closed its socket: wait for its exit (next round reaps it).
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
      if (ready) {
        backoff = 0;
        {
          std::lock_guard<std::mutex> l(m_);
          state_ = state::ready;
          current_ = inst;
          last_used_ = steady::now();
        }
        cv_.notify_all();
        std::string list;
        for (auto& s : inst->stages)
          list += (list.empty() ? "" : ",") + s;
        spdlog::info("{}: ready after {:.1f} s (serves {})", spec_.name, since(start), list);
        // ready: watch it, check its health while idle.
        for (;;) {
          cap_log();
          if (spawn::reap_child(pid, status)) {
            ended = describe_status(status);
            exited = true;
            break;
          }
          bool check = false;
          {
            std::lock_guard<std::mutex> l(m_);
            if (stop_) {
              stopping = true;
              break;
            }
            if (kill_) {
              std::string why = kill_why_;
              current_.reset();
              state_ = state::starting;
              // the lock is released by the guard below before the kill
              check = false;
              ended = why;
            } else if (!busy_ && spec_.health_interval_s > 0 &&
                       steady::now() - last_used_ > seconds(spec_.health_interval_s)) {
              busy_ = true;
              check = true;
            }
          }
          if (!ended.empty()) {
            end_it(ended);
            break;
          }
          if (check) {
            uint64_t seq = ++ping_seq;
            bool ok = inst->send(encode_ping(seq));
            auto deadline = steady::now() + seconds(spec_.health_timeout_s);
            std::string why = ok ? "" : "cannot send a ping";
            while (ok) {
              worker_message m;
              std::string err;
              auto g = inst->next(deadline, m, err);
              if (g == instance::got::message && m.type == worker_message::kind::pong && m.seq == seq)
                break;
              if (g == instance::got::message)
                continue;  // a late answer to a cancelled request
              ok = false;
              why = g == instance::got::timeout
                      ? "no answer to a ping within " + std::to_string(spec_.health_timeout_s) + " s"
                    : g == instance::got::eof ? "closed its socket"
                                              : "not the worker protocol: " + err;
            }
            {
              std::lock_guard<std::mutex> l(m_);
              busy_ = false;
              last_used_ = steady::now();
              if (!ok) {
                current_.reset();
                state_ = state::starting;
              }
            }
            cv_.notify_all();
            if (!ok) {
              end_it("health check failed: " + why);
              break;
            }
          }
          if (!nap(std::chrono::milliseconds(100), [&] { return kill_; })) {
            stopping = true;
            break;
          }
        }
      }
      {
        std::lock_guard<std::mutex> l(m_);
        if (!ended.empty())
          last_exit_ = ended;
        current_.reset();
        if (state_ == state::ready)
          state_ = state::starting;
      }
      cv_.notify_all();
      if (stopping) {
        if (!exited) {
          inst->send(encode_shutdown());
          ::shutdown(inst->fd, SHUT_WR);  // EOF: the library's cue to exit
          auto deadline = steady::now() + seconds(spec_.stop_grace_s);
          while (!spawn::reap_child(pid, status) && steady::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          if (steady::now() >= deadline)
            status = spawn::stop_child(pid, seconds(spec_.stop_grace_s));
        }
        spdlog::info("{}: stopped ({})", spec_.name, describe_status(status));
        break;
      }
    }
    const auto next = process::on_exit(spec_.name, spec_.log_path, pid >= 0, ended, budget, backoff);
    if (!process::settle_exit(m_, cv_, stop_, state_, last_exit_, restarts_, next, ended))
      break;
  }
  std::lock_guard<std::mutex> l(m_);
  if (state_ != state::gave_up)
    state_ = state::stopped;
  current_.reset();
  cv_.notify_all();
}

call_end worker_process::call(const request& r, double timeout_s, const std::atomic<bool>* cancel,
                              const std::function<void(uint32_t, uint32_t)>& progress,
                              const std::function<bool(uint32_t, uint32_t, const std::string&)>&
                                checkpoint,
                              const std::atomic<bool>* preempt) {
  bool preempt_sent = false;
  auto start = steady::now();
  auto deadline = timeout_s > 0 ? start + seconds(timeout_s) : steady::time_point::max();
  auto ended = [&](call_end::kind k, std::string detail) {
    call_end e;
    e.how = k;
    e.detail = std::move(detail);
    e.elapsed_s = since(start);
    return e;
  };
  auto cancelled = [&] { return cancel != nullptr && cancel->load(std::memory_order_acquire); };

  std::shared_ptr<instance> inst;
  {
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      if (state_ == state::gave_up)
        return ended(call_end::kind::down,
                     spec_.name + " gave up after more than " + std::to_string(spec_.max_restarts) +
                       " restarts within " + std::to_string(int(spec_.restart_period_s)) +
                       " s (last: " + last_exit_ + "); log " + spec_.log_path);
      if (state_ == state::stopped || stop_)
        return ended(call_end::kind::down, spec_.name + " is stopped");
      if (state_ == state::ready && !busy_ && current_ && loads_waiting_ == 0)
        break;
      if (cancelled())
        return ended(call_end::kind::cancelled, "cancelled while the worker was starting");
      if (steady::now() >= deadline)
        return ended(call_end::kind::timed_out,
                     "the worker was not ready within the stage timeout" +
                       (last_exit_.empty() ? std::string() : " (last: " + last_exit_ + ")") +
                       "; log " + spec_.log_path);
      cv_.wait_for(l, slice);
    }
    inst = current_;
    busy_ = true;
  }
  // Ends the call; `kill` hands the instance to the supervisor to end and restart.
  auto finish = [&](call_end e, const std::string& kill) {
    {
      std::lock_guard<std::mutex> l(m_);
      busy_ = false;
      last_used_ = steady::now();
      if (!kill.empty() && current_ == inst) {
        kill_ = true;
        kill_why_ = kill;
        state_ = state::starting;
      }
    }
    cv_.notify_all();
    return e;
  };
  // After EOF: the supervisor's word on how it ended, when it comes soon.
  auto death = [&] {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait_for(l, std::chrono::seconds(2), [&] { return current_ != inst; });
    return spec_.name + " died mid-job" + (last_exit_.empty() ? "" : " (" + last_exit_ + ")") +
           "; log " + spec_.log_path;
  };

  if (std::find(inst->stages.begin(), inst->stages.end(), r.stage) == inst->stages.end()) {
    std::string list;
    for (auto& s : inst->stages)
      list += (list.empty() ? "" : ", ") + s;
    return finish(ended(call_end::kind::protocol_error,
                        spec_.name + " serves only " + (list.empty() ? "nothing" : list) +
                          ", not " + r.stage),
                  "");
  }
  if (!inst->send(encode_request(r)))
    return finish(ended(call_end::kind::died, death()), "cannot send it a request");

  for (;;) {
    if (!preempt_sent && preempt != nullptr && preempt->load(std::memory_order_acquire)) {
      preempt_sent = true;
      inst->send(encode_preempt(r.id));
    }
    bool c = cancelled();
    if (c || steady::now() >= deadline) {
      auto kind = c ? call_end::kind::cancelled : call_end::kind::timed_out;
      inst->send(encode_cancel(r.id));
      auto grace_end = steady::now() + seconds(spec_.cancel_grace_s);
      for (;;) {
        worker_message m;
        std::string err;
        auto g = inst->next(grace_end, m, err);
        if (g == instance::got::message && m.type == worker_message::kind::result && m.id == r.id)
          return finish(ended(kind, c ? "cancelled" : "stage timeout"), "");
        if (g == instance::got::message)
          continue;
        if (g == instance::got::eof)
          return finish(ended(kind, c ? "cancelled" : "stage timeout"), "");
        return finish(ended(kind, c ? "cancelled; the worker ignored it and was killed"
                                    : "stage timeout; the worker ignored the cancel and was killed"),
                      c ? "ignored a cancel" : "ignored a cancel at the stage timeout");
      }
    }
    worker_message m;
    std::string err;
    auto g = inst->next(std::min(deadline, steady::now() + slice), m, err);
    if (g == instance::got::timeout)
      continue;
    if (g == instance::got::eof)
      return finish(ended(call_end::kind::died, death()), "");
    if (g == instance::got::bad)
      return finish(ended(call_end::kind::protocol_error, spec_.name + ": " + err),
                    "broke the worker protocol: " + err);
    if (m.type == worker_message::kind::progress && m.id == r.id) {
      if (progress)
        progress(m.step, m.steps);
    } else if (m.type == worker_message::kind::checkpoint && m.id == r.id) {
      // Only a file of the request's own folder: the node moves it into its latent store.
      const std::string dir = r.checkpoint_dir + "/";
      const bool inside = !r.checkpoint_dir.empty() && m.file.rfind(dir, 0) == 0
                          && m.file.find("/../") == std::string::npos
                          && m.file.find('/', dir.size()) == std::string::npos;
      if (!inside)
        spdlog::warn("{}: checkpoint {} of request {} is not a file of its checkpoint dir {}: "
                     "ignored", spec_.name, m.file, r.id, r.checkpoint_dir);
      else if (checkpoint)
        checkpoint(m.step, m.steps, m.file);
    } else if (m.type == worker_message::kind::result && m.id == r.id) {
      if (!m.model.empty() || !m.model_identity.empty()) {
        std::lock_guard<std::mutex> l(m_);
        inst->model = m.model;
        inst->model_identity = m.model_identity;
      }
      call_end e = ended(call_end::kind::result, "");
      e.result = std::move(m);
      return finish(std::move(e), "");
    }
    // Anything else (a late pong, a late answer to a cancelled request) is dropped.
  }
}

load_end worker_process::load(const load_request& lr, double timeout_s,
                              const std::atomic<bool>* cancel) {
  auto cancelled = [&] { return cancel != nullptr && cancel->load(std::memory_order_acquire); };
  auto start = steady::now();
  auto deadline = timeout_s > 0 ? start + seconds(timeout_s) : steady::time_point::max();
  auto ended = [&](bool loaded, std::string detail) {
    load_end e;
    e.loaded = loaded;
    e.detail = std::move(detail);
    e.elapsed_s = since(start);
    return e;
  };
  std::shared_ptr<instance> inst;
  {
    std::unique_lock<std::mutex> l(m_);
    ++loads_waiting_;  // calls that come meanwhile wait behind it
    auto leave = [&](load_end e) {
      --loads_waiting_;
      cv_.notify_all();
      return e;
    };
    for (;;) {
      if (state_ == state::gave_up || state_ == state::stopped || stop_)
        return leave(ended(false, spec_.name + " is not running" +
                                    (last_exit_.empty() ? std::string()
                                                        : " (last: " + last_exit_ + ")")));
      if (state_ == state::ready && !busy_ && current_)
        break;
      if (cancelled())
        return leave(ended(false, "cancelled"));
      if (steady::now() >= deadline)
        return leave(ended(false, "the worker was not ready within " +
                                    std::to_string(timeout_s) + " s"));
      cv_.wait_for(l, slice);
    }
    --loads_waiting_;
    inst = current_;
    if (!inst->takes_load)
      return ended(false, "its hello did not say it takes load requests (\"load\": true)");
    busy_ = true;
  }
  auto finish = [&](load_end e) {
    {
      std::lock_guard<std::mutex> l(m_);
      busy_ = false;
      last_used_ = steady::now();
      if (e.loaded && current_ == inst) {
        inst->model = e.reply.model;
        inst->model_identity = e.reply.model_identity;
      }
    }
    cv_.notify_all();
    return e;
  };
  if (!inst->send(encode_load(lr)))
    return finish(ended(false, "cannot send it the load request"));
  for (;;) {
    worker_message m;
    std::string err;
    auto g = inst->next(std::min(deadline, steady::now() + slice), m, err);
    if (g == instance::got::timeout) {
      if (cancelled())
        return finish(ended(false, "cancelled"));
      if (steady::now() >= deadline)
        return finish(ended(false, "no answer to the load request within " +
                                     std::to_string(timeout_s) + " s"));
      continue;
    }
    if (g == instance::got::eof)
      return finish(ended(false, spec_.name + " closed its socket during the load; log " +
                                   spec_.log_path));
    if (g == instance::got::bad)  // not killed: the load is what it did not understand
      return finish(ended(false, "it answered the load request with " + err));
    if (m.id != lr.id)
      continue;  // a pong, a late answer
    if (m.type == worker_message::kind::loaded && m.outcome == msg::outcome::ok) {
      auto e = ended(true, "");
      if (m.model.empty())
        m.model = lr.model;  // a loaded that names no model loaded the one asked for
      e.reply = std::move(m);
      return finish(std::move(e));
    }
    return finish(ended(false, "it refused the load (" + m.outcome + "): " +
                                 exec::printable(m.error, 400)));
  }
}

std::pair<std::string, std::string> worker_process::loaded_model() const {
  std::lock_guard<std::mutex> l(m_);
  if (!current_)
    return {};
  return {current_->model, current_->model_identity};
}

worker_process::state worker_process::current() const {
  std::lock_guard<std::mutex> l(m_);
  return state_;
}

int worker_process::restarts() const {
  std::lock_guard<std::mutex> l(m_);
  return restarts_;
}

pid_t worker_process::pid() const {
  std::lock_guard<std::mutex> l(m_);
  return current_ ? current_->pid : 0;
}

std::vector<std::string> worker_process::stages() const {
  std::lock_guard<std::mutex> l(m_);
  return current_ ? current_->stages : std::vector<std::string>{};
}

} // namespace vidline::backends::worker
