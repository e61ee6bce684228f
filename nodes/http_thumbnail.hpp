#pragma once
/// The review cards' thumbnails (GET /v1/runs/{id}/jobs/{i}/thumbnail): a frame of a job's
/// video, taken by ffmpeg run as a child process (the `thumbnail` filter picks a
/// representative frame of the first second), scaled to at most 320 pixels wide, JPEG. Kept
/// in <data_dir>/review/<sha256>.jpg by the video's digest, so a video is looked at once
/// however often its card is drawn. A sim video (no picture in it) has none: the dashboard
/// shows a placeholder.

#include <string>

namespace vidline::nodes {

/// How long ffmpeg may take for one frame (real seconds).
inline constexpr int thumbnail_timeout_s = 30;
/// The widest thumbnail (pixels); a narrower video keeps its width.
inline constexpr int thumbnail_max_width = 320;

/// The path of a JPEG frame of the video at `video` (SHA-256 `sha256`, 64 hex digits), made
/// now or before, under `data_dir`; "" with `why` and `status` (an HTTP status: 501 no
/// ffmpeg on this host, 500 ffmpeg failed on it) when there is none.
std::string thumbnail_of(const std::string& video, const std::string& sha256,
                         const std::string& data_dir, std::string& why, int& status);

} // namespace vidline::nodes
