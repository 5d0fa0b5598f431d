#pragma once
// The train module: config-driven trainer, checkpoints, metrics writers, progress display.
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/config.h"
#include "lockstep/train/event_writer.h"
#include "lockstep/train/progress.h"
#include "lockstep/train/resume.h"
#include "lockstep/train/run_identity.h"
#include "lockstep/train/safetensors.h"
#include "lockstep/train/train_data.h"
#include "lockstep/train/trainer.h"
#include "lockstep/train/training_state.h"
