#pragma once
// The notes and warnings a run prints on stderr besides the progress line (config keys without
// effect, how a checkpoint was picked): rank 0's only, each line as "what: line".
#include <string>
#include <vector>

namespace lockstep::train {

/// Prints each of lines as "what: line" when chief (rank 0); nothing on other ranks.
void printNotes(bool chief, const char* what, const std::vector<std::string>& lines);

}  // namespace lockstep::train
