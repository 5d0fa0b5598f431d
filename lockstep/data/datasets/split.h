#pragma once

namespace lockstep::data {

/// Which part of a data set with a fixed train/test division to load.
enum class Split { train, test };

}  // namespace lockstep::data
