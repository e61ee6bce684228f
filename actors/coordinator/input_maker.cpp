#include "actors/coordinator/input_maker.hpp"

#include <chrono>
#include <filesystem>

#include "backends/exec/child.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "config/shot_graph.hpp"

namespace vidline::actors {

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
  backends::exec::child_spec spec;
  spec.argv = argv;
  spec.env = backends::exec::current_environment();
  spec.stdout_path = out;
  spec.stderr_path = err;
  backends::exec::child_limits lim;
  lim.timeout = std::chrono::seconds(60);
  auto end = backends::exec::run_child(spec, lim);
  if (end.how == backends::exec::child_end::kind::exited && end.exit_code == 0)
    return "";
  std::string tail;
  try {
    tail = files::read_all(err);
    if (tail.size() > 300)
      tail = tail.substr(tail.size() - 300);
  } catch (const std::exception&) {
  }
  if (end.how == backends::exec::child_end::kind::spawn_failed)
    return argv[0] + " could not be started: " + end.error;
  return argv[0] + " failed (exit " + std::to_string(end.exit_code) + "): " + tail;
}

/// Frame k of a real video on this host, as PNG bytes, or why not (`error`).
std::string decoded_frame(const context& ctx, const sched::fx_make_input& fx, std::string& error) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(fx.output, ec)) {
    error = "the video " + fx.output + " (decoder " + fx.decoder
            + ") is not on the coordinator's host; frames are taken from videos there";
    return "";
  }
  const std::string tmp = input_dir(ctx) + "/.frame-" + fx.run_id + "-"
                          + std::to_string(fx.index) + "-" + fx.name;
  files::make_dirs(input_dir(ctx));
  if (auto why = run_tool({"ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
                           "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", fx.output},
                          tmp + ".count", tmp + ".err");
      !why.empty()) {
    error = why;
    return "";
  }
  uint64_t frames = 0;
  try {
    frames = std::stoull(files::read_all(tmp + ".count"));
  } catch (const std::exception&) {
    error = "ffprobe did not count the frames of " + fx.output;
    return "";
  }
  if (fx.frame >= frames) {
    error = "frame " + std::to_string(fx.frame) + " is outside " + fx.output + " ("
            + std::to_string(frames) + " frames)";
    return "";
  }
  if (auto why = run_tool({"ffmpeg", "-v", "error", "-y", "-i", fx.output, "-vf",
                           "select=eq(n\\," + std::to_string(fx.frame) + ")", "-frames:v", "1",
                           "-f", "image2", "-c:v", "png", tmp + ".png"},
                          "", tmp + ".err");
      !why.empty()) {
    error = why;
    return "";
  }
  std::string png = files::read_all(tmp + ".png");
  for (auto* ext : {".png", ".count", ".err"})
    std::filesystem::remove(tmp + ext, ec);
  if (png.empty())
    error = "ffmpeg wrote no frame " + std::to_string(fx.frame) + " of " + fx.output;
  return png;
}

} // namespace

sched::ev_input_made make_input(const context& ctx, const sched::fx_make_input& fx) {
  sched::ev_input_made out;
  out.run_id = fx.run_id;
  out.index = fx.index;
  out.name = fx.name;
  try {
    std::string bytes;
    if (decoder_backend_type(*ctx.cluster, fx.decoder) == "sim") {
      bytes = config::graph::sim_frame(fx.output_sha256, fx.frame);
      if (bytes.empty())
        out.error = "the video of job " + std::to_string(fx.source) + " has no digest";
    } else {
      bytes = decoded_frame(ctx, fx, out.error);
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

} // namespace vidline::actors
