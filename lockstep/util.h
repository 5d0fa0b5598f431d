#pragma once
// Umbrella header of the util module: errors, checks, element types, environment variables.
#include "lockstep/util/dtype.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/names.h"
