#include "actors/latents/latents_actor.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/coordinator/input_maker.hpp"
#include "actors/latents/store_machine.hpp"
#include "actors/latents/sweep.hpp"
#include "actors/pool/pool_actor.hpp"
#include "common/files.hpp"
#include "common/metrics.hpp"
#include "common/sha256.hpp"
#include "messages/actor_types.hpp"

namespace vidline::actors::latents {
namespace {

namespace fs = std::filesystem;

struct shell {
  context ctx;
  latents::state st;
  std::map<std::string, latents::file> notes;  ///< what each latent's .job note said (cache)
  latents::sweep_limits limits;
  int ticks = 0;  ///< status ticks since the last sweep
};

double real_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// The `<sha>.latent` files in the latent directory, with the job their note names.
std::map<std::string, latents::file> scan(shell& sh) {
  std::map<std::string, latents::file> out;
  std::error_code ec;
  for (fs::directory_iterator it(latent_dir(sh.ctx), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!data_paths::is_latent_file_name(name))
      continue;
    const std::string sha = name.substr(0, 64);
    std::error_code size_ec;
    const auto bytes = it->file_size(size_ec);
    if (!is_sha256_hex(sha) || size_ec)
      continue;
    auto note = sh.notes.find(sha);
    if (note == sh.notes.end()) {
      latents::file f;
      std::ifstream in(data_paths::latent_job_file(latent_dir(sh.ctx), sha));
      if (!(in >> f.run_id >> f.index) || !files::is_safe_name(f.run_id))
        f = latents::file{};
      // A checkpoint's note goes on: "checkpoint <step> <attempt>" (checkpoint_note).
      std::string word;
      if (!f.run_id.empty() && in >> word && word == "checkpoint"
          && (!(in >> f.checkpoint_step >> f.attempt) || f.checkpoint_step == 0))
        f = latents::file{};  // never taken for the job's latent
      note = sh.notes.emplace(sha, f).first;
    }
    latents::file f = note->second;
    f.bytes = bytes;
    out[sha] = f;
  }
  for (auto it = sh.notes.begin(); it != sh.notes.end();)
    it = out.count(it->first) ? std::next(it) : sh.notes.erase(it);
  return out;
}

/// Seconds since `p` was last written (0 when it cannot be read: kept).
double idle_of(const fs::path& p, fs::file_time_type now) {
  std::error_code ec;
  auto t = fs::last_write_time(p, ec);
  if (ec)
    return 0;
  return std::chrono::duration<double>(now - t).count();
}

/// The data directory's leftovers (sweep.hpp), each with how long it has been untouched.
std::vector<latents::listed> list_leftovers(const shell& sh) {
  using latents::leftover;
  std::vector<latents::listed> out;
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  auto add_files = [&](const std::string& dir, leftover kind, auto&& wanted) {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code e2;
      if (!it->is_regular_file(e2) || !wanted(it->path().filename().string()))
        continue;
      latents::listed l{it->path().string(), kind, idle_of(it->path(), now), 1, 0};
      l.links = it->hard_link_count(e2);
      l.bytes = it->file_size(e2);
      out.push_back(std::move(l));
    }
    ec.clear();
  };
  auto ends_with = [](const std::string& s, const char* tail) {
    const std::string t(tail);
    return s.size() > t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  const std::size_t before_parts = out.size();
  // Part files of fetches, latents a decoder quarantined as corrupt, and a job note whose
  // latent never came (a kill between the note and the rename).
  const std::string ldir = latent_dir(sh.ctx);
  add_files(ldir, leftover::part, [&](const std::string& n) {
    if (ends_with(n, data_paths::latent_job_ext) && n.size() == 64 + 4)
      return !fs::exists(data_paths::latent_file(ldir, n.substr(0, 64)));
    return ends_with(n, ".part") || ends_with(n, ".part.state") || ends_with(n, ".quarantined");
  });
  // A part's state file is as old as its part (it is rewritten only every part_sync_bytes).
  for (std::size_t i = before_parts; i < out.size(); ++i)
    if (ends_with(out[i].path, ".part.state")) {
      const std::string part = out[i].path.substr(0, out[i].path.size() - 6);
      std::error_code pe;
      if (fs::exists(part, pe))
        out[i].idle_s = std::min(out[i].idle_s, idle_of(part, now));
    }
  add_files(conditioning_dir(sh.ctx), leftover::conditioning,
            [&](const std::string& n) { return ends_with(n, ".cond"); });
  add_files(output_blob_dir(sh.ctx), leftover::output_blob,
            [](const std::string& n) { return is_sha256_hex(n); });
  // Inputs, and the videos of other hosts the coordinator took frames from: both unused
  // for input_retention_s go.
  for (const auto& dir : {input_dir(sh.ctx), coordinator::input_video_dir(sh.ctx)}) {
    add_files(dir, leftover::input, [](const std::string& n) { return is_sha256_hex(n); });
    // Pulls of inputs and videos (<sha>.part, .part.state) and uploads to this node
    // (.<sha>.<pid>-<n>.part).
    add_files(dir, leftover::part, [&](const std::string& n) {
      return ends_with(n, ".part") || ends_with(n, ".part.state");
    });
  }
  // A work directory's age is that of the newest thing in it.
  for (fs::directory_iterator it(work_dir(sh.ctx), ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_directory(e2))
      continue;
    double idle = idle_of(it->path(), now);
    uint64_t bytes = 0;
    for (fs::directory_iterator in(it->path(), e2), iend; !e2 && in != iend; in.increment(e2)) {
      idle = std::min(idle, idle_of(in->path(), now));
      std::error_code e3;
      if (in->is_regular_file(e3))
        bytes += in->file_size(e3);
    }
    out.push_back({it->path().string(), leftover::work_dir, idle, 1, bytes});
  }
  ec.clear();
  for (fs::directory_iterator it(sh.ctx.data_dir + "/receipts", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code e2;
    if (it->is_directory(e2))
      add_files(it->path().string(), leftover::receipt, [](const std::string&) { return true; });
  }
  return out;
}

/// Removes the leftovers past their limits; empty receipt directories go with them.
void sweep_leftovers(shell& sh) {
  auto r = latents::sweep(list_leftovers(sh), sh.limits);
  if (r.remove.empty())
    return;
  std::set<std::string> parents;
  for (auto& path : r.remove) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec)
      spdlog::warn("latents: cannot remove {}: {}", path, ec.message());
    if (path.rfind(sh.ctx.data_dir + "/receipts/", 0) == 0)
      parents.insert(files::parent_of(path));
  }
  for (auto& dir : parents) {
    std::error_code ec;
    if (fs::is_empty(dir, ec) && !ec)
      fs::remove(dir, ec);
  }
  std::string what;
  for (int k = 0; k < 6; ++k)
    if (r.counts[k] != 0) {
      const char* name = latents::leftover_name(static_cast<latents::leftover>(k));
      what += (what.empty() ? "" : ", ") + std::to_string(r.counts[k]) + " " + name;
      metrics::global().add("vidline_leftovers_removed_total",
                            {{"host", sh.ctx.host}, {"kind", name}}, r.counts[k]);
    }
  spdlog::info("latents: removed leftovers past their retention: {} ({} bytes)", what, r.bytes);
}

void execute(shell& sh, const std::vector<latents::effect>& fx) {
  for (auto& e : fx) {
    if (auto* r = std::get_if<latents::fx_report>(&e)) {
      sh.ctx.out->send(sh.ctx.cluster->coordinator, "coordinator", r->h);
    } else if (auto* rm = std::get_if<latents::fx_remove>(&e)) {
      const std::string ldir = latent_dir(sh.ctx);
      std::error_code ec;
      fs::remove(data_paths::latent_file(ldir, rm->sha256), ec);
      fs::remove(data_paths::latent_job_file(ldir, rm->sha256), ec);
      sh.notes.erase(rm->sha256);
      spdlog::info("latents: removed {} (released)", rm->sha256);
    } else if (auto* l = std::get_if<latents::fx_log>(&e)) {
      spdlog::log(static_cast<spdlog::level::level_enum>(l->level), "latents: {}", l->text);
    }
  }
}

} // namespace

latents_role::behavior_type latents_actor(latents_role::pointer self, context ctx) {
  auto sh = std::make_shared<shell>();
  sh->ctx = std::move(ctx);
  const auto& k = sh->ctx.cluster->knobs;
  sh->st.host = sh->ctx.host;
  sh->st.epoch = sh->ctx.random64();
  sh->st.budget_bytes = k.latent_budget_bytes;
  sh->st.retention_s = k.latent_retention_s;
  sh->limits.part_s = k.stale_part_s;
  sh->limits.conditioning_s = k.conditioning_retention_s;
  sh->limits.output_blob_s = k.output_blob_retention_s;
  sh->limits.receipt_s = k.receipt_retention_s;
  sh->limits.input_s = k.input_retention_s;
  // A live stage ends by its timeout (real seconds here), so a work directory untouched
  // for twice the longest is a dead one's.
  sh->limits.work_dir_s =
    60 + 2 * static_cast<double>(sh->ctx.real_ms(std::max(k.sample_timeout_s, k.decode_timeout_s))) / 1000;
  // Sweeps every 30 s (the listing walks a few directories), or every half of the
  // shortest limit when that is sooner.
  double sweep_ms = 30'000;
  for (double lim : {sh->limits.part_s, sh->limits.conditioning_s, sh->limits.output_blob_s,
                     sh->limits.receipt_s, sh->limits.input_s, sh->limits.work_dir_s})
    if (lim > 0)
      sweep_ms = std::min(sweep_ms, lim * 500);
  const int sweep_every = std::max(1, static_cast<int>(sweep_ms / std::max(1, k.status_interval_ms)));
  auto interval = std::chrono::milliseconds(k.status_interval_ms);
  self->send(self, msg::status_atom::value);
  return {
    [sh](msg::latent_release& r) {
      execute(*sh, latents::step(sh->st, latents::ev_release{std::move(r.sha256s)}, real_now()));
    },
    [self, sh, interval, sweep_every](msg::status_atom) {
      if (++sh->ticks >= sweep_every) {
        sh->ticks = 0;
        sweep_leftovers(*sh);
      }
      auto held = scan(*sh);
      double bytes = 0;
      for (auto& [sha, f] : held)
        bytes += static_cast<double>(f.bytes);
      const metrics::labels host{{"host", sh->ctx.host}};
      metrics::global().set("vidline_latent_bytes_waiting", host, bytes);
      metrics::global().set("vidline_latent_files", host, static_cast<double>(held.size()));
      execute(*sh, latents::step(sh->st, latents::ev_scan{std::move(held)}, real_now()));
      // Every interval, not only on a change: a pool restarted meanwhile learns it too.
      for (auto& p : sh->ctx.cluster->pools)
        if (p.host == sh->ctx.host)
          if (auto pool = sh->ctx.out->local("pool:" + p.name))
            self->send(caf::actor_cast<pool::pool_role>(pool), msg::latent_budget{sh->st.accepting()});
      self->delayed_send(self, interval, msg::status_atom::value);
    },
    [](msg::crash_atom) -> caf::result<void> { throw std::runtime_error("crash requested"); },
  };
}

} // namespace vidline::actors::latents
