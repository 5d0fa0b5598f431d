#pragma once
// Umbrella header of the launch module: the agent behind `lockstep run` (rendezvous, worker
// environment, supervision, restarts, failure reports). Programs it starts read who they are with
// comm::workerEnvironment() (lockstep/comm/worker_environment.h).
#include "lockstep/launch/agent.h"
#include "lockstep/launch/console.h"
#include "lockstep/launch/failure_report.h"
#include "lockstep/launch/hostfile.h"
#include "lockstep/launch/launch_options.h"
#include "lockstep/launch/orphan_reaper.h"
#include "lockstep/launch/output_sink.h"
#include "lockstep/launch/progress_channel.h"
#include "lockstep/launch/progress_line.h"
#include "lockstep/launch/progress_sender.h"
#include "lockstep/launch/rendezvous.h"
#include "lockstep/launch/signal_watcher.h"
#include "lockstep/launch/worker_env.h"
#include "lockstep/launch/worker_group.h"
#include "lockstep/launch/worker_process.h"
#include "lockstep/launch/worker_specs.h"
