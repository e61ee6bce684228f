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

} // namespace vidline::records
