#include "lockstep/train/monitor/notes.h"

#include <cstdio>

namespace lockstep::train {

void printNotes(bool chief, const char* what, const std::vector<std::string>& lines) {
  if (!chief) return;
  for (const auto& l : lines) std::fprintf(stderr, "%s: %s\n", what, l.c_str());
}

}  // namespace lockstep::train
