#include "backends/comfyui/comfyui_backend.hpp"

#include "config/shot_identity.hpp"

#include <chrono>
#include <mutex>
#include <filesystem>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "backends/comfyui/bundle.hpp"
#include "backends/comfyui/client.hpp"
#include "backends/comfyui/comfyui_options.hpp"
#include "backends/comfyui/template.hpp"
#include "backends/exec/stage_util.hpp"
#include "backends/process/backend_process.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"

namespace vidline::backends::comfyui {
namespace {

using json = nlohmann::json;
using steady = std::chrono::steady_clock;
namespace fs = std::filesystem;

/// Thrown inside an attempt to end it with `result`; caught where the attempt started.
struct stage_end {
  stage_result result;
};

[[noreturn]] void end_with(const char* outcome, std::string error, double elapsed) {
  throw stage_end{exec::failed(outcome, std::move(error), elapsed)};
}

/// Whether a path component from the server is safe to join under a directory of ours.
bool safe_relative(const std::string& p, bool allow_slash) {
  if (p.find('\0') != std::string::npos || (!p.empty() && p[0] == '/'))
    return false;
  std::istringstream in(p);
  for (std::string part; std::getline(in, part, '/');) {
    if (part == ".." || (!allow_slash && part.empty()))
      return false;
  }
  return allow_slash || p.find('/') == std::string::npos;
}

/// One attempt of one stage against the server: its clock, its prompt id, its calls.
class attempt {
public:
  attempt(const comfyui_options& o, std::string who, const stage_env& env, std::string stage,
          std::string client_id)
      : o_(o), who_(std::move(who)), env_(env), stage_(std::move(stage)),
        client_id_(std::move(client_id)), cl_(o.server), start_(steady::now()) {}

  double elapsed() const { return std::chrono::duration<double>(steady::now() - start_).count(); }
  const std::string& who() const { return who_; }
  client& api() { return cl_; }

  /// Ends the attempt when it was cancelled or ran out of time, stopping its prompt first.
  void check_stop() {
    bool cancelled = env_.cancel != nullptr && env_.cancel->load();
    bool late = env_.timeout_s > 0 && elapsed() >= env_.timeout_s;
    if (!cancelled && !late)
      return;
    std::string stopped = stop_prompt();
    if (cancelled)
      end_with(msg::outcome::transient, "cancelled", elapsed());
    std::ostringstream e;
    e << "timeout: " << who_ << " exceeded the stage timeout of " << env_.timeout_s << " s"
      << stopped;
    end_with(msg::outcome::transient, e.str(), elapsed());
  }

  /// Sleeps `s` seconds in short slices, ending the attempt on cancel or timeout.
  void pause(double s) {
    auto until = steady::now() + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(s));
    for (;;) {
      check_stop();
      auto now = steady::now();
      if (now >= until)
        return;
      std::this_thread::sleep_for(std::min<steady::duration>(until - now, std::chrono::milliseconds(20)));
    }
  }

  /// `fn()`, tried again while the server is unreachable, for at most unreachable_s.
  template <class F>
  auto call(F fn) -> decltype(fn()) {
    double since = -1;
    for (;;) {
      check_stop();
      try {
        return fn();
      } catch (const unreachable& e) {
        if (since < 0)
          since = elapsed();
        if (elapsed() - since >= o_.unreachable_s)
          end_with(msg::outcome::transient,
                   who_ + ": " + e.what() + " (no answer for " + std::to_string(int(o_.unreachable_s)) + " s)",
                   elapsed());
        pause(std::min(o_.poll_interval_s * 2, 1.0));
      }
    }
  }

  /// Runs `workflow` as prompt `id` to its end (steps 2-3 of the header) and returns its
  /// history entry.
  json run(const json& workflow, const std::string& id) {
    id_ = id;
    auto entry = call([&] { return cl_.history(id); });
    if (entry) {
      spdlog::info("{}: prompt {} had already ended: taking its result", who_, id);
    } else if (call([&] { return cl_.queue(); }).holds(id)) {
      spdlog::info("{}: prompt {} is already queued: waiting for it", who_, id);
    } else {
      submit(workflow, id);
    }
    int resubmits = 0;
    while (!entry) {
      pause(o_.poll_interval_s);
      entry = call([&] { return cl_.history(id); });
      if (entry)
        break;
      if (call([&] { return cl_.queue(); }).holds(id))
        continue;
      entry = call([&] { return cl_.history(id); });  // it may have ended between the looks
      if (entry)
        break;
      if (resubmits >= o_.resubmit_limit)
        end_with(msg::outcome::transient,
                 who_ + ": ComfyUI at " + o_.url + " lost prompt " + id +
                   " (neither queued nor in its history: restarted?) after " +
                   std::to_string(resubmits) + " resubmission(s)",
                 elapsed());
      ++resubmits;
      spdlog::warn("{}: ComfyUI at {} lost prompt {} (restarted?): submitting it again", who_,
                   o_.url, id);
      submit(workflow, id);
    }
    return *entry;
  }

  /// The verdict on a prompt's history entry; returns normally only on success.
  void check_entry(const json& entry) {
    json status = entry.is_object() ? entry.value("status", json::object()) : json::object();
    std::string str = status.is_object() ? status.value("status_str", "") : "";
    bool completed = status.is_object() && status.value("completed", false);
    if (str == "success" && completed)
      return;
    std::string error_text, detail;
    bool interrupted = false;
    if (status.is_object() && status.contains("messages") && status["messages"].is_array())
      for (auto& m : status["messages"]) {
        if (!m.is_array() || m.size() < 2 || !m[0].is_string())
          continue;
        const auto& data = m[1];
        if (m[0] == "execution_interrupted")
          interrupted = true;
        if (m[0] == "execution_error" && data.is_object()) {
          error_text = data.value("exception_type", "") + ": " + data.value("exception_message", "");
          detail = " (node " + data.value("node_id", std::string("?")) + " " +
                   data.value("node_type", std::string("?")) + ")";
          if (data.contains("traceback") && data["traceback"].is_array())
            for (auto& line : data["traceback"])
              if (line.is_string())
                error_text += "\n" + line.get<std::string>();
        }
      }
    std::string head = who_ + ": prompt " + id_ + " ";
    if (interrupted && error_text.empty())
      end_with(msg::outcome::transient, head + "was interrupted (not by this attempt)", elapsed());
    if (error_text.empty())
      end_with(msg::outcome::transient, head + "ended with status '" + exec::printable(str, 40) + "'",
               elapsed());
    std::vector<std::string> capacity = exec::default_capacity_patterns();
    capacity.insert(capacity.end(), o_.capacity_patterns.begin(), o_.capacity_patterns.end());
    std::string first_line = error_text.substr(0, error_text.find('\n'));
    std::string said = head + "failed" + detail + ": " + exec::printable(first_line, 400);
    if (auto p = exec::find_pattern(error_text, capacity))
      end_with(msg::outcome::capacity, said + " [out of memory: '" + *p + "']", elapsed());
    if (exec::find_pattern(error_text, o_.fatal_patterns))
      end_with(msg::outcome::fatal, said, elapsed());
    if (exec::find_pattern(error_text, o_.transient_patterns))
      end_with(msg::outcome::transient, said, elapsed());
    end_with(o_.other_errors == "fatal" ? msg::outcome::fatal : msg::outcome::transient, said,
             elapsed());
  }

  /// The first file node `node` of `entry` saved.
  output_file output_of(const json& entry, const std::string& node, const std::string& what) {
    json outputs = entry.is_object() ? entry.value("outputs", json::object()) : json::object();
    std::vector<output_file> files;
    if (outputs.is_object() && outputs.contains(node))
      files = files_of(outputs[node]);
    if (files.empty())
      end_with(msg::outcome::fatal,
               who_ + ": node " + node + " (" + what + ") of prompt " + id_ +
                 " saved no file: is it an output node of the workflow?",
               elapsed());
    return files.front();
  }

  /// Copies a file the server saved to `dest`: GET /view, or from its output directory.
  void fetch(const output_file& f, const std::string& dest) {
    if (!safe_relative(f.filename, false) || !safe_relative(f.subfolder, true))
      end_with(msg::outcome::fatal,
               who_ + ": the server named an unsafe output path '" + exec::printable(f.subfolder + "/" + f.filename, 200) + "'",
               elapsed());
    if (o_.outputs_from == "directory") {
      if (f.type != "output")
        end_with(msg::outcome::fatal, who_ + ": output of type '" + f.type + "' is not in the output directory", elapsed());
      std::string src = o_.output_dir + "/" + (f.subfolder.empty() ? "" : f.subfolder + "/") + f.filename;
      std::error_code ec;
      fs::copy_file(src, dest, fs::copy_options::overwrite_existing, ec);
      if (ec)
        end_with(msg::outcome::transient, who_ + ": cannot copy " + src + ": " + ec.message(), elapsed());
      return;
    }
    try {
      call([&] { return cl_.view(f.filename, f.subfolder, f.type, dest); });
    } catch (const refused& e) {
      end_with(msg::outcome::transient, who_ + ": " + e.what(), elapsed());
    } catch (const std::runtime_error& e) {  // our own disk
      end_with(msg::outcome::transient, who_ + ": " + e.what(), elapsed());
    }
  }

  /// Places a local file as a ComfyUI input "vidline/<id>/<name>"; returns the name for a
  /// loader node.
  std::string place(const std::string& file, const std::string& name) {
    std::string sub = "vidline/" + id_;
    if (o_.inputs_to == "directory") {
      std::string dir = o_.input_dir + "/" + sub;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (!ec)
        fs::copy_file(file, dir + "/" + name, fs::copy_options::overwrite_existing, ec);
      if (ec)
        end_with(msg::outcome::transient, who_ + ": cannot place " + name + " in " + dir + ": " + ec.message(), elapsed());
      return sub + "/" + name;
    }
    try {
      return call([&] { return cl_.upload(file, name, sub); });
    } catch (const refused& e) {
      end_with(msg::outcome::fatal, who_ + ": " + e.what(), elapsed());
    } catch (const std::runtime_error& e) {
      end_with(msg::outcome::transient, who_ + ": " + e.what(), elapsed());
    }
  }

  /// Removes what this attempt left in ComfyUI's directories (only when vidline reaches
  /// them: the HTTP API has no way to delete).
  void clean_up() {
    std::error_code ec;
    if (o_.outputs_from == "directory" && !id_.empty())
      fs::remove_all(o_.output_dir + "/vidline/" + id_, ec);
    if (o_.inputs_to == "directory" && !id_.empty())
      fs::remove_all(o_.input_dir + "/vidline/" + id_, ec);
  }

  void set_id(const std::string& id) { id_ = id; }

private:
  void submit(const json& workflow, const std::string& id) {
    double since = -1;
    for (;;) {
      check_stop();
      try {
        json reply = cl_.submit(workflow, id, client_id_);
        id_ = id;
        if (reply.is_object() && reply.contains("node_errors") && reply["node_errors"].is_object() &&
            !reply["node_errors"].empty()) {
          // ComfyUI dropped the outputs that failed validation and queued the rest: a job
          // missing an output must not run (or succeed) on what is left.
          std::string stopped = stop_prompt();
          end_with(msg::outcome::fatal,
                   who_ + ": ComfyUI at " + o_.url + " refused part of the workflow (HTTP 200 with " +
                     "node_errors; its valid outputs were queued" + stopped + "): " +
                     describe_node_errors(reply["node_errors"]),
                   elapsed());
        }
        spdlog::info("{}: submitted prompt {} to {}", who_, id, o_.url);
        return;
      } catch (const refused& e) {
        end_with(msg::outcome::fatal,
                 who_ + ": ComfyUI at " + o_.url + " refused the workflow (HTTP " +
                   std::to_string(e.status()) + "): " + describe_rejection(e.body()),
                 elapsed());
      } catch (const unreachable& e) {
        if (since < 0)
          since = elapsed();
        if (elapsed() - since >= o_.unreachable_s)
          end_with(msg::outcome::transient, who_ + ": " + e.what(), elapsed());
        pause(std::min(o_.poll_interval_s * 2, 1.0));
        // The request may have arrived even though its answer did not: never queue it twice.
        try {
          if (cl_.history(id) || cl_.queue().holds(id))
            return;
        } catch (const unreachable&) {
        }
      }
    }
  }

  /// Interrupts our prompt if it is the one running and drops it if still pending.
  /// Best effort, one try each; returns a note for the error message.
  std::string stop_prompt() {
    if (id_.empty())
      return "";
    try {
      client quick([&] {
        endpoint e = o_.server;
        e.read_timeout_s = std::min(e.read_timeout_s, 5.0);
        return e;
      }());
      auto q = quick.queue();
      if (q.running.count(id_)) {
        quick.interrupt(id_);
        return "; prompt " + id_ + " interrupted";
      }
      if (q.pending.count(id_)) {
        quick.delete_pending(id_);
        return "; prompt " + id_ + " removed from the queue";
      }
    } catch (const std::exception& e) {
      return "; could not stop prompt " + id_ + ": " + e.what();
    }
    return "";
  }

  const comfyui_options& o_;
  std::string who_;
  const stage_env& env_;
  std::string stage_;
  std::string client_id_;
  client cl_;
  steady::time_point start_;
  std::string id_;
};

/// What a sampler and a decoder share: the options and, when configured, the ComfyUI
/// process they own.
class comfyui_stage {
public:
  comfyui_stage(comfyui_options o, const backend_params& p)
      : o_(std::move(o)), owner_(p.owner), backend_(p.backend.name),
        log_file_bytes_(p.log_file_bytes), log_files_(p.log_files) {}

protected:
  template_values common_values(const msg::job_spec& job) const {
    template_values v{{"prompt", job.prompt},
            {"negative_prompt", job.negative_prompt.empty() ? o_.negative_prompt
                                                            : job.negative_prompt},
            {"seed", job.seed},
            {"width", job.width},
            {"height", job.height},
            {"seconds", job.seconds},
            {"frames", exec::frames_for(job.seconds, o_.fps, o_.frame_offset)},
            {"fps", o_.fps},
            {"run_id", job.run_id},
            {"index", job.index},
            {"job", job.run_id + "-" + std::to_string(job.index)}};
    for (auto& p : job.params)  // the shot's params, typed ({{param.steps}} stays a number)
      v["param." + p.name] = config::param_json(p);
    return v;
  }

  /// The sample template of the job's workflow: its own, else the backend's.
  const json& sample_template(const msg::job_spec& job) const {
    auto it = o_.workflow_templates.find(job.workflow);
    return it != o_.workflow_templates.end() ? it->second : *o_.sample_workflow;
  }

  std::string prompt_id(const char* stage, const msg::job_spec& job, const stage_env& env,
                        const std::string& extra) const {
    return prompt_id_for(backend_, owner_, stage, job, env.work_dir, extra);
  }

  json rendered(const json& tmpl, const template_values& v, attempt& a, const char* which) {
    auto r = render(tmpl, v);
    if (!r.ok)
      end_with(msg::outcome::fatal,
               a.who() + ": the " + which + " workflow does not render: " + r.error +
                 (r.where.empty() ? "" : " at " + r.where),
               a.elapsed());
    return r.workflow;
  }

  /// Starts the owned ComfyUI (if the options give one) on the first call, with the
  /// owner's devices, and waits until it answers; ends the attempt if it is down.
  void ensure_process(attempt& a, const stage_env& env) {
    if (!o_.process)
      return;
    process::backend_process* p = nullptr;
    {
      std::lock_guard<std::mutex> l(process_m_);
      if (!process_) {
        try {
          auto spec = process::comfyui_process_spec(*o_.process, o_.server, owner_, env.vendor,
                                                    env.devices);
          spec.log_max_bytes = log_file_bytes_;
          spec.log_files = log_files_;
          process_ = std::make_unique<process::backend_process>(std::move(spec));
        } catch (const std::exception& e) {
          end_with(msg::outcome::fatal, a.who() + ": " + e.what(), a.elapsed());
        }
      }
      p = process_.get();
    }
    std::string why;
    for (;;) {
      a.check_stop();
      if (p->wait_ready(0.2, &why))
        return;
      auto st = p->current();
      if (st == process::backend_process::state::gave_up || st == process::backend_process::state::stopped)
        end_with(msg::outcome::transient, a.who() + ": its ComfyUI process is down: " + why, a.elapsed());
    }
  }

  /// Runs `body` as one attempt, turning its end into a stage_result.
  template <class Body>
  stage_result guarded(const char* stage, const stage_env& env, Body body) {
    std::string who = "comfyui " + std::string(stage) + " (" + owner_ + ")";
    if (!(env.timeout_s >= 0) || env.work_dir.empty() || env.output_path.empty())
      return exec::failed(msg::outcome::fatal, who + ": no work directory, output path or timeout", 0);
    attempt a(o_, who, env, stage, "vidline-" + owner_);
    try {
      files::make_dirs(env.work_dir + "/parts");
      ensure_process(a, env);
      stage_result r = body(a);
      a.clean_up();
      return r;
    } catch (const stage_end& e) {
      a.clean_up();
      return e.result;
    } catch (const std::exception& e) {  // our own disk, mostly
      return exec::failed(msg::outcome::transient, who + ": " + e.what(), a.elapsed());
    }
  }

  /// Checks the product at `path`, moves it to env.output_path, and reports it.
  stage_result deliver(const std::string& path, const stage_env& env, attempt& a) {
    std::string why;
    auto p = exec::check_product(path, why);
    if (!p)
      end_with(msg::outcome::fatal, a.who() + ": " + why, a.elapsed());
    files::fsync_file(path);
    files::make_dirs(files::parent_of(env.output_path));
    files::rename_durable(path, env.output_path);
    stage_result r;
    r.outcome = msg::outcome::ok;
    r.sha256 = p->sha256;
    r.bytes = p->bytes;
    r.elapsed_s = a.elapsed();
    return r;
  }

  comfyui_options o_;
  std::string owner_;
  std::string backend_;
  std::mutex process_m_;
  uint64_t log_file_bytes_;
  int log_files_;
  std::unique_ptr<process::backend_process> process_;  ///< last member: stopped first
};

class comfyui_sampler final : public sampler_backend, comfyui_stage {
public:
  using comfyui_stage::comfyui_stage;

  stage_result sample(const msg::job_spec& job, const std::string& /*conditioning*/,
                      const stage_env& env) override {
    return guarded("sample", env, [&](attempt& a) {
      std::string id = prompt_id("sample", job, env, "");
      a.set_id(id);
      template_values v = common_values(job);
      v["latent_prefix"] = "vidline/" + id + "/latent";
      const json& tmpl = sample_template(job);
      auto uses = placeholders_of(tmpl);
      // Each named input the template uses is placed for the server as the reference is.
      for (auto& in : job.inputs) {
        const std::string key = "input." + in.name;
        if (std::find(uses.begin(), uses.end(), key) == uses.end())
          continue;
        if (in.path.empty() || !fs::is_regular_file(in.path))
          end_with(msg::outcome::transient,
                   a.who() + ": input " + in.name + " is not readable on this host", a.elapsed());
        std::string ext = fs::path(in.path).extension().string();
        if (ext.size() > 8 || !safe_relative(ext, false))
          ext = "";
        v[key] = a.place(in.path, in.name + ext);
      }
      for (auto& n : uses)
        if (is_shot_placeholder(n) && !v.count(n))
          end_with(msg::outcome::fatal,
                   a.who() + ": the workflow's template uses {{" + n + "}}, which job "
                   + job.run_id + "/" + std::to_string(job.index) + " does not carry",
                   a.elapsed());
      if (std::find(uses.begin(), uses.end(), "reference_image") != uses.end()) {
        if (job.reference.empty())
          end_with(msg::outcome::fatal,
                   a.who() + ": the sample workflow uses {{reference_image}}: give the run a "
                             "reference image (--reference-file)",
                   a.elapsed());
        if (!fs::is_regular_file(job.reference))
          end_with(msg::outcome::fatal,
                   a.who() + ": reference image " + job.reference + " is not readable on this host",
                   a.elapsed());
        std::string ext = fs::path(job.reference).extension().string();
        if (ext.size() > 8 || !safe_relative(ext, false))
          ext = "";
        v["reference_image"] = a.place(job.reference, "reference" + ext);
      }
      json workflow = rendered(tmpl, v, a, "sample");
      json entry = a.run(workflow, id);
      a.check_entry(entry);
      std::vector<bundle_part> parts;
      for (auto& [part, node] : o_.latents) {
        std::string dest = env.work_dir + "/parts/" + part + ".latent";
        a.fetch(a.output_of(entry, node, "SaveLatent of part " + part), dest);
        std::string why;
        if (!exec::check_product(dest, why))
          end_with(msg::outcome::fatal, a.who() + ": part " + part + ": " + why, a.elapsed());
        parts.push_back({part, dest});
      }
      std::string bundle = env.work_dir + "/product-latent";
      write_bundle(bundle, parts);
      return deliver(bundle, env, a);
    });
  }
};

class comfyui_decoder final : public decoder_backend, comfyui_stage {
public:
  using comfyui_stage::comfyui_stage;

  stage_result decode(const msg::job_spec& job, const std::string& latent_path,
                      const std::string& latent_sha256, const stage_env& env) override {
    return guarded("decode", env, [&](attempt& a) {
      if (!is_sha256_hex(latent_sha256))
        end_with(msg::outcome::fatal, a.who() + ": expected latent digest is not 64 lowercase hex digits", 0);
      std::string got = sha256_file_hex(latent_path);
      if (got.empty())
        end_with(msg::outcome::transient, a.who() + ": cannot read latent " + latent_path, 0);
      if (got != latent_sha256)
        end_with(msg::outcome::corrupt,
                 a.who() + ": latent " + latent_path + " hashed to " + got + ", expected " +
                   latent_sha256 + "; nothing decoded",
                 0);
      std::vector<bundle_part> parts;
      try {
        parts = read_bundle(latent_path, env.work_dir + "/parts");
      } catch (const std::runtime_error& e) {
        end_with(msg::outcome::fatal, a.who() + ": " + e.what(), a.elapsed());
      }
      std::string id = prompt_id("decode", job, env, latent_sha256);
      a.set_id(id);
      template_values v = common_values(job);
      v["output_prefix"] = "vidline/" + id + "/video";
      auto uses = placeholders_of(*o_.decode_workflow);
      for (auto& p : parts) {
        std::string key = "latent_" + p.part;
        if (std::find(uses.begin(), uses.end(), key) != uses.end())
          v[key] = a.place(p.path, p.part + ".latent");
      }
      json workflow = rendered(*o_.decode_workflow, v, a, "decode");
      json entry = a.run(workflow, id);
      a.check_entry(entry);
      output_file f = a.output_of(entry, o_.video_output, "the video");
      std::string dest = env.work_dir + "/product-" + fs::path(env.output_path).filename().string();
      a.fetch(f, dest);
      return deliver(dest, env, a);
    });
  }
};

comfyui_options options_for(const backend_params& p) {
  if (p.backend.type != "comfyui")
    throw std::runtime_error("backend '" + p.backend.name + "': type is '" + p.backend.type +
                             "', not 'comfyui'");
  auto o = parse_comfyui_options(p.backend.name, p.backend.options);
  load_workflow_templates(p.backend, o);
  return o;
}

} // namespace

std::string prompt_id_for(const std::string& backend, const std::string& owner,
                          const std::string& stage, const msg::job_spec& job,
                          const std::string& work_dir, const std::string& extra) {
  std::ostringstream k;
  k << "vidline-comfyui-1\x1f" << backend << '\x1f' << owner << '\x1f' << stage << '\x1f'
    << job.run_id << '\x1f' << job.index << '\x1f' << exec::attempt_of(work_dir) << '\x1f'
    << job.seed << '\x1f' << job.width << 'x' << job.height << 'x' << job.seconds << '\x1f'
    << to_hex(sha256_of(job.prompt)) << '\x1f' << extra;
  return uuid_from(k.str());
}

std::unique_ptr<encoder_backend> make_comfyui_encoder(const backend_params& p) {
  options_for(p);  // the options are checked even though the encoder does not use them
  return exec::make_prompt_encoder("comfyui encode (" + p.owner + ")");
}

std::unique_ptr<sampler_backend> make_comfyui_sampler(const backend_params& p) {
  auto o = options_for(p);
  if (!o.sample_workflow && (p.backend.workflows.empty() ||
                             o.workflow_templates.size() < p.backend.workflows.size()))
    throw config::config_error("/backends/" + p.backend.name + "/options",
                               "'sample_workflow' is missing, and " + p.owner + " needs it");
  return std::make_unique<comfyui_sampler>(std::move(o), p);
}

std::unique_ptr<decoder_backend> make_comfyui_decoder(const backend_params& p) {
  auto o = options_for(p);
  if (!o.decode_workflow)
    throw config::config_error("/backends/" + p.backend.name + "/options",
                               "'decode_workflow' is missing, and " + p.owner + " needs it");
  return std::make_unique<comfyui_decoder>(std::move(o), p);
}

} // namespace vidline::backends::comfyui
