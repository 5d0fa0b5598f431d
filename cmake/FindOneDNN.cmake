# Debian's libdnnl-dev ships a CMake config that insists on OpenCL (its GPU runtime) being
# installed; lockstep uses only the CPU engine, so find the header and library directly.
find_path(ONEDNN_INCLUDE_DIR dnnl.hpp)
find_library(ONEDNN_LIBRARY dnnl)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN DEFAULT_MSG ONEDNN_LIBRARY ONEDNN_INCLUDE_DIR)
if(OneDNN_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION ${ONEDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${ONEDNN_INCLUDE_DIR})
endif()
