#include "lockstep/train/checkpoint/resume.h"

#include <filesystem>

#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

namespace lockstep::train {

namespace fs = std::filesystem;

namespace {

// `latest` first (when it names one), then every checkpoint newest first. A `latest` that names
// none is said in `notes`.
std::vector<std::string> candidates(const std::string& dir, std::vector<std::string>& notes) {
  std::vector<std::string> out;
  if (auto latest = latestCheckpoint(dir)) {
    out.push_back(*latest);
  } else if (file::exists(dir + "/latest")) {
    notes.push_back(dir + "/latest names no checkpoint in " + dir +
                    " (edited or damaged): taking the newest checkpoint that verifies instead");
  }
  for (const std::string& p : listCheckpoints(dir)) {
    if (out.empty() || p != out.front()) out.push_back(p);
  }
  return out;
}

ResumePick onPurpose(const ResumeRequest& r) {
  ResumePick pick;
  const std::string& from = r.resume_from;
  std::vector<std::string> paths;
  if (file::exists(from + "/manifest.json")) {
    paths.push_back(from);
  } else if (file::isDirectory(from)) {
    paths = candidates(from, pick.notes);
  }
  if (paths.empty()) {
    throw IoError("--resume-from " + from +
                  ": neither a checkpoint (no manifest.json) nor a directory of checkpoints (ckpt-<step>/)");
  }
  std::string skipped;
  for (const std::string& path : paths) {
    try {
      pick.data = loadCheckpoint(path, r.keep);
    } catch (const IoError& e) {
      if (paths.size() == 1) throw;
      pick.notes.push_back(std::string("skipping checkpoint: ") + e.what());
      skipped += std::string("\n  ") + e.what();
      continue;
    }
    pick.path = path;
    const std::string why = incompatibility(pick.data->identity, r.now);
    if (!why.empty()) {
      pick.notes.push_back("resuming on purpose from " + path + " although " + why + " (written by " +
                           describe(pick.data->identity) + ")");
    }
    return pick;
  }
  throw IoError("--resume-from " + from + ": no checkpoint there verifies:" + skipped);
}

}  // namespace

ResumePick pickResumeCheckpoint(const ResumeRequest& r) {
  if (!r.resume_from.empty()) return onPurpose(r);
  ResumePick pick;
  std::vector<std::string> refused;     // "ckpt-N (why)": another run's
  std::vector<std::string> unreadable;  // "ckpt-N (why)": a manifest or file that does not verify
  std::string example;
  for (const std::string& path : candidates(r.checkpoint_dir, pick.notes)) {
    CheckpointInfo info;
    try {
      info = readCheckpointManifest(path);
    } catch (const IoError& e) {
      pick.notes.push_back(std::string("skipping checkpoint: ") + e.what());
      unreadable.push_back(fs::path(path).filename().string() + " (" + e.what() + ")");
      continue;
    }
    const std::string why = incompatibility(info.identity, r.now);
    if (!why.empty()) {
      pick.notes.push_back("not resuming " + path + ": " + why);
      refused.push_back(fs::path(path).filename().string() + " (" + why + ")");
      if (example.empty()) example = path;
      continue;
    }
    try {
      pick.data = loadCheckpoint(path, r.keep);
    } catch (const IoError& e) {
      pick.notes.push_back(std::string("skipping checkpoint: ") + e.what());
      unreadable.push_back(fs::path(path).filename().string() + " (" + e.what() + ")");
      continue;
    }
    pick.path = path;
    return pick;
  }
  std::string list;
  for (const auto& s : unreadable) list += (list.empty() ? "" : "; ") + s;
  for (const auto& s : refused) list += (list.empty() ? "" : "; ") + s;
  // Checkpoints there, and none of them loads: a fresh start would write its own in their place
  // (one of the same step replaces it), so a run that should continue is never restarted over them,
  // asked for (--resume) or not (a restarted worker).
  if (!unreadable.empty()) {
    throw IoError("--resume: no checkpoint in " + r.checkpoint_dir +
                  " verifies, none was loaded and none is replaced: " + list +
                  "; repair or remove them, resume from an older copy on purpose with --resume-from PATH, or "
                  "start afresh in another --output-dir (or checkpoint.dir)");
  }
  if (refused.empty()) return pick;
  const std::string how = "to resume from one of them on purpose, pass --resume-from " + example +
                          "; to start afresh, use another --output-dir (or checkpoint.dir)";
  if (r.required) {
    throw ValueError("--resume: " + r.checkpoint_dir +
                     " holds no checkpoint of this run or a compatible one (same config and seed), only: " +
                     list + "; " + how);
  }
  pick.notes.push_back("starting from scratch: " + r.checkpoint_dir +
                       " holds only other runs' checkpoints (" + list + "); " + how);
  return pick;
}

std::vector<std::string> freshStartNotes(const std::string& dir, const RunIdentity& now) {
  std::vector<std::string> names;
  for (const std::string& path : listCheckpoints(dir)) {
    try {
      if (readCheckpointManifest(path).identity.run_id != now.run_id)
        names.push_back(fs::path(path).filename().string());
    } catch (const IoError&) {
      names.push_back(fs::path(path).filename().string() + " (unreadable)");
    }
  }
  if (names.empty()) return {};
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return {dir + " already holds checkpoints of other runs (" + list +
          "); they are kept, except one of the same step as a checkpoint this run writes, which that "
          "replaces; pruning removes only this run's own; pass --resume to continue a run instead"};
}

}  // namespace lockstep::train
