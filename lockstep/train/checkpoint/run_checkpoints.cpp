#include "lockstep/train/checkpoint/run_checkpoints.h"

#include <cstdio>

#include "lockstep/train/checkpoint/resume.h"
#include "lockstep/train/checkpoint/zero_checkpoint.h"
#include "lockstep/train/monitor/notes.h"
#include "lockstep/util/error.h"

namespace lockstep::train {

RunCheckpoints::RunCheckpoints(const RunCheckpointsOptions& options, parallel::Engine& engine,
                               data::DataLoader& loader, nlohmann::json config, RunIdentity identity)
    : options_(options),
      engine_(engine),
      parts_{engine.model().get(),
             engine.optimizer().get(),
             engine.scheduler(),
             &loader,
             &defaultGenerator(),
             std::move(config),
             engine.environment().worldSize(),
             engine.lossScaler()},
      identity_(std::move(identity)),
      last_saved_(engine.globalSteps()) {
  // ZeRO: each rank writes its own partition of the checkpoint (zero_checkpoint.h), nothing
  // gathered; a load reshards to this run's world size and stage.
  parts_.zero = engine.zero();
}

ResumePick pickRunResume(const RunCheckpointsOptions& options, const RunIdentity& identity, bool chief,
                         const CheckpointSelection& keep) {
  // Before any save of this run: what a signal cut short (a save, a pruning) is hidden, not a
  // checkpoint, and nobody else's to finish.
  if (chief) {
    for (const std::string& p : removeUnfinishedCheckpoints(options.dir))
      std::fprintf(stderr, "note: removed %s, left by an interrupted checkpoint save or removal\n",
                   p.c_str());
  }
  if (!options.resume && options.resume_from.empty()) {
    printNotes(chief, "note", freshStartNotes(options.dir, identity));
    return {};
  }
  // A restarted worker of a job started --resume-from takes the job's own newer checkpoints
  // first, and --resume-from again when there are none yet.
  ResumePick pick;
  if (options.resume) {
    pick = pickResumeCheckpoint(
        {options.dir, "", options.resume_required && options.resume_from.empty(), identity, keep});
  }
  if (!pick.data && !options.resume_from.empty()) {
    ResumePick from = pickResumeCheckpoint({options.dir, options.resume_from, true, identity, keep});
    from.notes.insert(from.notes.begin(), pick.notes.begin(), pick.notes.end());
    pick = std::move(from);
  }
  printNotes(chief, "warning", pick.notes);
  if (!pick.data && chief) {
    std::fprintf(stderr, "warning: --resume: no checkpoint to resume in %s, starting from scratch\n",
                 options.dir.c_str());
  }
  return pick;
}

void reportResumed(const ResumePick& pick, const std::string& note, bool chief) {
  if (!chief) return;
  std::fprintf(stderr, "resuming from %s (step %lld)\n", pick.path.c_str(),
               static_cast<long long>(pick.data->step));
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
}

void RunCheckpoints::resume() {
  const bool chief = engine_.environment().isMain();
  const ResumePick pick = pickRunResume(options_, identity_, chief);
  if (!pick.data) return;
  // ZeRO stage 3: the parameters load one gathered bucket at a time, their values then going back
  // into each rank's partition, so the whole model is never resident on a rank (nor on its GPU).
  std::string note;
  try {
    note = parts_.zero && !engine_.parametersWhole() ? restoreTrainingStateByBucket(*pick.data, parts_)
                                                     : restoreTrainingState(*pick.data, parts_);
  } catch (const ValueError& e) {
    // A checkpoint of another model or optimizer (--resume-from on purpose): named, with its path.
    throw ValueError("cannot resume from " + pick.path + ": " + e.what());
  }
  engine_.setGlobalSteps(pick.data->step);
  last_saved_ = pick.data->step;
  // Resuming continues that run (its pruning and identity), unless it was another's on purpose.
  if (incompatibility(pick.data->identity, identity_).empty()) identity_.run_id = pick.data->identity.run_id;
  reportResumed(pick, note, chief);
}

std::optional<std::string> RunCheckpoints::save() {
  const int64_t step = engine_.globalSteps();
  if (step == last_saved_) return std::nullopt;
  last_saved_ = step;
  const bool chief = engine_.environment().isMain();
  if (!parts_.zero && !chief) return std::nullopt;
  CheckpointOptions co;
  co.keep_last = options_.keep_last;
  co.die_in_save_at_step = options_.die_in_save_at_step;
  CheckpointData d = captureTrainingState(parts_, step);
  d.identity = identity_;
  if (parts_.zero) {  // collective: every rank writes its partition
    return saveZeroCheckpoint(options_.dir, d, *parts_.zero, engine_.environment().group.get(), co);
  }
  return saveCheckpoint(options_.dir, d, co);
}

}  // namespace lockstep::train
