#pragma once
/// How an `exec` sample command reports checkpoints (docs/backends.md, "Checkpoints"): it
/// writes each one whole to a temporary name in `{checkpoint_dir}`, then renames it to
/// `<step>.ckpt` (the state after that many steps; a rename is atomic, so a checkpoint is
/// never seen half written). While the command runs, a watcher hands every new
/// `<step>.ckpt` to the pool, oldest step first, which moves it into its latent store; a
/// last look after the command ended takes those it wrote just before a crash.
///
/// Failures handled: names that are not `<digits>.ckpt` (ignored: the command's own
/// temporaries), a step no newer than the last one handed over (removed), a checkpoint the
/// pool could not store (left; the next one may be).

#include <atomic>
#include <cstdint>
#include <thread>

#include "backends/backend.hpp"

namespace vidline::backends::exec {

/// Watches env.checkpoint_dir from construction to stop() (or destruction).
class checkpoint_watch {
public:
  explicit checkpoint_watch(const stage_env& env);
  ~checkpoint_watch();
  checkpoint_watch(const checkpoint_watch&) = delete;
  checkpoint_watch& operator=(const checkpoint_watch&) = delete;

  /// Stops watching after one last look.
  void stop();

  /// Hands the checkpoints now in the folder over (oldest step first). For the watcher
  /// thread and tests.
  void look();

  /// How often the folder is looked at.
  static constexpr int interval_ms = 200;

private:
  const stage_env& env_;
  uint32_t last_step_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

} // namespace vidline::backends::exec
