#pragma once
// Umbrella header of the comm module: stores, process groups and their backends.
#include "lockstep/comm/file_store.h"
#include "lockstep/comm/hash_store.h"
#include "lockstep/comm/prefix_store.h"
#include "lockstep/comm/store.h"
#include "lockstep/comm/tcp_store.h"
