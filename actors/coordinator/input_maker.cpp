#include "actors/coordinator/input_maker.hpp"

#include <chrono>
#include <filesystem>
#include <mutex>

#include <spdlog/spdlog.h>

#include "common/spawn/child.hpp"
#include "common/crash_points.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "config/shot_graph.hpp"

namespace vidline::actors::coordinator {

std::string input_video_dir(const context& ctx) {
  return data_paths::input_video_dir(ctx.data_dir);
}

std::string decoder_backend_type(const config::cluster& c, const std::string& name) {
  for (auto& d : c.decoders)
    if (d.name == name) {
      auto b = c.backends.find(d.backend);
      return b == c.backends.end() ? "" : b->second.type;
    }
  return "";
}

namespace {

/// Stores `bytes` as an input (content-addressed: an input made twice is written once).
std::string store(const context& ctx, const std::string& bytes) {
  const std::string sha = to_hex(sha256_of(bytes));
  const std::string dir = input_dir(ctx);
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/" + sha, ec)) {
    files::make_dirs(dir);
    files::write_atomic(dir + "/" + sha, bytes);
  }
  return sha;
}

/// Runs a tool to its end with a deadline; "" when it exited 0, else why not.
std::string run_tool(const std::vector<std::string>& argv, const std::string& out,
                     const std::string& err) {
  spawn::child_spec spec;
  spec.argv = argv;
  spec.env = spawn::current_environment();
  spec.stdout_path = out;
  spec.stderr_path = err;
  spawn::child_limits lim;
  lim.timeout = std::chrono::seconds(60);
  auto end = spawn::run_child(spec, lim);
  if (end.how == spawn::child_end::kind::exited && end.exit_code == 0)
    return "";
  std::string tail;
  try {
    tail = files::read_all(err);
    if (tail.size() > 300)
      tail = tail.substr(tail.size() - 300);
  } catch (const std::exception&) {
  }
  if (end.how == spawn::child_end::kind::spawn_failed)
    return argv[0] + " could not be started: " + end.error;
  return argv[0] + " failed (exit " + std::to_string(end.exit_code) + "): " + tail;
}

/// The source's video, for messages.
std::string video_label(const fx_make_input& fx) {
  return "the video of job " + std::to_string(fx.source) + " (decoder " + fx.decoder + ")";
}

/// A local path holding the source's video: where it lies when its decoder is on this host,
/// else the copy pulled from the decoder's host into input_video_dir (pulled now unless an
/// earlier frame of it brought it). "" with `error` when it cannot be had.
std::string video_here(const context& ctx, const fx_make_input& fx,
                       const video_fetch& fetch, std::string& error) {
  const auto* d = ctx.cluster->find_decoder(fx.decoder);
  std::error_code ec;
  if (is_sha256_hex(fx.output_sha256)) {
    // Uploaded as an input by its digest (a video of a collection folder, offered for
    // reuse): verified when it came.
    const std::string uploaded = data_paths::by_digest(input_dir(ctx), fx.output_sha256);
    if (std::filesystem::is_regular_file(uploaded, ec)) {
      std::filesystem::last_write_time(uploaded, std::filesystem::file_time_type::clock::now(), ec);
      return uploaded;
    }
  }
  if (d == nullptr || d->host == ctx.host) {
    if (std::filesystem::is_regular_file(fx.output, ec))
      return fx.output;
    error = video_label(fx) + " is not at " + fx.output
            + (d == nullptr ? " (its decoder is not in the config)" : "");
    return "";
  }
  if (!is_sha256_hex(fx.output_sha256)) {
    error = video_label(fx) + " lies on host " + d->host + " and has no digest to fetch it by";
    return "";
  }
  const std::string dir = input_video_dir(ctx);
  const std::string dest = dir + "/" + fx.output_sha256;
  // One copy at a time in the process: a coordinator restarted by its supervisor while its
  // predecessor's maker still copies waits, then finds the copy (never two on one part).
  static std::mutex copying;
  std::lock_guard<std::mutex> one(copying);
  if (std::filesystem::is_regular_file(dest, ec)) {
    // Renamed there only once verified; used now, so the sweep keeps it.
    std::filesystem::last_write_time(dest, std::filesystem::file_time_type::clock::now(), ec);
    return dest;
  }
  if (!fetch) {
    error = video_label(fx) + " lies on host " + d->host + ", and this process cannot fetch it";
    return "";
  }
  files::make_dirs(dir);
  crash::point("input.before_fetch");
  const auto began = std::chrono::steady_clock::now();
  if (auto why = fetch(d->host, fx.output_sha256, dest); !why.empty()) {
    error = video_label(fx) + " lies on host " + d->host + " and could not be fetched from it: "
            + why;
    return "";
  }
  spdlog::info("coordinator: fetched video {} from host {} in {:.1f} s to take frame {} of it",
               fx.output_sha256, d->host,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count(),
               fx.frame);
  return dest;
}

/// The source's latent handed over: stored as an input at <data_dir>/inputs/<sha256> once
/// its bytes hash to the digest its sampler reported: copied from this host's latents when
/// it was sampled here, else pulled from the host that sampled it (as a decoder pulls it).
/// Its size, or nothing with `error`.
std::optional<uint64_t> latent_input(const context& ctx, const fx_make_input& fx,
                                     const video_fetch& fetch_latent, std::string& error) {
  const std::string label = "the latent of job " + std::to_string(fx.source);
  if (!is_sha256_hex(fx.output_sha256)) {
    error = label + " is not known (its job has no latent digest)";
    return std::nullopt;
  }
  const std::string dest = data_paths::by_digest(input_dir(ctx), fx.output_sha256);
  std::error_code ec;
  files::make_dirs(input_dir(ctx));
  if (std::filesystem::is_regular_file(dest, ec)) {  // renamed there only once verified
    std::filesystem::last_write_time(dest, std::filesystem::file_time_type::clock::now(), ec);
    return std::filesystem::file_size(dest);
  }
  uint64_t bytes = 0;
  if (fx.latent_host == ctx.host) {
    const std::string here = data_paths::latent_file(latent_dir(ctx), fx.output_sha256);
    if (auto why = files::copy_verified(here, fx.output_sha256, dest, bytes); !why.empty()) {
      error = label + " on this host could not be taken: " + why;
      return std::nullopt;
    }
    return bytes;
  }
  if (!fetch_latent) {
    error = label + " lies on host " + fx.latent_host + ", and this process cannot fetch it";
    return std::nullopt;
  }
  if (auto why = fetch_latent(fx.latent_host, fx.output_sha256, dest); !why.empty()) {
    error = label + " lies on host " + fx.latent_host + " and could not be fetched from it: "
            + why;
    return std::nullopt;
  }
  return std::filesystem::file_size(dest);
}

/// Frame k of a real video, as PNG bytes, or why not (`error`).
std::string decoded_frame(const context& ctx, const fx_make_input& fx,
                          const video_fetch& fetch, std::string& error) {
  const std::string video = video_here(ctx, fx, fetch, error);
  if (video.empty())
    return "";
  std::error_code ec;
  const std::string tmp = input_dir(ctx) + "/.frame-" + fx.run_id + "-"
                          + std::to_string(fx.index) + "-" + fx.name;
  files::make_dirs(input_dir(ctx));
  if (auto why = run_tool({"ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
                           "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", video},
                          tmp + ".count", tmp + ".err");
      !why.empty()) {
    error = why + " (" + video_label(fx) + ")";
    return "";
  }
  uint64_t frames = 0;
  try {
    frames = std::stoull(files::read_all(tmp + ".count"));
  } catch (const std::exception&) {
    error = "ffprobe did not count the frames of " + video_label(fx) + " (" + video + ")";
    return "";
  }
  if (fx.frame >= frames) {
    error = "frame " + std::to_string(fx.frame) + " is outside " + video_label(fx) + " ("
            + std::to_string(frames) + " frames)";
    return "";
  }
  if (auto why = run_tool({"ffmpeg", "-v", "error", "-y", "-i", video, "-vf",
                           "select=eq(n\\," + std::to_string(fx.frame) + ")", "-frames:v", "1",
                           "-f", "image2", "-c:v", "png", tmp + ".png"},
                          "", tmp + ".err");
      !why.empty()) {
    error = why + " (" + video_label(fx) + ")";
    return "";
  }
  std::string png = files::read_all(tmp + ".png");
  for (auto* ext : {".png", ".count", ".err"})
    std::filesystem::remove(tmp + ext, ec);
  if (png.empty())
    error = "ffmpeg wrote no frame " + std::to_string(fx.frame) + " of " + video_label(fx);
  return png;
}

} // namespace

ev_input_made make_input(const context& ctx, const fx_make_input& fx,
                                const video_fetch& fetch, const video_fetch& fetch_latent) {
  ev_input_made out;
  out.run_id = fx.run_id;
  out.index = fx.index;
  out.name = fx.name;
  try {
    if (fx.latent) {
      if (auto bytes = latent_input(ctx, fx, fetch_latent, out.error)) {
        out.sha256 = fx.output_sha256;
        out.bytes = *bytes;
      }
      return out;
    }
    std::string bytes;
    if (decoder_backend_type(*ctx.cluster, fx.decoder) == "sim") {
      bytes = config::graph::sim_frame(fx.output_sha256, fx.frame);
      if (bytes.empty())
        out.error = "the video of job " + std::to_string(fx.source) + " has no digest";
    } else {
      bytes = decoded_frame(ctx, fx, fetch, out.error);
    }
    if (!out.error.empty())
      return out;
    out.sha256 = store(ctx, bytes);
    out.bytes = bytes.size();
  } catch (const std::exception& e) {
    out.error = std::string("the input could not be stored: ") + e.what();
  }
  return out;
}

input_maker::input_maker(context ctx, video_fetch fetch, answer_fn answer,
                         video_fetch fetch_latent)
    : ctx_(std::move(ctx)), fetch_(std::move(fetch)), fetch_latent_(std::move(fetch_latent)),
      answer_(std::move(answer)), thread_([this] { loop(); }) {}

input_maker::~input_maker() {
  {
    std::lock_guard<std::mutex> l(m_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

std::optional<ev_input_made> input_maker::ask(const fx_make_input& fx) {
  if (!fx.latent && decoder_backend_type(*ctx_.cluster, fx.decoder) == "sim")
    return make_input(ctx_, fx);
  {
    std::lock_guard<std::mutex> l(m_);
    if (!asked_.insert(key{fx.run_id, fx.index, fx.name}).second)
      return std::nullopt;  // being made: its answer comes
    queue_.push_back(fx);
  }
  cv_.notify_all();
  return std::nullopt;
}

void input_maker::loop() {
  for (;;) {
    fx_make_input fx;
    {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (stop_)
        return;
      fx = std::move(queue_.front());
      queue_.pop_front();
    }
    auto made = make_input(ctx_, fx, fetch_, fetch_latent_);
    answer_(std::move(made));
    std::lock_guard<std::mutex> l(m_);
    asked_.erase(key{fx.run_id, fx.index, fx.name});
  }
}

} // namespace vidline::actors::coordinator
