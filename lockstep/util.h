#pragma once
// Umbrella header of the util module: errors, checks, element types, environment variables,
// files, swap files, name suggestions.
#include "lockstep/util/dtype.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/suggest.h"
#include "lockstep/util/swap_file.h"
