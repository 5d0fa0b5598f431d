#pragma once
// A training run's checkpoint policy: which checkpoint it resumes (resume.h's rules), when it
// saves (every N steps and at each epoch's end, never twice for one step), how many it keeps,
// and how (a ZeRO run's ranks each write their partition, zero_checkpoint.h; otherwise rank 0
// writes the whole state, checkpoint.h).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "lockstep/parallel/engine.h"
#include "lockstep/train/checkpoint/resume.h"
#include "lockstep/train/checkpoint/run_identity.h"
#include "lockstep/train/checkpoint/training_state.h"

namespace lockstep::train {

struct RunCheckpointsOptions {
  std::string dir;
  /// Checkpoints of this run kept, newest first (0: every one).
  int keep_last = 3;
  /// Save after every this many optimizer steps too (0: only at the ends of epochs).
  int64_t every_steps = 0;
  /// Resume from the newest valid checkpoint in dir of this run or a compatible one; with
  /// resume_required, finding only other runs' is an error.
  bool resume = false;
  bool resume_required = false;
  /// A checkpoint (or a dir of them) to start from on purpose, whatever run wrote it.
  std::string resume_from;
  /// Fault injection (CheckpointOptions::die_in_save_at_step). 0: off.
  int64_t die_in_save_at_step = 0;
};

/// The checkpoint a run with these options resumes (resume.h's rules; data nullopt: it starts
/// fresh). Rank 0 (chief) first removes what an interrupted save left, then logs the notes and
/// the checkpoints passed over. Every rank calls it alike and gets the same answer.
ResumePick pickRunResume(const RunCheckpointsOptions& options, const RunIdentity& identity, bool chief,
                         const CheckpointSelection& keep = {});
/// Rank 0's log of a resume: the checkpoint, and restoreTrainingState's note when there is one.
void reportResumed(const ResumePick& pick, const std::string& note, bool chief);

/// Not thread-safe. resume() and save() are collective (every rank calls them alike).
class RunCheckpoints {
 public:
  /// engine and loader are borrowed for the object's life; config is stored in every checkpoint's
  /// config.json. identity: this run's, fresh (a resume may take the checkpoint's run id).
  RunCheckpoints(const RunCheckpointsOptions& options, parallel::Engine& engine, data::DataLoader& loader,
                 nlohmann::json config, RunIdentity identity);

  /// Restores the checkpoint the options pick into the engine's model, optimizer, scheduler and
  /// loss scaler, the loader and the random generator, or starts fresh; rank 0 logs which and why.
  void resume();
  /// Whether a checkpoint is due after optimizer step `step` (every_steps).
  bool dueAfterStep(int64_t step) const {
    return options_.every_steps > 0 && step % options_.every_steps == 0;
  }
  /// Saves the engine's current step unless it is saved already; returns the checkpoint's path
  /// where this rank wrote one.
  std::optional<std::string> save();

 private:
  RunCheckpointsOptions options_;
  parallel::Engine& engine_;
  TrainingParts parts_;
  RunIdentity identity_;
  int64_t last_saved_ = 0;
};

}  // namespace lockstep::train
