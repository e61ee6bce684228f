/// The embedded reference profile (docs/profile.md explains every number).

#include "config/profile/profile.hpp"

namespace vidline::config::profile {
namespace {

constexpr std::string_view reference_text = R"json({
  "format": "vidline-profile",
  "version": 1,
  "name": "reference",
  "notes": "Calibrated on docs/reference.md (the real two-host line). Sampling times exclude conditioning (the encoder's own entry) and start when the sampler starts; batch-derived numbers subtract decode, handoff and conditioning from the measured wall times. docs/profile.md shows every step of the arithmetic.",
  "latent": {
    "size": "416x736x5",
    "bytes": 13000000,
    "source": "docs/sim-contract.md: 13,000,000 bytes for 416x736, 5 s, scaled by width x height x seconds (docs/reference.md: latent about 13 MB)"
  },
  "handoff": {
    "remote": {
      "s": 0.7,
      "min_s": 0.5,
      "max_s": 0.9,
      "source": "docs/reference.md 'How the line works' 3: 0.5-0.9 s per latent over the 10GbE link with scp/socket and a SHA-256 check; s = midpoint"
    },
    "same_host": {
      "s": 0.0,
      "source": "assumption, not measured: the latent already lies on the decoder's host (the XTX shares host B with the 3080 Ti)"
    }
  },
  "pools": {
    "t10x8": {
      "description": "8 x Tesla T10 16 GB on host A, Ulysses=8, FSDP, no CPU offload",
      "cold_extra": {
        "s": 41.076,
        "min_s": 36.113,
        "max_s": 46.039,
        "source": "mean of cold - warm at the two sizes with batch rows: 416x736x5 46.039, 736x1280x5 36.113"
      },
      "capacity": {
        "max_load": 9420800,
        "fail_after_s": 204.389,
        "source": "docs/reference.md single jobs: 736x1280x10 (load 9,420,800) ran; 640x1152x15 (load 11,059,200) ran out of memory after ~204.389 s ('a rank needed 1.06 GiB more, 558.62 MiB free'). max_load is the largest load known to fit; the true limit lies in [9,420,800, 11,059,200)."
      },
      "sampling": [
        {
          "size": "416x736x5",
          "cold": {
            "s": 107.534,
            "min_s": 97.335,
            "source": "batch '416x736, 5 s | one 8 x T10 pool': first 133.314 - decode 12.020 (rtx3080ti) - handoff 0.7 - conditioning 13.06 (t10x4). min_s: single-job row 110.395 - conditioning 13.06 (that row counts from submission)"
          },
          "warm": {
            "s": 61.495,
            "source": "same batch: (makespan 440.791 - first 133.314) / 5 ('Derived': about 61.5)"
          }
        },
        {
          "size": "736x1280x5",
          "cold": {
            "s": 193.228,
            "source": "batch '736x1280, 5 s | one 8 x T10 pool': first 238.642 - decode 31.654 - handoff 0.7 - conditioning 13.06"
          },
          "warm": {
            "s": 157.115,
            "min_s": 154.226,
            "source": "same batch: (makespan 1024.217 - first 238.642) / 5 ('Derived': about 157). min_s: single-job row 'warm' 167.286 - conditioning 13.06"
          }
        },
        {
          "size": "544x960x15",
          "cold": {
            "s": 315.665,
            "source": "single-job row 328.725 - conditioning 13.06. The row says neither cold nor warm; taken as cold like the 416x736x5 single-job row. Warm = cold - cold_extra"
          }
        },
        {
          "size": "736x1280x10",
          "cold": {
            "s": 429.05,
            "source": "single-job row 442.110 - conditioning 13.06; taken as cold (see 544x960x15). Warm = cold - cold_extra"
          }
        }
      ]
    },
    "t10x4": {
      "description": "4 x Tesla T10 16 GB on host A (half of it), Ulysses=4, FSDP, no CPU offload",
      "cold_extra": {
        "s": 34.414,
        "min_s": 23.473,
        "max_s": 45.355,
        "source": "mean of cold - warm at the two sizes with batch rows: 416x736x5 45.355, 736x1280x5 23.473"
      },
      "capacity": {
        "max_load": 4710400,
        "fail_after_s": 204.389,
        "source": "docs/reference.md: 736x1280x5 (load 4,710,400) ran in every 4 x T10 batch; 736x1280x10 (load 9,420,800) ran out of memory during sampling ('did not fit on 4 GPUs'). max_load is the largest load known to fit. fail_after_s was not measured on 4 x T10: borrowed from the 8 x T10 OOM (assumption)."
      },
      "sampling": [
        {
          "size": "416x736x5",
          "cold": {
            "s": 120.616,
            "max_s": 216.754,
            "source": "batch '416x736, 5 s | two 4 x T10 pools': first 146.396 - decode 12.020 - handoff 0.7 - conditioning 13.06. max_s: single-job row 'cold model' 229.814 - 13.06; that run is far slower than the first job of any batch and would put the 4 x T10 batch rows 36-66% off, so it is kept as the spread only"
          },
          "warm": {
            "s": 75.261,
            "source": "same batch: (makespan 296.917 - first 146.396) / 2 ('Derived': about 75)"
          }
        },
        {
          "size": "736x1280x5",
          "cold": {
            "s": 301.357,
            "source": "batch '736x1280, 5 s | two 4 x T10 pools': first 346.771 - decode 31.654 - handoff 0.7 - conditioning 13.06"
          },
          "warm": {
            "s": 277.884,
            "source": "same batch: (makespan 902.538 - first 346.771) / 2 ('Derived': about 278). The one-host row ('sampling 591' while the same GPUs also decoded) is not used"
          }
        }
      ]
    },
    "rx7900xtx": {
      "description": "1 x RX 7900 XTX 24 GB (ROCm) on host B, the decoder's host; samples a whole job by itself",
      "cold_extra": {
        "s": 88.922,
        "min_s": 83.304,
        "max_s": 94.54,
        "source": "FITTED, not measured: mean of the fitted cold - warm at the two sizes (416x736x5 94.540, 736x1280x5 83.304). Far above the T10 pools' 23-46 s; a ROCm card loading the whole 20 GB model alone (and compiling kernels on first use) is a plausible cause"
      },
      "capacity": {
        "max_load": 9420800,
        "fail_after_s": 204.389,
        "source": "docs/reference.md: the largest size the XTX ran is 736x1280x10 (one-host row, 862.99 s end to end); nothing larger was tried, so max_load is that load. fail_after_s not measured on the XTX: borrowed from the 8 x T10 OOM (assumption)."
      },
      "sampling": [
        {
          "size": "416x736x5",
          "cold": {
            "s": 160.922,
            "source": "FITTED FROM TWO BATCH ROWS, not measured: see warm"
          },
          "warm": {
            "s": 66.382,
            "source": "FITTED FROM TWO BATCH ROWS, not measured (the XTX was never timed alone inside a batch). The reference handed jobs to its sources in turn (job i to source i mod n, docs/planner.md), so the XTX took 2 of 6 jobs in '416x736, 5 s | two 4 x T10 pools + XTX' and 3 of 6 in '... one 8 x T10 pool + XTX', its last latent the last decoded in both: conditioning 27 (rx7900xtx) + cold + warm + handoff 0 (same host) + decode 12.020 = 266.324, and 27 + cold + 2 x warm + 0 + 12.020 = 332.706. So warm = 332.706 - 266.324 = 66.382 and cold = 227.304 - 66.382 = 160.922. Check: the one-host row (104.69 s end to end, warm) = this warm + 27 conditioning + 11.3 left for decode on the XTX"
          }
        },
        {
          "size": "736x1280x5",
          "cold": {
            "s": 351.094,
            "source": "FITTED FROM TWO BATCH ROWS, not measured: see warm"
          },
          "warm": {
            "s": 267.79,
            "source": "FITTED FROM TWO BATCH ROWS, not measured, as at 416x736x5: rows '736x1280, 5 s | two 4 x T10 pools + XTX' (XTX 2 of 6 jobs: 27 + cold + warm + 0 + 31.654 = 677.538) and '... one 8 x T10 pool + XTX' (XTX 3 of 6 jobs: 27 + cold + 2 x warm + 0 + 31.654 = 945.328). So warm = 945.328 - 677.538 = 267.790 and cold = 618.884 - 267.790 = 351.094. The one-host rows (686 s fast attention, 1155 s plain, end to end) measure another setup and are not used"
          }
        },
        {
          "size": "736x1280x10",
          "warm": {
            "s": 336.881,
            "source": "DERIVED: the fitted 736x1280x5 warm time x 862.99 / 686, the ratio of the one-host end-to-end rows 736x1280x10 and 736x1280x5 (fast attention assumed for both). Cold = warm + cold_extra"
          }
        }
      ]
    }
  },
  "encoders": {
    "t10x4": {
      "s": 13.06,
      "source": "docs/reference.md 'How the line works' 1: the text encoder split over 4 GPUs layer by layer, unloaded right after encoding: 13.06 s. Unloaded each time, so every uncached prompt pays it; a cached prompt costs 0"
    },
    "t10": {
      "s": 27.0,
      "source": "docs/reference.md 'How the line works' 1: 27 s on one card (the card is not named; taken as one T10)"
    },
    "rx7900xtx": {
      "s": 27.0,
      "source": "ASSUMPTION, not measured on the XTX: the one-card figure (27 s) is used"
    }
  },
  "decoders": {
    "rtx3080ti": {
      "description": "RTX 3080 Ti 12 GB on host B: INT8 video VAE + audio VAE + mux",
      "decode": [
        {
          "size": "416x736x5",
          "s": 12.02,
          "min_s": 11.859,
          "max_s": 12.181,
          "source": "single-job rows: 12.181 (the 4 x T10 job) and 11.859 (the 8 x T10 job); s = mean ('How the line works' 4 rounds it to 11.8)"
        },
        {
          "size": "736x1280x5",
          "s": 31.654,
          "source": "single-job row 8 x T10, 736x1280, 5 s"
        },
        {
          "size": "544x960x15",
          "s": 50.405,
          "source": "single-job row 8 x T10, 544x960, 15 s"
        },
        {
          "size": "736x1280x10",
          "s": 59.319,
          "source": "single-job row 8 x T10, 736x1280, 10 s"
        }
      ]
    },
    "t10": {
      "description": "a lone Tesla T10 16 GB, fp16 video VAE",
      "decode": [
        {
          "size": "736x1280x5",
          "s": 72.588,
          "source": "single-job row 'lone T10 decode of an existing latent', 736x1280, 5 s"
        }
      ],
      "scale_of": {
        "decoder": "rtx3080ti",
        "factor": 2.2932,
        "source": "other sizes: the 3080 Ti's time x 72.588 / 31.654, the one size both were measured at. The one-host 4 x T10 row says 'decode+mux ~50' at 416x736x5 against 27.6 by this rule; that host was sampling at the same time, so it is not used"
      }
    }
  }
}
)json";

} // namespace

std::string_view profile::reference_json() { return reference_text; }

profile profile::reference() { return parse(std::string(reference_text)); }

} // namespace vidline::config::profile
