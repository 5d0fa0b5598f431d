# CUDA support for lockstep (LOCKSTEP_CUDA = AUTO | ON | OFF). Sets:
#   LOCKSTEP_WITH_CUDA           ON when the GPU code is built
#   LOCKSTEP_CUDA_RUNTIME_DEPS   what lockstep_tensor links (cudart)
#   LOCKSTEP_CUDA_KERNEL_DEPS    what lockstep_kernels links (cudart, cuDNN, libdl: cuBLASLt is opened at run time)
#   LOCKSTEP_CUDA_KERNEL_DEFS    its compile definitions (cuBLASLt's soname and build-time directory)
#   LOCKSTEP_CUDA_COMM_DEPS      what lockstep_comm links (NCCL, cudart)
#   LOCKSTEP_CUDNN_FRONTEND_INCLUDE  the cuDNN frontend's headers, or "" (LockstepCudnnFrontend.cmake)
# The libraries are found through CMake's CUDAToolkit module; cuDNN and NCCL, which that module
# does not know, are looked for beside the toolkit's libraries (and in the system's paths).
set(LOCKSTEP_WITH_CUDA OFF)
set(LOCKSTEP_CUDA_RUNTIME_DEPS "")
set(LOCKSTEP_CUDA_KERNEL_DEPS "")
set(LOCKSTEP_CUDA_COMM_DEPS "")
if(NOT LOCKSTEP_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "LOCKSTEP_CUDA='${LOCKSTEP_CUDA}': use AUTO, ON or OFF")
endif()
if(LOCKSTEP_CUDA STREQUAL "OFF")
  message(STATUS "lockstep: CUDA support off (LOCKSTEP_CUDA=OFF)")
  return()
endif()

include(CheckLanguage)
check_language(CUDA)
set(missing "")
if(NOT CMAKE_CUDA_COMPILER)
  set(missing "nvcc (the CUDA toolkit; put it on PATH or set CMAKE_CUDA_COMPILER)")
else()
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    set(missing "the CUDA toolkit's libraries (CUDAToolkit)")
  else()
    find_library(LOCKSTEP_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(LOCKSTEP_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(LOCKSTEP_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(LOCKSTEP_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(NOT TARGET CUDA::cublasLt)
      list(APPEND missing "cuBLASLt")
    endif()
    if(NOT LOCKSTEP_CUDNN_LIBRARY OR NOT LOCKSTEP_CUDNN_INCLUDE)
      list(APPEND missing "cuDNN 9 (libcudnn, cudnn.h)")
    endif()
    if(NOT LOCKSTEP_NCCL_LIBRARY OR NOT LOCKSTEP_NCCL_INCLUDE)
      list(APPEND missing "NCCL 2 (libnccl, nccl.h)")
    endif()
  endif()
endif()

if(missing)
  if(LOCKSTEP_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LOCKSTEP_CUDA=ON but not found: ${missing}. Install them or configure with "
                        "-DLOCKSTEP_CUDA=AUTO (GPU support when found) or OFF.")
  endif()
  message(STATUS "lockstep: CUDA support off (LOCKSTEP_CUDA=AUTO, not found: ${missing})")
  return()
endif()

# Hopper (H100/H200) unless the builder names others: every architecture costs nvcc time.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
# lockstep's headers are C++20 (the modules' cxx_std_20 applies to their .cu files too); CMake 3.25
# does not know nvcc 13's flag for it, so name it.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_FLAGS_RELEASE "-O3 -DNDEBUG")
# Device code carries its source lines (the code generated is the same): compute-sanitizer's reports
# and Nsight Compute's source view name the line (scripts/gpu_check/gtests.py).
add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)

add_library(lockstep_cudnn INTERFACE)
target_link_libraries(lockstep_cudnn INTERFACE ${LOCKSTEP_CUDNN_LIBRARY})
target_include_directories(lockstep_cudnn INTERFACE ${LOCKSTEP_CUDNN_INCLUDE})
add_library(lockstep_nccl INTERFACE)
target_link_libraries(lockstep_nccl INTERFACE ${LOCKSTEP_NCCL_LIBRARY})
target_include_directories(lockstep_nccl INTERFACE ${LOCKSTEP_NCCL_INCLUDE})
set(LOCKSTEP_CUDA_RUNTIME_DEPS CUDA::cudart)
# cuBLASLt is opened on first use (kernels/cuda/cublaslt.cpp), not linked: linking it costs every
# process ~150 MiB of resident memory at start, CPU-only ranks included. Its headers come with cudart's.
set(LOCKSTEP_CUDA_KERNEL_DEPS CUDA::cudart lockstep_cudnn ${CMAKE_DL_LIBS})
set(LOCKSTEP_CUDA_KERNEL_DEFS LOCKSTEP_CUBLASLT_SONAME="libcublasLt.so.${CUDAToolkit_VERSION_MAJOR}"
                              LOCKSTEP_CUBLASLT_BUILD_DIR="${CUDAToolkit_LIBRARY_DIR}")
set(LOCKSTEP_CUDA_COMM_DEPS CUDA::cudart lockstep_nccl)
include(${CMAKE_CURRENT_LIST_DIR}/LockstepCudnnFrontend.cmake)  # LOCKSTEP_CUDNN_FRONTEND_INCLUDE
set(LOCKSTEP_WITH_CUDA ON)
message(STATUS "lockstep: CUDA support on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
               "${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${LOCKSTEP_CUDNN_LIBRARY}, NCCL ${LOCKSTEP_NCCL_LIBRARY})")
