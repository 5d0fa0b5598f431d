# Install rules: the module libraries, the public headers, the `lockstep` CLI and a CMake package
# (lib/cmake/lockstep) exporting lockstep::lockstep and lockstep::MODULE, for
#   find_package(lockstep CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE lockstep::lockstep)
# docs/install.md describes the layout; tests/install/ checks it with a real consumer project.
include(CMakePackageConfigHelpers)

set(LOCKSTEP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep
    CACHE STRING "Where lockstepConfig.cmake is installed, relative to the prefix")
# The package needs MPI exactly when lockstep's MPI backend is built (option LOCKSTEP_WITH_MPI).

get_property(lockstep_module_targets GLOBAL PROPERTY LOCKSTEP_MODULE_TARGETS)
# With CUDA, the modules link cuDNN and NCCL through these two interface targets (LockstepCuda.cmake).
if(LOCKSTEP_WITH_CUDA)
  list(APPEND lockstep_module_targets lockstep_cudnn lockstep_nccl)
endif()
install(TARGETS ${lockstep_module_targets} EXPORT lockstepTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lockstep_development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lockstep_development)
if(TARGET lockstep)
  install(TARGETS lockstep RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT lockstep_runtime)
endif()

# lockstep/MODULE.h umbrellas and the lockstep/MODULE/**.h tree, layout kept. The CLI's headers
# are the binary's own and stay out.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/lockstep/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lockstep
        COMPONENT lockstep_development
        FILES_MATCHING PATTERN "*.h"
        PATTERN "cli" EXCLUDE)

install(EXPORT lockstepTargets NAMESPACE lockstep:: FILE lockstepTargets.cmake
        DESTINATION ${LOCKSTEP_INSTALL_CMAKEDIR} COMPONENT lockstep_development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lockstepConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/lockstepConfig.cmake
                              INSTALL_DESTINATION ${LOCKSTEP_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
# The find modules the package's config needs again for oneDNN and Gloo (Debian ships no usable
# CMake config for either).
install(FILES ${PROJECT_BINARY_DIR}/lockstepConfig.cmake ${PROJECT_BINARY_DIR}/lockstepConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindOneDNN.cmake ${PROJECT_SOURCE_DIR}/cmake/FindGloo.cmake
        DESTINATION ${LOCKSTEP_INSTALL_CMAKEDIR} COMPONENT lockstep_development)
