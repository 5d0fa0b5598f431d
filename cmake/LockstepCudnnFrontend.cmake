# The cuDNN frontend's C++ headers (header-only; NVIDIA's graph API over cuDNN's backend), for the
# kernels built on cuDNN's fused graphs: kernels/cuda/fused_attention.cpp (scaled dot-product
# attention). Included by LockstepCuda.cmake when GPU support is on. Sets:
#   LOCKSTEP_CUDNN_FRONTEND_INCLUDE  the directory holding cudnn_frontend.h, or "" when unavailable
# Where the headers come from, first match:
#   -DLOCKSTEP_CUDNN_FRONTEND_DIR=DIR  a directory with cudnn_frontend.h (a checkout's include/, or
#                                      site-packages/include of an installed nvidia-cudnn-frontend)
#   otherwise the nvidia-cudnn-frontend wheel from PyPI (pinned version and SHA-256), downloaded once
#   into the build tree; its include/ is the frontend's headers, the same in every platform's wheel.
# Without them (offline, no directory given) lockstep still builds: attention then runs on
# lockstep's own GPU kernel and says so once per process (docs/gpu.md).
set(LOCKSTEP_CUDNN_FRONTEND_DIR "" CACHE PATH "Directory with the cuDNN frontend's cudnn_frontend.h (default: fetch the pinned PyPI wheel)")
set(LOCKSTEP_CUDNN_FRONTEND_VERSION 1.32.0)
set(LOCKSTEP_CUDNN_FRONTEND_INCLUDE "")
if(LOCKSTEP_CUDNN_FRONTEND_DIR)
  if(NOT EXISTS ${LOCKSTEP_CUDNN_FRONTEND_DIR}/cudnn_frontend.h)
    message(FATAL_ERROR "LOCKSTEP_CUDNN_FRONTEND_DIR=${LOCKSTEP_CUDNN_FRONTEND_DIR} has no cudnn_frontend.h: "
                        "name the directory that holds it (the frontend's include/)")
  endif()
  set(LOCKSTEP_CUDNN_FRONTEND_INCLUDE ${LOCKSTEP_CUDNN_FRONTEND_DIR})
else()
  set(fe_root ${CMAKE_BINARY_DIR}/_deps/cudnn-frontend-${LOCKSTEP_CUDNN_FRONTEND_VERSION})
  if(NOT EXISTS ${fe_root}/include/cudnn_frontend.h)
    set(fe_wheel nvidia_cudnn_frontend-${LOCKSTEP_CUDNN_FRONTEND_VERSION}-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl)
    set(fe_url "https://files.pythonhosted.org/packages/11/02/660e2dd9f9d9f940e1641443771730612c3aadaafbc5ef7a93cc313d519d/${fe_wheel}")
    file(DOWNLOAD ${fe_url} ${fe_root}/${fe_wheel} STATUS fe_status TIMEOUT 300
         EXPECTED_HASH SHA256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0)
    list(GET fe_status 0 fe_code)
    if(fe_code EQUAL 0)
      file(ARCHIVE_EXTRACT INPUT ${fe_root}/${fe_wheel} DESTINATION ${fe_root} PATTERNS "include/*")
      file(REMOVE ${fe_root}/${fe_wheel})
    else()
      list(GET fe_status 1 fe_message)
      file(REMOVE ${fe_root}/${fe_wheel})
      message(STATUS "lockstep: could not fetch the cuDNN frontend headers (${fe_url}: ${fe_message}); "
                     "attention runs on lockstep's own GPU kernel. Give -DLOCKSTEP_CUDNN_FRONTEND_DIR=DIR to use a local copy.")
    endif()
  endif()
  if(EXISTS ${fe_root}/include/cudnn_frontend.h)
    set(LOCKSTEP_CUDNN_FRONTEND_INCLUDE ${fe_root}/include)
  endif()
endif()
if(LOCKSTEP_CUDNN_FRONTEND_INCLUDE)
  message(STATUS "lockstep: cuDNN frontend headers ${LOCKSTEP_CUDNN_FRONTEND_INCLUDE}")
endif()
