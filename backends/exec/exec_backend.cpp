#include "backends/exec/exec_backend.hpp"
#include "backends/exec/checkpoint_watch.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include <spdlog/spdlog.h>

#include "backends/exec/stage_util.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"

namespace vidline::backends::exec {
namespace {

/// Bytes of each log's end searched for out-of-memory texts and quoted in errors.
constexpr std::size_t tail_bytes = 64 * 1024;

/// One stage as the backend runs it.
struct stage_call {
  const char* stage = "";            ///< "encode" | "sample" | "decode"
  const stage_command* command = nullptr;
  std::map<std::string, std::string> values;   ///< placeholder values
  std::string label;                 ///< log file stem: <run>-<index>-<stage>-<attempt>
  std::string product;               ///< {output}: where the command leaves its product
};

std::string join_devices(const std::vector<std::string>& d) {
  std::string s;
  for (std::size_t i = 0; i < d.size(); ++i)
    s += (i ? "," : "") + d[i];
  return s;
}

/// The last few non-empty lines of a log, for an error message.
std::string last_lines(const std::string& text, int n) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos)
      lines.push_back(line);
  std::string out;
  for (std::size_t i = lines.size() > std::size_t(n) ? lines.size() - n : 0; i < lines.size(); ++i)
    out += (out.empty() ? "" : "\n") + lines[i];
  return out;
}

std::string signal_name(int sig) {
  const char* d = ::sigdescr_np(sig);
  return "signal " + std::to_string(sig) + (d ? std::string(" (") + d + ")" : std::string());
}

/// Runs the commands of one backend instance.
class runner {
public:
  runner(exec_options o, std::string owner, std::string backend)
      : o_(std::move(o)), owner_(std::move(owner)), backend_(std::move(backend)) {
    patterns_ = default_capacity_patterns();
    patterns_.insert(patterns_.end(), o_.capacity_patterns.begin(), o_.capacity_patterns.end());
  }

  const exec_options& options() const { return o_; }

  /// Values every stage has.
  std::map<std::string, std::string> common_values(const stage_env& env) const {
    return {{"work_dir", env.work_dir},
            {"devices", join_devices(env.devices)},
            {"vendor", env.vendor}};
  }

  static void add_job_values(std::map<std::string, std::string>& v, const msg::job_spec& job,
                             const exec_options& o) {
    v["run_id"] = job.run_id;
    v["index"] = std::to_string(job.index);
    v["seed"] = std::to_string(job.seed);
    v["width"] = std::to_string(job.width);
    v["height"] = std::to_string(job.height);
    v["seconds"] = std::to_string(job.seconds);
    v["frames"] = std::to_string(frames_for(job.seconds, o.fps, o.frame_offset));
    v["fps"] = std::to_string(o.fps);
    // The shot (docs/backends.md, "exec"): {param.NAME} and {input.NAME} expand to "" for
    // one the job does not carry.
    v["workflow"] = job.workflow;
    v["model"] = job.model;
    v["negative_prompt"] = job.negative_prompt;
    for (auto& p : job.params)
      v["param." + p.name] = p.text;
    for (auto& i : job.inputs)
      v["input." + i.name] = i.path;
  }

  /// Runs a prepared call and moves its product to env.output_path.
  stage_result run(stage_call& call, const stage_env& env) {
    std::string who = "exec " + std::string(call.stage) + " (" + owner_ + ")";
    if (!(env.timeout_s >= 0))
      return failed(msg::outcome::fatal, who + ": timeout_s must be >= 0", 0);
    if (env.output_path.empty() || env.work_dir.empty())
      return failed(msg::outcome::fatal, who + ": no work directory or output path", 0);
    if (env.cancel != nullptr && env.cancel->load())
      return failed(msg::outcome::transient, "cancelled", 0);

    std::string log_dir = (o_.log_dir.empty() ? default_log_dir(env.work_dir) : o_.log_dir) +
                          "/" + owner_;
    std::string out_log = log_dir + "/" + call.label + ".stdout.log";
    std::string err_log = log_dir + "/" + call.label + ".stderr.log";
    spawn::child_spec spec;
    try {
      files::make_dirs(env.work_dir);
      files::make_dirs(log_dir);
      std::filesystem::remove(call.product);  // a stale product of an earlier try
      for (auto& a : call.command->argv)
        spec.argv.push_back(expand(a, call.values));
      spec.env = environment(call, env);
    } catch (const std::invalid_argument& e) {  // a template the options check let through
      return failed(msg::outcome::fatal, who + ": " + e.what(), 0);
    } catch (const std::exception& e) {
      return failed(msg::outcome::transient, who + ": " + e.what(), 0);
    }
    spec.cwd = env.work_dir;
    spec.stdout_path = out_log;
    spec.stderr_path = err_log;

    spawn::child_limits lim;
    double timeout = env.timeout_s;
    if (call.command->timeout_s > 0)
      timeout = timeout > 0 ? std::min(timeout, call.command->timeout_s) : call.command->timeout_s;
    lim.timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout));
    lim.grace = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(o_.kill_grace_s));
    lim.cancel = env.cancel;

    spdlog::debug("{}: running {} (logs {}.*)", who, spec.argv[0], log_dir + "/" + call.label);
    spawn::child_end end = spawn::run_child(spec, lim);
    if (end.leftovers_killed)
      spdlog::warn("{}: {} left processes behind in its process group; killed them", who,
                   spec.argv[0]);
    std::string where = "; log " + err_log;
    auto output_tail = [&] { return file_tail(err_log, tail_bytes) + "\n" + file_tail(out_log, tail_bytes); };
    auto quoted = [&] {
      std::string last = last_lines(file_tail(err_log, 4096), 3);
      if (last.empty())
        last = last_lines(file_tail(out_log, 4096), 3);
      return last.empty() ? std::string() : ": " + printable(last, 400);
    };

    switch (end.how) {
    case spawn::child_end::kind::spawn_failed:
      return failed(msg::outcome::fatal, who + ": " + printable(end.error), end.elapsed_s);
    case spawn::child_end::kind::cancelled:
      return failed(msg::outcome::transient, "cancelled", end.elapsed_s);
    case spawn::child_end::kind::timed_out: {
      // One rank out of memory often leaves the others waiting forever: that is capacity.
      if (auto p = find_pattern(output_tail(), patterns_))
        return failed(msg::outcome::capacity,
                      who + ": out of memory ('" + *p + "'), then stopped at the stage timeout" +
                        quoted() + where,
                      end.elapsed_s);
      std::ostringstream e;
      e << "timeout: " << who << " exceeded the stage timeout of " << timeout
        << " s; its process group was stopped" << where;
      return failed(msg::outcome::transient, e.str(), end.elapsed_s);
    }
    case spawn::child_end::kind::signaled:
    case spawn::child_end::kind::exited:
      break;
    }
    if (end.how == spawn::child_end::kind::signaled || end.exit_code != 0) {
      exit_verdict v = classify_exit(end, output_tail(), o_);
      return failed(v.outcome, who + ": " + v.reason + quoted() + where, end.elapsed_s);
    }

    return commit_product(call.product, env.output_path, who + ": " + spec.argv[0] + " exited 0",
                          " ({output})" + where, end.elapsed_s);
  }

  /// Writes the prompt to <work_dir>/prompt.txt and returns its path.
  static std::string write_prompt(const stage_env& env, const std::string& prompt) {
    std::string path = env.work_dir + "/prompt.txt";
    files::make_dirs(env.work_dir);
    files::write_atomic(path, prompt);
    return path;
  }

  /// Where the command of a stage leaves its product: in the work directory, named like
  /// the final file (a decoder's muxer may pick the container from the extension).
  static std::string product_path(const stage_env& env) {
    return env.work_dir + "/product-" + std::filesystem::path(env.output_path).filename().string();
  }

  /// A log file stem: only [A-Za-z0-9._-], whatever a run id holds.
  std::string label(const std::string& stem, const stage_env& env) const {
    std::string attempt = attempt_of(env.work_dir);
    std::string l = stem + (attempt.empty() ? "" : "-" + attempt);
    for (char& c : l)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
        c = '_';
    if (!l.empty() && l[0] == '.')
      l[0] = '_';
    return l;
  }

private:
  std::vector<std::string> environment(const stage_call& call, const stage_env& env) const {
    std::vector<std::string> drop = device_variable_names();
    std::vector<std::pair<std::string, std::string>> set;
    for (auto& kv : device_variables(env.vendor, env.devices))
      set.push_back(kv);
    set.emplace_back("VIDLINE_STAGE", call.stage);
    set.emplace_back("VIDLINE_OWNER", owner_);
    set.emplace_back("VIDLINE_BACKEND", backend_);
    set.emplace_back("VIDLINE_WORK_DIR", env.work_dir);
    set.emplace_back("VIDLINE_OUTPUT", call.product);
    set.emplace_back("VIDLINE_DEVICES", join_devices(env.devices));
    for (auto& kv : o_.env)
      set.emplace_back(kv.first, expand(kv.second, call.values));
    for (auto& kv : call.command->env)
      set.emplace_back(kv.first, expand(kv.second, call.values));
    // Later entries win; every name set here is dropped from what is inherited.
    std::map<std::string, std::string> chosen;
    std::vector<std::string> order;
    for (auto& [k, v] : set) {
      if (!chosen.count(k))
        order.push_back(k);
      chosen[k] = v;
      drop.push_back(k);
    }
    auto out = spawn::current_environment(drop);
    for (auto& k : order)
      out.push_back(k + "=" + chosen[k]);
    return out;
  }

  exec_options o_;
  std::vector<std::string> patterns_;
  std::string owner_;
  std::string backend_;
};

class exec_encoder final : public encoder_backend {
public:
  explicit exec_encoder(std::shared_ptr<runner> r) : r_(std::move(r)) {}

  stage_result encode(const std::string& prompt, const stage_env& env) override {
    stage_call call;
    call.stage = "encode";
    call.command = &*r_->options().encode;
    call.values = r_->common_values(env);
    try {
      call.values["prompt_file"] = runner::write_prompt(env, prompt);
    } catch (const std::exception& e) {
      return failed(msg::outcome::transient, std::string("exec encode: ") + e.what(), 0);
    }
    call.product = runner::product_path(env);
    call.values["output"] = call.product;
    call.label = r_->label("encode-" + to_hex(sha256_of(prompt)).substr(0, 16), env);
    return r_->run(call, env);
  }

private:
  std::shared_ptr<runner> r_;
};

class exec_sampler final : public sampler_backend {
public:
  explicit exec_sampler(std::shared_ptr<runner> r) : r_(std::move(r)) {}

  stage_result sample(const msg::job_spec& job, const std::string& conditioning_path,
                      const stage_env& env) override {
    stage_call call;
    call.stage = "sample";
    call.command = &*r_->options().sample;
    call.values = r_->common_values(env);
    runner::add_job_values(call.values, job, r_->options());
    try {
      call.values["prompt_file"] = runner::write_prompt(env, job.prompt);
    } catch (const std::exception& e) {
      return failed(msg::outcome::transient, std::string("exec sample: ") + e.what(), 0);
    }
    call.values["conditioning"] = conditioning_path;
    call.values["reference"] = job.reference;
    call.product = runner::product_path(env);
    call.values["output"] = call.product;
    // Checkpoints (checkpoint_watch.hpp): where the command saves them, and where it goes
    // on from ("" and 0: from the start).
    call.values["checkpoint_dir"] = env.checkpoint_dir;
    call.values["checkpoint_interval_s"] = [&] {
      std::ostringstream n;
      n << env.checkpoint_interval_s;
      return n.str();
    }();
    call.values["resume_file"] = env.resume_file;
    call.values["resume_step"] = std::to_string(env.resume_step);
    call.label = r_->label(job.run_id + "-" + std::to_string(job.index) + "-sample", env);
    checkpoint_watch watch(env);
    auto r = r_->run(call, env);
    watch.stop();
    return r;
  }

private:
  std::shared_ptr<runner> r_;
};

class exec_decoder final : public decoder_backend {
public:
  explicit exec_decoder(std::shared_ptr<runner> r) : r_(std::move(r)) {}

  stage_result decode(const msg::job_spec& job, const std::string& latent_path,
                      const std::string& latent_sha256, const stage_env& env) override {
    if (auto bad = check_latent("exec decode", latent_path, latent_sha256))
      return *bad;
    stage_call call;
    call.stage = "decode";
    call.command = &*r_->options().decode;
    call.values = r_->common_values(env);
    runner::add_job_values(call.values, job, r_->options());
    try {
      call.values["prompt_file"] = runner::write_prompt(env, job.prompt);
    } catch (const std::exception& e) {
      return failed(msg::outcome::transient, std::string("exec decode: ") + e.what(), 0);
    }
    call.values["latent"] = latent_path;
    call.values["latent_sha256"] = latent_sha256;
    call.product = runner::product_path(env);
    call.values["output"] = call.product;
    call.label = r_->label(job.run_id + "-" + std::to_string(job.index) + "-decode", env);
    return r_->run(call, env);
  }

private:
  std::shared_ptr<runner> r_;
};

std::shared_ptr<runner> make_runner(const backend_params& p, const char* needed,
                                    bool (*has)(const exec_options&)) {
  const config::backend& b = p.backend;
  if (b.type != "exec")
    throw std::runtime_error("backend '" + b.name + "': type is '" + b.type + "', not 'exec'");
  exec_options o = parse_exec_options(b.name, b.options);
  if (needed != nullptr && !has(o))
    throw config::config_error("/backends/" + b.name + "/options",
                               std::string("'") + needed + "' is missing, and " + p.owner +
                                 " needs it");
  return std::make_shared<runner>(std::move(o), p.owner, b.name);
}

} // namespace

exit_verdict classify_exit(const spawn::child_end& end, std::string_view output_tail,
                           const exec_options& o) {
  exit_verdict v;
  std::vector<std::string> patterns = default_capacity_patterns();
  patterns.insert(patterns.end(), o.capacity_patterns.begin(), o.capacity_patterns.end());
  std::string how = end.how == spawn::child_end::kind::signaled ? "killed by " + signal_name(end.signal)
                                                         : "exit " + std::to_string(end.exit_code);
  if (auto p = find_pattern(output_tail, patterns)) {
    v.outcome = msg::outcome::capacity;
    v.reason = how + ", out of memory ('" + *p + "')";
    return v;
  }
  auto in = [](const std::vector<int>& codes, int c) {
    return std::find(codes.begin(), codes.end(), c) != codes.end();
  };
  if (end.how == spawn::child_end::kind::exited && in(o.fatal_exit_codes, end.exit_code)) {
    v.outcome = msg::outcome::fatal;
    v.reason = how + " (a fatal exit code)";
  } else if (end.how == spawn::child_end::kind::exited && in(o.transient_exit_codes, end.exit_code)) {
    v.outcome = msg::outcome::transient;
    v.reason = how + " (a transient exit code)";
  } else {
    v.outcome = o.other_exits == "fatal" ? msg::outcome::fatal : msg::outcome::transient;
    v.reason = how;
    if (end.how == spawn::child_end::kind::signaled && end.signal == SIGKILL)
      v.reason += "; not by vidline: perhaps the kernel's OOM killer (host memory)";
  }
  return v;
}

std::unique_ptr<encoder_backend> make_exec_encoder(const backend_params& p) {
  auto r = make_runner(p, nullptr, nullptr);
  if (!r->options().encode)
    return make_prompt_encoder("exec encode (" + p.owner + ")");
  return std::make_unique<exec_encoder>(std::move(r));
}

std::unique_ptr<sampler_backend> make_exec_sampler(const backend_params& p) {
  return std::make_unique<exec_sampler>(
    make_runner(p, "sample", [](const exec_options& o) { return o.sample.has_value(); }));
}

std::unique_ptr<decoder_backend> make_exec_decoder(const backend_params& p) {
  return std::make_unique<exec_decoder>(
    make_runner(p, "decode", [](const exec_options& o) { return o.decode.has_value(); }));
}

} // namespace vidline::backends::exec
