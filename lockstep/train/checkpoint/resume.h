#pragma once
// Which checkpoint a run resumes from (docs/checkpoints.md). Pure file logic, no training parts:
//  - automatic (--resume, or a worker restarted by --max-restarts): the checkpoint `latest` names
//    first, then the others newest first; each must verify whole (checkpoint.h) and belong to this
//    run or a compatible one (run_identity.h). Every one passed over is named with the reason.
//  - on purpose (--resume-from PATH): that checkpoint (or the newest valid one under a directory
//    of checkpoints) whatever run wrote it; it must still verify whole.
#include <optional>
#include <string>
#include <vector>

#include "lockstep/train/checkpoint/checkpoint.h"
#include "lockstep/train/checkpoint/run_identity.h"

namespace lockstep::train {

struct ResumeRequest {
  /// Where this run's checkpoints are (automatic resume looks here).
  std::string checkpoint_dir;
  /// --resume-from: a checkpoint directory or a directory of checkpoints; empty: automatic.
  std::string resume_from;
  /// The user asked for a resume (--resume): finding only other runs' checkpoints is an error
  /// then; for a restarted worker it is a fresh start with a note.
  bool required = false;
  RunIdentity now;
  /// The tensors of a whole-tensor checkpoint to load (checkpoint.h); default: all.
  CheckpointSelection keep{};
};

struct ResumePick {
  std::optional<CheckpointData> data;  // nullopt: start from scratch
  std::string path;
  /// Lines for the log (rank 0 prints them): each checkpoint passed over and why, and notes.
  std::vector<std::string> notes;
};

/// The checkpoint to resume, per the rules above. ValueError (naming the directory, each
/// checkpoint refused and why, and how to resume on purpose) when `required` and only other runs'
/// checkpoints were found; IoError naming each checkpoint and why when there are checkpoints and none
/// verifies (a fresh start would write over them; asked for or not); IoError naming the file when
/// --resume-from names one that fails to verify, or holds no valid checkpoint. Every rank calls it
/// alike and gets the same answer.
ResumePick pickResumeCheckpoint(const ResumeRequest& request);

/// Notes for a run starting afresh in `dir`: other runs' checkpoints there are named (they are
/// kept and a restart does not take them unless compatible). Empty when there are none.
std::vector<std::string> freshStartNotes(const std::string& dir, const RunIdentity& now);

}  // namespace lockstep::train
