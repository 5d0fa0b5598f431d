# lockstep_module(NAME DEPS ... [EXCLUDE regex...]): a library from lockstep/NAME/**/*.cpp, less the
# files whose paths match an EXCLUDE regex (a part left out of this build, e.g. comm/mpi/), target
# lockstep_NAME, also known as lockstep::NAME (the name the installed package exports it under).
# A module with no sources yet is an INTERFACE library so later modules can link it already.
# lockstep_all (lockstep::lockstep) links every module.
add_library(lockstep_all INTERFACE)
add_library(lockstep::lockstep ALIAS lockstep_all)
set_target_properties(lockstep_all PROPERTIES EXPORT_NAME lockstep)
set_property(GLOBAL PROPERTY LOCKSTEP_MODULE_TARGETS lockstep_all)
function(lockstep_module name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "DEPS;EXCLUDE" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/lockstep/${name}/*.cpp
                                              ${PROJECT_SOURCE_DIR}/lockstep/${name}/*.cu)
  # lockstep/*/cuda/ and comm/nccl/ are the GPU code: only in a build with CUDA (cmake/LockstepCuda.cmake).
  if(NOT LOCKSTEP_WITH_CUDA)
    list(FILTER sources EXCLUDE REGEX "/(cuda|nccl)/")
  endif()
  foreach(pattern ${ARG_EXCLUDE})
    list(FILTER sources EXCLUDE REGEX "${pattern}")
  endforeach()
  set(target lockstep_${name})
  if(sources)
    add_library(${target} STATIC ${sources})
    set(scope PUBLIC)
  else()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  endif()
  # Headers are included as "lockstep/MODULE/x.h": the source root while building, include/ once installed.
  target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  # The headers are C++20; a consumer compiles them with at least that.
  target_compile_features(${target} ${scope} cxx_std_20)
  target_link_libraries(${target} ${scope} ${ARG_DEPS})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  add_library(lockstep::${name} ALIAS ${target})
  target_link_libraries(lockstep_all INTERFACE ${target})
  set_property(GLOBAL APPEND PROPERTY LOCKSTEP_MODULE_TARGETS ${target})
endfunction()

# lockstep_test(MODULE [EXCLUDE regex...] [TIMEOUT seconds]): tests/MODULE/*.cpp -> one GoogleTest
# binary test_MODULE, each test a CTest test (timing out after TIMEOUT s, default 300: a guard
# against hangs, not a speed check). Called from tests/CMakeLists.txt.
function(lockstep_test module)
  cmake_parse_arguments(ARG "" "TIMEOUT" "DEPS;EXCLUDE" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${module}/*.cpp)
  foreach(pattern ${ARG_EXCLUDE})
    list(FILTER sources EXCLUDE REGEX "${pattern}")
  endforeach()
  # tests/MODULE/gpu_*.cpp need a GPU: their own binary test_MODULE_gpu, CTest label `gpu`, built
  # only with CUDA; each test skips with the reason printed where no GPU is found.
  set(gpu_sources ${sources})
  list(FILTER gpu_sources INCLUDE REGEX "/gpu_[^/]*\\.cpp$")
  list(FILTER sources EXCLUDE REGEX "/gpu_[^/]*\\.cpp$")
  if(gpu_sources AND LOCKSTEP_WITH_CUDA)
    add_executable(test_${module}_gpu ${gpu_sources})
    target_link_libraries(test_${module}_gpu PRIVATE lockstep_${module} ${ARG_DEPS} GTest::gtest GTest::gtest_main)
    target_include_directories(test_${module}_gpu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    gtest_discover_tests(test_${module}_gpu DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS gpu)
  endif()
  if(NOT sources)
    return()
  endif()
  add_executable(test_${module} ${sources})
  target_link_libraries(test_${module} PRIVATE lockstep_${module} ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(test_${module} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  gtest_discover_tests(test_${module} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT ${ARG_TIMEOUT})
endfunction()
