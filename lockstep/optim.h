#pragma once
// Umbrella header of the optim module: optimizers, gradient clipping, loss scaling, LR schedules
// and schedulers, and the registry that builds them by name.
#include "lockstep/optim/adam.h"
#include "lockstep/optim/clip_grad.h"
#include "lockstep/optim/grad_scaler.h"
#include "lockstep/optim/loss_scaler.h"
#include "lockstep/optim/lr_schedule.h"
#include "lockstep/optim/lr_scheduler.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/optim/registry.h"
#include "lockstep/optim/sgd.h"
#include "lockstep/optim/warmup_lr.h"
