#include "actors/decoder/decoder_actor.hpp"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/decoder/decoder_machine.hpp"
#include "actors/decoder/output_index.hpp"
#include "actors/inbound.hpp"
#include "actors/warm_start.hpp"
#include "actors/worker.hpp"
#include "backends/backend.hpp"
#include "common/crash_points.hpp"
#include "common/files.hpp"
#include "common/metrics.hpp"
#include "common/stage_records.hpp"
#include "common/sha256.hpp"
#include "messages/actor_types.hpp"
#include "messages/envelope.hpp"
#include "messages/review_actor_types.hpp"

namespace vidline::actors::decoder {
namespace {

struct shell {
  context ctx;
  config::decoder dec;
  decoder::state st;
  std::shared_ptr<backends::decoder_backend> backend;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::string> devices;
  std::string vendor;
  std::string extension;
  uint64_t refused = 0;  ///< orders refused by inbound::check_order
  decoder::cache indexed;  ///< the run index files it appends to
};

std::string latent_path(const shell& sh, const std::string& sha) {
  return data_paths::latent_file(latent_dir(sh.ctx), sha);
}

/// The video file's path: <outputs>/<run>/job-<index>-<seed>.<ext>, or <outputs>/<run>/
/// <name>.<ext> for a shot's named take. Run ids, numbers and safe names only (checked by
/// inbound::check_order), so nothing from a message can steer it out of the output directory.
std::string output_path(const shell& sh, const msg::job_spec& j) {
  if (!j.name.empty())
    return data_paths::run_output_dir(output_dir(sh.ctx), j.run_id) + "/" + j.name + "."
           + sh.extension;
  return data_paths::run_output_dir(output_dir(sh.ctx), j.run_id) + "/job-"
         + std::to_string(j.index) + "-"
         + std::to_string(j.seed) + "." + sh.extension;
}

/// Where a video lies until its lease lets it be published: beside its final path (one
/// rename, same file system), hidden, with the same extension (tools read the format off it).
std::string staged_path(const shell& sh, const msg::job_spec& j, uint64_t attempt) {
  return data_paths::run_output_dir(output_dir(sh.ctx), j.run_id) + "/.staged-"
         + std::to_string(attempt) + "-job-"
         + std::to_string(j.index) + "-" + std::to_string(j.seed) + "." + sh.extension;
}

void execute(decoder_role::pointer self, const std::shared_ptr<shell>& sh,
           std::vector<decoder::effect> fx);

/// Where a published video's result is kept until the coordinator acknowledges it:
/// <data>/unacked/<decoder>/<attempt>.result (the decode_result, msgpack). A restarted
/// decoder reports these again (decoder_machine.hpp, ev_recovered).
std::string unacked_dir(const shell& sh) { return sh.ctx.data_dir + "/unacked/" + sh.dec.name; }

std::string unacked_path(const shell& sh, uint64_t attempt) {
  return unacked_dir(sh) + "/" + std::to_string(attempt) + ".result";
}

/// Keeps a result durably until its ack (written before the video is published, so no
/// published video is without it; one whose video never got published is dropped at start).
void keep_unacked(shell& sh, const msg::decode_result& r) {
  files::make_dirs(unacked_dir(sh));
  files::write_atomic(unacked_path(sh, r.attempt), msg::pack_body(r));
}

/// The kept results of an earlier epoch whose video is still there with its digest; kept
/// results that do not read, or whose video is gone or changed, are removed.
std::vector<msg::decode_result> recover_unacked(shell& sh) {
  std::vector<msg::decode_result> out;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(unacked_dir(sh), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string path = it->path().string();
    if (it->path().extension() != ".result")
      continue;
    msg::decode_result r;
    bool ok = false;
    std::string why = "it does not read";
    try {
      ok = msg::unpack_body_as(files::read_all(path), msg::decode_limits{}, r)
           && r.outcome == msg::outcome::ok && r.decoder == sh.dec.name;
      if (ok && sha256_file_hex(r.output) != r.output_sha256) {
        ok = false;
        why = "its video " + r.output + " is gone or changed";
      }
    } catch (const std::exception& x) {
      ok = false;
      why = x.what();
    }
    if (ok) {
      out.push_back(std::move(r));
      continue;
    }
    spdlog::warn("decoder {}: kept result {} dropped: {}", sh.dec.name, path, why);
    std::error_code rec;
    std::filesystem::remove(path, rec);
  }
  return out;
}

/// The held order of `attempt`, or nullptr.
const decoder::held* held_of(const shell& sh, uint64_t attempt) {
  for (auto& h : sh.st.holding)
    if (h.order.attempt == attempt)
      return &h;
  return nullptr;
}

/// The queue as the metrics show it, read off the state after each step.
void observe(const shell& sh) {
  auto& reg = metrics::global();
  const metrics::labels lane{{"decoder", sh.dec.name}};
  const double pending = sh.st.pending();
  reg.set("vidline_decoder_pending", lane, pending);
  reg.set_max("vidline_decoder_pending_max", lane, pending);
  reg.set("vidline_decoder_holding", lane, static_cast<double>(sh.st.holding.size()));
}

/// A stage of a held order ended: its duration (ok) or its error.
void stage_ended(const shell& sh, uint64_t attempt, const char* stage, const std::string& outcome,
                 double now) {
  const auto* h = held_of(sh, attempt);
  if (h == nullptr)
    return;
  auto& reg = metrics::global();
  const double from = std::string(stage) == "handoff" ? h->ordered_at : h->decode_started_at;
  if (outcome == msg::outcome::ok && from >= 0)
    reg.observe("vidline_stage_duration_seconds", {{"stage", stage}, {"lane", sh.dec.name}},
                now - from);
  reg.add("vidline_stage_attempts_total", {{"stage", stage}, {"lane", sh.dec.name},
                                           {"outcome", outcome}});
  if (outcome != msg::outcome::ok)
    reg.add("vidline_decode_errors_total", {{"decoder", sh.dec.name}, {"outcome", outcome}});
}

void fetched(decoder_role::pointer self, const std::shared_ptr<shell>& sh, uint64_t attempt,
             const std::string& outcome, const std::string& error) {
  stage_ended(*sh, attempt, "handoff", outcome, sh->ctx.run_now());
  execute(self, sh, decoder::step(sh->st, decoder::ev_fetched{attempt, outcome, error},
                                 sh->ctx.run_now()));
}

void fetch(decoder_role::pointer self, const std::shared_ptr<shell>& sh,
           const msg::decode_order& o) {
  // Its names become the latent's, the video's and the receipt's paths and a command's
  // argv: a hostile order ends here, reported fatal, before anything touches the disk.
  if (auto why = inbound::check_order(o, sh->ctx.cluster->knobs); !why.empty()) {
    if (++sh->refused <= 10 || sh->refused % 1000 == 0)
      spdlog::warn("decoder {}: order {} refused: {} ({} refused so far)", sh->dec.name,
                   o.attempt, why, sh->refused);
    fetched(self, sh, o.attempt, msg::outcome::fatal, "order refused: " + why);
    return;
  }
  auto dest = latent_path(*sh, o.latent_sha256);
  // Already here (sampled on this host, or fetched before a restart): verified at decode.
  if (std::filesystem::exists(dest)) {
    fetched(self, sh, o.attempt, msg::outcome::ok, "");
    return;
  }
  files::make_dirs(latent_dir(sh->ctx));
  auto me = caf::actor_cast<caf::actor>(self);
  uint64_t attempt = o.attempt;
  const auto began = std::chrono::steady_clock::now();
  sh->ctx.out->fetch_latent(o.source_host, o.latent_sha256, o.latent_bytes, dest,
                            [me, attempt, began, bytes = o.latent_bytes,
                             name = sh->dec.name](fetch_result r) {
                              if (r.outcome == msg::outcome::ok) {
                                const metrics::labels lane{{"decoder", name}};
                                metrics::global().add("vidline_handoff_bytes_total", lane,
                                                      static_cast<double>(bytes));
                                metrics::global().add(
                                  "vidline_handoff_seconds_total", lane,
                                  std::chrono::duration<double>(std::chrono::steady_clock::now()
                                                                - began).count());
                              }
                              caf::anon_send(me, msg::fetch_done{attempt, r.outcome, r.error});
                            });
}

void decode(decoder_role::pointer self, const std::shared_ptr<shell>& sh,
            const msg::decode_order& o) {
  backends::stage_env env;
  env.work_dir = work_dir(sh->ctx) + "/" + std::to_string(o.attempt);
  env.output_path = staged_path(*sh, o.job, o.attempt);
  auto final_path = output_path(*sh, o.job);
  env.devices = sh->devices;
  env.vendor = sh->vendor;
  env.timeout_s = sh->ctx.cluster->knobs.decode_timeout_s;
  env.cancel = sh->cancel.get();
  auto backend = sh->backend;
  auto cancel = sh->cancel;
  auto latent = latent_path(*sh, o.latent_sha256);
  auto job = o.job;
  auto sha = o.latent_sha256;
  uint64_t attempt = o.attempt;
  auto data_dir = sh->ctx.data_dir;
  auto name = sh->dec.name;
  run_on_worker(
    self,
    [backend, cancel, env, job, latent, sha, attempt, data_dir, name, final_path]() {
      // A video this host already made from this very latent is not made twice.
      if (auto r = records::reuse(data_dir, "decoded", job.run_id, job.index, attempt, sha)) {
        spdlog::info("decoder {}: {}/{} reuses {} decoded before", name, job.run_id, job.index,
                     r->product);
        return msg::stage_done{attempt, msg::outcome::ok, "", r->sha256, r->bytes, 0, false,
                               r->product, r->product};
      }
      files::make_dirs(env.work_dir);
      files::make_dirs(files::parent_of(env.output_path));
      auto r = backend->decode(job, latent, sha, env);
      if (r.outcome == msg::outcome::ok) {
        // The digest of the file as it lies on disk is what the receipt and status vouch
        // for. It stays staged until the lease decides (commit_video).
        r.sha256 = sha256_file_hex(env.output_path, &r.bytes);
      } else {
        std::error_code ec;
        std::filesystem::remove(env.output_path, ec);
      }
      if (r.outcome == msg::outcome::corrupt) {
        // Never decode it again: move it aside so the next attempt fetches a fresh copy.
        std::error_code ec;
        std::filesystem::rename(latent, latent + ".quarantined", ec);
      }
      std::error_code ec;
      std::filesystem::remove_all(env.work_dir, ec);
      const bool ok = r.outcome == msg::outcome::ok;
      return msg::stage_done{attempt, r.outcome, r.error, r.sha256, r.bytes, r.elapsed_s, r.cold,
                             ok ? env.output_path : "", ok ? final_path : ""};
    },
    [attempt](const std::string& what) {
      return msg::stage_done{attempt, msg::outcome::transient, "decoder: " + what, "", 0, 0,
                             false, "", ""};
    });
}

void report(shell& sh) {
  sh.ctx.out->send(sh.ctx.cluster->coordinator, "coordinator", sh.st.status(sh.ctx.mono_now()));
}

/// The run's index line of a published video (output_index.hpp). A failure is logged, not
/// fatal: the video and its receipt stand; the line is added when the video is reused.
void index_video(shell& sh, const decoder::fx_commit& c) {
  decoder::entry e;
  e.order = c.order;
  e.output = c.output;
  e.output_sha256 = c.sha256;
  e.handoff_s = c.handoff_s;
  e.decode_s = c.decode_s;
  std::error_code ec;
  e.bytes = static_cast<uint64_t>(std::filesystem::file_size(c.output, ec));
  try {
    decoder::append(sh.indexed, files::parent_of(c.output) + "/" + decoder::file_name,
                         e);
  } catch (const std::exception& x) {
    spdlog::error("decoder {}: {}/{}: the run's index line was not written: {}", sh.dec.name,
                  c.order.job.run_id, c.order.job.index, x.what());
  }
  // Collectable by its digest (`vidline run --collect`): a hard link, no copy. Already
  // there = the same bytes (content-addressed); a failure only means it cannot be collected.
  if (is_sha256_hex(c.sha256)) {
    const std::string blobs = output_blob_dir(sh.ctx);
    const std::string link = data_paths::by_digest(blobs, c.sha256);
    std::error_code lec;
    if (!std::filesystem::exists(link, lec)) {
      std::filesystem::create_directories(blobs, lec);
      std::filesystem::create_hard_link(c.output, link, lec);
      if (lec && !std::filesystem::exists(link))
        spdlog::warn("decoder {}: {}/{}: cannot link {} for collection: {}", sh.dec.name,
                     c.order.job.run_id, c.order.job.index, link, lec.message());
      else
        try {
          files::fsync_dir(blobs);
        } catch (const std::exception&) {
        }
    }
  }
}

/// Publishes a video within its lease: renamed into place, receipt, ledger line
/// (records::publish, the sequence the pools' latents follow too), index line.
void commit_video(shell& sh, const decoder::fx_commit& c) {
  keep_unacked(sh, c.result);
  if (c.staged == c.output) {
    index_video(sh, c);  // reused: published by an earlier attempt (its line, if missing)
    return;
  }
  const auto& job = c.order.job;
  records::publish({sh.ctx.data_dir, "decoded", job.run_id, job.index, c.order.attempt,
                    c.staged, c.output, c.sha256, c.order.latent_sha256});
  index_video(sh, c);
  crash::point("video.after_index");
}

/// Removes a video that lost the race; the ledger says so (and the machine counts it). A
/// published one goes with its index line and its collection link.
void discard_video(shell& sh, const decoder::fx_discard& d) {
  if (d.published) {
    std::filesystem::path video(d.path);
    try {
      if (!d.sha256.empty())
        decoder::remove(sh.indexed, video.parent_path().string() + "/" + decoder::file_name,
                             video.stem().string(), d.sha256);
    } catch (const std::exception& x) {
      spdlog::error("decoder {}: {}/{}: the index line of the removed video {} stays: {}",
                    sh.dec.name, d.run_id, d.index, d.path, x.what());
    }
    if (is_sha256_hex(d.sha256)) {
      const std::string link = data_paths::by_digest(output_blob_dir(sh.ctx), d.sha256);
      std::error_code ec;
      if (std::filesystem::equivalent(link, d.path, ec) && !ec
          && std::filesystem::hard_link_count(link, ec) == 2)
        std::filesystem::remove(link, ec);
    }
  }
  records::retract(sh.ctx.data_dir, "decoded", d.run_id, d.index, d.attempt, d.path,
                   d.published);
  metrics::global().add("vidline_products_retracted_total",
                        {{"lane", sh.dec.name},
                         {"reason", d.published ? "another_won" : "lease_ended"}});
}

/// A reviewer's verdict for the run index beside a video this host holds (the coordinator's
/// verdicts.hpp): appended as the video's line again with `review`, unless the index has
/// that revision already; answered either way, as the coordinator sends it until answered.
void index_verdict(shell& sh, const msg::verdict_index& v) {
  msg::verdict_indexed a;
  a.decoder = sh.dec.name;
  a.host = sh.ctx.host;
  a.run_id = v.run_id;
  a.index = v.index;
  a.revision = v.revision;
  if (auto why = inbound::check_verdict(v, output_dir(sh.ctx)); !why.empty()) {
    a.outcome = msg::verdict_outcome::refused;
    a.error = why;
  } else {
    const std::string dir = data_paths::run_output_dir(output_dir(sh.ctx), v.run_id);
    const nlohmann::json review = {
      {"verdict", v.verdict}, {"at_unix", v.at_unix},
      {"take_index", v.take_index >= 0 ? nlohmann::json(v.take_index) : nlohmann::json(nullptr)},
      {"revision", v.revision}};
    try {
      const auto r = decoder::append_review(dir + "/" + decoder::file_name,
                                                 v.output.substr(dir.size() + 1),
                                                 v.output_sha256, review);
      a.outcome = r == decoder::review_result::no_line ? msg::verdict_outcome::no_line
                                                            : msg::verdict_outcome::indexed;
      if (r == decoder::review_result::appended)
        spdlog::info("decoder {}: {}/{}: verdict {} (revision {}) in the run index", sh.dec.name,
                     v.run_id, v.index, v.verdict, v.revision);
    } catch (const std::exception& x) {
      a.outcome = msg::verdict_outcome::error;
      a.error = x.what();
      spdlog::error("decoder {}: {}/{}: the verdict is not in the run index: {}", sh.dec.name,
                    v.run_id, v.index, x.what());
    }
  }
  sh.ctx.out->send(sh.ctx.cluster->coordinator, "coordinator", a);
}

/// The coordinator acknowledged a published video's result: its kept copy goes.
void forget_unacked(shell& sh, uint64_t attempt) {
  std::error_code ec;
  std::filesystem::remove(unacked_path(sh, attempt), ec);
}

void execute(decoder_role::pointer self, const std::shared_ptr<shell>& sh,
           std::vector<decoder::effect> fx) {
  for (auto& e : fx) {
    if (auto* f = std::get_if<decoder::fx_fetch>(&e))
      fetch(self, sh, f->order);
    else if (auto* d = std::get_if<decoder::fx_decode>(&e))
      decode(self, sh, d->order);
    else if (std::holds_alternative<decoder::fx_report>(e))
      report(*sh);
    else if (auto* c = std::get_if<decoder::fx_commit>(&e))
      commit_video(*sh, *c);
    else if (auto* x = std::get_if<decoder::fx_discard>(&e))
      discard_video(*sh, *x);
    else if (auto* f = std::get_if<decoder::fx_forget>(&e))
      forget_unacked(*sh, f->attempt);
    else if (auto* l = std::get_if<decoder::fx_log>(&e))
      spdlog::log(static_cast<spdlog::level::level_enum>(l->level), "decoder {}: {}",
                  sh->dec.name, l->text);
  }
  observe(*sh);
}

} // namespace

decoder_role::behavior_type decoder_actor(decoder_role::pointer self, context ctx,
                                          config::decoder dec) {
  auto sh = std::make_shared<shell>();
  sh->ctx = std::move(ctx);
  sh->dec = std::move(dec);
  sh->st.decoder = sh->dec.name;
  sh->st.host = sh->ctx.host;
  sh->st.time_scale = sh->ctx.time_scale;  // the unix stamps of its results
  sh->st.epoch = sh->ctx.random64();
  if (auto* h = sh->ctx.cluster->find_host(sh->ctx.host))
    for (auto& g : h->gpus)
      if (g.id == sh->dec.gpu) {
        sh->devices.push_back(std::to_string(g.index));
        sh->vendor = g.vendor;
      }
  auto* b = sh->ctx.cluster->find_backend(sh->dec.backend);
  if (b == nullptr)
    throw std::runtime_error("decoder " + sh->dec.name + ": unknown backend " + sh->dec.backend);
  sh->extension = b->type == "sim" ? "simvideo" : "mp4";
  const auto& knobs = sh->ctx.cluster->knobs;
  sh->backend = backends::make_decoder({*b, sh->dec.profile_key, sh->dec.name, sh->dec.host,
                                        {sh->dec.gpu}, knobs.log_file_bytes, knobs.log_files});
  self->attach_functor([cancel = sh->cancel] { *cancel = true; });
  if (decoder_warms_at_start(*sh->ctx.cluster, sh->dec)) {
    // Beside the pools' loads: the first latent then finds the decoder's model loaded.
    backends::warm_request req;
    req.model = default_model_key(*sh->ctx.cluster);
    req.env.work_dir = work_dir(sh->ctx) + "/warm-" + sh->dec.name;
    req.env.devices = sh->devices;
    req.env.vendor = sh->vendor;
    req.env.cancel = sh->cancel.get();
    warm_in_background(self, sh->backend, req, "decoder " + sh->dec.name, sh->cancel);
  }
  auto interval = std::chrono::milliseconds(sh->ctx.cluster->knobs.status_interval_ms);
  spdlog::info("decoder {}: up (epoch {:x})", sh->dec.name, sh->st.epoch);
  // Videos published before a restart whose results the coordinator never acknowledged:
  // reported again, so it adopts or retracts each.
  if (auto kept = recover_unacked(*sh); !kept.empty())
    execute(self, sh, decoder::step(sh->st, decoder::ev_recovered{std::move(kept)},
                                     sh->ctx.run_now()));
  self->send(self, msg::status_atom::value);
  return {
    [self, sh](msg::decode_order& o) {
      auto fx = decoder::step(sh->st, decoder::ev_order{std::move(o)}, sh->ctx.run_now());
      for (auto& e : fx)
        if (std::holds_alternative<decoder::fx_fetch>(e))
          crash::point("decoder.after_dequeue");
      execute(self, sh, std::move(fx));
    },
    [self, sh](msg::result_ack& a) {
      execute(self, sh, decoder::step(sh->st, decoder::ev_ack{a.attempt, a.discard},
                                       sh->ctx.run_now()));
    },
    [self, sh](msg::lease_grant& g) {
      execute(self, sh, decoder::step(sh->st, decoder::ev_grant{std::move(g), sh->ctx.mono_now()},
                                       sh->ctx.run_now()));
    },
    [self, sh](msg::fetch_done& f) { fetched(self, sh, f.attempt, f.outcome, f.error); },
    [sh](msg::verdict_index& v) { index_verdict(*sh, v); },
    [self, sh](msg::stage_done& d) {
      if (d.attempt == warm_attempt)
        return;  // the warm start's answer (logged by it): no decode has attempt 0
      std::string output_sha = d.outcome == msg::outcome::ok ? d.sha256 : "";
      stage_ended(*sh, d.attempt, "decode", d.outcome, sh->ctx.run_now());
      execute(self, sh,
            decoder::step(sh->st,
                           decoder::ev_decoded{d.attempt, d.outcome, d.error,
                                                d.final_path,
                                                output_sha, d.elapsed_s, d.product_path,
                                                sh->ctx.mono_now()},
                           sh->ctx.run_now()));
    },
    [self, sh, interval](msg::status_atom) {
      report(*sh);
      self->delayed_send(self, interval, msg::status_atom::value);
    },
    [](msg::crash_atom) -> caf::result<void> { throw std::runtime_error("crash requested"); },
  };
}

} // namespace vidline::actors::decoder
