#include "lockstep/tensor/deferred_init.h"

namespace lockstep {

namespace {
thread_local int depth = 0;
}  // namespace

DeferredInit::DeferredInit() { ++depth; }
DeferredInit::~DeferredInit() { --depth; }
bool DeferredInit::active() { return depth > 0; }

}  // namespace lockstep
