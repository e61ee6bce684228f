#pragma once
/// What a host keeps about the stages it finished, so that no finished stage is paid for
/// twice across crashes and restarts:
/// - a receipt per job and stage (`<dir>/<run>/<index>.<stage>`), written durably right
///   after the product is committed: it names the product and its SHA-256;
/// - the work ledger (`<data_dir>/ledger.log`), one line per finished stage, appended and
///   fsynced: an audit of the GPU work this host did, which the chaos checker reads.

#include <cstdint>
#include <optional>
#include <string>

namespace vidline::records {

struct receipt {
  std::string product;   ///< absolute path of the latent or video file
  std::string sha256;    ///< of the product
  uint64_t bytes = 0;
  std::string source;    ///< sampled: ""; decoded: the latent's SHA-256
};

/// Path of the receipt of (run, index, stage) under `dir`.
std::string receipt_path(const std::string& dir, const std::string& run_id, uint32_t index,
                         const std::string& stage);

/// Writes a receipt durably (temporary file, fsync, rename).
void write_receipt(const std::string& path, const receipt& r);

/// The receipt at `path` if it exists, parses, and its product is still there with the
/// recorded size and digest (the product is re-hashed: a receipt never vouches for a file
/// damaged since).
std::optional<receipt> valid_receipt(const std::string& path);

/// One finished stage in the ledger: "<stage> <run> <index> <attempt> <sha256>".
struct ledger_entry {
  std::string stage;  ///< "sampled" or "decoded"; "fenced-sampled", "fenced-decoded" (a product
                      ///< removed unpublished: its lease ended), "removed-decoded" (a video
                      ///< published, then removed: another attempt's won)
  std::string run_id;
  uint32_t index = 0;
  uint64_t attempt = 0;
  std::string sha256;  ///< of the product
};

/// Appends the entry's line to the ledger and fsyncs it.
void ledger_append(const std::string& data_dir, const ledger_entry& e);

/// Whether the ledger has a line for (stage, run, index). A stage is committed (its
/// receipt written) before its ledger line, so a process killed between the two leaves a
/// finished stage without one; whoever reuses the receipt adds it (ledger_record_reuse).
bool ledger_has(const std::string& data_dir, const std::string& stage, const std::string& run_id,
                uint32_t index);

/// After a receipt was reused: appends the entry unless the ledger already has one for
/// its (stage, run, index), so the ledger counts every finished stage exactly once.
void ledger_record_reuse(const std::string& data_dir, const ledger_entry& e);

/// A finished stage's product, as a pool (a latent) or a decoder (a video) publishes it.
struct publication {
  std::string data_dir;  ///< the host's: receipts/ and ledger.log are under it
  std::string stage;     ///< "sampled" or "decoded"
  std::string run_id;
  uint32_t index = 0;
  uint64_t attempt = 0;
  std::string staged;    ///< where the stage left it
  std::string product;   ///< where it is published
  std::string sha256;    ///< of the product
  std::string source;    ///< the receipt's source (decoded: the latent's SHA-256)
};

/// The one publishing sequence (docs/reliability.md, "Order of durability"): the staged
/// file renamed durably into place, then its receipt, then its ledger line. Crash points
/// `<what>.before_commit` (staged, nothing published) and `<what>.after_commit` (product,
/// receipt and ledger line durable, nothing reported), `what` being "latent" for sampled
/// and "video" for decoded. A kill between the receipt and the ledger line is mended by
/// ledger_record_reuse when the receipt is reused. Returns the product's size. Throws
/// std::runtime_error when a step fails (what was done before it stands).
uint64_t publish(const publication& p);

/// The receipt of (run, index, stage) on this host, if it vouches for a product still
/// there intact (valid_receipt) and, when `source` is given, was made from it. A reuse
/// is recorded in the ledger (ledger_record_reuse) as `attempt`'s.
std::optional<receipt> reuse(const std::string& data_dir, const std::string& stage,
                             const std::string& run_id, uint32_t index, uint64_t attempt,
                             const std::string& source = "");

/// Removes a product that lost its lease or its race, and says so in the ledger:
/// "fenced-<stage>" when it was never published, "removed-<stage>" when it was (its
/// receipt goes too, when it vouches for this very path).
void retract(const std::string& data_dir, const std::string& stage, const std::string& run_id,
             uint32_t index, uint64_t attempt, const std::string& path, bool published);

} // namespace vidline::records
