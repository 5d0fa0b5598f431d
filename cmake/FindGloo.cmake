# Debian's libgloo-dev ships headers and libgloo.so but no CMake package config.
find_path(GLOO_INCLUDE_DIR gloo/allreduce.h)
find_library(GLOO_LIBRARY gloo)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Gloo DEFAULT_MSG GLOO_LIBRARY GLOO_INCLUDE_DIR)
if(Gloo_FOUND AND NOT TARGET Gloo::gloo)
  add_library(Gloo::gloo UNKNOWN IMPORTED)
  set_target_properties(Gloo::gloo PROPERTIES
    IMPORTED_LOCATION ${GLOO_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${GLOO_INCLUDE_DIR})
endif()
