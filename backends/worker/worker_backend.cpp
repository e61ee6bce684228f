#include "backends/worker/worker_backend.hpp"

#include "config/shot_identity.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include <spdlog/spdlog.h>

#include "common/spawn/child.hpp"
#include "backends/exec/exec_options.hpp"
#include "backends/exec/stage_util.hpp"
#include "backends/worker/worker_options.hpp"
#include "backends/worker/worker_process.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::backends::worker {
namespace {

/// Bytes of a dead worker's log (written during the call) searched for out-of-memory texts.
constexpr std::size_t tail_bytes = 64 * 1024;

std::string join(const std::vector<std::string>& d, const char* sep = ",") {
  std::string s;
  for (std::size_t i = 0; i < d.size(); ++i)
    s += (i ? sep : "") + d[i];
  return s;
}

uint64_t file_size(const std::string& path) {
  std::error_code ec;
  auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

/// What a file gained since it was `from` bytes long (its last `max` bytes of that).
std::string written_since(const std::string& path, uint64_t from, std::size_t max) {
  uint64_t now = file_size(path);
  if (now <= from)
    return "";
  uint64_t start = std::max<uint64_t>(from, now > max ? now - max : 0);
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(start));
  std::string s(static_cast<std::size_t>(now - start), '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<std::size_t>(in.gcount()));
  return s;
}

/// The stages of one owner and its worker process.
class worker_stage {
public:
  worker_stage(worker_options o, std::string owner, std::string backend, std::string stage)
      : o_(std::move(o)), owner_(std::move(owner)), backend_(std::move(backend)),
        stage_(std::move(stage)) {
    patterns_ = exec::default_capacity_patterns();
    patterns_.insert(patterns_.end(), o_.capacity_patterns.begin(), o_.capacity_patterns.end());
  }

  const worker_options& options() const { return o_; }
  /// The cap of its process's log (knobs log_file_bytes, log_files).
  void cap_log(uint64_t bytes, int files) {
    log_file_bytes_ = bytes;
    log_files_ = files;
  }

  /// Runs request `r` (its job and input fields filled in) as one attempt.
  stage_result run(request r, const stage_env& env) {
    std::string who = "worker " + r.stage + " (" + owner_ + ")";
    if (!(env.timeout_s >= 0) || env.output_path.empty() || env.work_dir.empty())
      return exec::failed(msg::outcome::fatal, who + ": no work directory, output path or timeout", 0);
    if (env.cancel != nullptr && env.cancel->load())
      return exec::failed(msg::outcome::transient, "cancelled", 0);
    std::string product =
      env.work_dir + "/product-" + std::filesystem::path(env.output_path).filename().string();
    worker_process* p = nullptr;
    try {
      files::make_dirs(env.work_dir);
      std::filesystem::remove(product);  // a stale product of an earlier try
      files::write_atomic(env.work_dir + "/prompt.txt", r.prompt);
      r.prompt_file = env.work_dir + "/prompt.txt";
      p = ensure_process(env);
    } catch (const std::invalid_argument& e) {  // a template the options check let through
      return exec::failed(msg::outcome::fatal, who + ": " + e.what(), 0);
    } catch (const std::exception& e) {
      return exec::failed(msg::outcome::transient, who + ": " + e.what(), 0);
    }
    std::string attempt = exec::attempt_of(env.work_dir);
    r.id = attempt.empty() ? env.work_dir : attempt;
    r.output = product;
    r.work_dir = env.work_dir;
    r.timeout_s = env.timeout_s;
    const std::string& log = p->spec().log_path;
    uint64_t log_from = file_size(log);

    call_end e = p->call(r, env.timeout_s, env.cancel, env.progress, env.checkpoint, env.preempt);
    std::string where = "; log " + log;
    switch (e.how) {
    case call_end::kind::result: {
      stage_result res;
      if (e.result.outcome == msg::outcome::ok)
        res = exec::commit_product(product, env.output_path, who + ": the worker said ok",
                                   " (its request's output)" + where, e.elapsed_s);
      else
        res = exec::failed(e.result.outcome.c_str(),
                           who + ": " + (e.result.error.empty() ? e.result.outcome
                                                                : exec::printable(e.result.error, 600)),
                           e.elapsed_s);
      res.cold = e.result.cold;
      res.model = e.result.model;
      res.model_identity = e.result.model_identity;
      if (!r.model.empty() && !e.result.model.empty() && e.result.model != r.model)
        spdlog::warn("{}: the job asked for model '{}', the worker says it has '{}' loaded", who,
                     r.model, e.result.model);
      return res;
    }
    case call_end::kind::died: {
      if (auto pat = exec::find_pattern(written_since(log, log_from, tail_bytes), patterns_))
        return exec::failed(msg::outcome::capacity,
                            who + ": out of memory ('" + *pat + "'): " + e.detail, e.elapsed_s);
      return exec::failed(msg::outcome::transient, who + ": " + e.detail, e.elapsed_s);
    }
    case call_end::kind::timed_out:
      return exec::failed(msg::outcome::transient,
                          "timeout: " + who + " exceeded the stage timeout of " +
                            std::to_string(env.timeout_s) + " s: " + e.detail + where,
                          e.elapsed_s);
    case call_end::kind::cancelled:
      if (e.detail != "cancelled")
        spdlog::warn("{}: {}", who, e.detail);
      return exec::failed(msg::outcome::transient, "cancelled", e.elapsed_s);
    case call_end::kind::down:
      return exec::failed(msg::outcome::transient, who + ": " + e.detail, e.elapsed_s);
    case call_end::kind::protocol_error:
      return exec::failed(msg::outcome::fatal, who + ": " + e.detail + where, e.elapsed_s);
    }
    return exec::failed(msg::outcome::fatal, who + ": unknown end of a call", e.elapsed_s);
  }

  /// Starts the worker now and has it load `w.model` (the warm start).
  warm_result warm(const warm_request& w) {
    warm_result out;
    worker_process* p = nullptr;
    try {
      p = ensure_process(w.env);
    } catch (const std::exception& e) {
      out.error = e.what();
      return out;
    }
    load_request l;
    l.id = "load-" + owner_;
    l.stage = stage_;
    l.workflow = w.workflow;
    l.model = w.model;
    load_end e = p->load(l, o_.start_timeout_s, w.env.cancel);
    out.warmed = e.loaded;
    out.error = e.detail;
    out.model = e.reply.model;
    out.model_identity = e.reply.model_identity;
    out.load_s = e.reply.load_s > 0 ? e.reply.load_s : e.elapsed_s;
    return out;
  }

  /// What its worker said it has loaded; ("", "") before it started.
  std::pair<std::string, std::string> loaded_model() {
    std::lock_guard<std::mutex> l(m_);
    return process_ ? process_->loaded_model() : std::pair<std::string, std::string>{};
  }

private:
  /// The owner's worker, started on the first call with the owner's devices.
  worker_process* ensure_process(const stage_env& env) {
    std::lock_guard<std::mutex> l(m_);
    if (process_)
      return process_.get();
    std::string log_dir =
      (o_.log_dir.empty() ? exec::default_log_dir(env.work_dir) : o_.log_dir) + "/" + owner_;
    std::map<std::string, std::string> values{{"devices", join(env.devices)},
                                              {"vendor", env.vendor},
                                              {"owner", owner_},
                                              {"stages", stage_}};
    worker_spec s;
    s.name = "worker of " + owner_;
    for (auto& a : o_.argv)
      s.argv.push_back(exec::expand(a, values));
    std::vector<std::pair<std::string, std::string>> set;
    for (auto& kv : exec::device_variables(env.vendor, env.devices))
      set.push_back(kv);
    set.emplace_back("VIDLINE_WORKER_FD", std::to_string(worker_fd));
    set.emplace_back("VIDLINE_WORKER_PROTOCOL", std::to_string(protocol_version));
    set.emplace_back("VIDLINE_STAGES", stage_);
    set.emplace_back("VIDLINE_OWNER", owner_);
    set.emplace_back("VIDLINE_BACKEND", backend_);
    set.emplace_back("VIDLINE_DEVICES", join(env.devices));
    set.emplace_back("PYTHONUNBUFFERED", "1");
    for (auto& [k, v] : o_.env)
      set.emplace_back(k, exec::expand(v, values));
    std::vector<std::string> drop = exec::device_variable_names();
    std::map<std::string, std::string> chosen;
    std::vector<std::string> order;
    for (auto& [k, v] : set) {
      if (!chosen.count(k))
        order.push_back(k);
      chosen[k] = v;
      drop.push_back(k);
    }
    s.env = spawn::current_environment(drop);
    for (auto& k : order)
      s.env.push_back(k + "=" + chosen[k]);
    s.cwd = log_dir;
    s.log_path = log_dir + "/worker.log";
    s.log_max_bytes = log_file_bytes_;
    s.log_files = log_files_;
    s.start_timeout_s = o_.start_timeout_s;
    s.stop_grace_s = o_.stop_grace_s;
    s.cancel_grace_s = o_.cancel_grace_s;
    s.health_interval_s = o_.health_interval_s;
    s.health_timeout_s = o_.health_timeout_s;
    s.max_restarts = o_.max_restarts;
    s.restart_period_s = o_.restart_period_s;
    process_ = std::make_unique<worker_process>(std::move(s));
    return process_.get();
  }

  worker_options o_;
  std::vector<std::string> patterns_;
  std::string owner_;
  std::string backend_;
  std::string stage_;                 ///< what this owner asks of its worker
  uint64_t log_file_bytes_ = 10u << 20;
  int log_files_ = 5;
  std::mutex m_;
  std::unique_ptr<worker_process> process_;  ///< last member: stopped first
};

request job_request(const char* stage, const msg::job_spec& job, const worker_options& o) {
  request r;
  r.stage = stage;
  r.run_id = job.run_id;
  r.index = job.index;
  r.seed = job.seed;
  r.width = job.width;
  r.height = job.height;
  r.seconds = job.seconds;
  r.frames = exec::frames_for(job.seconds, o.fps, o.frame_offset);
  r.fps = o.fps;
  r.prompt = job.prompt;
  r.reference = job.reference;
  r.workflow = job.workflow;
  r.model = job.model;
  r.negative_prompt = job.negative_prompt;
  for (auto& p : job.params)
    r.params_json.emplace_back(p.name, config::param_json(p).dump());
  for (auto& i : job.inputs)
    r.named_inputs.emplace_back(i.name, i.path);
  return r;
}

class worker_encoder final : public encoder_backend {
public:
  explicit worker_encoder(std::unique_ptr<worker_stage> s) : s_(std::move(s)) {}
  stage_result encode(const std::string& prompt, const stage_env& env) override {
    request r;
    r.stage = "encode";
    r.prompt = prompt;
    return s_->run(std::move(r), env);
  }
  warm_result warm(const warm_request& w) override { return s_->warm(w); }

private:
  std::unique_ptr<worker_stage> s_;
};

class worker_sampler final : public sampler_backend {
public:
  explicit worker_sampler(std::unique_ptr<worker_stage> s) : s_(std::move(s)) {}
  stage_result sample(const msg::job_spec& job, const std::string& conditioning_path,
                      const stage_env& env) override {
    request r = job_request("sample", job, s_->options());
    r.conditioning = conditioning_path;
    r.checkpoint_dir = env.checkpoint_dir;
    r.checkpoint_interval_s = env.checkpoint_interval_s;
    r.resume_step = env.resume_file.empty() ? 0 : env.resume_step;
    r.resume_file = env.resume_file;
    r.resume_sha256 = env.resume_sha256;
    return s_->run(std::move(r), env);
  }
  warm_result warm(const warm_request& w) override { return s_->warm(w); }
  std::optional<std::pair<std::string, std::string>> loaded_model() const override {
    return s_->loaded_model();
  }

private:
  std::unique_ptr<worker_stage> s_;
};

class worker_decoder final : public decoder_backend {
public:
  explicit worker_decoder(std::unique_ptr<worker_stage> s) : s_(std::move(s)) {}
  stage_result decode(const msg::job_spec& job, const std::string& latent_path,
                      const std::string& latent_sha256, const stage_env& env) override {
    if (auto bad = exec::check_latent("worker decode", latent_path, latent_sha256))
      return *bad;
    request r = job_request("decode", job, s_->options());
    r.latent = latent_path;
    r.latent_sha256 = latent_sha256;
    return s_->run(std::move(r), env);
  }
  warm_result warm(const warm_request& w) override { return s_->warm(w); }

private:
  std::unique_ptr<worker_stage> s_;
};

std::unique_ptr<worker_stage> make_stage(const backend_params& p, const char* stage) {
  const config::backend& b = p.backend;
  if (b.type != "worker")
    throw std::runtime_error("backend '" + b.name + "': type is '" + b.type + "', not 'worker'");
  auto s = std::make_unique<worker_stage>(parse_worker_options(b.name, b.options), p.owner,
                                          b.name, stage);
  s->cap_log(p.log_file_bytes, p.log_files);
  return s;
}

} // namespace

std::unique_ptr<encoder_backend> make_worker_encoder(const backend_params& p) {
  return std::make_unique<worker_encoder>(make_stage(p, "encode"));
}

std::unique_ptr<sampler_backend> make_worker_sampler(const backend_params& p) {
  return std::make_unique<worker_sampler>(make_stage(p, "sample"));
}

std::unique_ptr<decoder_backend> make_worker_decoder(const backend_params& p) {
  return std::make_unique<worker_decoder>(make_stage(p, "decode"));
}

} // namespace vidline::backends::worker
